"""One watch per resource in a process: the caches ``kq serve``'s parts share (docs/architecture.md).

The webhook and the controller both read the ElasticQuotaTrees, ResourcePolicies, PriorityClasses and
Namespaces. The part that runs first offers its caches here; a later part that needs the same resource, with the
same selectors, adds its listener to that cache instead of listing and watching it again. The part that offered
a cache runs it; a part that borrowed one only reads it and listens.
"""

from __future__ import annotations

from aiohttp import web

from webhook.kube.cache import ApiListWatch, WatchCache
from webhook.kube.client import ResourceRef

WatchKey = tuple[ResourceRef, str | None, str | None]
"""A resource and its label and field selectors."""


class SharedWatches:
    """The caches one process offers to share, by resource and selectors."""

    def __init__(self) -> None:
        self._caches: dict[WatchKey, WatchCache] = {}

    def offer(self, cache: WatchCache) -> None:
        """Share ``cache`` when it reads the whole resource from the API server as it is (not slimmed)."""
        source = cache.source
        if isinstance(source, ApiListWatch):
            self._caches.setdefault((source.ref, source.label_selector, source.field_selector), cache)

    def find(self, ref: ResourceRef, label_selector: str | None = None,
             field_selector: str | None = None) -> WatchCache | None:
        """The cache another part offered for ``ref`` with these selectors, if any."""
        return self._caches.get((ref, label_selector, field_selector))


WATCHES = web.AppKey("watches", SharedWatches)
"""Where ``kq serve`` keeps the shared caches on its application, for its plugins."""
