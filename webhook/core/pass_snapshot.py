"""The jobs of one decision pass sorted out in one walk over them (:func:`sort_out`), for
:func:`webhook.core.decide.decide`: the waiting jobs by quota in dequeue order, what the admitted jobs hold
by node, the jobs that wait for another reason, and the pass's :class:`~webhook.core.ledger.Ledger`.

A pass over a million waiting jobs spends most of its time on their memory, not on arithmetic: a later walk
over one quota's jobs visits them in no memory order (a cache miss a job and field). So the walk takes
what the pass reads of a job (its workload, creation time, priority and request) while the job is at hand,
and the sums and sorts run over those lists.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from itertools import chain
from operator import attrgetter, itemgetter
from typing import Generic

from webhook.api.names import MAX_JOBS
from webhook.core.decisions import J
from webhook.core.ledger import Ledger, build_ledger
from webhook.core.quantity import NANO
from webhook.core.queueing import sort_in_order
from webhook.core.quota import QuotaNode, QuotaTree
from webhook.core.quota_attributes import reclaim_after
from webhook.core.resources import Resources, add_amounts, column, least_amounts
from webhook.core.startup import BackoffState
from webhook.core.workload import Phase, Workload, WorkloadKey

__all__ = ["Holding", "PassSnapshot", "kept_by_run_time", "minimum_run_times", "sort_out"]


@dataclass(frozen=True, slots=True)
class Holding:
    """The admitted jobs of one node, taken in the snapshot walk: what each requests, and the evictable ones'
    workloads and requests (the reclaim index's candidates)."""

    amounts: list[dict[str, int]]
    evictable: list[Workload]
    evictable_amounts: list[dict[str, int]]


@dataclass(slots=True)
class PassSnapshot(Generic[J]):
    """The jobs of one pass, sorted out in one walk over them."""

    groups: dict[str, Sequence[J]]
    """The waiting jobs by quota key (lower-cased), in dequeue order (:attr:`Workload.order_key`)."""
    workloads: dict[str, Sequence[Workload]]
    """Their workloads, in the same order."""
    least: dict[str, dict[str, int]]
    """Per known quota key with waiting jobs, per resource, the least any of them asks for."""
    admitted: dict[WorkloadKey, J]
    running: dict[str, Holding]
    """What the admitted jobs of known quotas hold, by node key, in the order they came."""
    unique: bool
    """No two admitted jobs share a key (so ``running`` and ``admitted`` hold the same jobs but unknown ones)."""
    stale: list[J]
    ledger: Ledger
    backoff: list[J]
    held: list[J]
    by_api: dict[WorkloadKey, Workload]
    """The reclaim candidates that cannot be held again, by key: loose pods and admitted Pods (docs/reclaim.md,
    "Pods"). Reclaim evicts them through the Eviction API; they do not go back to a queue."""
    protected: Mapping[WorkloadKey, str]
    """Admitted jobs and pods reclaim may not take, and why (those the caller names, and the ones younger than
    their quota's minimum run time)."""
    reclaimable_at: float | None = None
    """When the first job kept by a minimum run time may be taken again (a pass is due then)."""


_workload_of = attrgetter("workload")
_Parts = tuple[list[J], list[Workload], list[float], list[int], list[dict[str, int]]]
"""A group's waiting jobs, their workloads, creation times, priorities and requests' amounts, as they came."""
_job_amounts = attrgetter("workload.request._items")


def minimum_run_times(tree: QuotaTree) -> dict[str, Fraction]:
    """Per leaf key, the minimum run time before reclaim (seconds) its jobs have: the leaf's
    :data:`~webhook.api.names.RECLAIM_AFTER_ATTRIBUTE`, else its nearest ancestor's. Empty without any."""
    out: dict[str, Fraction] = {}
    stack: list[tuple[QuotaNode, Fraction | None]] = [(tree.root, None)]
    while stack:
        node, inherited = stack.pop()
        own = reclaim_after(node.attributes)
        seconds = own if own is not None else inherited
        if node.is_leaf and seconds is not None:
            out[node.key] = seconds
        stack.extend((child, seconds) for child in node.children)
    return out


def kept_by_run_time(tree: QuotaTree, workloads: Iterable[Workload], now: float) -> dict[WorkloadKey, str]:
    """The admitted ``workloads`` younger than their quota's minimum run time at ``now``, and why (what the pass
    protects; ``kq why`` names them)."""
    grace = minimum_run_times(tree)
    young: dict[WorkloadKey, tuple[float, str]] = {}
    if grace:
        for workload in workloads:
            if workload.phase is Phase.ADMITTED:
                _young(workload, grace, now, young)
    return {key: why for key, (_, why) in young.items()}


def _young(workload: Workload, grace: Mapping[str, Fraction], now: float,
           young: dict[WorkloadKey, tuple[float, str]]) -> bool:
    """Whether ``workload`` has run less than its quota's minimum run time at ``now`` (noted in ``young``)."""
    seconds = grace.get(workload.quota.lower())
    if seconds is None:
        return False
    since = workload.admitted_at if workload.admitted_at is not None else workload.created
    until = since + float(seconds)
    if until <= now:
        return False
    young[workload.key] = (until, f"it has run {max(0.0, now - since):.0f} s of the {float(seconds):.0f} s its "
                                  f"quota {workload.quota} grants before reclaim may take it "
                                  f"({until - now:.0f} s from now)")
    return True


def _sum(amounts: list[dict[str, int]], count: int) -> Resources:
    """What ``count`` jobs requesting ``amounts`` hold in all, ``kube-queue/max-jobs`` but one of them counted
    (``request_with_count`` adds one job), resources in the order they first appear. Each sum runs at C speed
    over the jobs (a queue may hold a million of them)."""
    return Resources(add_amounts({MAX_JOBS: (count - 1) * NANO}, amounts))


def _sum_and_least(amounts: list[dict[str, int]]) -> tuple[Resources, dict[str, int]]:
    """:func:`_sum` of ``amounts`` and, per resource, the least any of them asks for (absent counts as zero)."""
    summed = {MAX_JOBS: (len(amounts) - 1) * NANO}
    least: dict[str, int] = {}
    for name in dict.fromkeys(chain.from_iterable(amounts)):
        values = column(amounts, name)
        summed[name] = summed.get(name, 0) + sum(values)
        least[name] = min(values)
    return Resources(summed), least


def sort_out(
    tree: QuotaTree,
    jobs: Iterable[J],
    now: float,
    closing: frozenset[str] = frozenset(),
    *,
    loose: Sequence[Workload] = (),
    protected: Mapping[WorkloadKey, str] | None = None,
) -> PassSnapshot[J]:
    """Sort the jobs out, and their :func:`build_ledger`, summed per quota and phase first (one summed
    workload per quota and phase instead of one per job: the same ledger, a fraction of the work at depth).
    Jobs of quotas that are not in the tree are passed as they are, so :attr:`Ledger.unknown` lists them.
    A held job in backoff (before its retry time, or given up) counts as requested but does not wait; nor does
    a held job of a namespace being deleted (``closing``): nothing is released into it. ``loose`` are the pods no
    job accounts for (:mod:`webhook.core.loose`): admitted, never a job of ``kube-queue/max-jobs``. They and the
    admitted jobs that cannot be held again (Pods) are reclaim candidates evicted through the API
    (:attr:`PassSnapshot.by_api`); ``protected`` names the candidates reclaim may not take.

    Lists are found by the quota name as the jobs spell it (one lookup a job; a name is lower-cased once),
    and a job of an unknown quota always takes the slow way (so :attr:`Ledger.unknown` keeps their order)."""
    groups: dict[str, _Parts[J]] = {}
    """Per quota key: the waiting jobs, their workloads, creation times, priorities and requests' amounts."""
    waiting: dict[str, _Parts[J]] = {}
    running: dict[str, Holding] = {}
    running_by_name: dict[str, Holding] = {}
    other: dict[str, list[J]] = {}
    """Queued jobs that do not wait (backoff, held, closing namespace) by node key: they count as requested."""
    queued_keys: dict[str, None] = {}
    """Node keys with queued jobs, in the order their first job came."""
    backoff: list[J] = []
    held: list[J] = []
    admitted: dict[WorkloadKey, J] = {}
    by_api: dict[WorkloadKey, Workload] = {}
    grace = minimum_run_times(tree)
    young: dict[WorkloadKey, tuple[float, str]] = {}
    """Admitted jobs and pods younger than their quota's minimum run time: until when, and why."""
    stale: list[J] = []
    unknown: list[Workload] = []
    unknown_running = 0
    nodes = tree.nodes
    queued, run = Phase.QUEUED, Phase.ADMITTED
    for job in jobs:
        workload = job.workload
        phase = workload.phase
        if phase is queued:
            if job.backoff is not None and job.backoff_state(now) in (BackoffState.WAITING, BackoffState.GAVE_UP):
                backoff.append(job)
                target = other
            elif job.missing_class is not None:
                held.append(job)
                target = other
            elif closing and workload.key.namespace in closing:
                target = other
            else:
                parts = waiting.get(workload.quota)
                if parts is None:
                    key = workload.quota.lower()
                    parts = groups.get(key)
                    if parts is None:
                        parts = groups[key] = ([], [], [], [], [])
                    if key in nodes:
                        waiting[workload.quota] = parts
                        queued_keys[key] = None
                    else:
                        unknown.append(workload)
                # What the pass reads of a waiting job, taken now that the job is at hand (a later walk over a
                # group visits its jobs in no memory order: a cache miss a job and field).
                group_jobs, group_workloads, created, priority, requested = parts
                group_jobs.append(job)
                group_workloads.append(workload)
                created.append(workload.created)
                priority.append(workload.priority)
                requested.append(workload.request._items)
                target = None
            if target is not None:
                key = workload.quota.lower()
                if key in nodes:
                    target.setdefault(key, []).append(job)
                    queued_keys[key] = None
                else:
                    unknown.append(workload)
            if job.record is not None:
                stale.append(job)
        elif phase is run:
            admitted[workload.key] = job
            holding = running_by_name.get(workload.quota)
            if holding is None:
                key = workload.quota.lower()
                if key not in nodes:
                    unknown.append(workload)
                    unknown_running += 1
                    continue
                holding = running_by_name[workload.quota] = running.setdefault(key, Holding([], [], []))
            asks = workload.request._items
            holding.amounts.append(asks)
            if protected and workload.key in protected:
                continue
            if grace and _young(workload, grace, now, young):
                continue
            if job.evictable:
                holding.evictable.append(workload)
                holding.evictable_amounts.append(asks)
                if by_api:
                    by_api.pop(workload.key, None)  # a key listed twice: the last one is the job (as in admitted)
            else:
                holding.evictable.append(workload)
                holding.evictable_amounts.append(asks)
                by_api[workload.key] = workload
    counted_loose = 0
    for workload in loose:
        key = workload.quota.lower()
        if key not in nodes:
            continue
        holding = running.get(key)
        if holding is None:
            holding = running[key] = Holding([], [], [])
        asks = workload.request._items
        holding.amounts.append(asks)
        counted_loose += 1
        if grace and _young(workload, grace, now, young):
            continue
        if not protected or workload.key not in protected:
            holding.evictable.append(workload)
            holding.evictable_amounts.append(asks)
            by_api[workload.key] = workload
    summed = []
    for key, holding in running.items():
        summed.append(Workload(key=WorkloadKey("Sum", key, Phase.ADMITTED.value), quota=key, pod_sets=(),
                               phase=Phase.ADMITTED, request=_sum(holding.amounts, len(holding.amounts))))
    least: dict[str, dict[str, int]] = {}
    for key in queued_keys:
        parts = groups.get(key)
        waiting_amounts = parts[4] if parts is not None else []
        held_back = other.get(key)
        if held_back is None and waiting_amounts:
            # Every queued job of the quota waits: each resource's amounts are read once, for the sum and the least.
            request, least[key] = _sum_and_least(waiting_amounts)
        else:
            queued_amounts = waiting_amounts if held_back is None else [*waiting_amounts, *map(_job_amounts, held_back)]
            request = _sum(queued_amounts, len(queued_amounts))
            if waiting_amounts:
                least[key] = least_amounts(waiting_amounts)
        summed.append(Workload(key=WorkloadKey("Sum", key, Phase.QUEUED.value), quota=key, pod_sets=(),
                               phase=Phase.QUEUED, request=request))
    held_count = sum(len(holding.amounts) for holding in running.values())
    unique = len(admitted) + counted_loose == held_count + unknown_running
    ordered: dict[str, Sequence[J]] = {}
    workloads: dict[str, Sequence[Workload]] = {}
    for key, (group_jobs, group_workloads, created, priority, _) in groups.items():
        ordered[key], workloads[key] = _in_order(group_jobs, group_workloads, created, priority)
    return PassSnapshot(ordered, workloads, least, admitted, running, unique, stale,
                     build_ledger(tree, [*summed, *unknown]), backoff, held, by_api,
                     {**(protected or {}), **{key: why for key, (_, why) in young.items()}},
                     min((until for until, _ in young.values()), default=None))



def _in_order(
    jobs: list[J], workloads: list[Workload], created: list[float], priority: list[int]
) -> tuple[Sequence[J], Sequence[Workload]]:
    """The jobs and their workloads in dequeue order, as :func:`sort_in_order` puts them: the places are
    sorted on the creation times and priorities taken in the walk, and each list is put in that order once
    (a tuple, which the admission pass keeps as it is instead of copying it)."""
    if len(set(created)) < len(created):  # equal creation times: namespace and name decide (rare)
        sort_in_order(jobs, "workload.")
        return jobs, list(map(_workload_of, jobs))
    if len(created) == 1:
        return tuple(jobs), tuple(workloads)
    places = sorted(range(len(created)), key=created.__getitem__)
    places.sort(key=priority.__getitem__, reverse=True)
    pick = itemgetter(*places)
    return pick(jobs), pick(workloads)
