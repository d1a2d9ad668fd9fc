"""One watch per resource in a process: the caches ``kq serve``'s parts share (docs/architecture.md).

The webhook and the controller both read the ElasticQuotaTrees, ResourcePolicies, PriorityClasses and
Namespaces. The part that runs first offers its caches here; a later part that needs the same resource, with the
same selectors, adds its listener to that cache instead of listing and watching it again. The part that offered
a cache runs it; a part that borrowed one only reads it and listens.

What the parts make of a cache's objects is shared the same way (:meth:`SharedWatches.derived`): the honoured
tree, the PriorityClass values and the parsed ResourcePolicies are made once per change of their cache, and the
webhook's snapshot and the controller's pass read the same objects.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar, cast

from aiohttp import web

from webhook.api.objects import Obj
from webhook.kube.cache import ApiListWatch, WatchCache
from webhook.kube.client import ResourceRef

T = TypeVar("T")

HONOURED_TREE = "honoured-tree"
"""The name under which the parts of a process share the honoured tree (``webhook.core.treechoice``)."""
PRIORITY_VALUES = "priority-values"
"""The name under which the parts of a process share the PriorityClass values (``priority_values``)."""
POLICY_SET = "policy-set"
"""The name under which the parts of a process share the parsed ResourcePolicies (``webhook.core.placement``)."""

WatchKey = tuple[ResourceRef, str | None, str | None]
"""A resource and its label and field selectors."""


Make = Callable[[list[Obj], T | None], T]
"""Makes a value of a cache's objects, given the value made before (``None`` the first time) to reuse parts of."""


def remade(make: Callable[[list[Obj]], T]) -> Make[T]:
    """``make`` as a :data:`Make` that makes the value afresh each time."""

    def again(objects: list[Obj], previous: T | None) -> T:
        return make(objects)

    return again


class Derived(Generic[T]):
    """A value made from a cache's objects, made again only after the cache changed."""

    def __init__(self, cache: WatchCache, make: Make[T]) -> None:
        self.cache = cache
        self._make = make
        self._at = -1
        self._value: T | None = None

    @property
    def value(self) -> T:
        """The value for the cache as it is now (a listener of the cache already reads the new one)."""
        changes = self.cache.changes
        if self._at != changes or self._value is None:
            self._value = self._make(self.cache.items(), self._value)
            self._at = changes
        return self._value


class SharedWatches:
    """The caches one process offers to share, by resource and selectors, and what is made of them."""

    def __init__(self) -> None:
        self._caches: dict[WatchKey, WatchCache] = {}
        self._derived: dict[tuple[int, str], Derived[object]] = {}

    def offer(self, cache: WatchCache) -> None:
        """Share ``cache`` when it reads the whole resource from the API server as it is (not slimmed)."""
        source = cache.source
        if isinstance(source, ApiListWatch):
            self._caches.setdefault((source.ref, source.label_selector, source.field_selector), cache)

    def find(self, ref: ResourceRef, label_selector: str | None = None,
             field_selector: str | None = None) -> WatchCache | None:
        """The cache another part offered for ``ref`` with these selectors, if any."""
        return self._caches.get((ref, label_selector, field_selector))

    def derived(self, cache: WatchCache, name: str, make: Make[T]) -> Derived[T]:
        """The value called ``name`` made of ``cache``'s objects, shared by every part that asks for it by that
        name (the first one's ``make`` makes it: the parts agree on what the name means)."""
        key = (id(cache), name)
        found = self._derived.get(key)
        if found is None:
            made = Derived(cache, make)
            self._derived[key] = cast("Derived[object]", made)
            return made
        return cast("Derived[T]", found)  # registered under this name by a part that makes the same value


WATCHES = web.AppKey("watches", SharedWatches)
"""Where ``kq serve`` keeps the shared caches on its application, for its plugins."""
