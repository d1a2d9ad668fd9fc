"""Wiring: the watch caches that keep :class:`~webhook.extender.state.ExtenderState` current.

Seven caches - Nodes, Pods, ResourcePolicies, ElasticQuotaTrees (``kube-system`` only), the controller's
reservation ConfigMap (:mod:`webhook.extender.reserved`), DeviceClasses and ResourceClaims
(:mod:`webhook.extender.claims`) - feed the state: node, pod and claim events are applied one by one (a request
with 5,000 nodes must not wait for a rebuild); policies, trees, the reservation and the device classes are few
and are re-read whole on every change. ``state.ready`` turns true once all seven have listed. The pod and claim
caches keep only what the state reads of each object (:class:`SlimListWatch`), and the pod cache only pods that
can count - bound and not finished (:data:`POD_FIELD_SELECTOR`).

A CRD that is not installed (no ResourcePolicy or ElasticQuotaTree API yet), or a cluster that does not serve
``resource.k8s.io/v1``, reads as an empty list (:class:`~webhook.kube.optional.OptionalListWatch`): the
extender must not stall every pod of the cluster because an optional API is missing. Such a list is
retried every :data:`~webhook.kube.optional.ABSENT_RETRY_SECONDS`, so the API is picked up once it is served.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable

from webhook.api import kinds
from webhook.api.names import QUEUE_NAMESPACE, RESERVATIONS, TREE_NAMESPACE
from webhook.api.objects import Obj
from webhook.extender.claims import claim_essentials
from webhook.extender.pods import pod_essentials
from webhook.extender.state import ExtenderState
from webhook.kube.cache import RELIST, ApiListWatch, CacheEvent, ListWatch, WatchCache, wait_synced
from webhook.kube.client import KubeClient, ResourceRef
from webhook.kube.optional import ABSENT_RETRY_SECONDS, OptionalListWatch
from webhook.kube.slim import SlimListWatch
from webhook.kube.tasks import TaskGroup

log = logging.getLogger(__name__)

NODES = ResourceRef.of(kinds.NODE)
PODS = ResourceRef.of(kinds.POD)
POLICIES = ResourceRef.of(kinds.RESOURCE_POLICY)
TREES = ResourceRef.of(kinds.ELASTIC_QUOTA_TREE, TREE_NAMESPACE)
DEVICE_CLASSES = ResourceRef.of(kinds.DEVICE_CLASS)
CLAIMS = ResourceRef.of(kinds.RESOURCE_CLAIM)
__all__ = ["ABSENT_RETRY_SECONDS", "OptionalListWatch", "build_caches", "pod_cache", "running"]
POD_FIELD_SELECTOR = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"
"""The pods the extender watches: bound and not finished - the only ones that count towards a unit's ``max``
or a quota. A pending pod is known from the filter request it comes with; a pod placed but not yet bound is
counted from the extender's own assumption. The API server filters, so the pod's creation (and every status
change before it is bound) is neither sent nor decoded - one watch event fewer per pod in the scheduler's
busiest path - and finished pods (Job pods linger by the thousand) are neither listed nor kept: one that
finishes arrives as a ``DELETED`` event. What is given up: an assumed pod deleted before it was bound, or one
whose binding failed, is not seen here; :mod:`webhook.extender.audit` reads such pods back instead."""



def _incremental(
    upsert: Callable[[Obj], None],
    delete: Callable[[Obj], None],
    replace: Callable[[list[Obj]], None],
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


def _whole(update: Callable[[list[Obj]], None]) -> Callable[[WatchCache, CacheEvent], None]:
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
    """The seven caches, wired to ``state`` (not yet running)."""
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
    classes = WatchCache("extender-deviceclasses", OptionalListWatch(ApiListWatch(client, DEVICE_CLASSES)))
    classes.add_listener(_whole(state.set_device_classes))
    claims = WatchCache("extender-resourceclaims",
                        OptionalListWatch(SlimListWatch(ApiListWatch(client, CLAIMS), claim_essentials)))
    claims.add_listener(_incremental(state.upsert_claim, state.delete_claim, state.replace_claims))
    return [nodes, pods, policies, quota_trees, reservations, classes, claims]


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

