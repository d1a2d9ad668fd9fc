"""Why a job waits, computed with the decision core itself: the controller's oversell rate and queue policies as
``kq`` reads them, and :func:`explain_wait` (:func:`webhook.core.queueing.admission_pass`,
:func:`webhook.core.fit.check_fit` blockers, :func:`webhook.core.reclaim.explain_reclaim`) over the job views of
:mod:`webhook.readmodel.view`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from webhook.api.names import (
    CONTROLLER_COMPONENT,
    OVERSELL_RATE_ANNOTATION,
    RATE_ANNOTATIONS,
    STRICT_MARK_ANNOTATION,
)
from webhook.api.objects import Obj, annotations_of, event_source, event_time
from webhook.controller import decide
from webhook.controller.decide import PassRecord
from webhook.controller.model import TrackedJob
from webhook.controller.starts import accounted_by, loose_pods_of
from webhook.core.decide import RECLAIM_TRIES_PER_QUOTA
from webhook.core.fairshare import fair_note
from webhook.core.fit import Blocker, FitResult
from webhook.core.ledger import build_ledger
from webhook.core.loose import loose_inputs, read_budgets, with_claimed_devices
from webhook.core.pass_snapshot import kept_by_run_time
from webhook.core.queueing import Policy, admission_pass
from webhook.core.quota import QuotaTree
from webhook.core.rate import DEFAULT_OVERSELL_RATE, RateError, parse_rate
from webhook.core.reclaim import explain_reclaim
from webhook.core.resources import Resources
from webhook.core.tree_status import used_from_status
from webhook.core.workload import Phase, Workload, WorkloadKey
from webhook.readmodel.view import JobView, Snapshot


def leaf_policies(tree: QuotaTree, queues: Mapping[str, Obj]) -> dict[str, Policy]:
    """Each leaf's policy as the controller sees it: ``Block`` when any Queue of the leaf says ``Block`` (under
    ``StrictPriority=true`` the controller has turned them all to ``Block``), else ``Round``."""
    return decide.leaf_policies(tree, queues, strict=False)


def strict_priority(queues: Mapping[str, Obj]) -> bool:
    """Whether the controller runs with ``StrictPriority=true`` (it marks the Queues it turns to Block)."""
    return any(annotations_of(queue).get(STRICT_MARK_ANNOTATION) == "true" for queue in queues.values())




def controller_events(events: Iterable[Obj]) -> list[Obj]:
    """Events the queue controller wrote, newest first."""
    mine = [
        event
        for event in events
        if event.get("reportingComponent") == CONTROLLER_COMPONENT
        or event_source(event).get("component") == CONTROLLER_COMPONENT
    ]
    return sorted(mine, key=event_time, reverse=True)


def _rate(text: str) -> Fraction | None:
    try:
        return parse_rate(text)
    except RateError:
        return None


def oversell_rate(explicit: Fraction | None, tree_obj: Obj | None, queues: Mapping[str, Obj]) -> tuple[Fraction, str]:
    """The oversell rate the controller admits with, and where it was read: ``--oversellrate``; the rate the
    controller states on its Queues (:data:`OVERSELL_RATE_ANNOTATION`); an operator's annotation on the tree
    (either spelling of :data:`RATE_ANNOTATIONS`); else the controller's default, 2."""
    if explicit is not None:
        return explicit, "--oversellrate"
    holders: list[tuple[str, Obj, tuple[str, ...]]] = [
        (f"Queue {name}", obj, (OVERSELL_RATE_ANNOTATION,)) for name, obj in sorted(queues.items())
    ]
    if tree_obj is not None:
        holders.append(("the ElasticQuotaTree", tree_obj, RATE_ANNOTATIONS))
    for where, obj, keys in holders:
        for key in keys:
            value = annotations_of(obj).get(key)
            rate = _rate(value) if isinstance(value, str) else None
            if rate is not None:
                return rate, f"annotation {key} on {where}"
    return DEFAULT_OVERSELL_RATE, "the default; pass --oversellrate if the controller runs with another"


@dataclass(frozen=True, slots=True)
class WaitReport:
    """Why one QUEUING job waits, as the controller's next pass would see it."""

    job: JobView
    rate: Fraction
    rate_source: str
    usage_source: str
    policy: Policy
    fits_now: bool
    reason: FitResult | None
    position: int | None
    waiting: int
    """How many jobs wait in its quota."""
    ahead: tuple[tuple[int, Workload], ...]
    reclaim: str
    reclaim_possible: bool
    by_reclaim: bool = False
    """The next pass admits it by reclaim (``reclaim`` says whom it evicts)."""
    fairness: str = ""
    """What fair sharing means for it now (:func:`webhook.core.fairshare.fair_note`); ``""`` without it."""

    @property
    def blockers(self) -> tuple[Blocker, ...]:
        return self.reason.blockers if self.reason is not None else ()


def explain_wait(
    snapshot: Snapshot, views: Sequence[JobView], job: JobView, rate: Fraction, rate_source: str
) -> WaitReport:
    """Where the job stands and why, as the controller's next pass would see it.

    With every job and every pod of the tree at hand (``snapshot.complete`` and ``snapshot.tree_pods``), this
    runs the controller's own pass (:func:`webhook.controller.decide.decide`) over the same jobs, pods no job
    accounts for and PodDisruptionBudgets, and reads the job's fate in it. Otherwise it runs the admission pass
    alone, over the jobs this user can read, with usage from the tree's status.
    """
    tree = snapshot.tree
    assert tree is not None and job.workload is not None and job.leaf is not None
    policies = leaf_policies(tree, snapshot.queues)
    strict = strict_priority(snapshot.queues)
    if strict:
        policies = dict.fromkeys(policies, Policy.BLOCK)
    if snapshot.complete and snapshot.tree_pods is not None:
        return _from_the_pass(snapshot, views, job, rate, rate_source, strict)
    workloads = [view.workload for view in views if view.workload is not None]
    status_used = used_from_status(tree, snapshot.tree_obj.get("status") if snapshot.tree_obj else None)
    if snapshot.complete or status_used is None:
        used: Mapping[str, Resources] = build_ledger(tree, workloads).used_view()
        usage_source = "the admitted jobs" + ("" if snapshot.complete else " this user can read")
    else:
        used = status_used
        usage_source = "the ElasticQuotaTree's status"
    waiting = [w for w in workloads if w.phase is Phase.QUEUED]
    result = admission_pass(tree, used, waiting, policies, rate)
    policy = policies.get(job.leaf.key, Policy.ROUND)
    queue = result.queues.get(job.leaf.key, ())
    if job.key in {workload.key for workload in result.admitted}:
        return WaitReport(job, rate, rate_source, usage_source, policy, True, None, None, len(queue), (), "", False)
    admitted = [w for w in workloads if w.phase is Phase.ADMITTED]
    plan_text = explain_reclaim(tree, result.used, admitted, job.workload, rate)
    return _left_waiting(
        job, rate, rate_source, usage_source, policy, queue=queue, position=result.positions.get(job.key),
        reason=result.reasons.get(job.key), reclaim=plan_text, reclaim_possible=not plan_text.startswith("no reclaim"),
    )


def _left_waiting(
    job: JobView,
    rate: Fraction,
    rate_source: str,
    usage_source: str,
    policy: Policy,
    *,
    queue: Sequence[Workload],
    position: int | None,
    reason: FitResult | None,
    reclaim: str,
    reclaim_possible: bool,
    fairness: str = "",
) -> WaitReport:
    """The report of a job the pass leaves waiting in ``queue`` at ``position``, with the jobs ahead of it; both
    ways of reading its fate (the admission pass alone, the controller's whole pass) end here."""
    ahead = tuple((index, workload) for index, workload in enumerate(queue, start=1) if index < (position or 0))
    return WaitReport(
        job=job,
        rate=rate,
        rate_source=rate_source,
        usage_source=usage_source,
        policy=policy,
        fits_now=False,
        reason=reason,
        position=position,
        waiting=len(queue),
        ahead=ahead,
        reclaim=reclaim,
        reclaim_possible=reclaim_possible,
        fairness=fairness,
    )


def pass_inputs(
    snapshot: Snapshot, views: Sequence[JobView]
) -> tuple[list[TrackedJob], list[Workload], dict[WorkloadKey, str]]:
    """What the controller's pass takes, from a snapshot of every job and pod of the tree (``complete`` and
    ``tree_pods``): the jobs, the pods no job accounts for (with the devices they claim) and the ones of those
    reclaim may not take."""
    tree = snapshot.tree
    assert tree is not None and snapshot.tree_pods is not None
    tracked = [view.tracked for view in views if view.tracked is not None]
    pods = with_claimed_devices(loose_pods_of(snapshot.tree_pods, tree, accounted_by(tracked)), snapshot.devices)
    loose, protected = loose_inputs(tree, pods, read_budgets(snapshot.budgets))
    return tracked, loose, protected


def _from_the_pass(  # noqa: PLR0917 - explain_wait's arguments, passed on
    snapshot: Snapshot, views: Sequence[JobView], job: JobView, rate: Fraction, rate_source: str, strict: bool
) -> WaitReport:
    """:func:`explain_wait` by the controller's own pass over every job and pod of the tree."""
    tree = snapshot.tree
    assert tree is not None and job.workload is not None and job.leaf is not None and snapshot.tree_pods is not None
    tracked, loose, protected = pass_inputs(snapshot, views)
    decisions = decide.decide(tree, tracked, snapshot.queues, oversell_rate=rate, strict_priority=strict,
                              now=snapshot.now, loose=loose, protected=protected)
    return report_from_pass(PassRecord(tree, tracked, loose, protected, decisions, snapshot.now), job, rate,
                            rate_source)


def report_from_pass(record: PassRecord, job: JobView, rate: Fraction, rate_source: str) -> WaitReport:
    """Where ``job`` stands in the pass ``record`` holds and why (:func:`explain_wait` over every job and pod of
    the tree; the controller's read API over its own last pass)."""
    tree, tracked, loose, decisions = record.tree, record.tracked, record.loose, record.decisions
    protected: Mapping[WorkloadKey, str] = record.protected
    assert job.workload is not None and job.leaf is not None
    usage_source = "every admitted job and running pod of the tree"
    policy = decisions.policies.get(job.leaf.key, Policy.ROUND)
    key = job.key
    queue = sorted((waiting.workload for waiting in decisions.waiting
                    if waiting.workload.quota.lower() == job.leaf.key),
                   key=lambda workload: decisions.positions.get(workload.key, 0))
    if any(admitted.workload.key == key for admitted in (*decisions.admissions, *decisions.late_admissions)):
        return WaitReport(job, rate, rate_source, usage_source, policy, True, None, None, len(queue), (), "", False)
    plan = next((plan for plan in decisions.reclaims if plan.preemptor.workload.key == key), None)
    if plan is not None:
        return WaitReport(job, rate, rate_source, usage_source, policy, True, None, None, len(queue), (),
                          plan.reason, True, by_reclaim=True)
    used = decisions.ledger.used_view()
    gone = {victim.workload.key for plan in decisions.reclaims for victim in plan.victims}
    gone.update(workload.key for plan in decisions.reclaims for workload in plan.pods)
    running = [admitted.workload for admitted in (*decisions.admissions, *decisions.late_admissions)]
    running += [plan.preemptor.workload for plan in decisions.reclaims]
    running += [tracked_job.workload for tracked_job in tracked if tracked_job.workload.phase is Phase.ADMITTED
                and tracked_job.workload.key not in gone]
    running += [workload for workload in loose if workload.key not in gone]
    protected = {**protected, **kept_by_run_time(tree, running, record.now)}
    candidates = [workload for workload in running if workload.key not in protected]
    plan_text = explain_reclaim(tree, used, candidates, job.workload, rate)
    possible = not plan_text.startswith("no reclaim")
    if possible:
        plan_text = (f"{plan_text}; but this pass reclaims for the jobs ahead of it in its quota first (at most "
                     f"{RECLAIM_TRIES_PER_QUOTA} a quota a pass, only the first under Block): it is tried once "
                     "they are in")
    elif protected:
        unguarded = explain_reclaim(tree, used, running, job.workload, rate)
        if not unguarded.startswith("no reclaim"):
            named = "; ".join(f"{key} ({why})" for key, why in protected.items() if str(key) in unguarded)
            plan_text = f"{plan_text}; only evicting jobs or pods that may not be taken now would help: {named}"
    return _left_waiting(
        job, rate, rate_source, usage_source, policy, queue=queue, position=decisions.positions.get(key),
        reason=decisions.reasons.get(key), reclaim=plan_text, reclaim_possible=possible,
        fairness=fair_note(tree, used, job.leaf.key),
    )
