"""``kube_queue_watch_resource_version`` and ``kube_queue_watch_objects`` (``webhook/kube/watch_metrics.py``):
what each watch cache of a process has seen, read at scrape time."""

from __future__ import annotations

import gc
from typing import Any

from prometheus_client import REGISTRY

from webhook.kube.cache import WatchCache


def _cache(name: str, version: str | None, objects: int = 0) -> WatchCache:
    source: Any = object()  # never run: only what the cache holds is read
    cache = WatchCache(name, source)
    cache.resource_version = version
    cache._store = {("ns", f"o{index}"): {} for index in range(objects)}
    return cache


def _sample(metric: str, cache: str) -> float | None:
    return REGISTRY.get_sample_value(metric, {"cache": cache})


def test_each_cache_says_the_version_it_stored_and_what_it_holds() -> None:
    kept = _cache("test-policies", "1200", objects=3)
    assert _sample("kube_queue_watch_resource_version", "test-policies") == 1200
    assert _sample("kube_queue_watch_objects", "test-policies") == 3
    assert kept.name == "test-policies"


def test_of_two_caches_sharing_a_name_the_one_behind_is_shown() -> None:
    ahead, behind = _cache("test-pods", "900", objects=1), _cache("test-pods", "850", objects=2)
    assert _sample("kube_queue_watch_resource_version", "test-pods") == 850
    assert _sample("kube_queue_watch_objects", "test-pods") == 3
    assert (ahead.resource_version, behind.resource_version) == ("900", "850")


def test_an_opaque_version_is_left_out_and_a_cache_gone_is_forgotten() -> None:
    opaque = _cache("test-opaque", "abc")
    assert _sample("kube_queue_watch_resource_version", "test-opaque") is None
    assert _sample("kube_queue_watch_objects", "test-opaque") == 0
    del opaque
    gc.collect()
    assert _sample("kube_queue_watch_objects", "test-opaque") is None
