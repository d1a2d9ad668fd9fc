"""What the simulated quotas use over virtual time: admitted (the ledger's ``used``) and running, with their
time integrals and peaks, counted up each chain by the core's :class:`~webhook.core.chain_usage.ChainTally`."""

from __future__ import annotations

from collections.abc import Mapping

from webhook.api.names import MAX_JOBS
from webhook.core.chain_usage import ChainTally
from webhook.core.quantity import NANO
from webhook.core.quota import QuotaTree
from webhook.core.workload import Workload

__all__ = ["UsageMeter"]

_ONE_JOB = ((MAX_JOBS, NANO),)

HISTORY_LIMIT = 10_000
"""Notes of use over time kept at most (every other one is dropped beyond)."""


class UsageMeter:
    """Per quota node: what admitted jobs use (the ledger's ``used``) and what running jobs use, with their
    time integrals (for means) and peaks. Amounts in nano-units, time in microseconds."""

    def __init__(self, tree: QuotaTree) -> None:
        self.tree = tree
        self.used = ChainTally()
        self.running = ChainTally()
        self.used_area: dict[str, dict[str, int]] = {}
        self.running_area: dict[str, dict[str, int]] = {}
        self.borrowed_area: dict[str, dict[str, int]] = {}
        self.used_peak: dict[str, dict[str, int]] = {}
        self.running_peak: dict[str, dict[str, int]] = {}
        self.borrowed_peak: dict[str, dict[str, int]] = {}
        self.clock = 0
        self.watched = tuple(child.key for child in tree.root.children)
        """The quotas whose use over time the report shows: the root's children."""
        self.history: list[tuple[int, dict[str, dict[str, int]]]] = []
        """``(time, used per watched quota)`` at each change, thinned to at most :data:`HISTORY_LIMIT`."""
        self._guaranteed = {
            node.key: {name: node.min.get_or_zero(name) for name in {*node.min, *node.max} if name != MAX_JOBS}
            for node in tree.nodes.values()
        }

    def _borrowed(self, key: str, usage: Mapping[str, int]) -> dict[str, int]:
        return {name: max(0, usage.get(name, 0) - floor) for name, floor in self._guaranteed[key].items()}

    def advance(self, to: int) -> None:
        """Account for the time from the last call to ``to`` at the current usage."""
        span = to - self.clock
        if span <= 0:
            return
        for source, target in ((self.used, self.used_area), (self.running, self.running_area)):
            for key, usage in source.items():
                area = target.setdefault(key, {})
                for name, amount in usage.items():
                    if amount:
                        area[name] = area.get(name, 0) + amount * span
        for key, usage in self.used.items():
            area = self.borrowed_area.setdefault(key, {})
            for name, amount in self._borrowed(key, usage).items():
                if amount:
                    area[name] = area.get(name, 0) + amount * span
        self._remember()
        self.clock = to

    def _remember(self) -> None:
        """Note the watched quotas' use from the current time on (when it changed since the last note)."""
        now = {key: {name: amount for name, amount in (self.used.get(key) or {}).items()
                     if amount and name != MAX_JOBS}
               for key in self.watched}
        if self.history and self.history[-1][1] == now:
            return
        self.history.append((self.clock, now))
        if len(self.history) > HISTORY_LIMIT:
            self.history = self.history[::2]

    def sample(self) -> None:
        """Record peaks of the current usage."""
        for source, peaks in ((self.used, self.used_peak), (self.running, self.running_peak)):
            for key, usage in source.items():
                peak = peaks.setdefault(key, {})
                for name, amount in usage.items():
                    if amount > peak.get(name, 0):
                        peak[name] = amount
        for key, usage in self.used.items():
            peak = self.borrowed_peak.setdefault(key, {})
            for name, amount in self._borrowed(key, usage).items():
                if amount > peak.get(name, 0):
                    peak[name] = amount

    def admit(self, workload: Workload, sign: int = 1) -> None:
        """Count (``sign`` 1) or uncount (-1) an admitted job, with one ``max-jobs``, up its chain."""
        self.used.shift_workload(self.tree, workload, sign, _ONE_JOB)

    def run(self, workload: Workload, sign: int = 1) -> None:
        """Count (``sign`` 1) or uncount (-1) a running job, with one ``max-jobs``, up its chain."""
        self.running.shift_workload(self.tree, workload, sign, _ONE_JOB)
