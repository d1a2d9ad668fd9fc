"""A kind-agnostic view of a job: pod sets, request, priority, identity and quota.

Adapters in ``webhook.workloads`` turn each job kind into a :class:`Workload`; everything in the core
decides over this view only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from webhook.core.quantity import NANO
from webhook.core.resources import EMPTY, MAX_JOBS, Resources


class WorkloadError(ValueError):
    """A job whose pod sets cannot be read (bad quantity, negative count...): names where and why."""


@dataclass(frozen=True, slots=True)
class WorkloadKey:
    """Identity of a job: ``kind/namespace/name``."""

    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class PodSet:
    """``count`` pods, each requesting ``per_pod``."""

    name: str
    count: int
    per_pod: Resources

    @property
    def total(self) -> Resources:
        """What the pod set requests in all."""
        return self.per_pod * self.count


class Phase(Enum):
    """Where a job stands from the queue's point of view."""

    QUEUED = "Queued"
    ADMITTED = "Admitted"
    FINISHED = "Finished"


@dataclass(frozen=True, slots=True)
class Workload:
    """One job as the decision core sees it.

    ``created`` and ``admitted_at`` are seconds since the epoch (from the object, never a clock read in the
    core). ``quota`` is the leaf quota's name. ``request`` is precomputed from the pod sets.
    """

    key: WorkloadKey
    quota: str
    pod_sets: tuple[PodSet, ...]
    priority: int = 0
    created: float = 0.0
    uid: str = ""
    phase: Phase = Phase.QUEUED
    admitted_at: float | None = None
    request: Resources = field(default=EMPTY, compare=False)

    def __post_init__(self) -> None:
        if self.request is EMPTY and self.pod_sets:
            req = EMPTY
            for pod_set in self.pod_sets:
                req = req + pod_set.total
            object.__setattr__(self, "request", req)

    @property
    def request_with_count(self) -> Resources:
        """The request plus one ``kube-queue/max-jobs`` (the job itself counts against job caps)."""
        return self.request + {MAX_JOBS: NANO}

    @property
    def order_key(self) -> tuple[int, float, str, str]:
        """Dequeue order inside a quota: priority descending, then creation time, then name."""
        return (-self.priority, self.created, self.key.namespace, self.key.name)
