"""The jobs of a start estimate's replay (:mod:`webhook.core.eta_replay`): where each stands, and what the replay
reads of it, taken once."""

from __future__ import annotations

from enum import Enum

from webhook.core.eta_room import both_amounts
from webhook.core.eta_types import Basis, ReplayJob
from webhook.core.runtimes import Runtime
from webhook.core.workload import Phase, Workload

__all__ = ["Slot", "SortKey", "Status", "sort_key", "with_phase"]


class Status(Enum):
    """Where a job of the replay stands."""

    WAITING = 1
    PENDING = 2
    """Admitted; its pods wait for the pods' quota."""
    RUNNING = 3
    DONE = 4
    OUT = 5
    """Never released: gave up, held for a missing PriorityClass, a closing namespace, no quota."""


SortKey = tuple[int, float, str, str, str]
"""Queue order, then kind (two kinds may share a name)."""


class Slot:
    """One job of the replay."""

    __slots__ = ("admitted", "basis", "chain", "counted", "generation", "group", "job", "key", "leaf", "ready_at",
                 "request", "runtime", "shape", "size", "sort_key", "started", "status")

    def __init__(self, job: ReplayJob, chain: tuple[str, ...], runtime: Runtime, status: Status) -> None:
        self.job = job
        workload = job.workload
        self.key = workload.key
        self.leaf = workload.quota.lower()
        self.chain = chain
        self.runtime = runtime
        self.status = status
        priority, created, namespace, name = workload.order_key
        self.sort_key: SortKey = (priority, created, namespace, name, workload.key.kind)
        self.request, self.counted = both_amounts(workload)
        self.shape = self.request
        self.size = 0.0
        self.ready_at = float("-inf")
        self.admitted: float | None = None
        """When the replay first admits it (recorded for the jobs waiting in the snapshot only)."""
        self.started: float | None = None
        """When its pods first run (the same)."""
        self.basis: Basis | None = None
        """What the last of those two rests on."""
        self.generation = 0
        self.group = 0
        """Its group in the replay's usage tally (:class:`webhook.core.eta_room.Tally`)."""


def sort_key(slot: Slot) -> SortKey:
    """The job's place in its queue (the key its queue's list is kept sorted by)."""
    return slot.sort_key


def with_phase(workload: Workload, phase: Phase, admitted_at: float | None) -> Workload:
    """The workload admitted (at ``admitted_at``) or queued again."""
    return Workload(key=workload.key, quota=workload.quota, pod_sets=workload.pod_sets, priority=workload.priority,
                    created=workload.created, uid=workload.uid, phase=phase, admitted_at=admitted_at,
                    request=workload.request)
