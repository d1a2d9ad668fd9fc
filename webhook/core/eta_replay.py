"""One forward replay of a snapshot through the controller's own pass, on a virtual clock (docs/eta.md).

The snapshot's jobs are replayed from ``now``: running jobs end at their expected ends, every pass is
:func:`webhook.core.decide.decide` (so priorities, Round and Block, borrowing, reclaim, ``kube-queue/max-jobs``,
the oversell rate and backoff retry times play as in the controller), admitted jobs run once the pods' quota
lets them (running pods within ``max`` whatever the oversell rate, :mod:`webhook.core.podquota`, as the
scheduler extender keeps them) and then for their expected run time; the control plane's time around each run
(:mod:`webhook.core.handoff`) delays each start and each hand-on of a job's room. The first admission and the
first run of every waiting job are recorded.

An event-by-event replay of 10,000 waiting jobs is 10,000 passes; this one stays within a few hundred:

* **Buckets.** The events (ends of running jobs, retry times) are taken in buckets of
  ``max(floor, eps_time × time ahead)``, one pass per bucket, at the time of its last event; the floor is
  ``min_width``, or ``short_share`` of the shortest known run time up to ``short_cap``. A job that pass
  admits (or starts) is dated by the first end of the bucket whose freed room lets it fit, node by node and
  resource by resource after the jobs placed before it (:class:`webhook.core.eta_room.Freed`), so finishing times
  do not drift later bucket after bucket.
* **Windows.** A pass sees every admitted job but, of the waiting ones, only the first ``window`` of each queue
  (in queue order, those whose retry time has come) and, under ``Round``, the first ``per_shape`` jobs of each of
  the ``smallest`` smallest request shapes further back (the ones that could pass bigger jobs ahead). A queue
  none of whose jobs fits its chain or stays within its leaf's ``min`` (needed to reclaim) is left out: the pass
  would do nothing with it. When a pass admits a queue's whole window, another pass follows at the same time.

Both approximate the exact replay; ``python -m bench.eta_bench`` measures what they cost in accuracy next to
the estimate's own error (BENCHMARKS.md). Pure: no clock, no I/O.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Callable, Sequence

from webhook.core.decide import decide
from webhook.core.decisions import Decisions
from webhook.core.eta_room import Amounts, Chains, Freed, Tally, Usage, amounts_of, shift
from webhook.core.eta_slot import Slot, Status, sort_key, with_phase
from webhook.core.eta_types import Basis, Outcome, ReplayInput, ReplayJob, ReplayLimits, ReplayResult
from webhook.core.fit import limits_of
from webhook.core.podquota import pod_quota_blockers
from webhook.core.queueing import Policy
from webhook.core.quota import PREEMPT_LOWER_PRIORITY, PREEMPT_POLICY
from webhook.core.runtimes import UNKNOWN, Source
from webhook.core.startup import BackoffState
from webhook.core.workload import Phase, WorkloadKey

__all__ = ["Basis", "Outcome", "ReplayInput", "ReplayJob", "ReplayLimits", "ReplayResult", "replay"]


_FINISH, _RETRY = 0, 1
_NEAR = 64
"""How far from the front of a queue :meth:`_Replay._dequeue` scans before it searches."""


class _Replay:
    """The state of one replay (see :func:`replay`)."""

    def __init__(self, given: ReplayInput, limits: ReplayLimits, q: float, unknown_ends: bool,
                 between: Callable[[], None] | None) -> None:
        self.given = given
        self.limits = limits
        self.q = q
        self.between = between
        self.unknown_ends = unknown_ends
        self.handoff = given.handoff
        tree = self.tree = given.tree
        self.now = given.now
        self.chains = Chains(tree)
        self.modelled = given.rate > 1
        """Whether admitted jobs may wait for the pods' quota (the queue oversells)."""
        self.max_limits = {key: dict(node.max.items()) for key, node in tree.nodes.items()}
        self.admit_limits = {key: limits_of(node, given.rate) for key, node in tree.nodes.items()}
        self._roots = {resource: amount for resource, amount in tree.root.max.items() if amount > 0}
        self.slots: dict[WorkloadKey, Slot] = {}
        self.queues: dict[str, list[Slot]] = {}
        self.shapes: dict[str, dict[Amounts, list[Slot]]] = {}
        self.shape_order: dict[str, list[Amounts]] = {}
        """Per queue, its request shapes, smallest first."""
        self.holding: dict[WorkloadKey, Slot] = {}
        """Admitted jobs (pending or running)."""
        self.loose = {workload.key: workload for workload in given.loose}
        self.use_tally = Tally()
        """Admission usage now (the ledger's ``used``), kept as jobs come and go (:attr:`usage`)."""
        self.used: Usage = {}
        """:attr:`usage` after the last pass (what a bucket's ends freed room from)."""
        self.running: Usage = {}
        """What running pods use, when the pods' quota is modelled."""
        self.running_before: Usage = {}
        """:attr:`running` after the last pass."""
        self.events: list[tuple[float, int, int, WorkloadKey, int]] = []
        self.sequence = 0
        self.passes = 0
        self.tracked: list[Slot] = []
        """The jobs waiting in the snapshot, whose first admission and first run the replay records."""
        self.tally = [0, 0, 0, 0]
        """Finished jobs: all, declared, history, deadline."""
        self.groups: set[tuple[str, str, str]] = set()
        self.samples = 0
        self.basis: Basis | None = None
        self.sums = [0.0, 0.0]
        """Of the finished jobs whose run time had both figures: their p50s and their p90s."""
        self._setup()

    # Setup -------------------------------------------------------------------------------------------------
    def _setup(self) -> None:
        given, now = self.given, self.now
        waiting: list[Slot] = []
        for source in given.jobs:
            workload = source.workload
            if workload.phase is Phase.FINISHED:
                continue
            chain = self.chains.of(workload.quota)
            runtime = given.runtimes.get(workload.key) or UNKNOWN
            job = ReplayJob(workload, source, source.evictable, source.missing_class)
            if workload.phase is Phase.ADMITTED:
                slot = Slot(job, chain, runtime, Status.PENDING)
                self.slots[slot.key] = slot
                self.holding[slot.key] = slot
                slot.group = self.use_tally.group(chain, slot.counted)
                self.use_tally.add(slot.group, 1)
                since = given.running_since.get(slot.key)
                if since is None and not self.modelled:  # its pods are about to run
                    since = (workload.admitted_at if workload.admitted_at is not None else now) + self.handoff.start
                if since is not None:
                    self._run(slot, max(now, since), elapsed=max(0.0, now - since))
                continue
            state = source.backoff_state(now)
            out = (state is BackoffState.GAVE_UP or source.missing_class is not None or not chain
                   or workload.key.namespace in given.closing)
            slot = Slot(job, chain, runtime, Status.OUT if out else Status.WAITING)
            slot.size = sum(amount / self._roots[name] for name, amount in slot.request if name in self._roots)
            slot.group = self.use_tally.group(chain, slot.counted)
            self.slots[slot.key] = slot
            self.tracked.append(slot)
            if out:
                continue
            if state is BackoffState.WAITING and source.backoff is not None:
                slot.ready_at = source.backoff.retry_at
                self._push(slot.ready_at, _RETRY, slot)
            waiting.append(slot)
        waiting.sort(key=sort_key)  # then appended in order: no insertion into the middle of a long queue
        for slot in waiting:
            self.queues.setdefault(slot.leaf, []).append(slot)
            self.shapes.setdefault(slot.leaf, {}).setdefault(slot.shape, []).append(slot)
        for workload in self.loose.values():
            chain = self.chains.of(workload.quota)
            self.use_tally.add(self.use_tally.group(chain, amounts_of(workload, False)), 1)
            if self.modelled:
                shift(self.running, chain, amounts_of(workload, False), 1)
        for leaf, groups in self.shapes.items():
            self.shape_order[leaf] = sorted(groups, key=lambda shape: (groups[shape][0].size, shape))
        known = [figure for slot in self.slots.values() if (figure := slot.runtime.at(self.q)) is not None]
        limits = self.limits
        self.min_width = max(limits.min_width, min(limits.short_cap, limits.short_share * min(known, default=0.0)))
        """The narrowest bucket (:class:`ReplayLimits`)."""
        self._remember()

    @property
    def usage(self) -> Usage:
        """Admission usage now."""
        return self.use_tally.usage()

    def _remember(self) -> None:
        self.used = {key: dict(sums) for key, sums in self.usage.items()}
        if self.modelled:
            self.running_before = {key: dict(sums) for key, sums in self.running.items()}

    def _push(self, at: float, kind: int, slot: Slot) -> None:
        self.sequence += 1
        heapq.heappush(self.events, (at, kind, self.sequence, slot.key, slot.generation))

    def _enqueue(self, slot: Slot) -> None:
        insort(self.queues.setdefault(slot.leaf, []), slot, key=sort_key)
        groups = self.shapes.setdefault(slot.leaf, {})
        group = groups.get(slot.shape)
        if group is None:
            group = groups[slot.shape] = []
            # After setup: a shape no waiting job of the queue had (an evicted job's), maybe in a queue that had none.
            order = self.shape_order.setdefault(slot.leaf, [])
            order.append(slot.shape)
            order.sort(key=lambda shape: (groups[shape][0].size if groups[shape] else slot.size, shape))
        insort(group, slot, key=sort_key)

    def _dequeue(self, slot: Slot) -> None:
        for members in (self.queues[slot.leaf], self.shapes[slot.leaf][slot.shape]):
            try:  # a pass admits from the front of a queue: a scan from there finds the job sooner than a search
                index = members.index(slot, 0, _NEAR)
            except ValueError:
                index = bisect_left(members, slot.sort_key, key=sort_key)
                while members[index] is not slot:
                    index += 1
            del members[index]

    # Running and ending ------------------------------------------------------------------------------------
    def _run(self, slot: Slot, at: float, elapsed: float = 0.0) -> None:
        """The job's pods run from ``at``: it ends after its run time (never, when unknown, unless the replay
        takes unknown run times as ending at once), and its room is handed on the handoff's end after that."""
        slot.status = Status.RUNNING
        if self.modelled:
            shift(self.running, slot.chain, slot.request, 1)
        left = slot.runtime.remaining(elapsed, self.q) if elapsed > 0 else slot.runtime.at(self.q)
        if left is None and self.unknown_ends:
            left = 0.0
        if left is not None:
            self._push(at + left + self.handoff.end, _FINISH, slot)

    def _finish(self, slot: Slot) -> None:
        slot.status = Status.DONE
        del self.holding[slot.key]
        self.use_tally.add(slot.group, -1)
        if self.modelled:
            shift(self.running, slot.chain, slot.request, -1)
        runtime = slot.runtime
        self.basis = None
        self.tally[0] += 1
        low, high = runtime.at(0.5), runtime.at(0.9)
        if low is not None and high is not None:
            self.sums[0] += low
            self.sums[1] += high
        source = runtime.source
        if source is Source.DECLARED:
            self.tally[1] += 1
        elif source in (Source.NAMESPACE, Source.QUEUE):
            self.tally[2] += 1
            for group, count in runtime.groups:
                if group not in self.groups:
                    self.groups.add(group)
                    self.samples += count
        elif source is Source.DEADLINE:
            self.tally[3] += 1

    def _basis(self) -> Basis:
        """What the outcomes recorded now rest on (the same value until the next job finishes)."""
        basis = self.basis
        if basis is None:
            finished, declared, history, deadline = self.tally
            low, high = self.sums
            basis = self.basis = Basis(finished, declared, history, deadline, self.samples,
                                       high / low if low > 0 else 1.0)
        return basis

    # Passes ------------------------------------------------------------------------------------------------
    def _window(self, at: float) -> tuple[list[Slot], dict[str, list[Slot]]]:
        """The waiting jobs the pass sees (see the module), and each queue's first ones (its prefix)."""
        size, smallest = self.limits.window, self.limits.smallest
        seen: list[Slot] = []
        prefixes: dict[str, list[Slot]] = {}
        for leaf, members in self.queues.items():
            prefix: list[Slot] = []
            for slot in members:
                if slot.ready_at <= at:
                    prefix.append(slot)
                    if len(prefix) >= size:
                        break
            if not prefix:
                continue
            extra: list[Slot] = []
            if len(members) > len(prefix) and smallest and self.given.policies.get(leaf) is not Policy.BLOCK:
                extra = self._smallest(leaf, at, {id(slot) for slot in prefix})
            if not self._may_act(leaf, [*prefix, *extra]):
                continue
            prefixes[leaf] = prefix
            seen.extend(prefix)
            seen.extend(extra)
        return seen, prefixes

    def _may_act(self, leaf: str, prefix: Sequence[Slot]) -> bool:
        """Whether a pass could admit one of a queue's ``prefix`` jobs or reclaim for one: it fits its chain now,
        or stays within its leaf's ``min`` (a preemptor must), or the leaf preempts by priority. Usage only grows
        during a pass, so a queue for which none holds does nothing in it (under Block only the head counts)."""
        node = self.tree.nodes[leaf]
        if node.attributes.get(PREEMPT_POLICY) == PREEMPT_LOWER_PRIORITY:
            return True
        usage, limits = self.usage, self.admit_limits
        empty: dict[str, int] = {}
        own = usage.get(leaf, empty)
        for slot in prefix[:1] if self.given.policies.get(leaf) is Policy.BLOCK else prefix:
            fits = True
            for key in slot.chain:
                caps, sums = limits[key], usage.get(key, empty)
                for resource, amount in slot.counted:
                    cap = caps.get(resource)
                    if cap is not None and sums.get(resource, 0) + amount > cap:
                        fits = False
                        break
                if not fits:
                    break
            if fits:
                return True
            within = True
            for resource, amount in slot.request:
                guaranteed = node.min.get(resource)
                if guaranteed is None:
                    if resource not in node.max:
                        continue
                    guaranteed = 0
                if own.get(resource, 0) + amount > guaranteed:
                    within = False
                    break
            if within:
                return True
        return False

    def _smallest(self, leaf: str, at: float, taken: set[int]) -> list[Slot]:
        """The first ready jobs of a queue's smallest request shapes that are not in ``taken``."""
        groups, order = self.shapes[leaf], self.shape_order[leaf]
        count, per_shape = self.limits.smallest, self.limits.per_shape
        picked: list[Slot] = []
        shapes = empty = 0
        for shape in order:
            if shapes >= count:
                break
            group = groups[shape]
            if not group:
                empty += 1
                continue
            shapes += 1
            found = 0
            for slot in group:
                if slot.ready_at <= at:
                    if id(slot) not in taken:
                        picked.append(slot)
                    found += 1
                    if found >= per_shape:
                        break
        if empty > len(order) // 2:
            order[:] = [shape for shape in order if groups[shape]]
        return picked

    def _decide(self, at: float, window: list[Slot]) -> Decisions[ReplayJob]:
        if self.between is not None:
            self.between()
        self.passes += 1
        jobs = [slot.job for slot in self.holding.values()]
        jobs.extend(slot.job for slot in window)
        given = self.given
        return decide(self.tree, jobs, given.policies, oversell_rate=given.rate, now=at, closing=given.closing,
                      loose=list(self.loose.values()), protected=given.protected,
                      reclaim_tries_per_quota=given.reclaim_tries_per_quota, report=False)

    def _admit(self, slot: Slot, at: float) -> None:
        slot.job = slot.job.with_workload(with_phase(slot.job.workload, Phase.ADMITTED, at))
        slot.status = Status.PENDING
        self._dequeue(slot)
        self.holding[slot.key] = slot
        self.use_tally.add(slot.group, 1)
        if slot.admitted is None:
            slot.admitted = at
            slot.basis = self._basis()

    def _evict(self, slot: Slot) -> None:
        """Reclaim holds the job again: it waits at its place (its run starts afresh when admitted again)."""
        if slot.status is Status.RUNNING and self.modelled:
            shift(self.running, slot.chain, slot.request, -1)
        self.use_tally.add(slot.group, -1)
        slot.generation += 1
        slot.status = Status.WAITING
        slot.job = slot.job.with_workload(with_phase(slot.job.workload, Phase.QUEUED, None))
        del self.holding[slot.key]
        self._enqueue(slot)

    def _started(self, slot: Slot, at: float) -> None:
        if slot.started is None:
            slot.started = at
            slot.basis = self._basis()
        self._run(slot, at)

    def _settle(self, at: float, ends: Sequence[tuple[float, tuple[str, ...], Amounts, Amounts]],
                floor: float) -> None:
        """Passes at ``at`` until nothing more happens then, and the pods that may run start. ``ends`` are the
        bucket's ends (time, chain, request, request with its job count); nothing is dated before ``floor``."""
        freed = Freed([(when, chain, counted) for when, chain, _, counted in ends]) if ends else None
        added: Usage = {}
        admitted: list[Slot] = []
        for _ in range(self.limits.rounds_per_time):
            window, prefixes = self._window(at)
            if not window:  # no preemptor, nothing to admit: the pass would change nothing
                break
            decisions = self._decide(at, window)
            for plan in decisions.reclaims:
                for victim in plan.victims:
                    self._evict(self.slots[victim.workload.key])
                for pod in plan.pods:
                    gone = self.loose.pop(pod.key, None)
                    if gone is not None:
                        chain = self.chains.of(gone.quota)
                        self.use_tally.add(self.use_tally.group(chain, amounts_of(gone, False)), -1)
                        if self.modelled:
                            shift(self.running, chain, amounts_of(gone, False), -1)
            for job in (*decisions.admissions, *(plan.preemptor for plan in decisions.reclaims),
                        *decisions.late_admissions):
                slot = self.slots[job.workload.key]
                when = at
                if freed is not None:
                    found = freed.earliest(slot.chain, slot.counted, self.used, added, self.admit_limits)
                    when = at if found is None else min(at, max(found, floor))
                self._admit(slot, max(when, slot.ready_at, self.now))
                admitted.append(slot)
            refill = any(
                all(slot.status is not Status.WAITING for slot in prefix)
                and any(slot.ready_at <= at for slot in self.queues.get(leaf, ()))
                for leaf, prefix in prefixes.items()
            )
            again = refill or (self.limits.repass and (decisions.reclaims or decisions.late_admissions))
            if not again:
                break
        self._start_pending(at, ends, floor, admitted)
        self._remember()

    def _start_pending(self, at: float, ends: Sequence[tuple[float, tuple[str, ...], Amounts, Amounts]],
                       floor: float, admitted: list[Slot]) -> None:
        """Start the admitted jobs whose pods may run, the handoff's start after what lets them: their admission
        when the queue does not oversell; else, in order of priority and admission, room in the pods' quota."""
        lag = self.handoff.start
        if not self.modelled:
            for slot in admitted:
                if slot.status is Status.PENDING:
                    self._started(slot, (slot.job.workload.admitted_at or at) + lag)
            return
        pending = [slot for slot in self.holding.values() if slot.status is Status.PENDING]
        if not pending:
            return
        pending.sort(key=lambda slot: (-slot.job.workload.priority, slot.job.workload.admitted_at or 0.0,
                                       slot.key.namespace, slot.key.name))
        freed = Freed([(when, chain, request) for when, chain, request, _ in ends]) if ends else None
        added: Usage = {}
        for slot in pending:
            workload = slot.job.workload
            if pod_quota_blockers(self.tree, slot.leaf, dict(slot.request), self.running, by_name=False,
                                  first=True):
                continue
            when = at
            if freed is not None:
                found = freed.earliest(slot.chain, slot.request, self.running_before, added, self.max_limits)
                when = at if found is None else min(at, max(found, floor))
            self._started(slot, max(when, workload.admitted_at or floor) + lag)

    # The clock ---------------------------------------------------------------------------------------------
    def run(self) -> ReplayResult:
        limits = self.limits
        horizon = self.now + limits.horizon
        self._settle(self.now, (), self.now)
        at = self.now
        exhausted = False
        while self.events:
            # An end that falls before the last pass (a short job admitted in it, dated back) goes into the next
            # bucket, dated as it is, instead of opening a bucket back in time.
            first = max(self.events[0][0], at)
            if self.passes >= limits.max_passes or first > horizon:
                exhausted = True
                break
            until = first + max(self.min_width, limits.eps_time * (first - self.now))
            ends: list[tuple[float, tuple[str, ...], Amounts, Amounts]] = []
            last = float("-inf")
            changed = False
            while self.events and self.events[0][0] <= until:
                when, kind, _, key, generation = heapq.heappop(self.events)
                slot = self.slots[key]
                if slot.generation != generation:
                    continue
                if kind == _FINISH:
                    if slot.status is not Status.RUNNING:
                        continue
                    ends.append((when, slot.chain, slot.request, slot.counted))
                    self._finish(slot)
                elif slot.status is not Status.WAITING:
                    continue
                last = max(last, when)
                changed = True
            if changed:
                at = max(at, last)
                self._settle(at, ends, self.now)
        holders = tuple(key for key, slot in self.holding.items() if slot.runtime.at(self.q) is None)
        empty = Basis()
        outcomes = {slot.key: Outcome(slot.admitted, slot.started, slot.basis or empty) for slot in self.tracked}
        return ReplayResult(outcomes, at, exhausted, self.passes, holders)


def replay(given: ReplayInput, limits: ReplayLimits | None = None, *, q: float = 0.5,
           unknown_ends: bool = False, between: Callable[[], None] | None = None) -> ReplayResult:
    """Replay ``given`` forward with every run time at quantile ``q`` (unknown ones never end, or end at once
    with ``unknown_ends``): when each waiting job is first admitted and first runs. ``between`` is called before
    each of the replay's passes (the controller makes it wait while a real pass runs)."""
    return _Replay(given, limits or ReplayLimits(), q, unknown_ends, between).run()

