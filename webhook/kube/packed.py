"""Cached objects kept packed: their identity as dicts, the rest compressed (issue 38).

A queued Job in a watch cache is some fifteen small dicts (its spec, pod template, containers, requests...),
about 3.5 KiB in CPython, and the controller reads that part only when the job changes, is admitted or
evicted. :func:`packed` keeps ``apiVersion``, ``kind`` and ``metadata`` as they are (read on every pass) and
the rest as zlib-compressed JSON, about 100 bytes, with a preset dictionary: the first object its
:class:`Codec` packed, a typical object of its kind, so what every job repeats costs nothing.

A :class:`Packed` object is a read-only :class:`~collections.abc.Mapping`: reading ``spec`` or ``status``
decodes the rest (a few microseconds) and keeps the last :data:`DECODED_KEPT` decodings, so a reader going
over one object several times decodes it once. It is not a ``dict``: serialising one whole (``orjson``,
``json``) fails loudly instead of writing part of it; take ``dict(obj)`` or the part you need.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Iterator, Mapping

import orjson

from webhook.api.objects import Doc, Obj
from webhook.kube.slim import compacted, share_texts, trimmed

__all__ = ["DECODED_KEPT", "HEAD_KEYS", "Codec", "Packed", "packed"]

HEAD_KEYS = frozenset({"apiVersion", "kind", "metadata"})
"""What stays unpacked: read on every pass (the key, the version, labels and annotations)."""
DECODED_KEPT = 256
"""How many decoded rests are kept, the newest (a MiB or so): one reader going over one object decodes it once."""
LEVEL = 1
"""zlib's fastest level: with the preset dictionary it packs nearly as small as the best."""


class Codec:
    """zlib with a preset dictionary, one per cache: the first body it packs."""

    __slots__ = ("_zdict",)

    def __init__(self) -> None:
        self._zdict: bytes | None = None

    def pack(self, body: bytes) -> bytes:
        if self._zdict is None:
            self._zdict = body
        compressor = zlib.compressobj(LEVEL, zdict=self._zdict)
        return compressor.compress(body) + compressor.flush()

    def unpack(self, data: bytes) -> bytes:
        decompressor = zlib.decompressobj(zdict=self._zdict or b"")
        return decompressor.decompress(data) + decompressor.flush()


_decoded: dict[tuple[Codec, bytes], Doc] = {}
_decoded_lock = threading.Lock()


class Packed(Mapping[str, object]):
    """An object read like the dict it was, its rest decoded on demand (see the module)."""

    __slots__ = ("_body", "_codec", "_head")

    def __init__(self, head: Doc, body: bytes, codec: Codec) -> None:
        self._head = head
        self._body = body
        self._codec = codec

    def __getitem__(self, key: str) -> object:
        head = self._head
        if key in head:
            return head[key]
        return self._rest()[key]

    def get(self, key: str, default: object = None) -> object:
        head = self._head
        if key in head:
            return head[key]
        if not self._body:
            return default
        return self._rest().get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._head or (bool(self._body) and key in self._rest())

    def __iter__(self) -> Iterator[str]:
        yield from self._head
        if self._body:
            yield from self._rest()

    def __len__(self) -> int:
        return len(self._head) + (len(self._rest()) if self._body else 0)

    def __repr__(self) -> str:
        return f"Packed({dict(self)!r})"

    def _rest(self) -> Doc:
        if not self._body:
            return {}
        key = (self._codec, self._body)
        hit = _decoded.get(key)
        if hit is not None:
            return hit
        rest: Doc = orjson.loads(self._codec.unpack(self._body))
        with _decoded_lock:
            _decoded[key] = rest
            while len(_decoded) > DECODED_KEPT:
                del _decoded[next(iter(_decoded))]
        return rest


def packed(obj: Obj, codec: Codec) -> Obj:
    """``obj`` as a job cache keeps it: without managed fields or ``kubectl apply``'s copy
    (:func:`~webhook.kube.slim.trimmed`), its head's short texts shared with other objects'
    (:func:`~webhook.kube.slim.share_texts`), the rest packed by ``codec``. Call it on a freshly decoded object:
    it may change ``obj``'s metadata in place. An object ``orjson`` cannot write is kept as dicts
    (:func:`~webhook.kube.slim.compacted`)."""
    whole = trimmed(obj)
    head = {key: value for key, value in whole.items() if key in HEAD_KEYS}
    rest = {key: value for key, value in whole.items() if key not in HEAD_KEYS}
    try:
        body = orjson.dumps(rest) if rest else b""
    except TypeError:  # a number JSON allows but orjson does not (past 64 bits): kept as dicts instead
        return compacted(whole)
    share_texts(head)
    return Packed(head, codec.pack(body) if body else b"", codec)
