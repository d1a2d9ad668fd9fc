"""What each watch cache of this process has seen, read when ``/metrics`` is scraped (nothing on the watch's
own path): ``kube_queue_watch_resource_version{cache}``, the last resourceVersion it stored (list, event or
bookmark), and ``kube_queue_watch_objects{cache}``, how many objects it holds.

An operator compares the first with the API server's to see a watch that fell behind, and the second to see one that
holds nothing (a refused list). Where two caches of a process share a name, the resourceVersion of the one furthest
behind is shown and their objects are added up. A resourceVersion that is not a whole number (the API calls it
opaque) is left out.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import REGISTRY
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from webhook.kube.cache import WatchCache

RESOURCE_VERSION = "kube_queue_watch_resource_version"
OBJECTS = "kube_queue_watch_objects"


class WatchCollector(Collector):
    """The watch caches alive in this process (held weakly), as two gauges per cache name."""

    def __init__(self) -> None:
        self._caches: weakref.WeakSet[WatchCache] = weakref.WeakSet()

    def add(self, cache: WatchCache) -> None:
        self._caches.add(cache)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        versions: dict[str, int] = {}
        objects: dict[str, int] = {}
        for cache in list(self._caches):
            objects[cache.name] = objects.get(cache.name, 0) + len(cache)
            text = cache.resource_version or ""
            if text.isdigit():
                version = int(text)
                versions[cache.name] = min(versions.get(cache.name, version), version)
        seen = GaugeMetricFamily(RESOURCE_VERSION, "The last resourceVersion each watch cache stored (list, event "
                                 "or bookmark); of caches sharing a name, the furthest behind.", labels=["cache"])
        for name, version in sorted(versions.items()):
            seen.add_metric([name], float(version))
        held = GaugeMetricFamily(OBJECTS, "Objects each watch cache holds.", labels=["cache"])
        for name, count in sorted(objects.items()):
            held.add_metric([name], float(count))
        yield seen
        yield held


WATCHES = WatchCollector()
REGISTRY.register(WATCHES)
