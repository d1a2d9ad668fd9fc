"""The queue's decisions, pure: from an immutable snapshot of jobs to what to admit, evict and report.

One :func:`decide` call is one reconcile pass of the queue:

1. the ledger is rebuilt from the jobs (admitted = released with a record, see :mod:`.model`);
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
from bisect import insort
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from operator import attrgetter
from types import MappingProxyType
from typing import Any, Generic

from tests.reference_core.queueing import LazyReasons, PassResult, Policy, QueuePolicyError, admission_pass
from tests.reference_core.reclaim import Reclaimer, ReclaimPlan
from webhook.api.names import MAX_JOBS
from webhook.core.chain_usage import shift_usage
from webhook.core.decisions import Decisions, J, Reclaim
from webhook.core.fit import FitResult, check_fit
from webhook.core.ledger import Ledger, build_ledger
from webhook.core.quantity import NANO
from webhook.core.quota import QuotaTree, queue_name
from webhook.core.rate import validate_rate
from webhook.core.resources import Resources
from webhook.core.startup import BackoffState
from webhook.core.workload import Phase, Workload, WorkloadKey

__all__ = ["LEFTOVER_NOTE", "RECLAIM_BUDGET", "decide", "leaf_policies", "queue_policy_text"]


# Policies --------------------------------------------------------------------------------------------------


def queue_policy_text(obj: Mapping[str, Any]) -> str | None:
    """A Queue object's ``spec.queuePolicy``, when it is a string."""
    spec = obj.get("spec")
    value = spec.get("queuePolicy") if isinstance(spec, Mapping) else None
    return value if isinstance(value, str) else None


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


# The pass -------------------------------------------------------------------------------------------------


def _queued(job: J) -> J:
    return job.with_workload(dataclasses.replace(job.workload, phase=Phase.QUEUED, admitted_at=None))


RECLAIM_BUDGET = 50_000
"""Candidate victims one pass may look at while planning reclaims (a bound on the pass's work; quotas not
reached wait for the next pass, which starts again from the quota with the oldest waiting job)."""


def _reclaims(
    tree: QuotaTree,
    result: PassResult,
    victims: Sequence[Workload],
    policies: Mapping[str, Policy],
    rate: Fraction,
    tries_per_quota: int,
    budget: int | None,
) -> tuple[list[ReclaimPlan], Reclaimer]:
    """Preemptors in rounds: in each round every quota, taken by the creation time of its first waiting job,
    tries its next waiting jobs in queue order until one gets a plan; quotas with a plan go on to the next
    round. A quota gives up after ``tries_per_quota`` jobs without a plan in a pass (a plan does not count:
    a quota owed much gets all of it in one pass, before anything it is owed is written elsewhere); under
    ``Block`` only its head may reclaim (the next job is the head once the head got in).

    Victims are the admitted jobs (never a preemptor of this pass); jobs this pass admitted give way first
    and stay queued (:attr:`ReclaimPlan.withheld`), in ``Block`` quotas only from the back of the queue."""
    blocking = [quota for quota, policy in policies.items() if policy is Policy.BLOCK]
    reclaimer = Reclaimer(tree, result.used, victims, rate, fresh=result.admitted, ordered=blocking, budget=budget)
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
                plan = reclaimer.plan(waiting[cursor[0]], take_room=True)
                cursor[0] += 1
                if plan is not None:
                    reclaimer.commit(plan)
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


class _Positions(Mapping[WorkloadKey, int]):
    """Positions once a pass's reclaims are carried out: recomputed for the quotas the reclaims changed, the
    admission pass's for the others."""

    __slots__ = ("_changed", "_first", "_gone")

    def __init__(self, first: Mapping[WorkloadKey, int], changed: Mapping[WorkloadKey, int],
                 gone: set[WorkloadKey]) -> None:
        self._first = first
        self._changed = changed
        self._gone = gone
        """Keys the admission pass placed that are not waiting any more (admitted by a reclaim)."""

    def __getitem__(self, key: WorkloadKey) -> int:
        value = self._changed.get(key)
        if value is not None:
            return value
        if key in self._gone:
            raise KeyError(key)
        return self._first[key]

    def __iter__(self) -> Iterator[WorkloadKey]:
        yield from (key for key in self._first if key not in self._gone and key not in self._changed)
        yield from self._changed

    def __len__(self) -> int:
        return sum(1 for _ in self)


@dataclass(slots=True)
class _Snapshot(Generic[J]):
    """The jobs of one pass, sorted out in one walk over them."""

    by_id: dict[int, J]
    """Every job by the identity of its workload: the passes hand back the very workloads passed in, and an
    identity lookup is much cheaper at depth than a key lookup."""
    waiting: list[Workload]
    admitted: dict[WorkloadKey, J]
    stale: list[J]
    ledger: Ledger
    backoff: list[J]
    held: list[J]


def _snapshot(
    tree: QuotaTree,
    jobs: Iterable[J],
    now: float,
    closing: frozenset[str] = frozenset(),
    loose: Sequence[Workload] = (),
) -> _Snapshot[J]:
    """Sort the jobs out, and their :func:`build_ledger`, summed per quota and phase first (one summed
    workload per quota and phase instead of one per job: the same ledger, a fraction of the work at depth).
    Jobs of quotas that are not in the tree are passed as they are, so :attr:`Ledger.unknown` lists them.
    A held job in backoff (before its retry time, or given up) counts as requested but does not wait; nor does
    a held job of a namespace being deleted (``closing``): nothing is released into it. ``loose`` are the pods
    no job accounts for: admitted, never a job of ``kube-queue/max-jobs`` (their requests carry one job less)."""
    by_id: dict[int, J] = {}
    waiting: list[Workload] = []
    backoff: list[J] = []
    held: list[J] = []
    admitted: dict[WorkloadKey, J] = {}
    stale: list[J] = []
    admitted_groups: dict[str, list[Resources]] = {}
    queued_groups: dict[str, list[Resources]] = {}
    unknown: list[Workload] = []
    nodes = tree.nodes
    for job in jobs:
        workload = job.workload
        by_id[id(workload)] = job
        phase = workload.phase
        if phase is Phase.QUEUED:
            if job.backoff is not None and job.backoff_state(now) in (BackoffState.WAITING, BackoffState.GAVE_UP):
                backoff.append(job)
            elif job.missing_class is not None:
                held.append(job)
            elif workload.key.namespace not in closing:
                waiting.append(workload)
            if job.record is not None:
                stale.append(job)
            target = queued_groups
        elif phase is Phase.ADMITTED:
            admitted[workload.key] = job
            target = admitted_groups
        else:
            continue
        members = target.get(workload.quota)
        if members is None:
            if workload.quota.lower() not in nodes:
                unknown.append(workload)
                continue
            members = target[workload.quota] = []
        members.append(workload.request)
    for workload in loose:
        if workload.quota.lower() in nodes:
            admitted_groups.setdefault(workload.quota, []).append(workload.request)
    summed = []
    for phase, target in ((Phase.ADMITTED, admitted_groups), (Phase.QUEUED, queued_groups)):
        for quota, members in target.items():
            # ``request_with_count`` adds one job; the other ``len(members) - 1`` are counted here.
            amounts = {MAX_JOBS: (len(members) - 1) * NANO}
            for request in members:
                for name, amount in request.items():
                    amounts[name] = amounts.get(name, 0) + amount
            summed.append(
                Workload(key=WorkloadKey("Sum", quota, phase.value), quota=quota, pod_sets=(), phase=phase,
                         request=Resources(amounts))
            )
    return _Snapshot(by_id, waiting, admitted, stale, build_ledger(tree, [*summed, *unknown]), backoff, held)


def decide(
    tree: QuotaTree,
    jobs: Iterable[J],
    policies: Mapping[str, Policy],
    *,
    oversell_rate: Fraction,
    reclaim_tries_per_quota: int = 16,
    reclaim_budget: int | None = RECLAIM_BUDGET,
    now: float = 0.0,
    closing: frozenset[str] = frozenset(),
    loose: Sequence[Workload] = (),
    protected: Mapping[WorkloadKey, str] | None = None,
) -> Decisions[J]:
    """Admit, reclaim and place every job of the tree (see the module's steps) under each leaf's policy
    (:func:`leaf_policies`, by leaf key). Nothing is written here.
    ``now`` (seconds since the epoch) decides which jobs in backoff may queue again; no job of the namespaces
    in ``closing`` (being deleted) is admitted; ``loose`` are the pods outside the queue's jobs (they count as
    admitted). Reclaim may take every admitted job and loose pod but the ``protected`` ones; the jobs that cannot
    be held again and the loose pods go through the Eviction API (``Reclaim.pods``)."""
    rate = validate_rate(oversell_rate)
    snapshot = _snapshot(tree, jobs, now, closing, loose)
    by_id, admitted, ledger = snapshot.by_id, snapshot.admitted, snapshot.ledger
    protected = protected or {}
    by_api = {workload.key: workload for workload in loose if workload.quota.lower() in tree.nodes}
    by_api.update((key, job.workload) for key, job in admitted.items() if not job.evictable)
    candidates = [job.workload for job in admitted.values()] + list(by_api.values())
    candidates = [workload for workload in dict.fromkeys(candidates) if workload.key not in protected]
    result = admission_pass(tree, ledger.used_view(), snapshot.waiting, policies, rate)
    checks = result.checks
    plans: list[ReclaimPlan] = []
    reclaimer: Reclaimer | None = None
    if result.queues:  # nothing waits after the admission pass: no reclaim to plan (and no index to build)
        plans, reclaimer = _reclaims(tree, result, candidates, policies, rate, reclaim_tries_per_quota,
                                     reclaim_budget)
    withheld = {workload.key for plan in plans for workload in plan.withheld}
    admissions = [by_id[id(workload)] for workload in result.admitted if workload.key not in withheld]
    late = [by_id[id(plan.preemptor)] for plan in plans if not plan.victims and not plan.withheld]
    plans = [plan for plan in plans if plan.victims or plan.withheld]
    reclaims: list[Reclaim[J]] = []
    positions: Mapping[WorkloadKey, int] = result.positions
    reasons: Mapping[WorkloadKey, FitResult] = result.reasons
    queues_after: Mapping[str, Sequence[Workload]] = result.queues
    evicted: dict[WorkloadKey, J] = {}
    gone: list[Workload] = []
    if reclaimer is not None and (plans or late):
        used = dict(reclaimer.used)
        # A plan whose victims all fit once every plan is carried out (room later plans left over) evicts
        # nothing: its preemptor is admitted after the other plans' evictions, and its victims keep running.
        for plan in plans:
            kept = None
            if not plan.withheld and check_fit(tree, used, plan.victims[0], rate).fits:
                kept = _fit_all(tree, used, plan.victims, rate)
            if kept is not None:
                used = kept
                late.append(by_id[id(plan.preemptor)])
                continue
            for victim in plan.victims:
                if victim.key in by_api:
                    gone.append(victim)
                    continue
                evicted[victim.key] = job = _queued(admitted[victim.key])
                by_id[id(job.workload)] = job
            victims = tuple(admitted[victim.key] for victim in plan.victims if victim.key not in by_api)
            pods = tuple(victim for victim in plan.victims if victim.key in by_api)
            reclaims.append(Reclaim(by_id[id(plan.preemptor)], victims, plan.reason, pods))
        # Evicted and withheld jobs wait again at their place; room the plans left over is the next pass's
        # (its admission pass hands it out in turn, and its reclaims withhold what a borrower would take from
        # a quota owed it), never admitted here: a borrower given it now would be evicted by the next pass.
        preemptors = {plan.preemptor.key for plan in plans} | {job.workload.key for job in late}
        returning = [
            *(job.workload for job in evicted.values()),
            *(workload for plan in plans for workload in plan.withheld),
        ]
        changed: dict[str, list[Workload]] = {}
        for workload in (*(plan.preemptor for plan in plans), *(job.workload for job in late)):
            changed.setdefault(workload.quota.lower(), [])
        for workload in returning:
            changed.setdefault(workload.quota.lower(), []).append(workload)
        moved: dict[WorkloadKey, int] = {}
        after: dict[str, Sequence[Workload]] = dict(result.queues)
        for quota, extra in changed.items():
            queue = [workload for workload in result.queues.get(quota, ()) if workload.key not in preemptors]
            for workload in extra:  # the queue is in order already: put the returning jobs at their places
                insort(queue, workload, key=_order_key)
            moved.update((workload.key, place) for place, workload in enumerate(queue, start=1))
            if queue:
                after[quota] = tuple(queue)
            else:
                after.pop(quota, None)
        queues_after = after
        positions = _Positions(result.positions, moved, preemptors)
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
    waiting_jobs: list[J] = []
    for waiting_queue in queues_after.values():
        for workload in waiting_queue:
            job = by_id[id(workload)]
            waiting_jobs.append(job if job.workload.phase is Phase.QUEUED else _queued(job))
    final_ledger = ledger
    for job in (*admissions, *(plan.preemptor for plan in reclaims), *late):
        final_ledger = final_ledger.with_admitted(job.workload)
    for key in evicted:
        final_ledger = final_ledger.with_queued(admitted[key].workload)
    for workload in gone:
        final_ledger = final_ledger.without(workload)
    return Decisions(
        admissions=tuple(admissions),
        reclaims=tuple(reclaims),
        late_admissions=tuple(late),
        positions=positions,
        reasons=reasons,
        waiting=tuple(waiting_jobs),
        stale_records=tuple(snapshot.stale),
        ledger=final_ledger,
        policies=MappingProxyType(dict(policies)),
        checks=checks,
        backoff=tuple(snapshot.backoff),
        held=tuple(snapshot.held),
    )
