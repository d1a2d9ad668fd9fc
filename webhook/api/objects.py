"""Typed, read-only views of raw Kubernetes objects (the ``dict`` JSON decoding gives).

Objects come from the wire, so every accessor tolerates absent fields and fields of the wrong shape: a missing
or malformed ``metadata`` reads as empty, never as ``KeyError``/``TypeError``. One set of accessors for every
module, so "the name of an object" means the same thing in the controller, the webhook, the extender and
``kq``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, TypedDict, cast

Obj = Mapping[str, Any]
"""A raw object as decoded from JSON."""


class OwnerReference(TypedDict, total=False):
    """``metadata.ownerReferences[*]`` as the API server writes it."""

    apiVersion: str
    kind: str
    name: str
    uid: str
    controller: bool
    blockOwnerDeletion: bool


class ObjectMeta(TypedDict, total=False):
    """The fields of ``metadata`` the system reads."""

    name: str
    namespace: str
    uid: str
    resourceVersion: str
    generation: int
    creationTimestamp: str
    deletionTimestamp: str
    labels: dict[str, str]
    annotations: dict[str, str]
    ownerReferences: list[OwnerReference]
    finalizers: list[str]


_EMPTY: Mapping[str, Any] = {}


def meta(obj: Obj) -> Mapping[str, Any]:
    """``metadata``, or an empty mapping when it is absent or not an object."""
    metadata = obj.get("metadata")
    return metadata if isinstance(metadata, Mapping) else _EMPTY


def _text(obj: Obj, key: str) -> str:
    value = meta(obj).get(key)
    return value if isinstance(value, str) else ""


def name_of(obj: Obj) -> str:
    return _text(obj, "name")


def namespace_of(obj: Obj) -> str:
    return _text(obj, "namespace")


def uid_of(obj: Obj) -> str:
    return _text(obj, "uid")


def resource_version_of(obj: Obj) -> str:
    return _text(obj, "resourceVersion")


def labels_of(obj: Obj) -> Mapping[str, Any]:
    value = meta(obj).get("labels")
    return value if isinstance(value, Mapping) else _EMPTY


def annotations_of(obj: Obj) -> Mapping[str, Any]:
    value = meta(obj).get("annotations")
    return value if isinstance(value, Mapping) else _EMPTY


def owner_references_of(obj: Obj) -> list[OwnerReference]:
    """The owner references that are objects (malformed entries are skipped)."""
    value = meta(obj).get("ownerReferences")
    if not isinstance(value, list):
        return []
    return [cast(OwnerReference, ref) for ref in value if isinstance(ref, dict)]


def controller_of(obj: Obj) -> OwnerReference | None:
    """The owner reference with ``controller: true``, if any."""
    return next((ref for ref in owner_references_of(obj) if ref.get("controller") is True), None)


def parse_time(text: object) -> float | None:
    """Seconds since the epoch of an RFC 3339 time (``2024-05-01T12:00:00Z``; naive times are UTC);
    ``None`` when absent or unreadable."""
    if not isinstance(text, str) or not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def created_of(obj: Obj) -> float:
    """``creationTimestamp`` in epoch seconds; 0 when absent or unreadable."""
    return parse_time(meta(obj).get("creationTimestamp")) or 0.0


def event_time(event: Obj) -> float:
    """When an Event last happened: ``lastTimestamp``, ``eventTime`` or ``firstTimestamp`` (the first set), else
    its creation; 0 when none is readable."""
    for key in ("lastTimestamp", "eventTime", "firstTimestamp"):
        stamp = parse_time(event.get(key))
        if stamp:
            return stamp
    return created_of(event)


def deleting(obj: Obj) -> bool:
    """Whether the object has a ``deletionTimestamp`` (it is being deleted)."""
    return bool(meta(obj).get("deletionTimestamp"))
