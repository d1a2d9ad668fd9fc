"""The flag that wakes the controller's loop, and the debounce counted from the first change it serves.

A burst of changes makes one pass because the loop waits ``debounce`` before it runs one. That wait counts
from the first change the pass will serve, not from when the loop gets to look: changes that came while the
last pass was writing have waited already, and a pass that took longer than the debounce has batched them.
Passes still start at least ``debounce`` apart, for the first change after a pass starts comes after it
(docs/queueing.md, "One pass").
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class ChangeFlag(asyncio.Event):
    """An :class:`asyncio.Event` that remembers when it was first set since it was last cleared."""

    def __init__(self, clock: Callable[[], float]) -> None:
        super().__init__()
        self._clock = clock
        self.since: float | None = None
        """The monotonic time of the first change since the last pass began (``None``: none yet)."""

    def set(self) -> None:
        if self.since is None:
            self.since = self._clock()
        super().set()

    def clear(self) -> None:
        self.since = None
        super().clear()

    def settle(self, debounce: float) -> float:
        """How long the loop still waits before its pass: what is left of ``debounce`` since the first change,
        all of it when the loop woke without one (a timer or the resync)."""
        if self.since is None:
            return debounce
        return max(0.0, self.since + debounce - self._clock())
