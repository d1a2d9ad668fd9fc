"""What the start estimate's replay (:mod:`webhook.core.eta_replay`) takes and gives: the snapshot and what is
known of each job's run time (:class:`ReplayInput`), how far and how finely it goes (:class:`ReplayLimits`), and
when each waiting job is first admitted and first runs, with what that rests on (:class:`ReplayResult`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from webhook.core.decide import RECLAIM_TRIES_PER_QUOTA
from webhook.core.decisions import QueueJob
from webhook.core.handoff import NO_HANDOFF, Handoff
from webhook.core.queueing import Policy
from webhook.core.quota import QuotaTree
from webhook.core.runtimes import Runtime
from webhook.core.startup import BackoffNote, BackoffState
from webhook.core.workload import Workload, WorkloadKey

__all__ = ["Basis", "Outcome", "ReplayInput", "ReplayJob", "ReplayLimits", "ReplayResult"]


@dataclass(frozen=True, slots=True)
class ReplayJob:
    """A job as the replay hands it to :func:`decide`: its workload now, and the original job for its backoff
    note (read at the replay's virtual time)."""

    workload: Workload
    source: QueueJob
    evictable: bool = True
    missing_class: str | None = None
    record: None = None

    @property
    def backoff(self) -> BackoffNote | None:
        return self.source.backoff

    def backoff_state(self, now: float) -> BackoffState:
        return self.source.backoff_state(now)

    def with_workload(self, workload: Workload) -> ReplayJob:
        return ReplayJob(workload, self.source, self.evictable, self.missing_class)


@dataclass(frozen=True, slots=True)
class ReplayInput:
    """What the controller's next pass would see, and what is known of each job's run time."""

    tree: QuotaTree
    jobs: Sequence[QueueJob]
    policies: Mapping[str, Policy]
    rate: Fraction
    now: float
    runtimes: Mapping[WorkloadKey, Runtime]
    """Per job: its expected run time (absent: unknown)."""
    running_since: Mapping[WorkloadKey, float] = field(default_factory=dict)
    """Admitted jobs whose pods run, and since when (absent: its pods do not run yet). With an oversell rate of 1
    an admitted job absent here counts as running since its admission."""
    loose: Sequence[Workload] = ()
    """Pods no job accounts for: they keep running (unless reclaim evicts them)."""
    protected: Mapping[WorkloadKey, str] | None = None
    closing: frozenset[str] = frozenset()
    reclaim_tries_per_quota: int = RECLAIM_TRIES_PER_QUOTA
    handoff: Handoff = NO_HANDOFF
    """The control plane's time in each turn of a job (:mod:`webhook.core.handoff`; none in the simulator)."""


@dataclass(frozen=True, slots=True)
class ReplayLimits:
    """How far and how finely a replay goes (see the module)."""

    max_passes: int = 300
    horizon: float = 30 * 86400.0
    """Seconds ahead of ``now``; a job not started by then is beyond the estimate."""
    window: int = 16
    smallest: int = 4
    per_shape: int = 2
    eps_time: float = 0.35
    """A bucket spans this share of the time ahead (at least ``min_width`` seconds; see ``short_share``). At 0.5
    the p90 error was a tenth higher on the dev cluster's traces and the oversell trace; 0.25 took 7 more passes
    at 10,000 waiting jobs, 0.35 none (``bench/eta_bench.py``)."""
    min_width: float = 1.0
    short_share: float = 0.25
    """A bucket spans at least this share of the shortest known run time of the snapshot's jobs, up to
    ``short_cap`` seconds: no job can run twice in it (a minute on jobs of 12 to 60 s doubled the p90 error on
    the dev cluster), and jobs of minutes to hours need fewer passes (six in the first half hour)."""
    short_cap: float = 60.0
    rounds_per_time: int = 50
    repass: bool = False
    """Another pass at the same time after one that reclaimed, as the controller's own writes trigger one (off:
    the room the reclaims left over is handed out at the next bucket; it cost passes, not accuracy, in
    ``bench/eta_bench.py``'s traces)."""


@dataclass(frozen=True, slots=True)
class Basis:
    """What a start rests on: the jobs the replay saw end before it, by where their run time came from."""

    finished: int = 0
    declared: int = 0
    history: int = 0
    deadline: int = 0
    """Jobs whose run time was bounded by their deadline only."""
    samples: int = 0
    """Completed jobs behind the history figures used (distinct)."""
    spread: float = 1.0
    """Of those jobs' run times, the sum of their p90 over the sum of their p50 (how much later things go when
    every run time is pessimistic)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """When a job waiting in the snapshot is first admitted and first runs in the replay (``None``: not in it)."""

    admitted: float | None = None
    started: float | None = None
    basis: Basis = Basis()


@dataclass(frozen=True, slots=True)
class ReplayResult:
    outcomes: Mapping[WorkloadKey, Outcome]
    """Every job waiting in the snapshot."""
    end: float
    """The virtual time the replay reached."""
    exhausted: bool
    """It stopped at ``max_passes`` or the horizon with events left (later starts are unknown)."""
    passes: int
    unknown_holders: tuple[WorkloadKey, ...]
    """Jobs of unknown run time that hold quota at the end (they never end in this replay)."""
