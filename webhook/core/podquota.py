"""Pod-level elastic quota: what running pods use up each quota chain, and whether one more pod fits.

Admission may oversell a quota (``--oversellrate``), so the queue can release more jobs than fit; this rule
is what keeps the *running* pods within ``max`` whatever the oversell rate (the rate is not applied here): a
pod that would take its quota - its leaf or any ancestor - over ``max`` in a resource it requests waits.
The scheduler extender refuses it every node (counting the pods bound and the pods it let through but has
not yet seen bound); the simulator keeps the job's pods pending. Both count and check with this module only.

Which quota: the leaf that lists the pod's namespace now, as the queue controller counts it
(docs/accounting.md): none when no leaf lists it. The pod's quota label is not read: it says where the pod
was created, and a namespace moved to another leaf takes its running pods with it.

Usage is a plain mutable ``node key -> resource -> nano-units`` mapping that :func:`charge` keeps up to
date in place, one chain walk a pod: the extender charges and uncharges a pod on every binding event and
checks on every filter, so an immutable :class:`~webhook.core.ledger.Ledger` (a new chain of cells per
change, jobs rather than pods, ``kube-queue/max-jobs`` counted) would cost more and count the wrong thing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from webhook.api.names import MAX_JOBS
from webhook.core.quantity import format_quantity
from webhook.core.quota import QuotaTree
from webhook.core.resources import is_binary_resource

Usage = Mapping[str, Mapping[str, int]]
"""Quota node key (lower-case name) -> resource -> nano-units used by the pods of that node's subtree."""
MutableUsage = dict[str, dict[str, int]]
"""A :data:`Usage` that :func:`charge` updates in place."""


def quota_key(tree: QuotaTree | None, namespace: str) -> str | None:
    """The key of the leaf a pod of ``namespace`` counts against (see the module notes), or ``None``."""
    if tree is None:
        return None
    return tree.leaf_by_namespace.get(namespace)


def charge(
    usage: MutableUsage, tree: QuotaTree, quota: str, amounts: Iterable[tuple[str, int]], sign: int = 1
) -> None:
    """Add (``sign`` 1) or remove (-1) ``amounts`` at quota node ``quota`` and every ancestor, in place.

    An amount that comes back to zero is dropped, so a pod charged then uncharged leaves no trace (a node
    key once charged stays, with an empty mapping). ``amounts`` is read once per level: pass a mapping's
    ``items()`` or a list, not an iterator.
    """
    for node in tree.chain(quota):
        sums = usage.get(node.key)
        if sums is None:
            sums = usage[node.key] = {}
        for name, amount in amounts:
            left = sums.get(name, 0) + sign * amount
            if left:
                sums[name] = left
            else:
                sums.pop(name, None)


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


def checked(request: Mapping[str, int], *, by_name: bool = True) -> list[tuple[str, int]]:
    """The amounts of ``request`` the pod-level quota checks: positive, and not ``kube-queue/max-jobs`` (it
    counts jobs, not pods). By resource name, or as the request lists them (``by_name=False``)."""
    wanted = [(name, amount) for name, amount in request.items() if amount > 0 and name != MAX_JOBS]
    if by_name:
        wanted.sort()
    return wanted


def pod_quota_blockers(
    tree: QuotaTree, key: str, request: Mapping[str, int], *usages: Usage, by_name: bool = True, first: bool = False
) -> tuple[QuotaBlocker, ...]:
    """Every (level, resource) where ``sum(usages) + request > max``, leaf first, then resources by name (or
    as ``request`` lists them, ``by_name=False``); only the first such one with ``first``.

    ``usages`` are added up (bound pods, pods placed but not yet bound, a pod's own placement taken out...).
    A resource absent from a node's ``max`` is unlimited there; ``kube-queue/max-jobs`` is never checked.
    """
    wanted = checked(request, by_name=by_name)
    if not wanted:
        return ()
    blockers: list[QuotaBlocker] = []
    for node in tree.chain(key):
        caps = node.max
        for resource, amount in wanted:
            cap = caps.get(resource)
            if cap is None:
                continue
            used = 0
            for usage in usages:
                sums = usage.get(node.key)
                if sums is not None:
                    used += sums.get(resource, 0)
            if used + amount > cap:
                blockers.append(QuotaBlocker(node.full_name, resource, amount, used, cap))
                if first:
                    return tuple(blockers)
    return tuple(blockers)


POD_QUOTA_REFUSAL: Final = "pod-level quota"
"""How every refusal of the extender's pod-level quota begins. kube-scheduler copies it into the pod's
``PodScheduled`` condition, the only place ``kq why`` can read the refusal from (:func:`refused_by_pod_quota`)."""


def refused_by_pod_quota(message: str) -> bool:
    """The scheduler's message for a pod says the extender refused it for pod-level quota."""
    return POD_QUOTA_REFUSAL in message


def explain_blockers(blockers: tuple[QuotaBlocker, ...]) -> str:
    """The filter's reason for a pod refused by its quota (every node gets this text)."""
    return f"{POD_QUOTA_REFUSAL} (bound and placed pods): " + "; ".join(blocker.explain() for blocker in blockers)
