"""When will a waiting job start: the snapshot replayed forward through the controller's own pass (docs/eta.md).

:func:`estimate` runs :func:`webhook.core.eta_replay.replay` with every run time at its median, unknown ones
never ending: the estimated start. The latest start is the wait scaled by how much longer the jobs that end
before it run at their p90 than at their median (:attr:`~webhook.core.eta_replay.Basis.spread`). When some run
time is unknown the replay runs again with those ending at once: a job whose start moves between the two rests
on unknown run times and gets no estimate; when some of those jobs have a deadline, a replay at the p90 run
times (deadlines as ends, unknown ones never ending) still gives it a latest start. Each estimate says what it
rests on (:class:`~webhook.core.eta_replay.Basis`) or why there is none.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from webhook.core.decisions import QueueJob
from webhook.core.eta_replay import Basis, Outcome, ReplayInput, ReplayLimits, replay
from webhook.core.fit import check_fit
from webhook.core.handoff import NO_HANDOFF, Handoff
from webhook.core.resources import Resources
from webhook.core.runtimes import P50, P90, UNKNOWN, Runtime
from webhook.core.startup import BackoffState
from webhook.core.workload import Phase, WorkloadKey

__all__ = ["Estimate", "Estimates", "Why", "estimate", "worth_publishing"]

SHIFT_TOLERANCE = 60.0
"""Seconds a start may move, when unknown run times end at once instead of never, and not count as resting on
them (besides :data:`SHIFT_SHARE` of the wait)."""
SHIFT_SHARE = 0.1
PUBLISHED_SECONDS = 10.0
PUBLISHED_SHARE = 0.05
"""A published estimate is worth rewriting when a new one is more than this many seconds, and this share of the
wait ahead, away from it (:func:`worth_publishing`)."""


class Why(Enum):
    """Why a waiting job has no estimated start."""

    NONE = ""
    UNKNOWN_RUNTIMES = "unknown-runtimes"
    """It waits for jobs whose run time nobody knows."""
    BEYOND = "beyond-horizon"
    """Not within the replay's horizon (or its budget of passes)."""
    NEVER_FITS = "never-fits"
    """Its request alone is over a limit of its quota."""
    GAVE_UP = "gave-up"
    HELD = "held"
    """Its PriorityClass does not exist."""
    CLOSING = "namespace-closing"
    NO_QUOTA = "no-quota"
    NOT_STARTED = "not-started"
    """The replay never starts it, for none of the reasons above (its pods' quota cannot ever hold it, ...)."""


@dataclass(frozen=True, slots=True)
class Estimate:
    """One waiting job's estimate (times in seconds since the epoch)."""

    start: float | None
    """When its pods run, at the median run times (``None``: see :attr:`why`)."""
    latest: float | None
    """The same at the p90 run times: it should not start later."""
    finish: float | None
    """``start`` plus its own median run time, when that is known."""
    finish_latest: float | None
    runtime: Runtime
    """Its own run time, as estimated."""
    basis: Basis
    why: Why = Why.NONE
    unknown_jobs: tuple[WorkloadKey, ...] = ()
    """Jobs of unknown run time it waits for (a few)."""


@dataclass(frozen=True, slots=True)
class Estimates:
    """Every waiting job's estimate, and how far the replays went."""

    now: float
    by_key: Mapping[WorkloadKey, Estimate]
    passes: int
    """Decision passes the replays made in all."""
    exhausted: bool
    """A replay stopped at its horizon or budget with events left."""
    horizon: float
    """The last virtual time the median replay reached."""
    handoff: Handoff = NO_HANDOFF
    """The control plane's time the replays added to each turn."""


def _blocked(job: QueueJob, given: ReplayInput, never: dict[tuple[str, Resources], bool]) -> Why:
    """Why a waiting job can never be released whatever the replay does (``Why.NONE``: it can be). ``never``
    keeps, per quota and request, whether the request alone is over a limit (many jobs share a shape)."""
    workload = job.workload
    if job.backoff_state(given.now) is BackoffState.GAVE_UP:
        return Why.GAVE_UP
    if job.missing_class is not None:
        return Why.HELD
    if workload.key.namespace in given.closing:
        return Why.CLOSING
    if workload.quota.lower() not in given.tree.nodes:
        return Why.NO_QUOTA
    shape = (workload.quota.lower(), workload.request)
    over = never.get(shape)
    if over is None:
        over = never[shape] = any(blocker.never_fits
                                  for blocker in check_fit(given.tree, {}, workload, given.rate).blockers)
    if over:
        return Why.NEVER_FITS
    return Why.NONE


def _rests_on_unknown(now: float, median: float | None, unblocked: float | None) -> bool:
    """Whether a start moves when unknown run times end at once (``unblocked``) instead of never (``median``)."""
    if unblocked is None:
        return False
    if median is None:
        return True
    return median - unblocked > max(SHIFT_TOLERANCE, SHIFT_SHARE * (unblocked - now))


def _nearest(given: ReplayInput, quota: str, keys: Sequence[WorkloadKey], quotas: Mapping[WorkloadKey, str],
             count: int = 3) -> tuple[WorkloadKey, ...]:
    """The ``count`` of ``keys`` whose quota is nearest ``quota`` in the tree (the same leaf first, then the
    lowest common ancestor), to name the jobs of unknown run time a job waits for."""
    chain = [node.key for node in given.tree.chain(quota)]
    depth: dict[str, int] = {}  # per quota of a key: how far up ``chain`` it meets it

    def meets(theirs: str) -> int:
        found = depth.get(theirs)
        if found is None:
            keys = {node.key for node in given.tree.chain(theirs)}
            found = depth[theirs] = next((index for index, node in enumerate(chain) if node in keys), len(chain))
        return found

    def distance(key: WorkloadKey) -> tuple[int, str]:
        return meets(quotas.get(key, "")), str(key)

    return tuple(sorted(keys, key=distance)[:count])


def estimate(given: ReplayInput, limits: ReplayLimits | None = None, *,
             between: Callable[[], None] | None = None) -> Estimates:
    """Estimates for every job waiting in ``given`` (see the module); ``between`` is called before every pass of
    the replays (:func:`~webhook.core.eta_replay.replay`)."""
    median = replay(given, limits, q=P50, between=between)
    runtimes = [given.runtimes.get(job.workload.key, UNKNOWN) for job in given.jobs
                if job.workload.phase is not Phase.FINISHED]
    unknown = any(runtime.p50 is None for runtime in runtimes)
    free = replay(given, limits, q=P50, unknown_ends=True, between=between) if unknown else None
    bounded = unknown and any(runtime.p50 is None and runtime.p90 is not None for runtime in runtimes)
    late = replay(given, limits, q=P90, between=between) if bounded else None
    now = given.now
    holders = {job.workload.key: job.workload.quota for job in given.jobs}
    out: dict[WorkloadKey, Estimate] = {}
    never: dict[tuple[str, Resources], bool] = {}
    nearest: dict[str, tuple[WorkloadKey, ...]] = {}  # per quota: the same for every job of it
    for job in given.jobs:
        key = job.workload.key
        first = median.outcomes.get(key)
        if first is None:
            continue
        runtime = given.runtimes.get(key, UNKNOWN)
        blocked = _blocked(job, given, never)
        if blocked is not Why.NONE:
            out[key] = Estimate(None, None, None, None, runtime, Basis(), blocked)
            continue
        start, latest = first.started, None
        basis = first.basis
        why = Why.NONE
        waits_for: tuple[WorkloadKey, ...] = ()
        if free is not None and _rests_on_unknown(now, start, free.outcomes.get(key, Outcome()).started):
            start = None
            why = Why.UNKNOWN_RUNTIMES
            if job.workload.quota not in nearest:
                nearest[job.workload.quota] = _nearest(given, job.workload.quota, median.unknown_holders, holders)
            waits_for = nearest[job.workload.quota]
            if late is not None:  # the deadlines of the jobs it waits for bound it
                bound = late.outcomes.get(key, Outcome())
                latest, basis = bound.started, bound.basis
        elif start is None:
            why = Why.BEYOND if median.exhausted else Why.NOT_STARTED
        else:
            latest = now + (start - now) * max(1.0, basis.spread)
        p50, p90 = runtime.at(P50), runtime.at(P90)
        out[key] = Estimate(
            start=start,
            latest=latest,
            finish=start + p50 if start is not None and p50 is not None else None,
            finish_latest=latest + p90 if latest is not None and p90 is not None else None,
            runtime=runtime,
            basis=basis,
            why=why,
            unknown_jobs=waits_for,
        )
    passes = median.passes + sum(result.passes for result in (free, late) if result is not None)
    return Estimates(now, out, passes, median.exhausted, median.end, given.handoff)


def worth_publishing(published: float | None, fresh: float | None, now: float) -> bool:
    """Whether a fresh estimated start (seconds since the epoch; ``None``: none) has moved far enough from the
    published one to rewrite a Queue's status for it alone: more than :data:`PUBLISHED_SECONDS` and
    :data:`PUBLISHED_SHARE` of the wait ahead, or to or from none."""
    if published is None or fresh is None:
        return published is not fresh
    return abs(fresh - published) > max(PUBLISHED_SECONDS, PUBLISHED_SHARE * max(0.0, fresh - now))
