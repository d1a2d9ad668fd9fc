"""Room up quota chains for the start estimate's replay (:mod:`webhook.core.eta_replay`): usage kept as plain
``node key -> resource -> amount`` dicts along precomputed chains, and when, within one bucket of the replay's
clock, the room a job took was freed (:class:`Freed`)."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping, Sequence

from webhook.api.names import MAX_JOBS
from webhook.core.quantity import NANO
from webhook.core.quota import QuotaTree
from webhook.core.workload import Workload

__all__ = ["Amounts", "Chains", "Freed", "Tally", "Usage", "amounts_of", "both_amounts", "shift"]

Usage = dict[str, dict[str, int]]
"""Node key -> resource -> nano-units."""
Amounts = tuple[tuple[str, int], ...]
"""A request as ``(resource, amount)`` pairs, positive amounts only."""


class Chains:
    """Every node's chain of keys, leaf first, computed once (a replay walks them for every job it moves)."""

    __slots__ = ("keys",)

    def __init__(self, tree: QuotaTree) -> None:
        self.keys = {key: tuple(node.key for node in tree.chain(key)) for key in tree.nodes}

    def of(self, quota: str) -> tuple[str, ...]:
        """The chain of a leaf named ``quota`` (any case); empty when the tree has no such node."""
        return self.keys.get(quota) or self.keys.get(quota.lower(), ())


def both_amounts(workload: Workload) -> tuple[Amounts, Amounts]:
    """What a workload asks, without and with its one ``kube-queue/max-jobs``."""
    pairs = [(name, amount) for name, amount in workload.request.items() if amount > 0 and name != MAX_JOBS]
    request = tuple(pairs)
    pairs.append((MAX_JOBS, workload.request.get_or_zero(MAX_JOBS) + NANO))
    return request, tuple(pairs)


def amounts_of(workload: Workload, with_count: bool) -> Amounts:
    """What a workload asks, with its one ``kube-queue/max-jobs`` when ``with_count``."""
    return both_amounts(workload)[with_count]


def shift(usage: Usage, chain: Sequence[str], amounts: Amounts, sign: int) -> None:
    """Add (``sign`` 1) or take away (-1) ``amounts`` at every node of ``chain``, in place."""
    for key in chain:
        sums = usage.get(key)
        if sums is None:
            sums = usage[key] = {}
        for name, amount in amounts:
            sums[name] = sums.get(name, 0) + sign * amount


class Tally:
    """Usage up quota chains for jobs that come and go by the hundred between two reads: the changes are
    counted per group of jobs with the same chain and amounts, and shifted once each, by their net count, when
    the usage is read (:meth:`usage`)."""

    __slots__ = ("_counts", "_dirty", "_groups", "_index", "_usage")

    def __init__(self) -> None:
        self._usage: Usage = {}
        self._groups: list[tuple[tuple[str, ...], Amounts]] = []
        self._index: dict[tuple[tuple[str, ...], Amounts], int] = {}
        self._counts: list[int] = []
        self._dirty = False

    def group(self, chain: tuple[str, ...], amounts: Amounts) -> int:
        """The group of the jobs on ``chain`` that count ``amounts`` (made when first asked)."""
        key = (chain, amounts)
        found = self._index.get(key)
        if found is None:
            found = self._index[key] = len(self._groups)
            self._groups.append(key)
            self._counts.append(0)
        return found

    def add(self, group: int, count: int) -> None:
        """``count`` more jobs of ``group`` (fewer when negative)."""
        self._counts[group] += count
        self._dirty = True

    def usage(self) -> Usage:
        """The usage with every change so far (a live view: it changes with the next read after an add)."""
        if self._dirty:
            counts, groups, usage = self._counts, self._groups, self._usage
            for group, count in enumerate(counts):
                if count:
                    chain, amounts = groups[group]
                    shift(usage, chain, amounts, count)
                    counts[group] = 0
            self._dirty = False
        return self._usage


class Freed:
    """The room the ends of one bucket freed, node by node and resource by resource, in time order, so a job a
    pass admits (or starts) can be dated by the end that let it in (:meth:`earliest`) instead of the pass's
    time: finishing times then do not drift later bucket after bucket."""

    __slots__ = ("steps", "times")

    def __init__(self, ends: Sequence[tuple[float, tuple[str, ...], Amounts]]) -> None:
        self.times = [at for at, _, _ in ends]
        self.steps: dict[tuple[str, str], tuple[list[int], list[int]]] = {}
        """Per (node key, resource): indexes of the ends that freed some, and the room freed up to each."""
        steps = self.steps
        for index, (_, chain, amounts) in enumerate(ends):
            for key in chain:
                for resource, amount in amounts:
                    step = steps.get((key, resource))
                    if step is None:
                        steps[key, resource] = ([index], [amount])
                    else:
                        step[0].append(index)
                        totals = step[1]
                        totals.append(totals[-1] + amount)

    def earliest(
        self,
        chain: Sequence[str],
        amounts: Amounts,
        used: Mapping[str, Mapping[str, int]],
        added: Usage,
        limits: Mapping[str, Mapping[str, int]],
    ) -> float | None:
        """The time of the first end after which ``amounts`` fit on ``chain`` over ``used`` (before the bucket)
        plus ``added`` (the jobs placed before this one in the pass; this one is added to it); the bucket's first
        time when no end was needed; ``None`` when the ends alone do not explain the fit (evictions did)."""
        worst = -1
        explained = True
        steps = self.steps
        for key in chain:
            caps = limits.get(key)
            base = used.get(key)
            extra = added.get(key)
            if extra is None:
                extra = added[key] = {}
            for resource, amount in amounts:
                cap = caps.get(resource) if caps is not None else None
                if cap is not None:
                    deficit = (base.get(resource, 0) if base is not None else 0) + extra.get(resource, 0) + amount - cap
                    if deficit > 0:
                        step = steps.get((key, resource))
                        place = bisect_left(step[1], deficit) if step is not None else 0
                        if step is None or place == len(step[1]):
                            explained = False
                        elif step[0][place] > worst:
                            worst = step[0][place]
                extra[resource] = extra.get(resource, 0) + amount
        if not explained or not self.times:
            return None
        return self.times[max(worst, 0)]
