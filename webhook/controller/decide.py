"""The controller's side of a decision pass: cluster objects in, what to write out.

One :func:`decide` call is one reconcile pass of the queue: the core's pass (:func:`webhook.core.decide.decide`,
which says how it admits and reclaims) over the controller's jobs (:mod:`.model`), each leaf's policy read from
its Queue objects.

Alongside: the Queues the tree asks for (:func:`queue_actions`), the namespace labels
(:func:`namespace_actions`), each Queue's ``status`` and the tree's ``status``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Unpack

from webhook.api.kinds import QUEUE
from webhook.api.names import (
    MANAGED_NAMESPACE_LABEL,
    MANAGED_SINCE_ANNOTATION,
    NAMESPACE_QUOTA_LABEL,
    OVERSELL_RATE_ANNOTATION,
    PLACEMENT_NAMESPACE_LABEL,
    PLACEMENT_SINCE_ANNOTATION,
    QUEUE_ARGS_ANNOTATION,
    QUEUE_LABEL,
    QUOTA_FULLNAME_ANNOTATION,
    STRICT_MARK_ANNOTATION,
)
from webhook.api.objects import (
    BackoffItem,
    Doc,
    Obj,
    QueueItem,
    QueueItemDetails,
    QueueStatus,
    annotations_of,
    labels_of,
    parse_time,
    rfc3339_seconds,
)
from webhook.controller.model import TrackedJob
from webhook.core.decide import (
    LEFTOVER_NOTE,
    RECLAIM_BUDGET,
    PassOptions,
    leaf_policies,
    queue_policy_text,
)
from webhook.core.decide import decide as core_decide
from webhook.core.decisions import Decisions, Reclaim, reason_key
from webhook.core.eta import worth_publishing
from webhook.core.queueing import Policy, QueuePolicyError
from webhook.core.quota import QuotaNode, QuotaTree, namespace_quota_label, queue_name
from webhook.core.startup import GAVE_UP
from webhook.core.tree_status import TreeStatus, status_tree
from webhook.core.workload import Workload, WorkloadKey

if TYPE_CHECKING:
    from webhook.controller.eta import EtaStatus

__all__ = [
    "LEFTOVER_NOTE",
    "RECLAIM_BUDGET",
    "Decisions",
    "DesiredQueue",
    "JobDecisions",
    "JobReclaim",
    "NamespaceAction",
    "PassRecord",
    "QueueAction",
    "Reclaim",
    "backoff_item",
    "decide",
    "desired_queues",
    "leaf_policies",
    "namespace_actions",
    "queue_actions",
    "queue_body",
    "queue_policy_text",
    "queue_statuses",
    "reason_key",
    "sort_jobs",
    "tree_status",
    "with_published_estimates",
]

JobDecisions = Decisions[TrackedJob]
"""What a pass says about the controller's jobs."""
JobReclaim = Reclaim[TrackedJob]


@dataclass(frozen=True, slots=True)
class PassRecord:
    """One pass and what it decided on: the tree, the jobs, the pods no job accounts for, the jobs and pods
    reclaim may not take, and when it ran (the controller keeps its last one for ``kq why``)."""

    tree: QuotaTree
    tracked: Sequence[TrackedJob]
    loose: Sequence[Workload]
    protected: Mapping[WorkloadKey, str]
    decisions: JobDecisions
    now: float


# Queues and namespaces -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DesiredQueue:
    """One Queue the tree asks for: a namespace of a leaf."""

    name: str
    leaf: QuotaNode
    namespace: str

    @property
    def full_name(self) -> str:
        return self.leaf.full_name


def desired_queues(tree: QuotaTree | None) -> dict[str, DesiredQueue]:
    """``root-<leaf>-<namespace>`` for every namespace of every leaf, by Queue name."""
    if tree is None:
        return {}
    out: dict[str, DesiredQueue] = {}
    for leaf in tree.leaves():
        for namespace in leaf.namespaces:
            name = queue_name(leaf.name, namespace)
            out[name] = DesiredQueue(name, leaf, namespace)
    return out


@dataclass(frozen=True, slots=True)
class QueueAction:
    """``create`` (``body``), ``patch`` (a merge patch in ``body``) or ``delete`` one Queue."""

    verb: str
    name: str
    body: Obj = field(default_factory=dict)
    why: str = ""


def queue_body(desired: DesiredQueue, namespace: str, strict: bool, rate: str | None = None) -> Doc:
    """A new Queue object (``rate``: the oversell rate the controller admits with, stated on it for ``kq``)."""
    annotations = {QUOTA_FULLNAME_ANNOTATION: desired.full_name, QUEUE_ARGS_ANNOTATION: "{}\n"}
    if strict:
        annotations[STRICT_MARK_ANNOTATION] = "true"
    if rate is not None:
        annotations[OVERSELL_RATE_ANNOTATION] = rate
    return {
        "apiVersion": QUEUE.api_version,
        "kind": QUEUE.kind,
        "metadata": {
            "name": desired.name,
            "namespace": namespace,
            "labels": {QUEUE_LABEL: "true"},
            "annotations": annotations,
        },
        "spec": {"queuePolicy": Policy.BLOCK.value if strict else Policy.ROUND.value},
    }


def queue_actions(
    tree: QuotaTree | None,
    existing: Mapping[str, Obj],
    namespace: str,
    strict: bool,
    rate: str | None = None,
) -> list[QueueAction]:
    """What keeps the Queues in step with the tree: create missing ones, fix labels, annotations and (under
    ``StrictPriority``) policies, delete our Queues no leaf asks for. Queues without our label are never
    deleted (a Queue of the right name without it is adopted). Without a tree nothing changes: a tree deleted
    by mistake (or re-installed) finds its Queues as it left them (docs/accounting.md)."""
    if tree is None:
        return []
    desired = desired_queues(tree)
    actions: list[QueueAction] = []
    for name in sorted(desired):
        want = desired[name]
        obj = existing.get(name)
        if obj is None:
            actions.append(QueueAction("create", name, queue_body(want, namespace, strict, rate), "missing"))
            continue
        labels, annotations = labels_of(obj), annotations_of(obj)
        patch_labels: Doc = {}
        patch_annotations: Doc = {}
        spec: Doc = {}
        why = []
        if labels.get(QUEUE_LABEL) != "true":
            patch_labels[QUEUE_LABEL] = "true"
            why.append("label")
        if annotations.get(QUOTA_FULLNAME_ANNOTATION) != want.full_name:
            patch_annotations[QUOTA_FULLNAME_ANNOTATION] = want.full_name
            why.append("quota-fullname")
        if rate is not None and annotations.get(OVERSELL_RATE_ANNOTATION) != rate:
            patch_annotations[OVERSELL_RATE_ANNOTATION] = rate
            why.append("oversell-rate")
        current = queue_policy_text(obj)
        try:
            parsed: Policy | None = Policy.parse(current)
        except QueuePolicyError:
            parsed = None
        if strict:
            if parsed is not Policy.BLOCK:
                spec["queuePolicy"] = Policy.BLOCK.value
                patch_annotations[STRICT_MARK_ANNOTATION] = "true"
                why.append("strict-priority")
        elif annotations.get(STRICT_MARK_ANNOTATION) == "true":
            patch_annotations[STRICT_MARK_ANNOTATION] = None
            if parsed is Policy.BLOCK:
                spec["queuePolicy"] = Policy.ROUND.value
            why.append("strict-priority-off")
        elif parsed is None or current is None:
            spec["queuePolicy"] = Policy.ROUND.value
            why.append("policy")
        body: Doc = {}
        metadata: Doc = {}
        if patch_labels:
            metadata["labels"] = patch_labels
        if patch_annotations:
            metadata["annotations"] = patch_annotations
        if metadata:
            body["metadata"] = metadata
        if spec:
            body["spec"] = spec
        if body:
            actions.append(QueueAction("patch", name, body, ",".join(why)))
    for name in sorted(existing):
        if name not in desired and labels_of(existing[name]).get(QUEUE_LABEL) == "true":
            actions.append(QueueAction("delete", name, why="no leaf of the tree asks for it"))
    return actions


@dataclass(frozen=True, slots=True)
class NamespaceAction:
    """Set (``value``, ``"true"`` for the managed label) or remove (``value=None``) a label of a namespace (the
    managed label unless ``label`` says otherwise)."""

    name: str
    value: str | None
    label: str = MANAGED_NAMESPACE_LABEL


PLACEMENT_GRACE_SECONDS = 60.0
"""How long a placement label the webhook set stays without a policy the controller sees: the webhook labels the
namespace before it stores the policy, and the controller's policy watch may deliver the policy after the
namespace's change."""
JOIN_GRACE_SECONDS = 60.0
"""How long a managed label the webhook set stays on a namespace the controller's tree does not list: the webhook
labels the namespace before it allows the tree that lists it, and the controller's tree watch may deliver that
tree after the namespace's change (a job created meanwhile must still be held)."""


def namespace_actions(
    tree: QuotaTree | None,
    namespaces: Mapping[str, Obj],
    placement: frozenset[str] = frozenset(),
    now: float | None = None,
    *,
    routed_before: frozenset[str] = frozenset(),
    listed_before: frozenset[str] = frozenset(),
) -> list[NamespaceAction]:
    """Label the tree's namespaces ``kube-queue.x-k8s.io/managed: "true"``; unlabel the ones that left it.
    Without a tree that label does not change: the namespaces stay managed, so their new jobs stay held (the
    webhook holds them untagged) until a tree lists them again, instead of running unqueued
    (docs/accounting.md). The tree's namespaces also carry their leaf's name (``kube-queue.x-k8s.io/quota``:
    :func:`~webhook.core.quota.namespace_quota_label`, read by the pod admission policy), which follows the
    tree like the managed label. The namespaces in ``placement`` (a valid ResourcePolicy) get
    ``kube-queue.x-k8s.io/placement: "true"``, in the tree or not (their pods go to the webhook that applies the
    policy: outside the tree the placement webhook, inside it the pods of workload controllers too); the others
    lose it, unless it was set less than :data:`PLACEMENT_GRACE_SECONDS` before ``now`` (seconds since the epoch;
    ``None``: whatever its age) and the controller has not seen a policy there since (``routed_before``: the
    namespaces it saw in ``placement`` while they kept the label): a policy the controller saw go takes the
    label with it at once. Likewise a namespace the tree does not list keeps its managed and quota labels
    while the managed label is less than :data:`JOIN_GRACE_SECONDS` old, unless the controller saw a tree list it
    (``listed_before``): the tree that lists it may not have reached this controller yet."""
    managed = set(tree.leaf_by_namespace) if tree is not None else None
    actions = []
    for name in sorted(namespaces):
        labels = labels_of(namespaces[name])
        value = labels.get(MANAGED_NAMESPACE_LABEL)
        unlisted = managed is not None and name not in managed and value is not None
        # Joining a tree this controller has not seen yet: its managed and quota labels stay.
        joining = unlisted and name not in listed_before and _young(
            namespaces[name], now, MANAGED_SINCE_ANNOTATION, JOIN_GRACE_SECONDS)
        if managed is not None and name in managed and value != "true":
            actions.append(NamespaceAction(name, "true"))
        elif unlisted and not joining:
            actions.append(NamespaceAction(name, None))
        if tree is not None and not joining:
            leaf = namespace_quota_label(tree, name)
            if labels.get(NAMESPACE_QUOTA_LABEL) != leaf:
                actions.append(NamespaceAction(name, leaf, NAMESPACE_QUOTA_LABEL))
        wanted = name in placement
        current = labels.get(PLACEMENT_NAMESPACE_LABEL)
        if wanted and current != "true":
            actions.append(NamespaceAction(name, "true", PLACEMENT_NAMESPACE_LABEL))
        elif not wanted and current is not None and (
            name in routed_before
            or not _young(namespaces[name], now, PLACEMENT_SINCE_ANNOTATION, PLACEMENT_GRACE_SECONDS)
        ):
            actions.append(NamespaceAction(name, None, PLACEMENT_NAMESPACE_LABEL))
    return actions


def _young(namespace: Obj, now: float | None, annotation: str, grace: float) -> bool:
    """Whether the label whose time ``annotation`` holds was set less than ``grace`` seconds before ``now``."""
    if now is None:
        return False
    since = parse_time(annotations_of(namespace).get(annotation))
    return since is not None and now - since < grace


# The queue -------------------------------------------------------------------------------------------------


def decide(
    tree: QuotaTree,
    jobs: Iterable[TrackedJob],
    queues: Mapping[str, Obj],
    *,
    oversell_rate: Fraction,
    strict_priority: bool = False,
    **options: Unpack[PassOptions],
) -> JobDecisions:
    """The core's pass (:func:`webhook.core.decide.decide`) over the controller's jobs and the pods no job
    accounts for (``loose``, with the ``protected`` ones reclaim may not take), each leaf's policy read from its
    Queue objects (``queues`` by name; every leaf ``Block`` under ``strict_priority``)."""
    return core_decide(tree, jobs, leaf_policies(tree, queues, strict_priority), oversell_rate=oversell_rate,
                       **options)


# Status ----------------------------------------------------------------------------------------------------


def queue_statuses(
    tree: QuotaTree, decisions: JobDecisions, cap: int, eta: EtaStatus | None = None
) -> dict[str, QueueStatus]:
    """``status`` of every Queue the tree asks for: ``queueItemDetails.active`` lists the waiting jobs of the
    Queue's namespace by position (at most ``cap``, ``activeOmitted`` counts the rest), each with its start
    estimate when ``eta`` has one; ``backoff`` lists the jobs that failed to start, soonest retry first (at most
    ``cap``, ``backoffOmitted`` counts the rest); ``runtimeHistory`` the namespace's run-time history when
    ``eta`` has some (docs/eta.md)."""
    estimates = eta.items if eta is not None else {}
    desired = desired_queues(tree)
    by_queue: dict[str, list[TrackedJob]] = {name: [] for name in desired}
    for job in decisions.waiting:
        name = queue_name(job.leaf.name, job.workload.key.namespace)
        if name in by_queue:
            by_queue[name].append(job)
    out: dict[str, QueueStatus] = {}
    for name, members in by_queue.items():
        members.sort(key=lambda job: (decisions.positions.get(job.workload.key, 0), job.workload.key.name))
        active = [_active_item(job, decisions.positions.get(job.workload.key, 0), estimates.get(job.workload.key))
                  for job in members[:cap]]
        details: QueueItemDetails = {"active": active, "backoff": []}
        if len(members) > cap:
            details["activeOmitted"] = len(members) - cap
        out[name] = {"queueItemDetails": details}
        history = eta.history.get(desired[name].namespace) if eta is not None else None
        if history:
            out[name]["runtimeHistory"] = history
    backing: dict[str, list[TrackedJob]] = {}
    for job in decisions.backoff:
        name = queue_name(job.leaf.name, job.workload.key.namespace)
        if name in out:
            backing.setdefault(name, []).append(job)
    for name, members in backing.items():
        members.sort(key=lambda job: (job.backoff.retry_at if job.backoff else 0.0, job.workload.key.name))
        details = out[name]["queueItemDetails"]
        details["backoff"] = [backoff_item(job) for job in members[:cap]]
        if len(members) > cap:
            details["backoffOmitted"] = len(members) - cap
    return out


def _active_item(job: TrackedJob, position: int, estimate: Mapping[str, str] | None) -> QueueItem:
    item: QueueItem = {
        "name": job.workload.key.name,
        "namespace": job.workload.key.namespace,
        "priority": job.workload.priority,
        "position": position,
    }
    if job.workload.key.kind != "Job":
        item["kind"] = job.workload.key.kind
    if estimate:
        start, latest = estimate.get("estimatedStart"), estimate.get("estimatedStartLatest")
        if start is not None:
            item["estimatedStart"] = start
        if latest is not None:
            item["estimatedStartLatest"] = latest
    return item


ESTIMATE_FIELDS = ("estimatedStart", "estimatedStartLatest")
"""A waiting job's start estimate in its Queue's ``status.queueItemDetails.active`` item."""


def with_published_estimates(status: Obj, published: object, now: float) -> Obj:
    """``status`` (a Queue's, as :func:`queue_statuses` makes it, with fresh estimates) with each waiting job's
    estimate as ``published`` (the status written last) holds it, where no fresh figure is
    :func:`~webhook.core.eta.worth_publishing`. Equal to ``published``: nothing but small moves of estimates
    changed, and the status is not rewritten; else it is rewritten with every fresh estimate (docs/eta.md)."""
    details = status.get("queueItemDetails")
    before = published.get("queueItemDetails") if isinstance(published, Mapping) else None
    if not isinstance(details, Mapping) or not isinstance(before, Mapping):
        return status
    old = {_item_key(item): item for item in before.get("active") or () if isinstance(item, Mapping)}
    active = []
    for item in details.get("active") or ():
        kept = old.get(_item_key(item))
        if kept is None or any(
            worth_publishing(parse_time(kept.get(name)), parse_time(item.get(name)), now) for name in ESTIMATE_FIELDS
        ):
            active.append(item)
        else:
            active.append({**{key: value for key, value in item.items() if key not in ESTIMATE_FIELDS},
                           **{name: kept[name] for name in ESTIMATE_FIELDS if name in kept}})
    return {**status, "queueItemDetails": {**details, "active": active}}


def _item_key(item: Obj) -> tuple[object, object, object]:
    return item.get("namespace"), item.get("name"), item.get("kind")


def backoff_item(job: TrackedJob) -> BackoffItem:
    """One entry of a Queue's ``backoff`` list: ``{name, namespace, priority, reason, message, retryAt,
    attempts}``; ``reason`` is ``GaveUp`` once the job used all its attempts (``retryAt`` is then absent)."""
    note = job.backoff
    assert note is not None
    item: BackoffItem = {
        "name": job.workload.key.name,
        "namespace": job.workload.key.namespace,
        "priority": job.workload.priority,
        "reason": GAVE_UP if note.gave_up else note.category,
        "message": note.reason,
        "attempts": note.attempts,
    }
    if not note.gave_up:
        item["retryAt"] = rfc3339_seconds(note.retry_at)
    if job.workload.key.kind != "Job":
        item["kind"] = job.workload.key.kind
    return item


def tree_status(tree: QuotaTree, decisions: JobDecisions) -> TreeStatus:
    """The ElasticQuotaTree ``status``: per node ``used`` (admitted) and ``request`` (admitted + queued)."""
    return status_tree(tree, decisions.ledger)


def sort_jobs(jobs: Sequence[TrackedJob]) -> list[TrackedJob]:
    return sorted(jobs, key=lambda job: (job.workload.key.namespace, job.workload.key.name, job.workload.key.kind))
