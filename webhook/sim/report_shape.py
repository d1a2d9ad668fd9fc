"""The shape of ``kq simulate -o json``: what a run reports, field by field (webhook/sim/README.md)."""

from __future__ import annotations

from typing import NotRequired, TypedDict


class WaitStats(TypedDict):
    """Waits in seconds; ``None`` figures when no job waited."""

    count: int
    mean: float | None
    p50: float | None
    p95: float | None
    max: float | None


class ResourceFigures(TypedDict):
    """One resource of one quota, in whole units (cores, bytes); means over the run's virtual time."""

    min: float
    max: float | None
    used_mean: float | None
    used_peak: float
    running_mean: float | None
    min_utilisation: float | None
    max_utilisation: float | None
    borrowed_mean: float | None
    borrowed_peak: float


class QuotaReport(TypedDict):
    """One quota of the tree, with the jobs of the leaves under it."""

    quota: str
    leaf: bool
    policy: str | None
    submitted: int
    admissions: int
    evictions: int
    finished: int
    running: int
    pending: int
    waiting: int
    backoff: int
    failed_starts: int
    wait: WaitStats
    never_admitted: int
    waiting_longest: float | None
    resources: dict[str, ResourceFigures]


class JobReport(TypedDict):
    """One job at the end of the run (``position`` and ``reason`` while it waits)."""

    job: str
    kind: str
    namespace: str
    name: str
    quota: str
    priority: int
    request: dict[str, str]
    state: str
    position: int | None
    reason: str | None
    submitted: float
    admitted: float | None
    started: float | None
    finished: float | None
    wait: float | None
    admissions: int
    evictions: int
    failed_starts: int
    labels: dict[str, str]


class TimelineEntry(TypedDict):
    """One decision of the timeline, ``time`` in seconds."""

    time: float
    job: str
    quota: str
    decision: str
    reason: str


class RunSettings(TypedDict):
    oversellrate: float
    strictPriority: bool
    nodes: int
    until: float | None


class Report(TypedDict):
    """A whole run: ``jobs`` unless left out, ``timeline`` when asked for."""

    scenario: str
    settings: RunSettings
    end: float
    submitted: int
    events: int
    passes: int
    checks: int
    quotas: dict[str, QuotaReport]
    jobs: NotRequired[list[JobReport]]
    timeline: NotRequired[list[TimelineEntry]]


class Outcome(TypedDict):
    """A job's comparable outcome: ``state`` is ``admitted``, ``queued`` or ``finished``."""

    state: str
    position: int | None
    evicted: bool
