"""A :class:`~webhook.kube.cache.ListWatch` that keeps only what its reader needs of every object.

Watch caches of pods hold thousands of objects; keeping a slim copy (what the reader reads) instead of the
whole object saves most of their memory and every later copy. Used by the extender's and the controller's
pod caches.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass

from webhook.api.names import LAST_APPLIED_ANNOTATION
from webhook.api.objects import Doc, Obj
from webhook.kube.cache import ListWatch

__all__ = ["SlimListWatch", "compacted", "share_texts", "trimmed", "without_managed_fields"]

SHARED_TEXT_MAX = 64
"""Texts up to this length are shared between cached objects (:func:`compacted`): the defaults every job's
template carries, the images, the names of the resources. Longer ones are rarely repeated."""


def without_managed_fields(obj: Obj) -> Doc:
    """The object without ``metadata.managedFields`` (a shallow copy where it had them): the API server's record
    of which field manager set which field, often the largest part of a small object, and read by no cache
    here."""
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping) or "managedFields" not in metadata:
        return obj if isinstance(obj, dict) else dict(obj)
    out = dict(obj)
    out["metadata"] = {key: value for key, value in metadata.items() if key != "managedFields"}
    return out


def compacted(obj: Obj) -> Doc:
    """The object as dicts, in less memory (issue 38): :func:`without_managed_fields`, without
    :data:`LAST_APPLIED_ANNOTATION` (its annotations map stays, empty or not), and every text of at most
    :data:`SHARED_TEXT_MAX` characters shared with the equal texts of the other objects (``sys.intern``), so a
    field every job repeats (``IfNotPresent``, ``/dev/termination-log``, an image, a label) is held once.

    Changes ``obj`` in place: call it on a freshly decoded object only, as :class:`SlimListWatch` does. The
    values read are the same; only where they are stored changes. A job cache keeps its objects packed
    (:mod:`webhook.kube.packed`), and this when one cannot be."""
    out = trimmed(obj)
    share_texts(out)
    return out


def trimmed(obj: Obj) -> Doc:
    """:func:`without_managed_fields`, and without :data:`LAST_APPLIED_ANNOTATION` (its annotations map stays,
    empty or not). Changes ``obj``'s annotations in place."""
    out = without_managed_fields(obj)
    metadata = out.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    if isinstance(annotations, dict):
        annotations.pop(LAST_APPLIED_ANNOTATION, None)
    return out


def share_texts(node: Doc | list[object]) -> None:
    """Replace every short text inside ``node`` (dicts and lists, in place) by its interned equal. The keys are
    shared already: the decoder keeps one copy of each."""
    pending: list[Doc | list[object]] = [node]
    while pending:
        current = pending.pop()
        if isinstance(current, dict):
            for key, value in current.items():
                if type(value) is str:
                    if len(value) <= SHARED_TEXT_MAX:
                        current[key] = sys.intern(value)
                elif isinstance(value, (dict, list)):
                    pending.append(value)
            continue
        for index, value in enumerate(current):
            if type(value) is str:
                if len(value) <= SHARED_TEXT_MAX:
                    current[index] = sys.intern(value)
            elif isinstance(value, (dict, list)):
                pending.append(value)


@dataclass(frozen=True, slots=True)
class SlimListWatch:
    """A :class:`ListWatch` that hands on only ``slim(object)`` of every object it lists or watches."""

    inner: ListWatch
    slim: Callable[[Obj], Obj]

    async def list_page(self, limit: int, continue_token: str | None) -> Doc:
        page = await self.inner.list_page(limit, continue_token)
        items = page.get("items")
        if isinstance(items, list):
            page["items"] = [self.slim(item) if isinstance(item, Mapping) else item for item in items]
        return page

    def watch(self, resource_version: str, timeout_seconds: int) -> AbstractAsyncContextManager[AsyncIterator[Doc]]:
        return self._slimmed(self.inner.watch(resource_version, timeout_seconds))

    @contextlib.asynccontextmanager
    async def _slimmed(
        self, opened: AbstractAsyncContextManager[AsyncIterator[Doc]]
    ) -> AsyncIterator[AsyncIterator[Doc]]:
        async with opened as events:
            yield self._each(events)

    async def _each(self, events: AsyncIterator[Doc]) -> AsyncIterator[Doc]:
        slim = self.slim
        async for event in events:
            obj = event.get("object")
            if isinstance(obj, Mapping) and event.get("type") in _OBJECT_EVENTS:
                event["object"] = slim(obj)
            yield event


_OBJECT_EVENTS = frozenset({"ADDED", "MODIFIED", "DELETED"})
