"""RFC 6902 JSON Patch, applied as the API server applies a webhook's patch (``add``/``remove``/``replace``/
``test``): the admission handlers compute a patch step by step on a working copy, and tests check the result.
The JSON Pointers (RFC 6901) they address are built here too. Re-exported by :mod:`webhook.workloads.base`."""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from webhook.api.objects import Doc, Obj, plain


def escape_pointer(segment: str) -> str:
    """One JSON Pointer (RFC 6901) reference token: ``~`` -> ``~0``, ``/`` -> ``~1``."""
    return segment.replace("~", "~0").replace("/", "~1")


def pointer(*segments: str | int) -> str:
    """A JSON Pointer from raw segments: ``pointer("metadata", "labels", "a/b") == "/metadata/labels/a~1b"``."""
    return "".join("/" + escape_pointer(str(segment)) for segment in segments)


def unescape_pointer(token: str) -> str:
    """The raw segment of a reference token (inverse of :func:`escape_pointer`)."""
    return token.replace("~1", "/").replace("~0", "~")


class PatchError(ValueError):
    """A JSON Patch operation that does not apply."""


def _split(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"{path!r}: a JSON Pointer starts with '/'")
    return [unescape_pointer(token) for token in path[1:].split("/")]


def _container(doc: object, tokens: list[str], path: str) -> object:
    current = doc
    for token in tokens:
        if isinstance(current, dict):
            if token not in current:
                raise PatchError(f"{path}: {token!r} does not exist")
            current = current[token]
        elif isinstance(current, list):
            if not token.isdigit() or int(token) >= len(current):
                raise PatchError(f"{path}: bad list index {token!r}")
            current = current[int(token)]
        else:
            raise PatchError(f"{path}: cannot step into a {type(current).__name__}")
    return current


def apply_patch(obj: Obj, ops: Sequence[Obj]) -> Doc:
    """A copy of ``obj`` with RFC 6902 ``add``/``remove``/``replace``/``test`` operations applied (what the
    apiserver does with a webhook's patch). Raises :class:`PatchError`."""
    doc: object = orjson.loads(orjson.dumps(obj, default=plain))
    for op in ops:
        kind, path = op.get("op"), op.get("path")
        if not isinstance(path, str):
            raise PatchError(f"operation {op!r} has no path")
        tokens = _split(path)
        if not tokens:
            if kind in ("add", "replace"):
                doc = op.get("value")
                continue
            if kind == "test":
                if doc != op.get("value"):
                    raise PatchError(f"{path}: test failed")
                continue
            raise PatchError(f"{path}: cannot {kind} the whole document")
        parent = _container(doc, tokens[:-1], path)
        last = tokens[-1]
        if kind == "test":
            if _container(doc, tokens, path) != op.get("value"):
                raise PatchError(f"{path}: test failed")
        elif isinstance(parent, dict):
            if kind in ("remove", "replace") and last not in parent:
                raise PatchError(f"{path}: {last!r} does not exist")
            if kind == "remove":
                del parent[last]
            elif kind in ("add", "replace"):
                parent[last] = orjson.loads(orjson.dumps(op.get("value"), default=plain))
            else:
                raise PatchError(f"{path}: unsupported operation {kind!r}")
        elif isinstance(parent, list):
            value = orjson.loads(orjson.dumps(op.get("value"), default=plain)) if "value" in op else None
            if kind == "add" and last == "-":
                parent.append(value)
                continue
            if not last.isdigit():
                raise PatchError(f"{path}: bad list index {last!r}")
            index = int(last)
            limit = len(parent) if kind == "add" else len(parent) - 1
            if index > limit:
                raise PatchError(f"{path}: list index {index} out of range")
            if kind == "add":
                parent.insert(index, value)
            elif kind == "remove":
                del parent[index]
            elif kind == "replace":
                parent[index] = value
            else:
                raise PatchError(f"{path}: unsupported operation {kind!r}")
        else:
            raise PatchError(f"{path}: parent is a {type(parent).__name__}")
    if not isinstance(doc, dict):
        raise PatchError("the patched document is not an object")
    return doc
