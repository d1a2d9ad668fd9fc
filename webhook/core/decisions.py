"""What one decision pass of the queue says (:func:`webhook.core.decide.decide`), and the jobs it takes.

The pass takes any job type that satisfies :class:`QueueJob`: the live controller passes its view of a
cluster object (``webhook.controller.model.TrackedJob``), the simulator a :class:`PlainJob`. The
:class:`Decisions` hand back the very jobs passed in (or a copy held again, for the ones evicted), so each
caller maps a decision back to its own object without a lookup.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Generic, Protocol, Self, TypeVar

from webhook.core.fit import FitResult
from webhook.core.ledger import Ledger
from webhook.core.queue_views import LazyReasons
from webhook.core.queueing import Policy
from webhook.core.startup import BackoffNote, BackoffState, backoff_state
from webhook.core.workload import Workload, WorkloadKey

__all__ = ["Decisions", "J", "PlainJob", "QueueJob", "Reclaim", "reason_key"]


class QueueJob(Protocol):
    """What the pass reads of a job besides its :class:`Workload`."""

    @property
    def workload(self) -> Workload: ...

    @property
    def record(self) -> object | None:
        """The job's admission record, if it carries one (a held job carrying one has a stale record)."""

    @property
    def backoff(self) -> BackoffNote | None:
        """The note of a job that failed to start in time (docs/start-timeout.md)."""

    @property
    def missing_class(self) -> str | None:
        """The PriorityClass the job names when no such class exists (it is not released then)."""

    @property
    def evictable(self) -> bool:
        """Whether the job can be held again once released."""

    def backoff_state(self, now: float) -> BackoffState:
        """Where the job stands with its backoff note at ``now``."""

    def with_workload(self, workload: Workload) -> Self:
        """The same job with ``workload`` (the pass holds evicted jobs again this way)."""


J = TypeVar("J", bound=QueueJob)


@dataclass(frozen=True, slots=True)
class PlainJob:
    """A job that is only its workload: no admission record, no backoff note, an existing PriorityClass, and
    evictable (the simulator's jobs; backoff is the simulator's own clock there)."""

    workload: Workload
    evictable: bool = True
    record: None = None
    backoff: None = None
    missing_class: None = None

    def backoff_state(self, now: float) -> BackoffState:
        return backoff_state(None, "", now)

    def with_workload(self, workload: Workload) -> PlainJob:
        return dataclasses.replace(self, workload=workload)


@dataclass(frozen=True, slots=True)
class Reclaim(Generic[J]):
    """Evict ``victims`` and ``pods`` and admit ``preemptor`` as one step."""

    preemptor: J
    victims: tuple[J, ...]
    """Jobs to hold again: they wait at their place in their queue."""
    reason: str
    pods: tuple[Workload, ...] = ()
    """Loose pods to evict through the Eviction API (:mod:`webhook.core.loose`): they do not come back to
    a queue; their controller, if any, creates a replacement."""


@dataclass(frozen=True, slots=True)
class Decisions(Generic[J]):
    """The outcome of one pass."""

    admissions: tuple[J, ...]
    """Jobs the first pass releases, in admission order (each safe to write on its own)."""
    reclaims: tuple[Reclaim[J], ...]
    """Evictions with their preemptor, to carry out after :attr:`admissions`, in order (a plan may count on
    what the plans before it freed). A plan without victims only held back jobs that :attr:`admissions`
    leaves out."""
    late_admissions: tuple[J, ...]
    """Jobs released with room the reclaims left over (they keep their quota within ``min``, or their plan's
    victims turned out to fit too and keep running): only once every reclaim's evictions are done."""
    positions: Mapping[WorkloadKey, int]
    """1-based place of every still-waiting job in its quota's order."""
    reasons: Mapping[WorkloadKey, FitResult]
    """Why each still-waiting job waits."""
    waiting: tuple[J, ...]
    """Still-waiting jobs, in quota order then position."""
    stale_records: tuple[J, ...]
    """Held jobs that still carry an admission record."""
    ledger: Ledger
    """Usage once every decision is carried out (for the tree's status)."""
    policies: Mapping[str, Policy]
    checks: int = 0
    backoff: tuple[J, ...] = ()
    """Held jobs that failed to start and wait for their retry time (or gave up): not admitted, listed in
    their Queue's ``backoff`` (docs/start-timeout.md)."""
    held: tuple[J, ...] = ()
    """Held jobs that may not be released whatever the quota says: their PriorityClass does not exist."""
    reclaimable_at: float | None = None
    """When the first admitted job kept from reclaim by its quota's minimum run time may be taken (seconds
    since the epoch): a pass is due then (docs/reclaim.md, "A minimum run time")."""

    def forget_reasons(self) -> None:
        """Drop what reading every reason built (:meth:`webhook.core.queue_views.LazyReasons.forget`), once the
        pass's events are written: a kept pass then holds its queues only."""
        if isinstance(self.reasons, LazyReasons):
            self.reasons.forget()


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
