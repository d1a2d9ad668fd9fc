"""Pod-level elastic quota: whether one more pod keeps its quota within ``max`` at every level.

Pure functions over the quota tree and per-node usage (no I/O, no clock). Admission may oversell a quota
(``--oversellrate``), so the queue can release more jobs than fit; this check is what keeps the *running*
pods within ``max`` whatever the oversell rate: the extender refuses every node to a pod that would take
its quota - its leaf or any ancestor - over ``max`` in a resource it requests, counting the pods already
bound and the pods the extender let through but has not yet seen bound.

Which quota: the leaf that lists the pod's namespace now, as the queue controller counts it (docs/accounting.md):
none when no leaf lists it. The pod's quota label is not read: it says where the pod was created, and a
namespace moved to another leaf takes its running pods with it, so both sides count them in one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from webhook.core.quantity import format_quantity
from webhook.core.quota import QuotaTree
from webhook.core.resources import MAX_JOBS, is_binary_resource

Usage = Mapping[str, Mapping[str, int]]
"""Quota node key (lower-case name) -> resource -> nano-units used by the pods of that node's subtree."""


def quota_key(tree: QuotaTree | None, namespace: str) -> str | None:
    """The key of the leaf a pod of ``namespace`` counts against (see the module notes), or ``None``."""
    if tree is None:
        return None
    return tree.leaf_by_namespace.get(namespace)


@dataclass(frozen=True, slots=True)
class QuotaBlocker:
    """One level and resource that the pod would take over ``max``. Amounts are nano-units."""

    quota: str
    """Full name of the node, ``root/Department-a``."""
    resource: str
    request: int
    used: int
    max: int

    def explain(self) -> str:
        """``quota root/Department-a: cpu request 10 + used 95 > max 100``."""
        binary = is_binary_resource(self.resource)
        text = (
            f"quota {self.quota}: {self.resource} request {format_quantity(self.request, binary)}"
            f" + used {format_quantity(self.used, binary)} > max {format_quantity(self.max, binary)}"
        )
        if self.request > self.max:
            text += " (the pod alone is over the max)"
        return text


def _amount(usage: Usage, key: str, resource: str) -> int:
    per_node = usage.get(key)
    return 0 if per_node is None else per_node.get(resource, 0)


def pod_quota_blockers(
    tree: QuotaTree, key: str, request: Mapping[str, int], *usages: Usage
) -> tuple[QuotaBlocker, ...]:
    """Every (level, resource) where ``sum(usages) + request > max``, leaf first, resources by name.

    ``usages`` are added up (bound pods, pods placed but not yet bound...). A resource absent from a node's
    ``max`` is unlimited there; ``kube-queue/max-jobs`` counts jobs, not pods, and is never checked here.
    """
    wanted = sorted((name, amount) for name, amount in request.items() if amount > 0 and name != MAX_JOBS)
    if not wanted:
        return ()
    blockers: list[QuotaBlocker] = []
    for node in tree.chain(key):
        for resource, amount in wanted:
            cap = node.max.get(resource)
            if cap is None:
                continue
            used = sum(_amount(usage, node.key, resource) for usage in usages)
            if used + amount > cap:
                blockers.append(QuotaBlocker(node.full_name, resource, amount, used, cap))
    return tuple(blockers)


def explain_blockers(blockers: tuple[QuotaBlocker, ...]) -> str:
    """The filter's reason for a pod refused by its quota (every node gets this text)."""
    return "pod-level quota (bound and placed pods): " + "; ".join(blocker.explain() for blocker in blockers)
