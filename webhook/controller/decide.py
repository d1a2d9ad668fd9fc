"""The controller's decisions, pure: from an immutable snapshot to what to write.

One :func:`decide` call is one reconcile pass of the queue:

1. the ledger is rebuilt from the jobs (admitted = released with a record, see :mod:`.model`);
2. :func:`webhook.core.queueing.admission_pass` admits in order under each quota's policy;
3. every quota whose waiting jobs still do not fit gets a chance to reclaim (:func:`plan_reclaim`): one
   preemptor per quota and pass (only the head under ``Block``; the first jobs in order under ``Round``); a
   plan evicts its victims and admits its preemptor in the same step;
4. after a reclaim, a second admission pass places the rest and gives the final positions and reasons.

Alongside: the Queues the tree asks for (:func:`queue_actions`), the namespace labels
(:func:`namespace_actions`), each Queue's ``status`` and the tree's ``status``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType
from typing import Any

from webhook.controller.model import TrackedJob
from webhook.controller.records import (
    MANAGED_NAMESPACE_LABEL,
    QUEUE_ARGS_ANNOTATION,
    QUEUE_LABEL,
    QUOTA_FULLNAME_ANNOTATION,
    STRICT_MARK_ANNOTATION,
)
from webhook.core.fit import FitResult
from webhook.core.ledger import Ledger, build_ledger, status_tree
from webhook.core.queueing import PassResult, Policy, QueuePolicyError, admission_pass
from webhook.core.quota import QuotaNode, QuotaTree, queue_name
from webhook.core.reclaim import ReclaimPlan, plan_reclaim
from webhook.core.resources import Resources
from webhook.core.workload import Phase, WorkloadKey

QUEUE_GROUP = "scheduling.x-k8s.io"
QUEUE_VERSION = "v1alpha1"
QUEUE_KIND = "Queue"


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
    body: Mapping[str, Any] = field(default_factory=dict)
    why: str = ""


def _meta(obj: Mapping[str, Any], field_name: str) -> Mapping[str, Any]:
    metadata = obj.get("metadata")
    value = metadata.get(field_name) if isinstance(metadata, Mapping) else None
    return value if isinstance(value, Mapping) else {}


def queue_policy_text(obj: Mapping[str, Any]) -> str | None:
    spec = obj.get("spec")
    value = spec.get("queuePolicy") if isinstance(spec, Mapping) else None
    return value if isinstance(value, str) else None


def queue_body(desired: DesiredQueue, namespace: str, strict: bool) -> dict[str, Any]:
    """A new Queue object."""
    annotations = {QUOTA_FULLNAME_ANNOTATION: desired.full_name, QUEUE_ARGS_ANNOTATION: "{}\n"}
    if strict:
        annotations[STRICT_MARK_ANNOTATION] = "true"
    return {
        "apiVersion": f"{QUEUE_GROUP}/{QUEUE_VERSION}",
        "kind": QUEUE_KIND,
        "metadata": {
            "name": desired.name,
            "namespace": namespace,
            "labels": {QUEUE_LABEL: "true"},
            "annotations": annotations,
        },
        "spec": {"queuePolicy": Policy.BLOCK.value if strict else Policy.ROUND.value},
    }


def queue_actions(
    tree: QuotaTree | None, existing: Mapping[str, Mapping[str, Any]], namespace: str, strict: bool
) -> list[QueueAction]:
    """What keeps the Queues in step with the tree: create missing ones, fix labels, annotations and (under
    ``StrictPriority``) policies, delete our Queues no leaf asks for. Queues without our label are never
    deleted (a Queue of the right name without it is adopted)."""
    desired = desired_queues(tree)
    actions: list[QueueAction] = []
    for name in sorted(desired):
        want = desired[name]
        obj = existing.get(name)
        if obj is None:
            actions.append(QueueAction("create", name, queue_body(want, namespace, strict), "missing"))
            continue
        labels, annotations = _meta(obj, "labels"), _meta(obj, "annotations")
        patch_labels: dict[str, Any] = {}
        patch_annotations: dict[str, Any] = {}
        spec: dict[str, Any] = {}
        why = []
        if labels.get(QUEUE_LABEL) != "true":
            patch_labels[QUEUE_LABEL] = "true"
            why.append("label")
        if annotations.get(QUOTA_FULLNAME_ANNOTATION) != want.full_name:
            patch_annotations[QUOTA_FULLNAME_ANNOTATION] = want.full_name
            why.append("quota-fullname")
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
        body: dict[str, Any] = {}
        metadata: dict[str, Any] = {}
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
        if name not in desired and _meta(existing[name], "labels").get(QUEUE_LABEL) == "true":
            actions.append(QueueAction("delete", name, why="no leaf of the tree asks for it"))
    return actions


def leaf_policies(
    tree: QuotaTree, queues: Mapping[str, Mapping[str, Any]], strict: bool
) -> dict[str, Policy]:
    """Each leaf's policy by leaf key: ``Block`` under ``StrictPriority`` or when any Queue of the leaf says
    ``Block``; else ``Round`` (one leaf is one queue, whatever its namespaces)."""
    out: dict[str, Policy] = {}
    for leaf in tree.leaves():
        policy = Policy.ROUND
        if strict:
            policy = Policy.BLOCK
        else:
            for namespace in leaf.namespaces:
                obj = queues.get(queue_name(leaf.name, namespace))
                if obj is None:
                    continue
                try:
                    if Policy.parse(queue_policy_text(obj)) is Policy.BLOCK:
                        policy = Policy.BLOCK
                except QueuePolicyError:
                    continue
        out[leaf.key] = policy
    return out


@dataclass(frozen=True, slots=True)
class NamespaceAction:
    """Set (``value="true"``) or remove (``value=None``) the managed label of a namespace."""

    name: str
    value: str | None


def namespace_actions(tree: QuotaTree | None, namespaces: Mapping[str, Mapping[str, Any]]) -> list[NamespaceAction]:
    """Label the tree's namespaces ``kube-queue.x-k8s.io/managed: "true"``; unlabel the ones that left it."""
    managed = set(tree.leaf_by_namespace) if tree is not None else set()
    actions = []
    for name in sorted(namespaces):
        value = _meta(namespaces[name], "labels").get(MANAGED_NAMESPACE_LABEL)
        if name in managed and value != "true":
            actions.append(NamespaceAction(name, "true"))
        elif name not in managed and value is not None:
            actions.append(NamespaceAction(name, None))
    return actions


# The queue -------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reclaim:
    """Evict ``victims`` and admit ``preemptor``, in that order, as one step."""

    preemptor: TrackedJob
    victims: tuple[TrackedJob, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class Decisions:
    """The outcome of one pass."""

    admissions: tuple[TrackedJob, ...]
    """Jobs the first pass releases, in admission order (each safe to write on its own)."""
    reclaims: tuple[Reclaim, ...]
    """Evictions with their preemptor, to carry out after :attr:`admissions`."""
    late_admissions: tuple[TrackedJob, ...]
    """Jobs the pass after reclaim releases: only once every reclaim's evictions are done."""
    positions: Mapping[WorkloadKey, int]
    """1-based place of every still-waiting job in its quota's order."""
    reasons: Mapping[WorkloadKey, FitResult]
    """Why each still-waiting job waits."""
    waiting: tuple[TrackedJob, ...]
    """Still-waiting jobs, in quota order then position."""
    stale_records: tuple[TrackedJob, ...]
    """Held jobs that still carry an admission record."""
    ledger: Ledger
    """Usage once every decision is carried out (for the tree's status)."""
    policies: Mapping[str, Policy]
    checks: int = 0


def _queued(job: TrackedJob) -> TrackedJob:
    workload = dataclasses.replace(job.workload, phase=Phase.QUEUED, admitted_at=None)
    return dataclasses.replace(job, workload=workload)


def _admitted(job: TrackedJob) -> TrackedJob:
    return dataclasses.replace(job, workload=dataclasses.replace(job.workload, phase=Phase.ADMITTED))


def _reclaims(  # noqa: PLR0917 - a private helper of decide()
    tree: QuotaTree,
    result: PassResult,
    admitted: dict[WorkloadKey, TrackedJob],
    by_key: Mapping[WorkloadKey, TrackedJob],
    policies: Mapping[str, Policy],
    rate: Fraction,
    tries_per_quota: int,
) -> tuple[list[Reclaim], Mapping[str, Resources]]:
    """One preemptor per quota, quotas taken by the creation time of their first waiting job. Jobs admitted
    in this pass are never victims."""
    used: Mapping[str, Resources] = result.used
    fresh = {workload.key for workload in result.admitted}
    plans: list[Reclaim] = []
    order = sorted(result.queues.items(), key=lambda item: (item[1][0].created, item[0]))
    for quota, waiting in order:
        tries = 1 if policies.get(quota) is Policy.BLOCK else tries_per_quota
        for workload in waiting[:tries]:
            reason = result.reasons.get(workload.key)
            if reason is not None and reason.blocked_behind is not None:
                break
            victims_pool = [
                job.workload for key, job in admitted.items() if job.evictable and key not in fresh
            ]
            plan: ReclaimPlan | None = plan_reclaim(tree, used, victims_pool, workload, rate)
            if plan is None:
                continue
            victims = tuple(admitted[victim.key] for victim in plan.victims)
            plans.append(Reclaim(by_key[workload.key], victims, plan.reason))
            used = plan.used_after
            for victim in plan.victims:
                del admitted[victim.key]
            admitted[workload.key] = _admitted(by_key[workload.key])
            fresh.add(workload.key)
            break
    return plans, used


def decide(
    tree: QuotaTree,
    jobs: Iterable[TrackedJob],
    queues: Mapping[str, Mapping[str, Any]],
    *,
    oversell_rate: Fraction,
    strict_priority: bool = False,
    reclaim_tries_per_quota: int = 16,
) -> Decisions:
    """Admit, reclaim and place every job of the tree (see the module's steps). Nothing is written here."""
    tracked = list(jobs)
    by_key = {job.workload.key: job for job in tracked}
    policies = leaf_policies(tree, queues, strict_priority)
    ledger = build_ledger(tree, (job.workload for job in tracked))
    waiting = [job.workload for job in tracked if job.workload.phase is Phase.QUEUED]
    admitted = {job.workload.key: job for job in tracked if job.workload.phase is Phase.ADMITTED}
    result = admission_pass(tree, ledger.used_view(), waiting, policies, oversell_rate)
    checks = result.checks
    admissions = [by_key[workload.key] for workload in result.admitted]
    for job in admissions:
        admitted[job.workload.key] = _admitted(job)
    plans, used = _reclaims(tree, result, admitted, by_key, policies, oversell_rate, reclaim_tries_per_quota)
    final = result
    late: list[TrackedJob] = []
    if plans:
        taken = {plan.preemptor.workload.key for plan in plans} | {job.workload.key for job in admissions}
        still = [workload for workload in waiting if workload.key not in taken]
        for plan in plans:
            still.extend(_queued(victim).workload for victim in plan.victims)
        final = admission_pass(tree, used, still, policies, oversell_rate)
        checks += final.checks
        for workload in final.admitted:
            job = by_key[workload.key]
            late.append(job)
            admitted[workload.key] = _admitted(job)
    waiting_jobs: list[TrackedJob] = []
    for queue in final.queues.values():
        for workload in queue:
            job = by_key[workload.key]
            waiting_jobs.append(job if job.workload.phase is Phase.QUEUED else _queued(job))
    counted = [*(job.workload for job in admitted.values()), *(job.workload for job in waiting_jobs)]
    return Decisions(
        admissions=tuple(admissions),
        reclaims=tuple(plans),
        late_admissions=tuple(late),
        positions=final.positions,
        reasons=final.reasons,
        waiting=tuple(waiting_jobs),
        stale_records=tuple(job for job in tracked if job.stale_record),
        ledger=build_ledger(tree, counted),
        policies=MappingProxyType(policies),
        checks=checks,
    )


# Status ----------------------------------------------------------------------------------------------------


def queue_statuses(
    tree: QuotaTree, decisions: Decisions, cap: int
) -> dict[str, dict[str, Any]]:
    """``status`` of every Queue the tree asks for: ``queueItemDetails.active`` lists the waiting jobs of the
    Queue's namespace by position (at most ``cap``, ``activeOmitted`` counts the rest), ``backoff`` is empty
    (a job that cannot start stays in ``active``)."""
    by_queue: dict[str, list[TrackedJob]] = {name: [] for name in desired_queues(tree)}
    for job in decisions.waiting:
        name = queue_name(job.leaf.name, job.workload.key.namespace)
        if name in by_queue:
            by_queue[name].append(job)
    out: dict[str, dict[str, Any]] = {}
    for name, members in by_queue.items():
        members.sort(key=lambda job: (decisions.positions.get(job.workload.key, 0), job.workload.key.name))
        active = [
            {
                "name": job.workload.key.name,
                "namespace": job.workload.key.namespace,
                "priority": job.workload.priority,
                "position": decisions.positions.get(job.workload.key, 0),
                **({"kind": job.workload.key.kind} if job.workload.key.kind != "Job" else {}),
            }
            for job in members[:cap]
        ]
        details: dict[str, Any] = {"active": active, "backoff": []}
        if len(members) > cap:
            details["activeOmitted"] = len(members) - cap
        out[name] = {"queueItemDetails": details}
    return out


def tree_status(tree: QuotaTree, decisions: Decisions) -> dict[str, Any]:
    """The ElasticQuotaTree ``status``: per node ``used`` (admitted) and ``request`` (admitted + queued)."""
    return status_tree(tree, decisions.ledger)


def waiting_summary(decisions: Decisions, job: TrackedJob) -> tuple[int, str]:
    """``(position, why)`` of a waiting job."""
    key = job.workload.key
    reason = decisions.reasons.get(key)
    return decisions.positions.get(key, 0), reason.explain() if reason is not None else "waiting"


def reason_key(reason: FitResult | None) -> str:
    """What a waiting job's Queued event dedupes on: the blocking levels and resources, not the amounts (which
    change with every admission elsewhere)."""
    if reason is None:
        return "-"
    if reason.blocked_behind is not None:
        return f"behind:{reason.blocked_behind}"
    parts = sorted({f"{blocker.quota}:{blocker.resource}:{blocker.kind}" for blocker in reason.blockers})
    if reason.note and not parts:
        parts.append(reason.note)
    return "|".join(parts) or "fits"


def sort_jobs(jobs: Sequence[TrackedJob]) -> list[TrackedJob]:
    return sorted(jobs, key=lambda job: (job.workload.key.namespace, job.workload.key.name, job.workload.key.kind))
