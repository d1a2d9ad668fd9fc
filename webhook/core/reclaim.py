"""Reclaim: evict borrowers so that a quota gets back its guaranteed ``min`` (docs/reclaim.md).

A quota may use up to its ``max`` while others are idle; that use beyond ``min`` is *borrowed*. When a job
(the *preemptor*) does not fit although its quota would stay within ``min`` after admitting it
(:func:`webhook.core.fit.within_min`), the owner takes its guarantee back by evicting admitted jobs of other
quotas that borrow. The resources *being reclaimed* are those that block the preemptor when the plan starts
(never ``kube-queue/max-jobs``: a cap, not a guarantee); from a given quota, those that block it at the
lowest common ancestor of the two quotas or above (what the quota's jobs can free for it). The rules, in the
order they are applied:

* **Who may reclaim.** A preemptor that stays within ``min`` after admission at its leaf and at each
  ancestor where it competes with the victim's quota, i.e. every level of its chain below the lowest common
  ancestor with the victim. In the seed's two-level tree that is the preemptor's department, and
  :func:`webhook.core.fit.within_min` (leaf and every ancestor below the root) is exactly the condition; in
  deeper trees a team within its ``min`` may take capacity back from a sibling team that borrows, even
  while their department as a whole is over its own ``min``, but from another department only if its own
  department is within ``min`` too. Cross-quota reclaim does not look at priorities: the guarantee is owed
  whatever the priorities of the borrowers' jobs, which belong to other quotas with their own, unrelated
  priority scales.
* **Who may be evicted.** Admitted jobs of other leaf quotas, lowest priority first, then the most
  recently admitted (``admitted_at`` descending; a job without ``admitted_at`` counts as admitted when it
  was created), then namespace/name. A job is only taken when its eviction relieves a level and resource
  that still blocks the preemptor (it shares the blocking level and requests the blocking resource).
* **Borrowers only, never below min in what is reclaimed.** A job of another quota may go only if it holds
  a resource being reclaimed from its quota, and its eviction keeps its quota at or above ``min`` in every
  reclaimed resource it holds, at its leaf and at each ancestor below the lowest common ancestor with the
  preemptor (above that, the preemptor's own admission replaces what is freed). So its quota borrows that
  resource (uses more than its ``min`` of it by at least what the job holds). Resources that nobody
  contends do not protect it: a quota over ``min`` in CPU but under ``min`` in memory gives back a job that
  holds CPU and memory to a preemptor that lacks only CPU (its memory guarantee is not being taken; it can
  reclaim memory whenever it needs it). A quota under ``min`` in a contended resource keeps the jobs that
  hold it. ``kube-queue/max-jobs`` is a cap, not a guarantee: nobody is owed a job slot, so a preemptor
  blocked only by a job cap gets no reclaim (a job evicted for a slot would be owed it back just the same,
  and take it back: eviction ping-pong); the cap's blockers are relieved by the jobs taken for the other
  resources.
* **No more than needed.** Victims are taken until the preemptor fits; then each chosen victim, in reverse
  order of choice, is given back if the preemptor still fits without evicting it.
* **Only if it works.** When even the whole eligible set does not make the preemptor fit, nothing is
  evicted (the result is ``None``).
* **Inside one quota**, a job may also preempt strictly lower-priority jobs of its own leaf, but only when
  the leaf's attribute ``preempt-policy`` is ``PreemptLowerPriority``. Borrowers of other quotas are taken
  before the quota's own jobs. A preemptor within ``min`` at its leaf may take them as needed; any other
  preemptor only while the leaf uses more than its ``min`` of a resource that blocks the preemptor and the
  victim holds (checked before each eviction): a quota that borrows gives borrowed room to its
  higher-priority work, but a quota at its guarantee does not churn its running jobs for a job that would
  take it beyond ``min``; that job waits for its quota's jobs to finish. (Without this, a stream of large
  high-priority jobs evicts the same lower-priority jobs every time they get back in between two of them.)
* **Not yet written admissions give way first.** Jobs the same decision pass has just admitted (``fresh``,
  nothing written yet) are eligible on the same terms, and are taken before any running job: such a job is
  not evicted, it is *withheld* (:attr:`ReclaimPlan.withheld`) and simply stays queued. The borrower rule
  holds for it too (holding back what a quota below its ``min`` was just given, rather than evicting one of
  its running jobs, cost several times more evictions later on in the peer's replay). So capacity that
  frees up goes to a quota within its ``min`` (or to a higher-priority job of the same quota that may
  preempt) before a borrower, instead of being handed to the borrower and evicted from it a moment later.

"Fits" is :func:`webhook.core.fit.check_fit` with the same oversell rate as admission: with a rate above 1
reclaim frees capacity against ``max × rate`` too, so it evicts only what admission would otherwise refuse
(and pod-level quota still keeps running pods within ``max``).

The plan is atomic: the caller evicts the victims and admits the preemptor in the same step
(:attr:`ReclaimPlan.used_after` includes the preemptor). Admitting it in a later pass would let the evicted
jobs, created earlier, win the freed capacity back and start an eviction loop. Evicted jobs go back to their
queues at their original place (queue order depends on priority and creation time only).

A :class:`Reclaimer` plans many reclaims over one snapshot (one decision pass): chains, limits and
guarantees are computed once, candidate victims are indexed by leaf quota in eviction order, and each
committed plan updates the index in place. Asked to (``take_room``), it also gives a job that fits room
earlier plans left over, and keeps its quota within ``min``, a plan without victims. A preemptor that cannot
succeed is turned away cheaply: unknown quota, fits already, never fits, not entitled, blocked by job caps
only, or (before any candidate is looked at) not enough borrowed capacity under the levels that block it to
ever make it fit.
:func:`plan_reclaim` and :func:`explain_reclaim` are the one-shot forms; the sentences saying why there is no
plan are only written when asked for.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction
from operator import attrgetter
from types import MappingProxyType

from webhook.core.fit import check_fit, check_min, limits_of, validate_rate
from webhook.core.ledger import ChainTally, shift_usage
from webhook.core.quantity import NANO
from webhook.core.quota import PREEMPT_LOWER_PRIORITY, PREEMPT_POLICY, QuotaNode, QuotaTree
from webhook.core.resources import EMPTY, MAX_JOBS, Resources, total
from webhook.core.workload import Workload, WorkloadKey

__all__ = ["ReclaimPlan", "Reclaimer", "explain_reclaim", "plan_reclaim"]


@dataclass(frozen=True, slots=True)
class ReclaimPlan:
    """Whom to evict so that ``preemptor`` fits, and the usage afterwards."""

    preemptor: Workload
    victims: tuple[Workload, ...]
    """Admitted jobs to evict, in the order they were chosen (the first is the most evictable)."""
    reason: str
    """Who reclaims what from whom, for events and logs:
    ``root/Department-b reclaims cpu=10, memory=10Gi from root/Department-a by evicting Job/user-a/a4``."""
    used_after: Mapping[str, Resources]
    """Usage once the victims are evicted (and the withheld jobs held back) and the preemptor is admitted."""
    used_after_eviction: Mapping[str, Resources]
    """Usage once the victims are evicted and the withheld jobs held back, before the preemptor is admitted."""
    withheld: tuple[Workload, ...] = ()
    """Jobs admitted in the same pass but not written yet (the reclaimer's ``fresh`` jobs) that give way to
    the preemptor: they stay queued instead of being admitted; nothing is evicted for them."""


# Precomputed views -----------------------------------------------------------------------------------------


class _Chain:
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


class _Candidate:
    """An admitted job that a plan may take (evict, or withhold when ``fresh``)."""

    __slots__ = ("chain", "delta", "fresh", "key", "priority", "sort", "workload")

    def __init__(self, workload: Workload, chain: _Chain, fresh: bool, rank: float) -> None:
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


_sort_key = attrgetter("sort")

_Blockers = list[tuple[int, str, int]]
"""``(depth in the preemptor's chain, resource, how much too much)`` of every blocking level and resource."""


@dataclass(frozen=True, slots=True)
class _NoPlan:
    """Why there is no plan (the sentence is written by :meth:`Reclaimer.explain` only)."""

    why: str
    within: int = 0
    own: bool = False


_UNKNOWN, _FITS, _HOPELESS, _NOT_ENTITLED, _NOT_ENOUGH, _BUDGET = (
    "unknown", "fits", "hopeless", "not-entitled", "not-enough", "budget"
)
_NO_PLAN = {why: _NoPlan(why) for why in (_UNKNOWN, _FITS, _HOPELESS, _NOT_ENTITLED)}


def _reason_clauses(
    leaf: QuotaNode,
    preemptor: Workload,
    chosen: Iterable[tuple[Workload, str, bool, bool]],
    contested: tuple[str, ...],
) -> str:
    """``chosen``: ``(workload, its quota's full name, same quota, withheld)`` in order of choice."""
    groups: dict[tuple[str, bool, bool], list[Workload]] = {}
    for workload, quota, same, withheld in chosen:
        groups.setdefault((quota, same, withheld), []).append(workload)
    clauses: list[str] = []
    for (quota, same, withheld), members in groups.items():
        freed = total(member.request_with_count for member in members).only(contested)
        keys = ", ".join(f"{member.key} (priority {member.priority})" for member in members)
        if same and withheld:
            clauses.append(
                f"{leaf.full_name}: {preemptor.key} (priority {preemptor.priority}) goes ahead of lower-priority "
                f"{keys}, held back before they started, freeing {freed.describe()}"
            )
        elif same:
            clauses.append(
                f"{leaf.full_name}: {preemptor.key} (priority {preemptor.priority}) preempts "
                f"lower-priority {keys}, freeing {freed.describe()}"
            )
        elif withheld:
            clauses.append(f"{leaf.full_name} takes {freed.describe()} from {quota} ahead of {keys}, "
                           "held back before they started")
        else:
            clauses.append(f"{leaf.full_name} reclaims {freed.describe()} from {quota} by evicting {keys}")
    return "; ".join(clauses)


# The planner -----------------------------------------------------------------------------------------------


class Reclaimer:
    """Plans reclaims, one preemptor at a time, over one snapshot of usage and admitted jobs.

    ``used`` is the usage per node key that ``admitted`` and ``fresh`` jobs count in; ``admitted`` are the
    jobs that may be evicted, ``fresh`` the ones admitted by the same pass but not written yet (withheld
    instead of evicted, and taken first). :meth:`plan` never changes anything; :meth:`commit` carries a plan
    out in the reclaimer's view (its victims and withheld jobs leave, its preemptor counts), so that the next
    plan sees it. ``fresh`` jobs come in the order the pass admitted them; in the leaf quotas named in
    ``ordered`` (queue policy ``Block``) they are only withheld from the back (a job is held back only when
    every job the pass admitted after it in that quota is held back too), so no job runs while one ahead of it
    in its queue waits. ``budget`` bounds how many candidate victims all plans together may look at; once
    spent, :meth:`plan` answers ``None`` (:attr:`exhausted`).
    """

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
        self._chains: dict[str, _Chain | None] = {}
        self._candidates: dict[WorkloadKey, _Candidate] = {}
        self._running: dict[str, list[_Candidate]] = {}
        self._fresh: dict[str, list[_Candidate]] = {}
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
                members.sort(key=_sort_key)
        for leaf in self._totals:
            self._refresh(leaf)

    # Index ------------------------------------------------------------------------------------------------
    def _chain(self, quota: str) -> _Chain | None:
        """The chain of the quota named ``quota`` (any case; cached under the name as given too)."""
        try:
            return self._chains[quota]
        except KeyError:
            key = quota.lower()
            chain = self._chains.get(key)
            if chain is None and key in self.tree.nodes:
                chain = self._chains[key] = _Chain(self.tree.chain(key))
            self._chains[quota] = chain
            return chain

    def _index(self, workload: Workload, fresh: bool, rank: float) -> None:
        chain = self._chain(workload.quota)
        if chain is None:
            return
        candidate = _Candidate(workload, chain, fresh, rank)
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
    def _blockers(self, chain: _Chain, wanted: list[tuple[str, int]]) -> _Blockers:
        out: _Blockers = []
        for depth, key in enumerate(chain.keys):
            limits, usage = self._limits[key], self._use[key]
            for resource, amount in wanted:
                limit = limits.get(resource)
                if limit is not None:
                    over = usage.get(resource, 0) + amount - limit
                    if over > 0:
                        out.append((depth, resource, over))
        return out

    def _fits(self, chain: _Chain, wanted: list[tuple[str, int]]) -> bool:
        for key in chain.keys:
            limits, usage = self._limits[key], self._use[key]
            for resource, amount in wanted:
                limit = limits.get(resource)
                if limit is not None and usage.get(resource, 0) + amount > limit:
                    return False
        return True

    def _within(self, chain: _Chain, request: Resources) -> int:
        """How many levels of the chain, from the leaf up, stay within ``min`` after admitting a job that
        requests ``request`` (:func:`webhook.core.fit.check_min`, level by level)."""
        for depth in range(chain.competing):
            key = chain.keys[depth]
            guaranteed, usage = self._guaranteed[key], self._use[key]
            for resource, amount in request.items():
                if amount > 0:
                    limit = guaranteed.get(resource)  # never max-jobs
                    if limit is not None and usage.get(resource, 0) + amount > limit:
                        return depth
        return len(chain.keys)

    def _own_lower(self, chain: _Chain, priority: int) -> dict[str, int]:
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

    def _may_work(self, chain: _Chain, blockers: _Blockers, within: int, own: dict[str, int] | None) -> bool:
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
        self, chain: _Chain, blockers: _Blockers, within: int, priority: int | None
    ) -> Iterator[_Candidate]:
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
                yield from heapq.merge(*others, key=_sort_key)
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

    def _lca(self, candidate: _Candidate, chain: _Chain) -> tuple[int, tuple[str, ...]]:
        """``(depth in the preemptor's chain of the lowest common ancestor, the candidate's levels below it)``."""
        keys = candidate.chain.keys
        for index, key in enumerate(keys):
            depth = chain.depth.get(key)
            if depth is not None:
                return depth, keys[:index]
        return len(chain.keys), keys  # pragma: no cover - every chain ends at the root

    def _borrows(self, leaf: str, delta: Mapping[str, int], blockers: _Blockers) -> bool:
        """Whether ``leaf`` uses more than its ``min`` of a resource that blocks the preemptor and that a
        candidate holding ``delta`` holds (a resource without ``min`` is guaranteed zero)."""
        mins, usage = self._mins[leaf], self._use[leaf]
        return any(
            delta.get(resource, 0) > 0 and usage.get(resource, 0) > mins.get(resource, 0)
            for _, resource, _ in blockers
        )

    @staticmethod
    def _reclaimed(blockers: _Blockers, levels: int) -> tuple[tuple[str, ...], ...]:
        """Per depth ``meet`` of the preemptor's chain (``0 .. levels``): the resources reclaimed from a quota
        that meets the preemptor there, i.e. those (not ``kube-queue/max-jobs``, a cap that nobody is owed)
        that block it at that level or above when the plan starts (blockers only go away while it goes on)."""
        return tuple(
            tuple(sorted({resource for depth, resource, _ in blockers if depth >= meet and resource != MAX_JOBS}))
            for meet in range(levels + 1)
        )

    def _keeps_min(self, candidate: _Candidate, guarded: tuple[str, ...], reclaimed: tuple[str, ...]) -> bool:
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

    def _attempt(self, preemptor: Workload, explain: bool, take_room: bool = False) -> ReclaimPlan | _NoPlan:
        """The plan, or why there is none. Without ``explain`` the cheapest refusal comes first (the kind of
        refusal does not matter then); with it, refusals come in the order :meth:`explain` words them."""
        chain = self._chain(preemptor.quota)
        if chain is None:
            return _NO_PLAN[_UNKNOWN]
        request = preemptor.request
        own = chain.own
        within = self._within(chain, request)
        if within == 0 and not own and not explain:
            return _NO_PLAN[_NOT_ENTITLED]
        wanted = sorted((name, amount) for name, amount in request.items() if amount > 0 and name != MAX_JOBS)
        wanted.append((MAX_JOBS, request.get_or_zero(MAX_JOBS) + NANO))
        blockers = self._blockers(chain, wanted)
        if not blockers:
            if take_room and within == len(chain.keys):
                return ReclaimPlan(
                    preemptor=preemptor,
                    victims=(),
                    reason=f"{chain.leaf.full_name} takes room left over, within its min",
                    used_after=MappingProxyType(shift_usage(self.tree, self._used, (preemptor,), +1)),
                    used_after_eviction=MappingProxyType(dict(self._used)),
                )
            return _NO_PLAN[_FITS]
        amounts = dict(wanted)
        if any(amounts[resource] > self._limits[chain.keys[depth]][resource] for depth, resource, _ in blockers):
            return _NO_PLAN[_HOPELESS]
        if within == 0 and not own:
            return _NO_PLAN[_NOT_ENTITLED]
        if self.exhausted:
            return _NoPlan(_BUDGET, within, own)
        own_lower = self._own_lower(chain, preemptor.priority) if own else None
        if not self._may_work(chain, blockers, within, own_lower):
            return _NoPlan(_NOT_ENOUGH, within, own)

        reclaimed = self._reclaimed(blockers, len(chain.keys))
        if own_lower is None and not reclaimed[1]:
            return _NoPlan(_NOT_ENOUGH, within, own)  # only job caps block it: nobody is owed a job slot
        contested = tuple(sorted({resource for _, resource, _ in blockers}))
        meets: dict[str, tuple[int, tuple[str, ...]]] = {}
        stuck: set[str] = set()
        """Ordered leaves whose last fresh job still admitted was passed over: no earlier one may go."""
        chosen: list[_Candidate] = []
        current = blockers
        fits = False
        spent = False
        for candidate in self._stream(chain, blockers, within, preemptor.priority if own else None):
            if self._budget is not None and self.visits >= self._budget:
                spent = True
                break
            self.visits += 1
            if candidate.key in self._gone or candidate.key == preemptor.key:
                continue
            same = candidate.chain is chain
            guarded: tuple[str, ...] = ()
            if same:
                meet = 0
            else:
                place = candidate.chain.keys[0]
                found = meets.get(place)
                if found is None:
                    found = meets[place] = self._lca(candidate, chain)
                meet, guarded = found
            delta = candidate.delta
            if not any(depth >= meet and delta.get(resource, 0) > 0 for depth, resource, _ in current):
                take = False
            elif same:
                take = bool(within) or self._borrows(chain.keys[0], delta, current)
            else:
                take = self._keeps_min(candidate, guarded, reclaimed[meet])
            if candidate.fresh and candidate.chain.keys[0] in self._ordered:
                leaf_key = candidate.chain.keys[0]
                if leaf_key in stuck:
                    take = False
                elif not take:
                    stuck.add(leaf_key)  # the jobs ahead of it in its Block queue stay admitted too
            if not take:
                continue
            self._use.shift(candidate.chain.keys, delta, -1)
            chosen.append(candidate)
            current = self._blockers(chain, wanted)
            if not current:
                fits = True
                break
        if not fits:
            for candidate in chosen:
                self._use.shift(candidate.chain.keys, candidate.delta, +1)
            return _NoPlan(_BUDGET if spent else _NOT_ENOUGH, within, own)

        for index in range(len(chosen) - 1, -1, -1):
            candidate = chosen[index]
            if candidate.fresh and candidate.chain.keys[0] in self._ordered and any(
                other.fresh and other.chain is candidate.chain and other.sort > candidate.sort for other in chosen
            ):
                continue  # a job ahead of it in its Block queue stays held back: so does it
            self._use.shift(candidate.chain.keys, candidate.delta, +1)
            if self._fits(chain, wanted):
                del chosen[index]
            else:
                self._use.shift(candidate.chain.keys, candidate.delta, -1)
        for candidate in chosen:
            self._use.shift(candidate.chain.keys, candidate.delta, +1)

        taken = [candidate.workload for candidate in chosen]
        after_eviction = shift_usage(self.tree, self._used, taken, -1)
        reason = _reason_clauses(
            chain.leaf,
            preemptor,
            (
                (candidate.workload, candidate.chain.leaf.full_name, candidate.chain is chain, candidate.fresh)
                for candidate in chosen
            ),
            contested,
        )
        return ReclaimPlan(
            preemptor=preemptor,
            victims=tuple(candidate.workload for candidate in chosen if not candidate.fresh),
            reason=reason,
            used_after=MappingProxyType(shift_usage(self.tree, after_eviction, (preemptor,), +1)),
            used_after_eviction=MappingProxyType(after_eviction),
            withheld=tuple(candidate.workload for candidate in chosen if candidate.fresh),
        )

    def plan(self, preemptor: Workload, *, take_room: bool = False) -> ReclaimPlan | None:
        """Whom to evict so that ``preemptor`` (a waiting job) fits, or ``None`` (see the module's rules).

        With ``take_room``, a preemptor that fits already and stays within ``min`` at every level below the
        root gets a plan without victims (room that earlier plans left over: it is owed to a quota within
        its guarantee, and nobody could reclaim it from such a job), instead of ``None``."""
        attempt = self._attempt(preemptor, explain=False, take_room=take_room)
        return attempt if isinstance(attempt, ReclaimPlan) else None

    def explain(self, preemptor: Workload) -> str:
        """The plan's :attr:`~ReclaimPlan.reason`, or one line saying why nothing can be reclaimed."""
        attempt = self._attempt(preemptor, explain=True)
        if isinstance(attempt, ReclaimPlan):
            return attempt.reason
        return self._sentence(preemptor, attempt)

    def _sentence(self, preemptor: Workload, attempt: _NoPlan) -> str:
        why = attempt.why
        if why == _UNKNOWN:
            return f"no reclaim: quota {preemptor.quota!r} of {preemptor.key} is not in the ElasticQuotaTree"
        if why == _FITS:
            return f"no reclaim: {preemptor.key} fits without evicting anything"
        fit = check_fit(self.tree, self._used, preemptor, self.rate)
        if why == _HOPELESS:
            hopeless = next(blocker for blocker in fit.blockers if blocker.never_fits)
            return f"no reclaim: evicting cannot help, {hopeless.explain()}"
        entitled = check_min(self.tree, self._used, preemptor)
        if why == _NOT_ENTITLED:
            return (
                f"no reclaim: {preemptor.key} would take its quota beyond the guaranteed min "
                f"({entitled.explain()}), so it may only use idle capacity"
            )
        if why == _BUDGET:
            return f"no reclaim tried for {preemptor.key}: this pass's reclaim budget is spent (next pass tries again)"
        if not attempt.own and all(blocker.resource == MAX_JOBS for blocker in fit.blockers):
            return (
                f"no reclaim: {preemptor.key} waits for a job slot ({fit.explain()}); {MAX_JOBS} is a cap, "
                "not a guarantee, so no job is evicted for a slot"
            )
        scopes = []
        if attempt.within:
            scopes.append("borrowers of other quotas, none taken below its min in what is reclaimed")
        if attempt.own:
            scopes.append(
                "lower-priority jobs of its own quota"
                + ("" if attempt.within else " while the quota uses more than its min of what blocks it")
            )
        limit = "" if entitled.fits else f"; it may only reclaim below the level where {entitled.explain()}"
        return (
            f"no reclaim: evicting every eligible job ({' and '.join(scopes)}) would not make "
            f"{preemptor.key} fit: {fit.explain()}{limit}"
        )

    def commit(self, plan: ReclaimPlan) -> None:
        """Carry ``plan`` (made by :meth:`plan` on the current view) out in the view: its victims and withheld
        jobs stop counting and are no longer candidates, its preemptor counts (it is never a candidate)."""
        touched: set[str] = set()
        for workload in (*plan.victims, *plan.withheld):
            candidate = self._candidates[workload.key]
            self._gone.add(workload.key)
            self._use.shift(candidate.chain.keys, candidate.delta, -1)
            leaf = candidate.chain.keys[0]
            sums = self._totals[leaf][candidate.fresh]
            for resource, amount in candidate.delta.items():
                sums[resource] -= amount
            touched.add(leaf)
        chain = self._chain(plan.preemptor.quota)
        assert chain is not None
        self._use.shift(chain.keys, dict(plan.preemptor.request_with_count.items()), +1)
        touched.add(chain.keys[0])
        self._used = dict(plan.used_after)
        for leaf in touched:
            if leaf in self._totals:
                self._refresh(leaf)


def plan_reclaim(
    tree: QuotaTree,
    used: Mapping[str, Resources],
    admitted: Iterable[Workload],
    preemptor: Workload,
    oversell_rate: Fraction | int,
) -> ReclaimPlan | None:
    """Whom to evict so that ``preemptor`` fits (see the module's rules), or ``None`` when reclaim does not
    apply (it fits already, it is not entitled, its quota is unknown, or no allowed set of evictions makes
    it fit). ``admitted`` are the currently admitted jobs whose usage ``used`` counts."""
    return Reclaimer(tree, used, admitted, oversell_rate).plan(preemptor)


def explain_reclaim(
    tree: QuotaTree,
    used: Mapping[str, Resources],
    admitted: Iterable[Workload],
    preemptor: Workload,
    oversell_rate: Fraction | int,
) -> str:
    """The plan's :attr:`~ReclaimPlan.reason`, or one line saying why nothing can be reclaimed for
    ``preemptor`` (for ``kq why`` and logs)."""
    return Reclaimer(tree, used, admitted, oversell_rate).explain(preemptor)
