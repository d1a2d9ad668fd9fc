"""Wiring: the watch caches that keep :class:`~webhook.extender.state.ExtenderState` current.

Five caches - Nodes, Pods, ResourcePolicies, ElasticQuotaTrees (``kube-system`` only) and the controller's
reservation ConfigMap (:mod:`webhook.extender.reserved`) - feed the state:
node and pod events are applied one by one (a request with 5,000 nodes must not wait for a rebuild);
policies, trees and the reservation are few and are re-read whole on every change. ``state.ready`` turns true
once all five have listed. The pod cache keeps only what the state reads of each pod (:class:`SlimListWatch`), and
only pods that can count - bound and not finished (:data:`POD_FIELD_SELECTOR`).

A CRD that is not installed (no ResourcePolicy or ElasticQuotaTree API yet) reads as an empty list: the
extender must not stall every pod of the cluster because an optional API is missing. Such a list is
retried every :data:`ABSENT_RETRY_SECONDS`, so the CRD is picked up once it is installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

from webhook.api import kinds
from webhook.api.names import QUEUE_NAMESPACE, RESERVATIONS, TREE_NAMESPACE
from webhook.extender.pods import pod_essentials
from webhook.extender.state import ExtenderState
from webhook.kube.cache import RELIST, ApiListWatch, CacheEvent, ListWatch, WatchCache, wait_synced
from webhook.kube.client import JSON, KubeApiError, KubeClient, ResourceRef
from webhook.kube.slim import SlimListWatch
from webhook.kube.tasks import TaskGroup

log = logging.getLogger(__name__)

NODES = ResourceRef.of(kinds.NODE)
PODS = ResourceRef.of(kinds.POD)
POLICIES = ResourceRef.of(kinds.RESOURCE_POLICY)
TREES = ResourceRef.of(kinds.ELASTIC_QUOTA_TREE, TREE_NAMESPACE)
ABSENT_RETRY_SECONDS = 10.0
POD_FIELD_SELECTOR = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
"""The pods the extender watches: bound and not finished - the only ones that count towards a unit's ``max``
or a quota. A pending pod is known from the filter request it comes with; a pod placed but not yet bound is
counted from the extender's own assumption. The API server filters, so the pod's creation (and every status
change before it is bound) is neither sent nor decoded - one watch event fewer per pod in the scheduler's
busiest path - and finished pods (Job pods linger by the thousand) are neither listed nor kept: one that
finishes arrives as a ``DELETED`` event. What is given up: an assumed pod deleted before it was bound, or one
whose binding failed, is not seen here; :mod:`webhook.extender.audit` reads such pods back instead."""


@dataclass(slots=True)
class OptionalListWatch:
    """A :class:`ListWatch` whose resource may not exist: a 404 on list reads as an empty list, and the
    watch that follows waits ``retry_seconds`` then asks for a re-list (as a 410 Gone would)."""

    inner: ListWatch
    retry_seconds: float = ABSENT_RETRY_SECONDS
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    absent: bool = field(default=False)

    async def list_page(self, limit: int, continue_token: str | None) -> JSON:
        try:
            page = await self.inner.list_page(limit, continue_token)
        except KubeApiError as error:
            if not error.not_found:
                raise
            if not self.absent:
                log.info("component=extender event=resource_absent retry_in=%.0fs", self.retry_seconds)
            self.absent = True
            return {"items": [], "metadata": {"resourceVersion": "0"}}
        self.absent = False
        return page

    def watch(self, resource_version: str, timeout_seconds: int) -> AbstractAsyncContextManager[AsyncIterator[JSON]]:
        if self.absent:
            return self._wait_then_relist()
        return self.inner.watch(resource_version, timeout_seconds)

    @contextlib.asynccontextmanager
    async def _wait_then_relist(self) -> AsyncIterator[AsyncIterator[JSON]]:
        await self.sleep(self.retry_seconds)
        raise KubeApiError(410, "Gone", "resource not installed yet: list again")
        yield _nothing()  # pragma: no cover - unreachable, keeps this a generator


async def _nothing() -> AsyncIterator[JSON]:  # pragma: no cover
    return
    yield {}


"""Watch events that carry the resource itself (``BOOKMARK`` carries only a version, ``ERROR`` a Status)."""


def _incremental(
    upsert: Callable[[Mapping[str, Any]], None],
    delete: Callable[[Mapping[str, Any]], None],
    replace: Callable[[list[Mapping[str, Any]]], None],
) -> Callable[[WatchCache, CacheEvent], None]:
    def listener(cache: WatchCache, event: CacheEvent) -> None:
        if event.type == RELIST:
            replace(cache.items())
        elif event.obj is None:
            return
        elif event.type == "DELETED":
            delete(event.obj)
        else:
            upsert(event.obj)

    return listener


def _whole(update: Callable[[list[Mapping[str, Any]]], None]) -> Callable[[WatchCache, CacheEvent], None]:
    def listener(cache: WatchCache, event: CacheEvent) -> None:
        update(cache.items())

    return listener


def pod_cache(source: ListWatch, state: ExtenderState) -> WatchCache:
    """The pod cache over ``source``: slim pods (:func:`~webhook.extender.pods.pod_essentials`), applied to
    ``state`` one event at a time."""
    cache = WatchCache("extender-pods", SlimListWatch(source, pod_essentials))
    cache.add_listener(_incremental(state.upsert_pod, state.delete_pod, state.replace_pods))
    return cache


def build_caches(client: KubeClient, state: ExtenderState, tree_namespace: str = TREE_NAMESPACE,
                 queue_namespace: str = QUEUE_NAMESPACE) -> list[WatchCache]:
    """The five caches, wired to ``state`` (not yet running)."""
    trees = ResourceRef(TREES.group, TREES.version, TREES.plural, tree_namespace)
    nodes = WatchCache("extender-nodes", ApiListWatch(client, NODES))
    nodes.add_listener(_incremental(state.upsert_node, state.delete_node, state.replace_nodes))
    pods = pod_cache(ApiListWatch(client, PODS, field_selector=POD_FIELD_SELECTOR), state)
    policies = WatchCache("extender-resourcepolicies", OptionalListWatch(ApiListWatch(client, POLICIES)))
    policies.add_listener(_whole(state.set_policies))
    quota_trees = WatchCache("extender-elasticquotatrees", OptionalListWatch(ApiListWatch(client, trees)))
    quota_trees.add_listener(_whole(state.set_trees))
    reservations = WatchCache("extender-reservations", ApiListWatch(
        client, ResourceRef.of(kinds.CONFIG_MAP, queue_namespace), field_selector=f"metadata.name={RESERVATIONS}"
    ))
    reservations.add_listener(_whole(state.set_reservations))
    return [nodes, pods, policies, quota_trees, reservations]


@contextlib.asynccontextmanager
async def running(
    caches: list[WatchCache], state: ExtenderState, on_ready: Callable[[], object] | None = None
) -> AsyncIterator[None]:
    """Run the caches for the block's lifetime; ``state.ready`` (and ``on_ready()``) once they have all
    listed."""

    async def mark_ready() -> None:
        await wait_synced(caches)
        state.ready = True
        if on_ready is not None:
            on_ready()
        log.info(
            "component=extender event=ready nodes=%d pods=%d policies=%d tree=%s",
            len(state.nodes),
            len(caches[1]) if len(caches) > 1 else 0,
            state.policy_count,
            "yes" if state.tree is not None else "no",
        )

    async with TaskGroup("extender") as group:
        for cache in caches:
            group.start(cache.run(), f"cache-{cache.name}")
        group.start(mark_ready(), "extender-caches-ready")
        yield

