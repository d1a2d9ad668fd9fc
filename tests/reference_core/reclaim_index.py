"""The view a :class:`webhook.core.reclaim.Reclaimer` plans over: chains, limits and guarantees computed once,
candidate victims indexed by leaf quota in eviction order, and how much each subtree could free.

:class:`ReclaimIndex` holds that view and the cheap questions the planner asks of it (what blocks a
preemptor, whether it fits, how far up it stays within ``min``, which candidates may help, in which order,
and whether taking one keeps its quota at ``min``); the rules themselves are the planner's
(:mod:`webhook.core.reclaim`, docs/reclaim.md). Usage is counted in a :class:`~webhook.core.chain_usage.ChainTally`.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Mapping
from fractions import Fraction
from operator import attrgetter
from types import MappingProxyType

from webhook.api.names import MAX_JOBS
from webhook.core.chain_usage import ChainTally
from webhook.core.fit import limits_of
from webhook.core.quantity import NANO
from webhook.core.quota import PREEMPT_LOWER_PRIORITY, PREEMPT_POLICY, QuotaNode, QuotaTree
from webhook.core.rate import validate_rate
from webhook.core.resources import EMPTY, Resources
from webhook.core.workload import Workload, WorkloadKey

__all__ = ["Blockers", "Candidate", "Chain", "ReclaimIndex", "sort_key"]


# Chains and candidates -----------------------------------------------------------------------------------------


class Chain:
    """A quota's chain, leaf first, with what the plans read of it."""

    __slots__ = ("competing", "depth", "keys", "leaf", "nodes", "own")

    def __init__(self, nodes: tuple[QuotaNode, ...]) -> None:
        self.nodes = nodes
        self.leaf = nodes[0]
        self.keys = tuple(node.key for node in nodes)
        self.depth = {key: depth for depth, key in enumerate(self.keys)}
        self.competing = len(nodes) - 1 if len(nodes) > 1 else len(nodes)
        """How many levels, from the leaf up, compete for a guarantee (all but the root)."""
        self.own = nodes[0].attributes.get(PREEMPT_POLICY) == PREEMPT_LOWER_PRIORITY


class Candidate:
    """An admitted job that a plan may take (evict, or withhold when ``fresh``)."""

    __slots__ = ("chain", "delta", "fresh", "key", "priority", "sort", "workload")

    def __init__(self, workload: Workload, chain: Chain, fresh: bool, rank: float) -> None:
        self.workload = workload
        self.key = workload.key
        self.chain = chain
        self.fresh = fresh
        self.priority = workload.priority
        delta = dict(workload.request.items())
        delta[MAX_JOBS] = delta.get(MAX_JOBS, 0) + NANO
        self.delta = delta
        """What it holds at every level of its chain (:attr:`Workload.request_with_count`)."""
        key = workload.key
        self.sort = (workload.priority, -rank, key.namespace, key.name, key.kind)
        """Eviction order inside one leaf: lowest priority, then most recently admitted, then name."""


sort_key = attrgetter("sort")

Blockers = list[tuple[int, str, int]]
"""``(depth in the preemptor's chain, resource, how much too much)`` of every blocking level and resource."""


class ReclaimIndex:
    """Usage, limits, guarantees and the candidate victims of one snapshot (the arguments are
    :class:`webhook.core.reclaim.Reclaimer`'s)."""

    def __init__(
        self,
        tree: QuotaTree,
        used: Mapping[str, Resources],
        admitted: Iterable[Workload],
        oversell_rate: Fraction | int,
        *,
        fresh: Iterable[Workload] = (),
        ordered: Iterable[str] = (),
        budget: int | None = None,
    ) -> None:
        self.tree = tree
        self._ordered = {quota.lower() for quota in ordered}
        self.rate = validate_rate(oversell_rate)
        self._used: dict[str, Resources] = dict(used)
        self._budget = budget
        self.visits = 0
        """Candidate victims looked at so far (the work the plans did)."""
        self._limits: dict[str, dict[str, int]] = {}
        self._mins: dict[str, dict[str, int]] = {}
        self._guaranteed: dict[str, dict[str, int]] = {}
        self._use = ChainTally()
        """What the plans count as used, per node (nano-units)."""
        for key, node in tree.nodes.items():
            self._limits[key] = limits_of(node, self.rate)
            self._mins[key] = {name: amount for name, amount in node.min.items() if name != MAX_JOBS}
            self._guaranteed[key] = {
                name: node.min.get_or_zero(name) for name in (*node.min, *node.max) if name != MAX_JOBS
            }
            self._use[key] = dict(self._used.get(key, EMPTY).items())
        self._chains: dict[str, Chain | None] = {}
        self._candidates: dict[WorkloadKey, Candidate] = {}
        self._running: dict[str, list[Candidate]] = {}
        self._fresh: dict[str, list[Candidate]] = {}
        self._gone: set[WorkloadKey] = set()
        self._totals: dict[str, tuple[dict[str, int], dict[str, int]]] = {}
        """Per leaf: what its running and its fresh candidates hold in all."""
        self._avail: dict[str, dict[str, int]] = {}
        """Per leaf: at most how much of each resource taking its candidates can free (what they hold, but no
        more than what the leaf has beyond its min)."""
        self._excess: dict[str, dict[str, int]] = {key: {} for key in tree.nodes}
        """Per node: ``_avail`` summed over the leaves under it."""
        self._donors: dict[str, dict[str, set[str]]] = {key: {} for key in tree.nodes}
        """Per node and resource: the leaves under it with something of that resource to give."""
        for index, workload in enumerate(fresh):
            self._index(workload, True, float(index))
        for workload in admitted:
            if workload.key not in self._candidates:
                admitted_at = workload.admitted_at if workload.admitted_at is not None else workload.created
                self._index(workload, False, admitted_at)
        for lists in (self._running, self._fresh):
            for members in lists.values():
                members.sort(key=sort_key)
        for leaf in self._totals:
            self._refresh(leaf)

    # Index ------------------------------------------------------------------------------------------------
    def _chain(self, quota: str) -> Chain | None:
        """The chain of the quota named ``quota`` (any case; cached under the name as given too)."""
        try:
            return self._chains[quota]
        except KeyError:
            key = quota.lower()
            chain = self._chains.get(key)
            if chain is None and key in self.tree.nodes:
                chain = self._chains[key] = Chain(self.tree.chain(key))
            self._chains[quota] = chain
            return chain

    def _index(self, workload: Workload, fresh: bool, rank: float) -> None:
        chain = self._chain(workload.quota)
        if chain is None:
            return
        candidate = Candidate(workload, chain, fresh, rank)
        self._candidates[candidate.key] = candidate
        leaf = chain.keys[0]
        (self._fresh if fresh else self._running).setdefault(leaf, []).append(candidate)
        sums = self._totals.setdefault(leaf, ({}, {}))[fresh]
        for resource, amount in candidate.delta.items():
            sums[resource] = sums.get(resource, 0) + amount

    def _refresh(self, leaf: str) -> None:
        """Recompute a leaf's ``_avail`` and carry the difference up its chain."""
        mins, usage = self._mins[leaf], self._use[leaf]
        running, withheld = self._totals[leaf]
        fresh: dict[str, int] = {}
        for resource in {*running, *withheld}:
            held = running.get(resource, 0) + withheld.get(resource, 0)
            guaranteed = mins.get(resource)
            amount = held if guaranteed is None else min(held, usage.get(resource, 0) - guaranteed)
            if amount > 0:
                fresh[resource] = amount
        old = self._avail.get(leaf, {})
        if fresh == old:
            return
        self._avail[leaf] = fresh
        chain = self._chain(leaf)
        assert chain is not None
        for resource in {*old, *fresh}:
            change = fresh.get(resource, 0) - old.get(resource, 0)
            for key in chain.keys:
                excess = self._excess[key]
                excess[resource] = excess.get(resource, 0) + change
                donors = self._donors[key].setdefault(resource, set())
                if resource in fresh:
                    donors.add(leaf)
                else:
                    donors.discard(leaf)

    # Usage ------------------------------------------------------------------------------------------------
    def _blockers(self, chain: Chain, wanted: list[tuple[str, int]]) -> Blockers:
        return self._use.over(chain.keys, wanted, self._limits)

    def _fits(self, chain: Chain, wanted: list[tuple[str, int]]) -> bool:
        return self._use.fits(chain.keys, wanted, self._limits)

    def _within(self, chain: Chain, request: Resources) -> int:
        """How many levels of the chain, from the leaf up, stay within ``min`` after admitting a job that
        requests ``request`` (:func:`webhook.core.fit.check_min`, level by level)."""
        return self._use.within(chain.keys, chain.competing, request.items(), self._guaranteed)

    def _own_lower(self, chain: Chain, priority: int) -> dict[str, int]:
        """What the leaf's own strictly lower-priority candidates hold."""
        sums: dict[str, int] = {}
        leaf = chain.keys[0]
        for members in (self._fresh.get(leaf, ()), self._running.get(leaf, ())):
            for candidate in members:
                if candidate.priority >= priority:
                    break  # sorted by priority: the rest are not lower
                if candidate.key in self._gone:
                    continue
                for resource, amount in candidate.delta.items():
                    sums[resource] = sums.get(resource, 0) + amount
        return sums

    def _may_work(self, chain: Chain, blockers: Blockers, within: int, own: dict[str, int] | None) -> bool:
        """A necessary condition: for every blocking level and resource, the eligible candidates hold at least
        the excess (counting per leaf only what its ``min`` lets go)."""
        leaf = chain.keys[0]
        for depth, resource, over in blockers:
            available = own.get(resource, 0) if own is not None else 0
            reach = min(depth, within)
            if reach >= 1:
                available += (
                    self._excess[chain.keys[reach]].get(resource, 0) - self._excess[leaf].get(resource, 0)
                )
            if available < over:
                return False
        return True

    def _stream(
        self, chain: Chain, blockers: Blockers, within: int, priority: int | None
    ) -> Iterator[Candidate]:
        """Eligible candidates in the order they are taken: withheld before evicted, other quotas before the
        preemptor's own (only when ``priority`` is given: its strictly lower-priority jobs), then each leaf's
        eviction order merged."""
        leaf = chain.keys[0]
        leaves: set[str] = set()
        for depth, resource, _ in blockers:
            reach = min(depth, within)
            if reach >= 1:
                leaves |= self._donors[chain.keys[reach]].get(resource, set())
        leaves.discard(leaf)
        ordered = sorted(leaves)
        for lists in (self._fresh, self._running):
            others = [members for name in ordered if (members := lists.get(name))]
            if len(others) == 1:
                yield from others[0]
            elif others:
                yield from heapq.merge(*others, key=sort_key)
            if priority is not None:
                for candidate in lists.get(leaf, ()):
                    if candidate.priority >= priority:
                        break
                    yield candidate

    # Planning ---------------------------------------------------------------------------------------------
    @property
    def used(self) -> Mapping[str, Resources]:
        """The usage in the reclaimer's view (after every committed plan)."""
        return MappingProxyType(self._used)

    @property
    def exhausted(self) -> bool:
        """Whether the budget is spent."""
        return self._budget is not None and self.visits >= self._budget

    def _lca(self, candidate: Candidate, chain: Chain) -> tuple[int, tuple[str, ...]]:
        """``(depth in the preemptor's chain of the lowest common ancestor, the candidate's levels below it)``."""
        keys = candidate.chain.keys
        for index, key in enumerate(keys):
            depth = chain.depth.get(key)
            if depth is not None:
                return depth, keys[:index]
        return len(chain.keys), keys  # pragma: no cover - every chain ends at the root

    def _borrows(self, leaf: str, delta: Mapping[str, int], blockers: Blockers) -> bool:
        """Whether ``leaf`` uses more than its ``min`` of a resource that blocks the preemptor and that a
        candidate holding ``delta`` holds (a resource without ``min`` is guaranteed zero)."""
        mins, usage = self._mins[leaf], self._use[leaf]
        return any(
            delta.get(resource, 0) > 0 and usage.get(resource, 0) > mins.get(resource, 0)
            for _, resource, _ in blockers
        )

    @staticmethod
    def _reclaimed(blockers: Blockers, levels: int) -> tuple[tuple[str, ...], ...]:
        """Per depth ``meet`` of the preemptor's chain (``0 .. levels``): the resources reclaimed from a quota
        that meets the preemptor there, i.e. those (not ``kube-queue/max-jobs``, a cap that nobody is owed)
        that block it at that level or above when the plan starts (blockers only go away while it goes on)."""
        return tuple(
            tuple(sorted({resource for depth, resource, _ in blockers if depth >= meet and resource != MAX_JOBS}))
            for meet in range(levels + 1)
        )

    def _keeps_min(self, candidate: Candidate, guarded: tuple[str, ...], reclaimed: tuple[str, ...]) -> bool:
        """Whether ``candidate`` (of another quota) may go: it holds a resource being reclaimed from its quota,
        and its eviction keeps each level in ``guarded`` (its quota's levels below the lowest common ancestor
        with the preemptor) at or above ``min`` in every reclaimed resource it holds. Resources nobody
        contends do not protect it, however far below ``min`` its quota is in them (docs/reclaim.md)."""
        delta = candidate.delta
        held = [(resource, delta[resource]) for resource in reclaimed if delta.get(resource, 0) > 0]
        if not held:
            return False
        for key in guarded:
            mins = self._mins[key]
            if not mins:
                continue
            usage = self._use[key]
            for resource, amount in held:
                guaranteed = mins.get(resource)
                if guaranteed is not None and usage.get(resource, 0) - amount < guaranteed:
                    return False
        return True
