"""The virtual clock: submissions and completions drive the live controller's decision code.

The clock jumps from event to event (a submission, a completion). At each event time every event of that
time is applied first, then the queue decides exactly as the live controller's reconcile pass does — the
:class:`CorePath` runs the core's own pass (:func:`webhook.core.decide.decide`, the one the controller runs;
the simulator never re-implements a decision) — and its decisions are carried out:

* **admit**: the job leaves its queue and counts in its quota's ``used`` (the ledger, as ``eqtree
  status.used``); it starts when its pods can run (:mod:`webhook.sim.nodes`), and finishes ``run-for``
  after it started;
* **evict** (reclaim): the victim's pods stop, it is held again and returns to its queue at its original
  place (its priority and creation time are unchanged); when admitted again it runs its whole ``run-for``
  again (suspending a Job deletes its pods);
* a pass with reclaims or late admissions is followed by another pass at the same time, as the controller's
  watch triggers one after its writes (room a reclaim left over goes to the next pass); a pass with neither
  leaves nothing another pass would change.

Nothing here reads a clock or does I/O; a run is a pure function of the scenario and the decision path.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from fractions import Fraction

from webhook.api.objects import Obj
from webhook.core.decide import decide, leaf_policies
from webhook.core.decisions import Decisions, PlainJob
from webhook.core.fit import FitResult
from webhook.core.queueing import Policy
from webhook.core.quota import QuotaNode, QuotaTree
from webhook.core.workload import Phase, Workload, WorkloadKey
from webhook.kube.collector import collector_paused
from webhook.sim.meter import UsageMeter
from webhook.sim.model import MICROS, Scenario
from webhook.sim.nodes import NodePool, Placement, pod_quota_blocker
from webhook.workloads.base import Adapter

MAX_ROUNDS_PER_EVENT = 1000
"""Decision passes at one virtual time at most (each pass after the first follows a pass that reclaimed)."""


class State(Enum):
    """Where a simulated job stands."""

    QUEUED = "Queued"
    """Held in its quota's queue."""
    PENDING = "Pending"
    """Admitted, but its pods cannot all run yet (pod-level quota or node capacity)."""
    RUNNING = "Running"
    BACKOFF = "Backoff"
    """Released but did not start within the start timeout: held again until its retry time (or gave up)."""
    FINISHED = "Finished"


@dataclass(slots=True, eq=False)
class SimJob:
    """One submitted job and what happened to it (times in microseconds of virtual time)."""

    index: int
    adapter: Adapter
    obj: Obj
    leaf: QuotaNode
    workload: Workload
    """The job as the decision code sees it now (its phase follows the state)."""
    submitted: int
    run_for: int | None
    state: State = State.QUEUED
    first_admitted: int | None = None
    admitted: int | None = None
    started: int | None = None
    finished: int | None = None
    admissions: int = 0
    evictions: int = 0
    generation: int = 0
    """Bumped on every eviction, so a stale completion event is ignored."""
    placement: Placement | None = None
    pending_reason: str = ""
    never_starts: bool = False
    """Its pods never run (the scenario says so): the start timeout holds it again."""
    failed_starts: int = 0
    handle: object = None
    """The decision path's own view of the job, cached until :attr:`workload` changes (``None`` then)."""

    @property
    def key(self) -> WorkloadKey:
        return self.workload.key

    @property
    def wait(self) -> int | None:
        """Time from submission to the first admission (``None`` if never admitted)."""
        return None if self.first_admitted is None else self.first_admitted - self.submitted


class CorePath:
    """The decision code, as the simulator calls it: each leaf's policy from the scenario's Queues
    (:func:`leaf_policies`), then the core's :func:`decide`, as the live controller runs them (a test may
    subclass it to stand in its own)."""

    def __init__(self, reclaim_tries_per_quota: int = 16) -> None:
        self.reclaim_tries_per_quota = reclaim_tries_per_quota

    def workload(
        self, adapter: Adapter, obj: Obj, leaf: QuotaNode, priority_classes: Mapping[str, int]
    ) -> Workload:
        return adapter.to_workload(obj, leaf.name, priority_classes)

    @staticmethod
    def _job(job: SimJob) -> PlainJob:
        handle = job.handle
        if isinstance(handle, PlainJob) and handle.workload is job.workload:
            return handle
        # An admitted job carries its admission record in the cluster; the record only matters to the
        # controller for jobs held again while still carrying one (never the case here).
        plain = job.handle = PlainJob(job.workload)
        return plain

    def decide(
        self,
        tree: QuotaTree,
        jobs: Sequence[SimJob],
        queues: Mapping[str, Obj],
        *,
        oversell_rate: Fraction,
        strict_priority: bool,
    ) -> Decisions[PlainJob]:
        with collector_paused():  # as the controller runs its pass
            return decide(
                tree,
                [self._job(job) for job in jobs],
                leaf_policies(tree, queues, strict_priority),
                oversell_rate=oversell_rate,
                reclaim_tries_per_quota=self.reclaim_tries_per_quota,
            )


@dataclass(frozen=True, slots=True)
class Entry:
    """One line of the timeline."""

    time: int
    job: str
    quota: str
    decision: str
    """``queue``, ``admit``, ``evict``, ``pending``, ``start`` or ``finish``."""
    reason: str


@dataclass(slots=True)
class SimResult:
    """Everything a run produced; :mod:`webhook.sim.report` turns it into tables and JSON."""

    scenario: Scenario
    jobs: list[SimJob]
    """Every submitted job, in submission order."""
    timeline: list[Entry]
    meter: UsageMeter
    end: int
    """The virtual time the run ended (microseconds)."""
    positions: Mapping[WorkloadKey, int]
    """Final position of every still-waiting job."""
    reasons: Mapping[WorkloadKey, FitResult]
    """Final reason of every still-waiting job."""
    policies: Mapping[str, Policy]
    passes: int = 0
    checks: int = 0
    events: int = 0


_FINISH, _SUBMIT, _TIMEOUT, _RETRY = 0, 1, 2, 3


def seconds(micros: int) -> float:
    return micros / MICROS


class Simulator:
    """One run of a scenario: ``Simulator(scenario, path).run()``.

    ``record_timeline=False`` skips the timeline (and the "why" of each queued job), for large replays.
    """

    def __init__(self, scenario: Scenario, path: CorePath | None = None, *, record_timeline: bool = True) -> None:
        self.scenario = scenario
        self.path = CorePath() if path is None else path
        self.tree = scenario.tree
        self.record = record_timeline
        self.meter = UsageMeter(scenario.tree)
        self.pool = NodePool(scenario.nodes)
        self.jobs: list[SimJob | None] = [None] * len(scenario.submissions)
        self.by_key: dict[WorkloadKey, SimJob] = {}
        self.active: dict[int, SimJob] = {}
        """Unfinished jobs, by index (what the controller's caches would hold)."""
        self.pending: dict[int, SimJob] = {}
        self.timeline: list[Entry] = []
        self.heap: list[tuple[int, int, int, int, int]] = []
        self.sequence = 0
        self.passes = 0
        self.checks = 0
        self.events = 0
        self.positions: Mapping[WorkloadKey, int] = {}
        self.reasons: Mapping[WorkloadKey, FitResult] = {}
        self.policies: Mapping[str, Policy] = {}
        self._queued_now: list[SimJob] = []

    # Events ------------------------------------------------------------------------------------------------
    def _push(self, at: int, kind: int, index: int, generation: int = 0) -> None:
        self.sequence += 1
        heapq.heappush(self.heap, (at, kind, self.sequence, index, generation))

    def _log(self, at: int, job: SimJob, decision: str, reason: str) -> None:
        if self.record:
            self.timeline.append(Entry(at, str(job.key), job.leaf.full_name, decision, reason))

    def run(self) -> SimResult:
        """Run until no event is left (or the scenario's ``until``)."""
        for index, submission in enumerate(self.scenario.submissions):
            self._push(submission.at, _SUBMIT, index)
        until = self.scenario.until
        last = 0
        while self.heap:
            at = self.heap[0][0]
            if until is not None and at > until:
                break
            self.meter.advance(at)
            changed = False
            while self.heap and self.heap[0][0] == at:
                _, kind, _, index, generation = heapq.heappop(self.heap)
                if kind == _SUBMIT:
                    self._submit(index, at)
                    changed = True
                elif kind == _TIMEOUT:
                    changed = self._start_timed_out(index, generation, at) or changed
                elif kind == _RETRY:
                    changed = self._retry(index, generation, at) or changed
                else:
                    changed = self._finish(index, generation, at) or changed
            if changed:
                self.events += 1
                self._settle(at)
            last = at
        end = until if until is not None else last
        self.meter.advance(end)
        return SimResult(
            scenario=self.scenario,
            jobs=[job for job in self.jobs if job is not None],
            timeline=self.timeline,
            meter=self.meter,
            end=end,
            positions=self.positions,
            reasons=self.reasons,
            policies=self.policies,
            passes=self.passes,
            checks=self.checks,
            events=self.events,
        )

    def _submit(self, index: int, at: int) -> None:
        submission = self.scenario.submissions[index]
        leaf = self.tree.nodes[submission.leaf]
        workload = self.path.workload(submission.adapter, submission.obj, leaf, self.scenario.priority_classes)
        workload = dataclasses.replace(
            workload, created=seconds(at), uid=f"sim-{index}", phase=Phase.QUEUED, admitted_at=None
        )
        job = SimJob(index=index, adapter=submission.adapter, obj=submission.obj, leaf=leaf, workload=workload,
                     submitted=at, run_for=submission.run_for, never_starts=submission.never_starts)
        self.jobs[index] = job
        self.by_key[workload.key] = job
        self.active[index] = job
        self._queued_now.append(job)

    def _finish(self, index: int, generation: int, at: int) -> bool:
        job = self.jobs[index]
        if job is None or job.generation != generation or job.state is not State.RUNNING:
            return False
        self._stop(job)
        self.meter.admit(job.workload, -1)
        job.workload = dataclasses.replace(job.workload, phase=Phase.FINISHED)
        job.handle = None
        job.state = State.FINISHED
        job.finished = at
        del self.active[index]
        self._log(at, job, "finish", f"ran {seconds(at - (job.started or at)):g}s")
        return True

    # Decisions ---------------------------------------------------------------------------------------------
    def _settle(self, at: int) -> None:
        verdict: Decisions[PlainJob] | None = None
        by_key = self.by_key
        for _ in range(MAX_ROUNDS_PER_EVENT):
            verdict = self.path.decide(
                self.tree,
                list(self.active.values()),
                self.scenario.queues,
                oversell_rate=self.scenario.oversell_rate,
                strict_priority=self.scenario.strict_priority,
            )
            self.passes += 1
            self.checks += verdict.checks
            for admitted in verdict.admissions:
                self._admit(by_key[admitted.workload.key], at, "fits its quota at every level")
            for step in verdict.reclaims:
                preemptor = step.preemptor.workload.key
                for victim in step.victims:
                    self._evict(by_key[victim.workload.key], at, f"{step.reason}; for {preemptor}")
                self._admit(by_key[preemptor], at, f"reclaim: {step.reason}")
            for late in verdict.late_admissions:
                self._admit(by_key[late.workload.key], at, "fits after the reclaim")
            if not verdict.reclaims and not verdict.late_admissions:
                break
        self._start_pending(at)
        self.meter.sample()
        if verdict is not None:
            self.positions = verdict.positions
            self.reasons = verdict.reasons
            self.policies = verdict.policies
        queued, self._queued_now = self._queued_now, []
        if self.record:
            for job in queued:
                if job.state is State.QUEUED:
                    position = self.positions.get(job.key, 0)
                    reason = self.reasons.get(job.key)
                    why = reason.explain() if reason is not None else "waiting"
                    self._log(at, job, "queue", f"position {position}: {why}")

    def _admit(self, job: SimJob, at: int, reason: str) -> None:
        job.workload = dataclasses.replace(job.workload, phase=Phase.ADMITTED, admitted_at=seconds(at))
        job.handle = None
        job.state = State.PENDING
        job.admitted = at
        job.admissions += 1
        if job.first_admitted is None:
            job.first_admitted = at
        job.pending_reason = ""
        self.meter.admit(job.workload)
        self.pending[job.index] = job
        self._log(at, job, "admit", reason)
        if job.never_starts and self.scenario.start_timeout > 0:
            self._push(at + self.scenario.start_timeout, _TIMEOUT, job.index, job.generation)

    def _start_timed_out(self, index: int, generation: int, at: int) -> bool:
        """A released job still not running at its start deadline is held again and waits for its retry."""
        job = self.jobs[index]
        if job is None or job.generation != generation or job.state is not State.PENDING:
            return False
        self.pending.pop(index, None)
        self.meter.admit(job.workload, -1)
        job.workload = dataclasses.replace(job.workload, phase=Phase.QUEUED, admitted_at=None)
        job.handle = None
        job.state = State.BACKOFF
        job.admitted = None
        job.generation += 1
        job.failed_starts += 1
        del self.active[index]
        policy = self.scenario.backoff
        timeout = seconds(self.scenario.start_timeout)
        if policy.limit and job.failed_starts >= policy.limit:
            self._log(at, job, "backoff", f"did not start within {timeout:g}s; gave up after {job.failed_starts}")
            return True
        delay = int(policy.delay(job.failed_starts) * MICROS)
        self._push(at + delay, _RETRY, index, job.generation)
        self._log(at, job, "backoff", f"did not start within {timeout:g}s (attempt {job.failed_starts}); "
                  f"retries in {seconds(delay):g}s, its quota goes to the jobs behind it")
        return True

    def _retry(self, index: int, generation: int, at: int) -> bool:
        job = self.jobs[index]
        if job is None or job.generation != generation or job.state is not State.BACKOFF:
            return False
        job.state = State.QUEUED
        self.active[index] = job
        self._queued_now.append(job)
        self._log(at, job, "retry", "back in its queue at its original place")
        return True

    def _evict(self, job: SimJob, at: int, reason: str) -> None:
        self._stop(job)
        self.pending.pop(job.index, None)
        self.meter.admit(job.workload, -1)
        job.workload = dataclasses.replace(job.workload, phase=Phase.QUEUED, admitted_at=None)
        job.handle = None
        job.state = State.QUEUED
        job.admitted = None
        job.started = None
        job.evictions += 1
        job.generation += 1
        self._queued_now.append(job)
        self._log(at, job, "evict", reason)

    def _stop(self, job: SimJob) -> None:
        if job.state is not State.RUNNING:
            return
        if job.placement is not None:
            self.pool.release(job.placement)
            job.placement = None
        self.meter.run(job.workload, -1)

    def _start_pending(self, at: int) -> None:
        if not self.pending:
            return
        order = sorted(
            self.pending.values(),
            key=lambda job: (-job.workload.priority, job.admitted or 0, job.key.namespace, job.key.name),
        )
        for job in order:
            if job.never_starts:
                if not job.pending_reason:
                    job.pending_reason = "its pods never start (the scenario says so)"
                    self._log(at, job, "pending", job.pending_reason)
                continue
            blocker = pod_quota_blocker(self.tree, self.meter.running, job.workload)
            placement: Placement | None = None
            if blocker is None and self.pool.modelled:
                placed = self.pool.place(job.workload)
                if isinstance(placed, str):
                    blocker = placed
                else:
                    placement = placed
            if blocker is not None:
                if job.pending_reason != blocker:
                    job.pending_reason = blocker
                    self._log(at, job, "pending", blocker)
                continue
            was_pending = bool(job.pending_reason)
            job.placement = placement
            job.state = State.RUNNING
            job.started = at
            job.pending_reason = ""
            del self.pending[job.index]
            self.meter.run(job.workload)
            if was_pending:
                self._log(at, job, "start", f"pods placed after {seconds(at - (job.admitted or at)):g}s pending")
            if job.run_for is not None:
                self._push(at + job.run_for, _FINISH, job.index, job.generation)


def simulate(scenario: Scenario, path: CorePath | None = None, *, record_timeline: bool = True) -> SimResult:
    """Run ``scenario`` with the decision ``path`` (the core's, :class:`CorePath`, unless given; see
    :class:`Simulator`)."""
    return Simulator(scenario, path, record_timeline=record_timeline).run()
