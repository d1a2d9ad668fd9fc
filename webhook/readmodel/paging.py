"""A long list read page by page, the next page on its way while the caller decodes this one.

Listing 50,000 Jobs is some 100 pages of 500: the API server encodes each page while ``kq`` waits, then ``kq``
decodes it while the API server waits. :func:`prefetched` fetches in a thread of its own and finds each page's
``continue`` token in the first bytes of the answer (:func:`continue_token`), so the two overlap. The pages
come in order and the caller sees the same pages as when read one after the other.
"""

from __future__ import annotations

import queue
import re
import threading
from collections.abc import Callable, Generator, Sequence

import orjson

from webhook.api.objects import Obj

PAGE_SIZE = 500
"""Objects per page (``limit``)."""
AHEAD = 2
"""Pages fetched ahead of the one the caller decodes (each is a few MiB)."""
HEAD_BYTES = 4096
"""How far into a page its list metadata is looked for."""

_HEAD = re.compile(rb'\{"kind":"[^"]*","apiVersion":"[^"]*","metadata":\{([^{}]*)\}')
_CONTINUE = re.compile(rb'"continue":"([^"\\]*)"')


def decode(raw: bytes) -> Obj:
    """An answer's JSON, decoded as the controller's client decodes it (orjson), so both read the same values;
    ``{}`` when empty, ``{"text": ...}`` when it is not a JSON object."""
    if not raw:
        return {}
    try:
        value: object = orjson.loads(raw)
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {"text": raw.decode("utf-8", "replace")}


def continue_token(raw: bytes) -> str | None:
    """The ``metadata.continue`` of a list answer as the API server writes it (``kind``, ``apiVersion``,
    ``metadata``, then ``items``): ``""`` on the last page, ``None`` when the answer does not start that way
    (then it must be decoded to know)."""
    head = _HEAD.match(raw, 0, HEAD_BYTES)
    if head is None:
        return None
    found = _CONTINUE.search(head.group(1))
    if found is None:
        return None if b'"continue"' in head.group(1) else ""
    return found.group(1).decode("ascii", "replace")


def continue_of(page: Obj) -> str:
    """A decoded list page's ``continue`` token (``""`` on the last page)."""
    metadata = page.get("metadata")
    return str(metadata.get("continue") or "") if isinstance(metadata, dict) else ""


def with_token(query: Sequence[tuple[str, str]], token: str) -> list[tuple[str, str]]:
    return [("limit", str(PAGE_SIZE)), *query, *([("continue", token)] if token else [])]


def prefetched(fetch: Callable[[list[tuple[str, str]]], bytes], query: Sequence[tuple[str, str]]) -> Generator[Obj]:
    """The decoded pages of a list, ``fetch`` (one GET with the given query, its raw answer; it raises on a
    failure) called from a thread of its own, at most :data:`AHEAD` pages ahead. A failure is raised where its
    page would have come; when the caller stops early the thread is stopped and waited for, so ``fetch``'s
    connection is free again when this returns."""
    # A page comes raw, or decoded when its token could only be read that way (it is not decoded twice).
    pages: queue.Queue[bytes | Obj | BaseException | None] = queue.Queue(maxsize=AHEAD)
    stop = threading.Event()

    def put(item: bytes | Obj | BaseException | None) -> bool:
        while not stop.is_set():
            try:
                pages.put(item, timeout=0.1)
            except queue.Full:
                continue
            return True
        return False

    def run() -> None:
        token = ""
        try:
            while not stop.is_set():
                raw = fetch(with_token(query, token))
                found = continue_token(raw)
                page: bytes | Obj = raw
                if found is None:
                    page = decode(raw)
                    found = continue_of(page)
                token = found
                if not put(page) or not token:
                    break
        except BaseException as error:  # handed to the caller, raised there
            put(error)
            return
        put(None)

    thread = threading.Thread(target=run, name="kq-list-pages", daemon=True)
    thread.start()
    try:
        while True:
            item = pages.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield decode(item) if isinstance(item, bytes) else item
    finally:
        stop.set()
        thread.join()
