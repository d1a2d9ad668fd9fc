"""Wiring: the watch caches that keep the admission state current.

Six caches - ElasticQuotaTrees (in ``kube-system`` only: the webhook refuses trees anywhere else),
ResourcePolicies, PriorityClasses, Namespaces, LimitRanges and DeviceClasses - each rebuild their part of the
:class:`StateStore` on every change. ``store.ready`` turns true once all six have listed. DeviceClasses are
optional: on a cluster that does not serve ``resource.k8s.io/v1`` they read as none
(:class:`~webhook.kube.optional.OptionalListWatch`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import TypeVar

from aiohttp import web

from webhook.admission.state import StateStore
from webhook.api import kinds
from webhook.api.names import TREE_NAMESPACE
from webhook.api.objects import Obj, priority_values
from webhook.core.placement import policy_set
from webhook.core.treechoice import honoured_in
from webhook.kube.cache import ApiListWatch, CacheEvent, ListWatch, WatchCache, wait_synced
from webhook.kube.client import KubeClient, ResourceRef
from webhook.kube.optional import OptionalListWatch
from webhook.kube.shared import HONOURED_TREE, POLICY_SET, PRIORITY_VALUES, Derived, SharedWatches, remade
from webhook.kube.tasks import TaskGroup

T = TypeVar("T")

log = logging.getLogger(__name__)

TREES = ResourceRef.of(kinds.ELASTIC_QUOTA_TREE, TREE_NAMESPACE)
POLICIES = ResourceRef.of(kinds.RESOURCE_POLICY)
PRIORITY_CLASSES = ResourceRef.of(kinds.PRIORITY_CLASS)
NAMESPACES = ResourceRef.of(kinds.NAMESPACE)
LIMIT_RANGES = ResourceRef.of(kinds.LIMIT_RANGE)
DEVICE_CLASSES = ResourceRef.of(kinds.DEVICE_CLASS)
RUNTIME_CLASSES = ResourceRef.of(kinds.RUNTIME_CLASS)


def _rebuild(update: Callable[[Iterable[Obj]], None]) -> Callable[[WatchCache, CacheEvent], None]:
    def listener(cache: WatchCache, event: CacheEvent) -> None:
        update(cache.items())

    return listener


def build_caches(client: KubeClient, store: StateStore, tree_namespace: str = TREE_NAMESPACE,
                 watches: SharedWatches | None = None) -> list[WatchCache]:
    """The seven caches, each wired to its part of ``store`` (not yet running), and offered to ``watches`` for the
    other parts of the process to read (:mod:`webhook.kube.shared`), with the honoured tree, the PriorityClass
    values and the parsed ResourcePolicies made of them once for every part."""
    trees = ResourceRef(TREES.group, TREES.version, TREES.plural, tree_namespace)
    pairs: list[tuple[str, ResourceRef, Callable[[Iterable[Obj]], None]]] = [
        ("elasticquotatrees", trees, store.set_trees),
        ("resourcepolicies", POLICIES, store.set_policies),
        ("priorityclasses", PRIORITY_CLASSES, store.set_priority_classes),
        ("namespaces", NAMESPACES, store.set_namespaces),
        ("limitranges", LIMIT_RANGES, store.set_limit_ranges),
        ("deviceclasses", DEVICE_CLASSES, store.set_device_classes),
        ("runtimeclasses", RUNTIME_CLASSES, store.set_runtime_classes),
    ]
    caches = []
    for name, ref, update in pairs:
        source: ListWatch = ApiListWatch(client, ref)
        if ref is DEVICE_CLASSES:
            source = OptionalListWatch(source, component="admission")
        cache = WatchCache(name, source)
        listener = _rebuild(update)
        if watches is not None:
            watches.offer(cache)
            if ref is trees:
                listener = _shared(store.set_trees, watches.derived(cache, HONOURED_TREE, honoured_in(tree_namespace)))
            elif ref is PRIORITY_CLASSES:
                values = watches.derived(cache, PRIORITY_VALUES, remade(priority_values))
                listener = _shared(store.set_priority_classes, values)
            elif ref is POLICIES:
                listener = _shared(store.set_policies, watches.derived(cache, POLICY_SET, remade(policy_set)))
        cache.add_listener(listener)
        caches.append(cache)
    return caches


def _shared(update: Callable[[list[Obj], T], None], made: Derived[T]) -> Callable[[WatchCache, CacheEvent], None]:
    """A listener that hands ``update`` the cache's objects and what the process made of them."""

    def listener(cache: WatchCache, event: CacheEvent) -> None:
        update(cache.items(), made.value)

    return listener


def cache_context(
    caches: Sequence[WatchCache], store: StateStore
) -> Callable[[web.Application], contextlib.AbstractAsyncContextManager[None]]:
    """An aiohttp ``cleanup_ctx`` entry: runs the caches for the app's lifetime, marks the store ready once
    they have all listed, and cancels them on shutdown."""

    @contextlib.asynccontextmanager
    async def context(app: web.Application) -> AsyncIterator[None]:
        async def mark_ready() -> None:
            await wait_synced(caches)
            store.ready = True
            log.info("component=admission event=ready caches=%s", ",".join(cache.name for cache in caches))

        async with TaskGroup("admission") as group:
            for cache in caches:
                group.start(cache.run(), f"cache-{cache.name}")
            group.start(mark_ready(), "caches-ready")
            yield

    return context
