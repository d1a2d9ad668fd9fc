"""The queue's decisions, pure: from an immutable snapshot of jobs to what to admit, evict and report.

One :func:`decide` call is one reconcile pass of the queue:

1. the ledger is rebuilt from the jobs (admitted = released with a record, see :mod:`.model`), in the same walk
   that sorts them out (:mod:`webhook.core.pass_snapshot`);
2. :func:`webhook.core.queueing.admission_pass` admits in order under each quota's policy;
3. reclaim (:class:`webhook.core.reclaim.Reclaimer`, one index of candidate victims for the whole pass), in
   rounds over the quotas with waiting jobs, the one with the oldest waiting job first: each quota tries
   its next waiting jobs in order (only its head under ``Block``) until one gets a plan, and takes part in
   the next round while it gets one; a quota stops after ``reclaim_tries_per_quota`` jobs without a plan,
   and the pass after ``reclaim_budget`` candidate victims looked at. Jobs that step 2 admitted give way
   first: they are *withheld* (they stay queued; nothing was written for them), so room that frees up goes
   to a quota within its ``min`` before a borrower, instead of to the borrower and then evicted from it. A
   plan evicts its victims and admits its preemptor in the same step. A waiting job that fits room the
   plans left over and keeps its quota within ``min`` is admitted after the evictions (``late_admissions``);
4. evicted and withheld jobs wait again at their place, and positions and reasons are the ones after the
   reclaims. Any other room the plans left over is the next pass's (the writes of this one trigger it):
   its admission pass hands it out in turn and its reclaims hold back what a borrower would take from a
   quota owed it. Giving it to a borrower now is what made the next pass evict that borrower again, over
   and over (eviction ping-pong).

The live controller (``webhook.controller.decide``) and the simulator (``webhook.sim.engine``) both run this
pass; the types it returns are in :mod:`webhook.core.decisions`, each leaf's policy comes from
:func:`leaf_policies`.
"""

from __future__ import annotations

import dataclasses
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from itertools import chain
from operator import attrgetter
from types import MappingProxyType
from typing import TypedDict

from webhook.api.objects import Obj
from webhook.core.chain_usage import shift_usage
from webhook.core.decisions import Decisions, J, Reclaim
from webhook.core.fairshare import fair_admit_groups, fair_parents
from webhook.core.fit import FitResult, check_fit
from webhook.core.pass_snapshot import PassSnapshot, sort_out
from webhook.core.queueing import (
    LazyReasons,
    PassResult,
    Policy,
    QueuePolicyError,
    QueuePositions,
    admit_groups,
    still_waiting,
)
from webhook.core.quota import QuotaTree, queue_name
from webhook.core.rate import validate_rate
from webhook.core.reclaim import Reclaimer, ReclaimPlan
from webhook.core.resources import Resources
from webhook.core.workload import Phase, Workload, WorkloadKey

__all__ = [
    "LEFTOVER_NOTE",
    "RECLAIM_BUDGET",
    "RECLAIM_TRIES_PER_QUOTA",
    "PassOptions",
    "decide",
    "leaf_policies",
    "queue_policy_text",
]


# Policies --------------------------------------------------------------------------------------------------


def queue_policy_text(obj: Obj) -> str | None:
    """A Queue object's ``spec.queuePolicy``, when it is a string."""
    spec = obj.get("spec")
    value = spec.get("queuePolicy") if isinstance(spec, Mapping) else None
    return value if isinstance(value, str) else None


def leaf_policies(
    tree: QuotaTree, queues: Mapping[str, Obj], strict: bool
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


# The pass -------------------------------------------------------------------------------------------------


class PassOptions(TypedDict, total=False):
    """:func:`decide`'s options beyond the tree, the jobs, the policies and the rate (its defaults apply to
    those left out): for a caller that passes them on."""

    reclaim_tries_per_quota: int
    reclaim_budget: int | None
    now: float
    closing: frozenset[str]
    loose: Sequence[Workload]
    protected: Mapping[WorkloadKey, str] | None
    report: bool


def _queued(job: J) -> J:
    return job.with_workload(dataclasses.replace(job.workload, phase=Phase.QUEUED, admitted_at=None))


RECLAIM_TRIES_PER_QUOTA = 16
"""Waiting jobs of one quota tried as reclaim preemptors per pass, by default (bounds the work of a pass)."""

RECLAIM_BUDGET = 50_000
"""Candidate victims one pass may look at while planning reclaims (a bound on the pass's work; quotas not
reached wait for the next pass, which starts again from the quota with the oldest waiting job)."""


def _reclaims(  # noqa: PLR0917 - a private helper of decide()
    tree: QuotaTree,
    result: PassResult,
    snapshot: PassSnapshot[J],
    policies: Mapping[str, Policy],
    rate: Fraction,
    tries_per_quota: int,
    budget: int | None,
    worded: bool,
) -> tuple[list[ReclaimPlan], Reclaimer]:
    """Preemptors in rounds: in each round every quota, taken by the creation time of its first waiting job,
    tries its next waiting jobs in queue order until one gets a plan; quotas with a plan go on to the next
    round. A quota gives up after ``tries_per_quota`` jobs without a plan in a pass (a plan does not count:
    a quota owed much gets all of it in one pass, before anything it is owed is written elsewhere); under
    ``Block`` only its head may reclaim (the next job is the head once the head got in).

    Victims are the admitted jobs (never a preemptor of this pass); jobs this pass admitted give way first
    and stay queued (:attr:`ReclaimPlan.withheld`), in ``Block`` quotas only from the back of the queue."""
    admitted = snapshot.admitted
    blocking = [quota for quota, policy in policies.items() if policy is Policy.BLOCK]
    if snapshot.unique and not any(map(admitted.__contains__, map(_key_of, result.admitted))):
        # The usual case, every admitted job once and none also waiting: the index takes them by leaf as the
        # snapshot sorted them out, instead of a walk over each of them.
        running = {key: held.evictable for key, held in snapshot.running.items() if held.evictable}
        amounts = {key: held.evictable_amounts for key, held in snapshot.running.items() if held.evictable}
        reclaimer = Reclaimer(tree, result.used, (), rate, fresh=result.admitted, ordered=blocking, budget=budget,
                              running=running, running_amounts=amounts, worded=worded)
    else:
        protected = snapshot.protected
        victims = [job.workload for job in admitted.values() if job.evictable and job.workload.key not in protected]
        victims.extend(snapshot.by_api.values())
        reclaimer = Reclaimer(tree, result.used, victims, rate, fresh=result.admitted, ordered=blocking,
                              budget=budget, worded=worded)
    plans: list[ReclaimPlan] = []
    order = sorted(result.queues.items(), key=lambda item: (item[1][0].created, item[0]))
    # Per quota: its key, waiting jobs, whether it blocks, and [next job to try, failed tries left].
    active = [
        (quota, waiting, policies.get(quota) is Policy.BLOCK, [0, tries_per_quota]) for quota, waiting in order
    ]
    held_back: set[str] = set()
    """Quotas a plan took a job from that this pass admitted: under Block, that job heads the queue now."""
    while active and not reclaimer.exhausted:
        again = []
        for quota, waiting, block, cursor in active:
            while cursor[0] < len(waiting) and cursor[1] > 0 and not (block and quota in held_back):
                plan = reclaimer.plan(waiting[cursor[0]], take_room=True, commit=True)
                cursor[0] += 1
                if plan is not None:
                    plans.append(plan)
                    held_back.update(workload.quota.lower() for workload in plan.withheld)
                    again.append((quota, waiting, block, cursor))
                    break
                cursor[1] -= 1
                if block:
                    break
        active = again
    return plans, reclaimer


_order_key = attrgetter("order_key")
_key_of = attrgetter("key")
_job_order = attrgetter("workload.order_key")

LEFTOVER_NOTE = "fits the room this pass's reclaims left over: the next pass admits it"


def _fit_all(
    tree: QuotaTree, used: Mapping[str, Resources], workloads: Iterable[Workload], rate: Fraction
) -> dict[str, Resources] | None:
    """The usage with ``workloads`` admitted one after the other, or ``None`` when one of them does not fit."""
    current = dict(used)
    for workload in workloads:
        if not check_fit(tree, current, workload, rate).fits:
            return None
        current = shift_usage(tree, current, (workload,), +1)
    return current


def _job_of(groups: Mapping[str, Sequence[J]], workload: Workload) -> J:
    """The waiting job that carries ``workload`` (its group is in dequeue order: found by bisection)."""
    group = groups[workload.quota.lower()]
    index = bisect_left(group, workload.order_key, key=_job_order)
    while group[index].workload is not workload:
        index += 1
    return group[index]


def _rest(groups: Mapping[str, Sequence[J]], flags: Mapping[str, bytearray], quota: str) -> Sequence[J]:
    """The jobs of a quota's group that the admission pass left waiting (its ``queues[quota]``, as jobs)."""
    group = groups.get(quota, [])
    admitted = flags.get(quota)
    return group if admitted is None else still_waiting(group, admitted)


def _without(
    queue: Sequence[Workload], queue_jobs: Sequence[J], gone: Iterable[Workload]
) -> tuple[list[Workload], list[J]]:
    """A queue (in dequeue order) and its jobs (in the same order) without the workloads ``gone``: each is
    found by bisection (they are a few in a queue of up to a million), not by a test of every job."""
    places = set()
    for workload in gone:
        index = bisect_left(queue, workload.order_key, key=_order_key)
        while index < len(queue) and queue[index] is not workload:
            index += 1
        if index < len(queue):
            places.add(index)
    kept, kept_jobs = list(queue), list(queue_jobs)
    for index in sorted(places, reverse=True):
        del kept[index], kept_jobs[index]
    return kept, kept_jobs


def _moves_only(  # noqa: PLR0917 - a private helper of decide()
    snapshot: PassSnapshot[J],
    admissions: Sequence[J],
    reclaims: Sequence[Reclaim[J]],
    late: Sequence[J],
    policies: Mapping[str, Policy],
    checks: int,
) -> Decisions[J]:
    """The pass's moves without its report (``decide(report=False)``)."""
    return Decisions(
        admissions=tuple(admissions),
        reclaims=tuple(reclaims),
        late_admissions=tuple(late),
        positions=MappingProxyType({}),
        reasons=MappingProxyType({}),
        waiting=(),
        stale_records=tuple(snapshot.stale),
        ledger=snapshot.ledger,
        policies=MappingProxyType(dict(policies)),
        checks=checks,
        backoff=tuple(snapshot.backoff),
        held=tuple(snapshot.held),
        reclaimable_at=snapshot.reclaimable_at,
    )


def decide(
    tree: QuotaTree,
    jobs: Iterable[J],
    policies: Mapping[str, Policy],
    *,
    oversell_rate: Fraction,
    reclaim_tries_per_quota: int = RECLAIM_TRIES_PER_QUOTA,
    reclaim_budget: int | None = RECLAIM_BUDGET,
    now: float = 0.0,
    closing: frozenset[str] = frozenset(),
    loose: Sequence[Workload] = (),
    protected: Mapping[WorkloadKey, str] | None = None,
    report: bool = True,
) -> Decisions[J]:
    """Admit, reclaim and place every job of the tree (see the module's steps) under each leaf's policy
    (:func:`leaf_policies`, by leaf key). Nothing is written here.
    ``now`` (seconds since the epoch) decides which jobs in backoff may queue again; no job of the namespaces
    in ``closing`` (being deleted) is admitted; ``loose`` are the workloads of the pods no job of the queue accounts for
    (:mod:`webhook.core.loose`): they count as admitted, and reclaim may evict them like jobs, through the
    Eviction API (:attr:`Reclaim.pods`), as it does admitted jobs that cannot be held again (Pods);
    ``protected`` names the ones it may not take, and why. Without ``report`` only the moves are made
    (admissions, reclaims, late admissions, their reasons empty): ``positions``, ``reasons`` and ``waiting``
    come back empty and ``ledger`` is the one before the moves (the start estimate's replay reads nothing else,
    pass after pass)."""
    rate = validate_rate(oversell_rate)
    snapshot = sort_out(tree, jobs, now, closing, loose=loose, protected=protected)
    pods = snapshot.by_api
    admitted, ledger = snapshot.admitted, snapshot.ledger
    groups = snapshot.groups
    if fair_parents(tree):
        result, flags = fair_admit_groups(tree, ledger.used_view(), snapshot.workloads, policies, rate)
    else:
        result, flags = admit_groups(tree, ledger.used_view(), snapshot.workloads, policies, rate,
                                     least=snapshot.least)
    checks = result.checks
    plans: list[ReclaimPlan] = []
    reclaimer: Reclaimer | None = None
    if result.queues:  # nothing waits after the admission pass: no reclaim to plan (and no index to build)
        plans, reclaimer = _reclaims(tree, result, snapshot, policies, rate, reclaim_tries_per_quota,
                                     reclaim_budget, report)
    withheld = {workload.key for plan in plans for workload in plan.withheld}
    admissions = [_job_of(groups, workload) for workload in result.admitted if workload.key not in withheld]
    late = [_job_of(groups, plan.preemptor) for plan in plans if not plan.victims and not plan.withheld]
    plans = [plan for plan in plans if plan.victims or plan.withheld]
    reclaims: list[Reclaim[J]] = []
    positions: Mapping[WorkloadKey, int] = result.positions
    reasons: Mapping[WorkloadKey, FitResult] = result.reasons
    queues_after: Mapping[str, Sequence[Workload]] = result.queues
    evicted: dict[WorkloadKey, J] = {}
    evicted_pods: list[Workload] = []
    moved: dict[str, list[J]] = {}
    """The waiting jobs of the queues the reclaims changed, in order."""
    if reclaimer is not None and (plans or late):
        used: dict[str, Resources] | None = None
        """The usage after every plan, made when first read (one walk down the overlays, not one per node)."""
        # A plan whose victims all fit once every plan is carried out (room later plans left over) evicts
        # nothing: its preemptor is admitted after the other plans' evictions, and its victims keep running.
        for plan in plans:
            kept = None
            if not plan.withheld:
                if used is None:
                    used = dict(reclaimer.used.items())
                if check_fit(tree, used, plan.victims[0], rate).fits:
                    kept = _fit_all(tree, used, plan.victims, rate)
            if kept is not None:
                used = kept
                late.append(_job_of(groups, plan.preemptor))
                continue
            for victim in plan.victims:
                if victim.key not in pods:
                    evicted[victim.key] = _queued(admitted[victim.key])
            victims = tuple(admitted[victim.key] for victim in plan.victims if victim.key not in pods)
            gone = tuple(victim for victim in plan.victims if victim.key in pods)
            evicted_pods.extend(gone)
            reclaims.append(Reclaim(_job_of(groups, plan.preemptor), victims, plan.reason, gone))
        if not report:
            return _moves_only(snapshot, admissions, reclaims, late, policies, checks)
        if used is None:
            used = dict(reclaimer.used.items())
        # Evicted and withheld jobs wait again at their place; room the plans left over is the next pass's
        # (its admission pass hands it out in turn, and its reclaims withhold what a borrower would take from
        # a quota owed it), never admitted here: a borrower given it now would be evicted by the next pass.
        returning = [
            *evicted.values(),
            *(_job_of(groups, workload) for plan in plans for workload in plan.withheld),
        ]
        changed: dict[str, list[J]] = {}
        admitted_now: dict[str, list[Workload]] = {}
        for workload in (*(plan.preemptor for plan in plans), *(job.workload for job in late)):
            changed.setdefault(workload.quota.lower(), [])
            admitted_now.setdefault(workload.quota.lower(), []).append(workload)
        for job in returning:
            changed.setdefault(job.workload.quota.lower(), []).append(job)
        after: dict[str, Sequence[Workload]] = dict(result.queues)
        for quota, extra in changed.items():
            before = result.queues.get(quota, ())
            queue, queue_jobs = _without(before, _rest(groups, flags, quota), admitted_now.get(quota, ()))
            for job in extra:  # the queue is in order already: put the returning jobs at their places
                place = bisect_right(queue, job.workload.order_key, key=_order_key)
                queue.insert(place, job.workload)
                queue_jobs.insert(place, job)
            if queue:
                after[quota] = tuple(queue)
                moved[quota] = queue_jobs
            else:
                after.pop(quota, None)
        queues_after = after
        positions = QueuePositions(after.values())
        # Worded as admission_pass words it; a job that fits room the reclaims left over says so (the next
        # pass admits it); under Block the first waiting job of a quota waits and the others behind it.
        blocks = {quota: policies.get(quota) is Policy.BLOCK and quota in tree.nodes for quota in after}
        reasons = LazyReasons(
            tree,
            MappingProxyType(used),
            rate,
            [(queue, queue[0] if blocks[quota] and queue else None) for quota, queue in after.items()],
            fits_note=LEFTOVER_NOTE,
        )
    if not report:
        return _moves_only(snapshot, admissions, reclaims, late, policies, checks)
    # Every job of these queues is held (a waiting job of the snapshot, or a held copy of an evicted one); a
    # queue the reclaims left alone holds its group's jobs but the ones the admission pass admitted.
    waiting_jobs = tuple(chain.from_iterable(  # one copy of a million jobs, not two
        _rest(groups, flags, quota) if (found := moved.get(quota)) is None else found for quota in queues_after
    ))
    final_ledger = ledger.moved(
        admitted=(job.workload for job in (*admissions, *(plan.preemptor for plan in reclaims), *late)),
        queued=(admitted[key].workload for key in evicted),
        removed=evicted_pods,
    )
    return Decisions(
        admissions=tuple(admissions),
        reclaims=tuple(reclaims),
        late_admissions=tuple(late),
        positions=positions,
        reasons=reasons,
        waiting=waiting_jobs,
        stale_records=tuple(snapshot.stale),
        ledger=final_ledger,
        policies=MappingProxyType(dict(policies)),
        checks=checks,
        backoff=tuple(snapshot.backoff),
        held=tuple(snapshot.held),
        reclaimable_at=snapshot.reclaimable_at,
    )
