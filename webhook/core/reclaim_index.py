"""The view a :class:`webhook.core.reclaim.Reclaimer` plans over: chains, limits and guarantees computed once,
candidate victims indexed by leaf quota in eviction order, and how much each subtree could free.

:class:`ReclaimIndex` holds that view and the cheap questions the planner asks of it (what blocks a
preemptor, whether it fits, how far up it stays within ``min``, which candidates may help, in which order,
and whether taking one keeps its quota at ``min``); the rules themselves are the planner's
(:mod:`webhook.core.reclaim`, docs/reclaim.md). Usage is counted in a :class:`~webhook.core.chain_usage.ChainTally`.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping, Sequence
from fractions import Fraction
from operator import attrgetter

from webhook.api.names import MAX_JOBS
from webhook.core.chain_usage import ChainTally, UsageOverlay, shifted_view
from webhook.core.fit import limits_of
from webhook.core.guarantee import borrows, guaranteed, guarded_min, keeps_min
from webhook.core.quantity import NANO
from webhook.core.quota import PREEMPT_LOWER_PRIORITY, PREEMPT_POLICY, QuotaNode, QuotaTree
from webhook.core.rate import validate_rate
from webhook.core.resources import EMPTY, Resources, add_amounts, least_amounts
from webhook.core.workload import Workload, WorkloadKey, request_amounts

__all__ = ["Blockers", "Candidate", "Chain", "ReclaimIndex", "counted_amounts", "sort_key"]


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

    __slots__ = ("_delta", "chain", "fresh", "key", "leaf", "priority", "sort", "workload")

    def __init__(self, workload: Workload, chain: Chain, fresh: bool, rank: float) -> None:
        self.workload = workload
        self.key = key = workload.key
        self.chain = chain
        self.leaf = chain.keys[0]
        """Its leaf's node key."""
        self.fresh = fresh
        self.priority = workload.priority
        self._delta: dict[str, int] | None = None
        self.sort = (workload.priority, -rank, key.namespace, key.name, key.kind)
        """Eviction order inside one leaf: lowest priority, then most recently admitted, then name."""

    @property
    def delta(self) -> dict[str, int]:
        """What it holds at every level of its chain (:func:`counted_amounts`); made when first read (most
        candidates of a leaf are never looked at: they are made to be put in order)."""
        delta = self._delta
        if delta is None:
            delta = self._delta = counted_amounts(self.workload)
        return delta


def counted_amounts(workload: Workload) -> dict[str, int]:
    """:attr:`Workload.request_with_count` as a plain dict (what a job counts at every level of its chain)."""
    amounts = dict(workload.request.items())
    amounts[MAX_JOBS] = amounts.get(MAX_JOBS, 0) + NANO
    return amounts


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
        running: Mapping[str, Sequence[Workload]] | None = None,
        running_amounts: Mapping[str, Sequence[Mapping[str, int]]] | None = None,
        worded: bool = True,
    ) -> None:
        self.tree = tree
        self.worded = worded
        """Whether plans carry their :attr:`~webhook.core.reclaim.ReclaimPlan.reason` (else it is empty)."""
        self._ordered = {quota.lower() for quota in ordered}
        self.rate = validate_rate(oversell_rate)
        self._start: Mapping[str, Resources] = UsageOverlay(dict(used), {})
        """The usage before any plan."""
        self._moves: list[tuple[Sequence[Workload], Workload]] = []
        """Each committed plan's jobs taken (evicted or withheld) and its preemptor, in order. The usage after
        them is made only when read (:meth:`used_after`): a pass reads it once, not once per plan."""
        self._latest: tuple[int, Mapping[str, Resources]] = (0, self._start)
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
            self._mins[key] = guarded_min(node)
            self._guaranteed[key] = guaranteed(node)
            self._use[key] = dict(self._start.get(key, EMPTY).items())
        self._chains: dict[str, Chain | None] = {}
        self._candidates: dict[WorkloadKey, Candidate] = {}
        self._running: dict[str, list[Candidate]] = {}
        self._fresh: dict[str, list[Candidate]] = {}
        self._refusals: set[tuple[str, Resources, int | None, bool]] = set()
        """What :meth:`~webhook.core.reclaim.Reclaimer.plan` turned away before looking at any candidate since the
        last commit: ``(leaf key, request, priority, take_room)``, the priority only where the leaf preempts its
        own lower-priority jobs (elsewhere it plays no part). A refusal before the candidates reads only the
        view (usage, limits, guarantees, what each subtree may give, the leaf's own lower-priority jobs), which
        only a commit changes, and the budget, which only grows spent; the preemptor's name only matters among
        the candidates, so the same question gets the same answer until the next commit."""
        self._totals: dict[str, tuple[dict[str, int], dict[str, int]]] = {}
        """Per leaf: what its running and its fresh candidates hold in all."""
        self._avail: dict[str, dict[str, int]] = {}
        """Per leaf: at most how much of each resource taking its candidates can free (what they hold, but no
        more than what the leaf has beyond its min)."""
        self._excess: dict[str, dict[str, int]] = {key: {} for key in tree.nodes}
        """Per node: ``_avail`` summed over the leaves under it."""
        self._donors: dict[str, dict[str, set[str]]] = {key: {} for key in tree.nodes}
        """Per node and resource: the leaves under it with something of that resource to give."""
        self._least: dict[str, dict[str, int]] = {}
        """Per leaf, made when first asked (:meth:`_least_of`): the least any of its candidates holds of each
        resource that every one of them holds."""
        self._later: dict[str, list[Workload]] = {}
        """Per leaf: its admitted jobs, made candidates only when a plan first looks at the leaf
        (:meth:`_running_of`); their totals are counted at once."""
        self._take_fresh(fresh)
        for leaf, leaf_jobs in (running or {}).items():
            self._take_leaf(leaf, leaf_jobs, running_amounts.get(leaf) if running_amounts is not None else None)
        seen = set(self._candidates)
        for workload in admitted:
            chain = self._chain(workload.quota)
            if chain is None:
                continue
            count = len(seen)
            seen.add(workload.key)
            if len(seen) == count:
                continue  # a fresh job, or the same job twice: counted once
            leaf = chain.keys[0]
            later = self._later.get(leaf)
            if later is None:
                later = self._later[leaf] = []
            later.append(workload)
            sums = self._totals.setdefault(leaf, ({}, {}))[False]
            for resource, amount in workload.request.items():
                sums[resource] = sums.get(resource, 0) + amount
            sums[MAX_JOBS] = sums.get(MAX_JOBS, 0) + NANO
        for members in self._fresh.values():
            members.sort(key=sort_key)
        self._fresh_all = sorted((member for members in self._fresh.values() for member in members), key=sort_key)
        """Every fresh candidate in eviction order (what merging the leaves' lists gives: the order is total)."""
        for leaf in self._totals:
            self._refresh(leaf)

    # Index ------------------------------------------------------------------------------------------------
    def _take_leaf(
        self, leaf: str, members: Sequence[Workload], amounts: Sequence[Mapping[str, int]] | None = None
    ) -> None:
        """The admitted jobs of node ``leaf``, none of them also fresh or given twice (what the walk over
        ``admitted`` does job by job, with each sum at C speed over the jobs); ``amounts``, when given, are
        their requests' amounts in the same order (taken where the jobs were at hand)."""
        if self._chain(leaf) is None or not members:
            return
        self._later.setdefault(leaf, []).extend(members)
        self._count(leaf, False, list(map(request_amounts, members)) if amounts is None else amounts)

    def _count(self, leaf: str, fresh: bool, amounts: Sequence[Mapping[str, int]]) -> None:
        """Add jobs asking ``amounts`` to the leaf's running or fresh totals (one ``kube-queue/max-jobs`` a job),
        each resource summed at C speed over the jobs."""
        sums = self._totals.setdefault(leaf, ({}, {}))[fresh]
        add_amounts(sums, amounts)
        sums[MAX_JOBS] = sums.get(MAX_JOBS, 0) + NANO * len(amounts)

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

    def _take_fresh(self, fresh: Iterable[Workload]) -> None:
        """The jobs the pass admitted, in that order, as candidates by leaf; each leaf's totals summed at C speed
        over its jobs' requests (``kube-queue/max-jobs`` one a job)."""
        chain_of, candidates, by_leaf = self._chain, self._candidates, self._fresh
        amounts: dict[str, list[Mapping[str, int]]] = {}
        for index, workload in enumerate(fresh):
            chain = chain_of(workload.quota)
            if chain is None:
                continue
            candidate = Candidate(workload, chain, True, float(index))
            candidates[candidate.key] = candidate
            members = by_leaf.get(candidate.leaf)
            if members is None:
                members = by_leaf[candidate.leaf] = []
                amounts[candidate.leaf] = []
            members.append(candidate)
            amounts[candidate.leaf].append(request_amounts(workload))
        for leaf, asks in amounts.items():
            self._count(leaf, True, asks)

    def _running_of(self, leaf: str) -> list[Candidate]:
        """The leaf's admitted jobs as candidates, in eviction order (made on first use)."""
        members = self._running.get(leaf)
        if members is None:
            chain = self._chain(leaf)
            members = self._running[leaf] = []
            if chain is not None:
                for workload in self._later.pop(leaf, ()):
                    admitted_at = workload.admitted_at if workload.admitted_at is not None else workload.created
                    candidate = Candidate(workload, chain, False, admitted_at)
                    self._candidates[candidate.key] = candidate
                    members.append(candidate)
                members.sort(key=sort_key)
        return members

    def _drop(self, candidate: Candidate) -> None:
        """Take a candidate that a committed plan took out of the lists the plans walk, so that no later plan
        of the pass looks at it again (each list is in eviction order: it is found by bisection)."""
        leaf = candidate.leaf
        for members in ((self._fresh.get(leaf), self._fresh_all) if candidate.fresh else (self._running.get(leaf),)):
            if not members:
                continue
            index = bisect_left(members, candidate.sort, key=sort_key)
            while index < len(members) and members[index] is not candidate:
                index += 1
            if index < len(members):
                del members[index]

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
            if not change:
                continue
            gives, gave = resource in fresh, resource in old
            for key in chain.keys:
                excess = self._excess[key]
                excess[resource] = excess.get(resource, 0) + change
                if gives != gave:  # the leaf starts or stops having some to give
                    donors = self._donors[key].setdefault(resource, set())
                    if gives:
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
        for members in (self._fresh.get(leaf, ()), self._running_of(leaf)):
            for candidate in members:
                if candidate.priority >= priority:
                    break  # sorted by priority: the rest are not lower
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
        for fresh in (True, False):
            pick = self._fresh.get if fresh else self._running_of
            others = [members for name in ordered if (members := pick(name))]
            if len(others) == 1:
                yield from others[0]
            elif fresh and others:  # one walk over every fresh candidate, cheaper than merging many short lists
                for candidate in self._fresh_all:
                    if candidate.leaf in leaves:
                        yield candidate
            elif others:
                yield from heapq.merge(*others, key=sort_key)
            if priority is not None:
                for candidate in pick(leaf) or ():
                    if candidate.priority >= priority:
                        break
                    yield candidate

    # Planning ---------------------------------------------------------------------------------------------
    @property
    def used(self) -> Mapping[str, Resources]:
        """The usage in the reclaimer's view (after every committed plan)."""
        return self.used_after(len(self._moves))

    def used_after(self, count: int) -> Mapping[str, Resources]:
        """The usage after the first ``count`` committed plans (overlays over the usage before any plan; the
        latest one read is kept)."""
        known, view = self._latest
        if known == count:
            return view
        if known > count:
            known, view = 0, self._start
        moves = self._moves[known:count]
        taken = [workload for gone, _ in moves for workload in gone]
        if taken:
            view = shifted_view(self.tree, view, taken, -1)
        view = shifted_view(self.tree, view, [preemptor for _, preemptor in moves], +1)
        if count == len(self._moves):
            self._latest = (count, view)
        return view

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
        return borrows(self._mins[leaf], self._use[leaf], delta, (resource for _, resource, _ in blockers))

    @staticmethod
    def _reclaimed(blockers: Blockers, levels: int) -> tuple[tuple[str, ...], ...]:
        """Per depth ``meet`` of the preemptor's chain (``0 .. levels``): the resources reclaimed from a quota
        that meets the preemptor there, i.e. those (not ``kube-queue/max-jobs``, a cap that nobody is owed)
        that block it at that level or above when the plan starts (blockers only go away while it goes on)."""
        return tuple(
            tuple(sorted({resource for depth, resource, _ in blockers if depth >= meet and resource != MAX_JOBS}))
            for meet in range(levels + 1)
        )

    def _least_of(self, leaf: str) -> dict[str, int]:
        """The least any candidate of ``leaf`` holds of each resource that all of them hold. Candidates only
        leave the index, so a figure made once stays a lower bound for the ones left."""
        least = self._least.get(leaf)
        if least is None:
            jobs = [candidate.workload for candidate in self._fresh.get(leaf, ())]
            running = self._running.get(leaf)
            if running is not None:
                jobs.extend(candidate.workload for candidate in running)
            else:
                jobs.extend(self._later.get(leaf, ()))
            members = list(map(request_amounts, jobs))
            least = {name: amount for name, amount in least_amounts(members, members[0] if members else ()).items()
                     if amount > 0}
            self._least[leaf] = least
        return least

    def _keeps_none(self, leaf: str, guarded: tuple[str, ...], reclaimed: tuple[str, ...]) -> bool:
        """Whether no candidate of ``leaf`` passes :meth:`_keeps_min`: at a level in ``guarded``, what the level
        uses beyond its ``min`` of a reclaimed resource is less than the least any candidate holds of it. Usage
        only goes down while a plan takes candidates, so the answer holds for the rest of the plan."""
        least = self._least_of(leaf)
        if not least:
            return False
        for key in guarded:
            node_min = self._mins[key]
            if not node_min:
                continue
            usage = self._use[key]
            for resource in reclaimed:
                floor, need = node_min.get(resource), least.get(resource)
                if floor is not None and need is not None and usage.get(resource, 0) - floor < need:
                    return True
        return False

    def _keeps_min(self, candidate: Candidate, guarded: tuple[str, ...], reclaimed: tuple[str, ...]) -> bool:
        """Whether ``candidate`` (of another quota) may go: it holds a resource being reclaimed from its quota,
        and its eviction keeps each level in ``guarded`` (its quota's levels below the lowest common ancestor
        with the preemptor) at or above ``min`` in every reclaimed resource it holds. Resources nobody
        contends do not protect it, however far below ``min`` its quota is in them (docs/reclaim.md)."""
        delta = candidate.delta
        held = [(resource, delta[resource]) for resource in reclaimed if delta.get(resource, 0) > 0]
        return bool(held) and keeps_min(self._mins, self._use, guarded, held)
