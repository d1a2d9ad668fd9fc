"""Pods that no queued job accounts for ("loose" pods), as the decision pass counts and evicts them.

Every bound, unfinished pod of a quota's namespaces counts against the leaf that lists its namespace
(docs/accounting.md). The pods of a job the queue tracks count through the job. Every other pod is *loose*:
a Deployment's or a StatefulSet's, an orphan of a job deleted with ``--cascade=orphan``, a bare Pod. It is
admitted as it is, and reclaim may take it back under the same rules as a job (docs/reclaim.md, "Pods"):
it is a victim like any admitted job of its quota, ordered by its priority and creation time.

A pod cannot be held again, so reclaim evicts it through the Eviction API. Its controller, if it has one,
creates a replacement, which waits Pending while the quota's room is owed elsewhere (the extender counts the
queue's reservations, docs/pod-quota.md). Reclaim does not take (:func:`eviction_block`):

* a pod being deleted already: it frees its room on its own;
* a DaemonSet's pod or a node's mirror pod: it comes back on the same node at once, so evicting it frees
  nothing;
* a pod a PodDisruptionBudget protects now: a budget of its namespace selects it and its
  ``status.disruptionsAllowed`` is below 1 (the Eviction API would refuse it). Reclaim takes the next
  victim instead, and ``kq why`` names the budget.

A loose pod is never a job of ``kube-queue/max-jobs``: its workload's request carries one job less, so the
one :attr:`~webhook.core.workload.Workload.request_with_count` adds cancels out.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from webhook.api.names import MAX_JOBS
from webhook.core.dra import DeviceQuota, held_devices
from webhook.core.ledger import Ledger, build_ledger
from webhook.core.quantity import NANO
from webhook.core.quota import QuotaTree
from webhook.core.resources import EMPTY, Resources
from webhook.core.selectors import EMPTY_LABELS, FrozenLabels, LabelSelector, SelectorError, parse_label_selector
from webhook.core.workload import Phase, Workload, WorkloadKey

__all__ = [
    "LOOSE_KIND",
    "NOT_EVICTED_OWNERS",
    "DisruptionBudget",
    "LoosePod",
    "eviction_block",
    "loose_inputs",
    "loose_workload",
    "parse_budget",
    "read_budget",
    "read_budgets",
    "reserved_for_jobs",
    "with_claimed_devices",
]

LOOSE_KIND = "Pod"
"""The kind in a loose pod's :class:`~webhook.core.workload.WorkloadKey` (``Pod/user-a/web-7d4f9-x2``)."""

NOT_EVICTED_OWNERS = frozenset({"DaemonSet", "Node"})
"""Owner kinds whose pods reclaim never evicts: they come back on the same node at once."""

_NOT_A_JOB = Resources({MAX_JOBS: -NANO})


@dataclass(frozen=True, slots=True)
class LoosePod:
    """What the pass reads of one loose pod."""

    namespace: str
    name: str
    request: Resources
    priority: int = 0
    created: float = 0.0
    """When the pod was created, seconds since the epoch (its place in the eviction order)."""
    owner_kind: str = ""
    """Its controller owner's kind (``ReplicaSet``, ``StatefulSet``...), ``""`` when it has none."""
    labels: FrozenLabels = field(default=EMPTY_LABELS)
    deleting: bool = False
    uid: str = ""
    claims: tuple[str, ...] = ()
    """The DRA claims made for it from templates (:func:`webhook.core.dra.pod_claim_refs`)."""
    shared_claims: tuple[str, ...] = ()
    """The DRA claims it shares with other pods."""


@dataclass(frozen=True, slots=True)
class DisruptionBudget:
    """A PodDisruptionBudget as reclaim reads it: whom it selects and how many disruptions it allows now."""

    namespace: str
    name: str
    selector: LabelSelector
    allowed: int

    def protects(self, pod: LoosePod) -> bool:
        """Whether the budget forbids evicting ``pod`` now."""
        return self.allowed < 1 and pod.namespace == self.namespace and self.selector.matches(pod.labels)


def parse_budget(namespace: str, name: str, selector: object, allowed: object) -> DisruptionBudget | None:
    """A budget from its fields (``spec.selector``, ``status.disruptionsAllowed``); ``None`` when its selector
    is invalid (the API server refuses such a budget, so it protects nothing). A budget whose status says
    nothing yet allows nothing: the Eviction API refuses evictions until the disruption controller counted."""
    try:
        parsed = parse_label_selector(selector, "spec.selector")
    except SelectorError:
        return None
    count = allowed if isinstance(allowed, int) and not isinstance(allowed, bool) else 0
    return DisruptionBudget(namespace, name, parsed, count)


def read_budgets(objects: Iterable[Mapping[str, object]]) -> dict[str, list[DisruptionBudget]]:
    """PodDisruptionBudget objects as :func:`parse_budget` reads them, by namespace (invalid ones left out)."""
    out: dict[str, list[DisruptionBudget]] = {}
    for obj in objects:
        budget = read_budget(obj)
        if budget is not None:
            out.setdefault(budget.namespace, []).append(budget)
    return out


def read_budget(obj: Mapping[str, object]) -> DisruptionBudget | None:
    """One PodDisruptionBudget object (``metadata``, ``spec.selector``, ``status.disruptionsAllowed``)."""
    metadata, spec, status = (obj.get(key) for key in ("metadata", "spec", "status"))
    metadata = metadata if isinstance(metadata, Mapping) else {}
    spec = spec if isinstance(spec, Mapping) else {}
    status = status if isinstance(status, Mapping) else {}
    return parse_budget(str(metadata.get("namespace") or ""), str(metadata.get("name") or ""), spec.get("selector"),
                        status.get("disruptionsAllowed"))


def eviction_block(pod: LoosePod, budgets: Iterable[DisruptionBudget] = ()) -> str | None:
    """Why reclaim may not evict ``pod``, in words for ``kq why``; ``None`` when it may."""
    if pod.deleting:
        return "it is being deleted already"
    if pod.owner_kind in NOT_EVICTED_OWNERS:
        return f"a {pod.owner_kind}'s pod comes back on its node at once"
    for budget in budgets:
        if budget.protects(pod):
            return f"its PodDisruptionBudget {budget.name} allows no disruption now"
    return None


def loose_workload(pod: LoosePod, quota: str) -> Workload:
    """The pod as an admitted workload of the leaf quota ``quota``, admitted when it was created."""
    return Workload(
        key=WorkloadKey(LOOSE_KIND, pod.namespace, pod.name),
        quota=quota,
        pod_sets=(),
        priority=pod.priority,
        created=pod.created,
        uid=pod.uid,
        phase=Phase.ADMITTED,
        admitted_at=pod.created,
        request=pod.request + _NOT_A_JOB,
    )


def with_claimed_devices(pods: Iterable[LoosePod], quota: DeviceQuota) -> list[LoosePod]:
    """``pods`` with the devices their DRA claims hold added to their requests (:func:`held_devices`): a claim
    shared by several of them counts once, with the first of them by namespace and name."""
    out: list[LoosePod] = []
    counted: set[tuple[str, str]] = set()
    for pod in sorted(pods, key=lambda pod: (pod.namespace, pod.name)):
        extra = EMPTY
        if quota.classes and (pod.claims or pod.shared_claims):
            extra = held_devices(pod.namespace, pod.claims, pod.shared_claims, quota, counted)
        out.append(replace(pod, request=pod.request + extra) if extra else pod)
    return out


def reserved_for_jobs(ledger: Ledger, loose: Iterable[Workload], gone: Collection[WorkloadKey] = ()
                      ) -> dict[str, Resources]:
    """What the admitted jobs hold at each node of the tree (its subtree's jobs), the loose pods left out: the
    room the scheduler extender keeps from pods no job accounts for (docs/pod-quota.md). ``ledger`` is the
    pass's usage after its decisions (loose pods counted), ``gone`` the loose pods the pass evicts. Nodes the
    jobs do not use are left out; ``kube-queue/max-jobs`` is not a pod's resource and is left out too."""
    pods = build_ledger(ledger.tree, [workload for workload in loose if workload.key not in gone])
    out: dict[str, Resources] = {}
    for key in ledger.tree.nodes:
        held = (ledger.used(key) - pods.used(key)).without_zeros()
        held = Resources({name: amount for name, amount in held.items() if name != MAX_JOBS and amount > 0})
        if held:
            out[key] = held
    return out


def loose_inputs(
    tree: QuotaTree,
    pods: Iterable[LoosePod],
    budgets: Mapping[str, Sequence[DisruptionBudget]] | None = None,
) -> tuple[list[Workload], dict[WorkloadKey, str]]:
    """What the pass takes of ``pods``: the workload of each pod of a namespace of ``tree`` (under the leaf
    that lists its namespace now), and why reclaim may not evict those it may not (``budgets`` by
    namespace). Pods of other namespaces are left out."""
    workloads: list[Workload] = []
    protected: dict[WorkloadKey, str] = {}
    budgets = budgets or {}
    for pod in pods:
        leaf = tree.leaf_for_namespace(pod.namespace)
        if leaf is None:
            continue
        workload = loose_workload(pod, leaf.name)
        workloads.append(workload)
        why = eviction_block(pod, budgets.get(pod.namespace, ()))
        if why is not None:
            protected[workload.key] = why
    return workloads, protected
