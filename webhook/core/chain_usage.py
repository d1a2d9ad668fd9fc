"""Usage added up quota chains as plain maps: ``node key -> Resources`` (:func:`shift_usage`, and its cheap
overlay :func:`shifted_view`) and the mutable :class:`ChainTally` in nano-units that the reclaim planner and the
simulator's meters count in, which also reports what blocks an amount on a chain (``max`` and ``min``).

With :class:`webhook.core.ledger.Ledger` (the persistent per-node usage a pass keeps), the one place that adds
usage up a quota chain: a job counts at its leaf and at every ancestor up to the root, with
``kube-queue/max-jobs`` = 1 for the job itself (:attr:`Workload.request_with_count`).
"""

from __future__ import annotations

from collections.abc import ItemsView, Iterable, Iterator, Mapping, Sequence
from typing import Any

from webhook.core.quota import QuotaTree
from webhook.core.resources import EMPTY, Resources
from webhook.core.workload import Workload

__all__ = ["ChainTally", "UsageOverlay", "chain_keys", "shift_usage", "shifted_view"]


def chain_keys(tree: QuotaTree, quota: str) -> tuple[str, ...] | None:
    """The node keys from the quota named ``quota`` (any case) up to the root; ``None`` when unknown."""
    key: str | None = quota.lower()
    if key not in tree.nodes:
        return None
    keys: list[str] = []
    while key is not None:
        keys.append(key)
        key = tree.parents[key]
    return tuple(keys)


def shift_usage(
    tree: QuotaTree, used: Mapping[str, Resources], workloads: Iterable[Workload], sign: int
) -> dict[str, Resources]:
    """``used`` (node key -> what admitted jobs use) with each workload's ``request_with_count`` added
    (``sign`` 1) or removed (-1) at its leaf and every ancestor; a new mapping, ``used`` is untouched. Amounts
    are not clamped at zero, so a double removal shows as a negative usage. ``KeyError`` for an unknown quota."""
    return {**used, **_chain_changes(tree, used, workloads, sign)}


def _chain_changes(
    tree: QuotaTree, used: Mapping[str, Resources], workloads: Iterable[Workload], sign: int
) -> dict[str, Resources]:
    """The new usage of every node on the chains of ``workloads`` (see :func:`shift_usage`), and only those."""
    factor = 1 if sign > 0 else -1
    sums: dict[str, dict[str, int]] = {}
    chains: dict[str, tuple[str, ...]] = {}
    for workload in workloads:
        keys = chains.get(workload.quota)
        if keys is None:
            found = chain_keys(tree, workload.quota)
            if found is None:
                raise KeyError(f"quota {workload.quota!r} of {workload.key} is not in the ElasticQuotaTree")
            keys = chains[workload.quota] = found
        delta = [(name, amount * factor) for name, amount in workload.request_with_count.items()]
        for key in keys:
            current = sums.get(key)
            if current is None:
                current = sums[key] = dict(used.get(key, EMPTY).items())
            for name, amount in delta:
                current[name] = current.get(name, 0) + amount
    return {key: Resources.adopt(amounts) for key, amounts in sums.items()}


class UsageOverlay(Mapping[str, Resources]):
    """A read-only ``node key -> used`` map: ``base`` with the nodes in ``changes`` replaced. What
    :func:`shifted_view` returns: the same values as :func:`shift_usage`, without copying every node of a
    large tree for a change along one chain. A stack of overlays is flattened every :attr:`FLATTEN` levels,
    so a read looks at a bounded number of maps. Neither ``base`` nor ``changes`` may change afterwards."""

    __slots__ = ("_base", "_changes", "_depth")

    FLATTEN = 64

    _base: Mapping[str, Resources]
    _changes: dict[str, Resources]
    _depth: int

    def __init__(self, base: Mapping[str, Resources], changes: dict[str, Resources]) -> None:
        depth = 1
        if isinstance(base, UsageOverlay):
            depth = base._depth + 1
            if depth > self.FLATTEN:
                changes = {**base.flat(), **changes}
                base, depth = {}, 1
        self._base = base
        self._changes = changes
        self._depth = depth

    def flat(self) -> dict[str, Resources]:
        """Every node's usage as one new dict (one walk down the stack, one copy)."""
        layers = [self._changes]
        base = self._base
        while isinstance(base, UsageOverlay):
            layers.append(base._changes)
            base = base._base
        out = dict(base.items())
        for changes in reversed(layers):
            out.update(changes)
        return out

    def __getitem__(self, key: str) -> Resources:
        value = self._changes.get(key)
        return self._base[key] if value is None else value

    def get(self, key: str, default: Any = None, /) -> Any:
        value = self._changes.get(key)
        return self._base.get(key, default) if value is None else value

    def __contains__(self, key: object) -> bool:
        return key in self._changes or key in self._base

    def __iter__(self) -> Iterator[str]:
        return iter(self.flat())

    def __len__(self) -> int:
        return len(self.flat())

    def items(self) -> ItemsView[str, Resources]:
        return self.flat().items()


def shifted_view(
    tree: QuotaTree, used: Mapping[str, Resources], workloads: Iterable[Workload], sign: int
) -> UsageOverlay:
    """:func:`shift_usage` as a :class:`UsageOverlay` over ``used`` (which must not change afterwards): only the
    chains of ``workloads`` are computed, so its cost does not grow with the size of the tree."""
    return UsageOverlay(used, _chain_changes(tree, used, workloads, sign))


class ChainTally(dict[str, dict[str, int]]):
    """Mutable per-node amounts in nano-units (node key -> resource -> amount), for loops that count and
    uncount many times (the reclaim planner, the simulator's meters): :meth:`shift` adds along a chain of
    node keys, :meth:`shift_workload` along a workload's chain; :meth:`over`, :meth:`fits` and :meth:`within`
    report the ``max`` and ``min`` blockers of adding an amount along a chain."""

    __slots__ = ()

    def shift(self, keys: Iterable[str], delta: Mapping[str, int], sign: int) -> None:
        """Add ``sign`` times ``delta`` (resource -> amount) at every node of ``keys``."""
        for key in keys:
            usage = self.get(key)
            if usage is None:
                usage = self[key] = {}
            for resource, amount in delta.items():
                usage[resource] = usage.get(resource, 0) + sign * amount

    def shift_workload(
        self, tree: QuotaTree, workload: Workload, sign: int, extra: Iterable[tuple[str, int]] = ()
    ) -> None:
        """Add (``sign`` 1) or remove (-1) the workload's request, and ``extra``, at its leaf and every ancestor;
        ``KeyError`` for an unknown quota."""
        keys = chain_keys(tree, workload.quota)
        if keys is None:
            raise KeyError(f"quota {workload.quota!r} of {workload.key} is not in the ElasticQuotaTree")
        delta = dict(workload.request.items())
        for resource, amount in extra:
            delta[resource] = delta.get(resource, 0) + amount
        self.shift(keys, delta, sign)

    # Checks along a chain (amounts and limits in nano-units; ``limits`` and ``guaranteed`` by node key) --------
    def over(
        self, keys: Sequence[str], wanted: Sequence[tuple[str, int]], limits: Mapping[str, Mapping[str, int]]
    ) -> list[tuple[int, str, int]]:
        """The ``max`` blockers of adding ``wanted`` (resource, amount) at every node of ``keys`` (leaf first):
        ``(depth, resource, how much too much)`` wherever ``count + amount > limit``; a resource without a
        limit at a node is unlimited there."""
        out: list[tuple[int, str, int]] = []
        for depth, key in enumerate(keys):
            node_limits, usage = limits[key], self[key]
            for resource, amount in wanted:
                limit = node_limits.get(resource)
                if limit is not None:
                    excess = usage.get(resource, 0) + amount - limit
                    if excess > 0:
                        out.append((depth, resource, excess))
        return out

    def fits(
        self, keys: Sequence[str], wanted: Sequence[tuple[str, int]], limits: Mapping[str, Mapping[str, int]]
    ) -> bool:
        """Whether :meth:`over` finds no blocker (stops at the first)."""
        for key in keys:
            node_limits, usage = limits[key], self[key]
            for resource, amount in wanted:
                limit = node_limits.get(resource)
                if limit is not None and usage.get(resource, 0) + amount > limit:
                    return False
        return True

    def within(
        self,
        keys: Sequence[str],
        levels: int,
        request: Iterable[tuple[str, int]],
        guaranteed: Mapping[str, Mapping[str, int]],
    ) -> int:
        """The ``min`` check: how many of the first ``levels`` nodes of ``keys``, from the leaf up, stay within
        their guarantee after adding ``request`` (the depth of the first that does not; ``len(keys)`` when every
        one of them does). Resources absent from a node's ``guaranteed`` are not governed there."""
        pairs = tuple((resource, amount) for resource, amount in request if amount > 0)
        for depth in range(levels):
            key = keys[depth]
            node_min, usage = guaranteed[key], self[key]
            for resource, amount in pairs:
                limit = node_min.get(resource)
                if limit is not None and usage.get(resource, 0) + amount > limit:
                    return depth
        return len(keys)
