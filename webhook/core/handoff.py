"""The control plane's own time in each turn of a job, as the start estimate's replay adds it (docs/eta.md).

A job's run time is measured from its pods' recorded start to its recorded finish. Around that run the control
plane takes time the run time does not hold: from a job's admission to its pods' recorded start (creating the
pods, scheduling, starting them), and from its recorded finish to the controller's pass that sees it finished
and hands its room to the next job. On the dev cluster that is about a second per turn, a tenth of a turn of
jobs of 12 s; a job that waits behind ten such turns starts ten seconds after a replay without it says.

The controller measures both on the jobs that succeed (:class:`HandoffHistory`, the newest
:data:`HANDOFF_SAMPLES` of each), keeps them in the honoured tree's ``status.handoff`` (read back after a restart,
and by ``kq why``), and the replay adds their medians (:class:`Handoff`) to every turn. Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from webhook.api.names import HANDOFF_STATUS
from webhook.core.runtimes import nearest_rank

__all__ = ["HANDOFF_LIMIT", "HANDOFF_SAMPLES", "NO_HANDOFF", "Handoff", "HandoffHistory"]

HANDOFF_SAMPLES = 64
"""Samples of each kind kept (the newest): the figure follows the control plane's load within minutes."""
HANDOFF_LIMIT = 30.0
"""Seconds above which a sample is not a handoff but an outage (a controller that was down, a pod that waited for
a node) and is left out: the replay models neither."""
STATUS_START, STATUS_END = "startSeconds", "endSeconds"
"""The fields of ``status.handoff``: the samples, in seconds, oldest first."""


@dataclass(frozen=True, slots=True)
class Handoff:
    """What the replay adds to each turn of a job, in seconds."""

    start: float = 0.0
    """From its admission to its pods' recorded start: its estimated start is this much after its admission."""
    end: float = 0.0
    """From its recorded finish to the pass that hands its room on: its room is freed this much after its end."""


NO_HANDOFF = Handoff()
"""No time added (the simulator's control plane takes none)."""


class HandoffHistory:
    """The newest samples of both parts of a turn (see the module)."""

    def __init__(self, kept: int = HANDOFF_SAMPLES) -> None:
        self._starts: deque[float] = deque(maxlen=kept)
        self._ends: deque[float] = deque(maxlen=kept)

    def __len__(self) -> int:
        """Samples of the part measured most."""
        return max(len(self._starts), len(self._ends))

    def add(self, start: float | None, end: float | None) -> None:
        """One succeeded job's parts (``None``: not measured); a part out of ``[0, HANDOFF_LIMIT]`` is left out."""
        for samples, seconds in ((self._starts, start), (self._ends, end)):
            if seconds is not None and 0.0 <= seconds <= HANDOFF_LIMIT:
                samples.append(seconds)

    def figure(self) -> Handoff:
        """The median of each part (nothing measured: no time added)."""
        return Handoff(_median(self._starts), _median(self._ends))

    def items(self) -> dict[str, list[float]]:
        """The samples as ``status.handoff`` holds them (to the millisecond)."""
        return {STATUS_START: [round(seconds, 3) for seconds in self._starts],
                STATUS_END: [round(seconds, 3) for seconds in self._ends]}

    def restore_status(self, status: object) -> None:
        """Add what a tree's ``status`` (:data:`~webhook.api.names.HANDOFF_STATUS`) holds, if anything."""
        if isinstance(status, Mapping):
            self.restore(status.get(HANDOFF_STATUS))

    def restore(self, value: object) -> None:
        """Add what ``status.handoff`` held (:meth:`items`); what does not read as seconds is skipped."""
        if not isinstance(value, Mapping):
            return
        for samples, field in ((self._starts, STATUS_START), (self._ends, STATUS_END)):
            for seconds in _numbers(value.get(field)):
                if 0.0 <= seconds <= HANDOFF_LIMIT:
                    samples.append(seconds)


def _numbers(value: object) -> Iterable[float]:
    if not isinstance(value, list):
        return ()
    return (float(item) for item in value if isinstance(item, int | float) and not isinstance(item, bool))


def _median(samples: Iterable[float]) -> float:
    ordered = sorted(samples)
    return nearest_rank(ordered, 0.5) if ordered else 0.0
