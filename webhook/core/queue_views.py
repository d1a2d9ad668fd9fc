"""Views of a pass's waiting queues that are computed when first read: each job's position and why it waits.

A pass over a million waiting jobs hands back a position and a reason for every one of them; building the key
index (and checking why each waits) costs nothing for a caller that reads none of them, and once for one that
reads them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from operator import attrgetter

from webhook.core.fit import FitResult, check_fit
from webhook.core.quota import QuotaTree
from webhook.core.resources import Resources
from webhook.core.workload import Workload, WorkloadKey

__all__ = ["LazyReasons", "QueuePositions"]


class QueuePositions(Mapping[WorkloadKey, int]):
    """1-based place of every job in its queue, from the queues in order: the key index (a million entries
    for a million waiting jobs) is built on first use, so a pass whose positions nobody reads costs nothing
    for them."""

    __slots__ = ("_index", "_queues")

    def __init__(self, queues: Iterable[Sequence[Workload]]) -> None:
        self._queues = queues
        self._index: dict[WorkloadKey, int] | None = None

    def _entries(self) -> dict[WorkloadKey, int]:
        # The queues are kept once read: the read API's thread may read a kept pass while the controller's loop
        # does, and two builders must both find them (each builds the same index).
        if self._index is None:
            index: dict[WorkloadKey, int] = {}
            for queue in self._queues:
                index.update(zip(map(_key_of, queue), range(1, len(queue) + 1), strict=True))
            self._index = index
        return self._index

    def __getitem__(self, key: WorkloadKey) -> int:
        return self._entries()[key]

    def get(self, key: WorkloadKey, default: object = None) -> object:  # type: ignore[override]
        return self._entries().get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._entries()

    def __iter__(self) -> Iterator[WorkloadKey]:
        return iter(self._entries())

    def __len__(self) -> int:
        return len(self._entries())


_key_of = attrgetter("key")


@dataclass(eq=False, slots=True)
class LazyReasons(Mapping[WorkloadKey, FitResult]):
    """Why each still-waiting job waits, computed on first access against the usage after the pass.

    Usage only grows during a pass, so a job that did not fit when it was checked does not fit the final
    usage either, and the final usage is what the job actually waits on. Jobs held back by ``Block`` say
    which job they wait behind and why that one waits. The key index is built on first use, so a pass whose
    reasons nobody reads costs nothing for them.
    """

    tree: QuotaTree
    used: Mapping[str, Resources]
    rate: Fraction
    queues: Sequence[tuple[Sequence[Workload], Workload | None]]
    """``(waiting jobs in order, the job that blocks the others or None)`` of every quota."""
    fits_note: str | None = None
    """When set, a job that is not held behind another and fits the final usage waits with this note
    (the controller's "room a reclaim left over goes to the next pass")."""
    _index: dict[WorkloadKey, tuple[Workload, Workload | None]] | None = field(default=None, init=False)
    _cache: dict[WorkloadKey, FitResult] = field(default_factory=dict, init=False)
    _by_shape: dict[tuple[str, Resources], FitResult] = field(default_factory=dict, init=False)
    """A fit depends on the job's quota and request only: thousands of waiting jobs share a few shapes."""

    def _entries(self) -> dict[WorkloadKey, tuple[Workload, Workload | None]]:
        if self._index is None:
            index: dict[WorkloadKey, tuple[Workload, Workload | None]] = {}
            for rest, blocker in self.queues:
                for workload in rest:
                    # By key, not identity: a second object under the blocker's key (a snapshot that lists a
                    # job twice) must not wait behind itself, which would recurse without end.
                    held = blocker is not None and workload.key != blocker.key
                    index[workload.key] = (workload, blocker if held else None)
            self._index = index
        return self._index

    def __getitem__(self, key: WorkloadKey) -> FitResult:
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        workload, blocker = self._entries()[key]
        if blocker is None:
            shape = (workload.quota, workload.request)
            known = workload.quota.lower() in self.tree.nodes  # else the note names the job
            found = self._by_shape.get(shape) if known else None
            if found is None:
                found = check_fit(self.tree, self.used, workload, self.rate)
                if found.fits and self.fits_note is not None:
                    found = FitResult(fits=False, note=self.fits_note)
                if known:
                    self._by_shape[shape] = found
            result = found
        else:
            why = self[blocker.key].explain()
            result = FitResult(
                fits=False,
                blocked_behind=blocker.key,
                note=f"blocked behind {blocker.key} (queue policy Block), which waits: {why}",
            )
        self._cache[key] = result
        return result

    def forget(self) -> None:
        """Drop what reading the reasons built (the key index, each job's result): a pass that is kept after its
        events were written holds only its queues, and a later read builds what it needs again."""
        self._index = None
        self._cache = {}

    def __iter__(self) -> Iterator[WorkloadKey]:
        return iter(self._entries())

    def __len__(self) -> int:
        return len(self._entries())
