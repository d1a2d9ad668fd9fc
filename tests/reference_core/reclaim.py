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

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from types import MappingProxyType

from tests.reference_core.reclaim_index import Candidate, ReclaimIndex
from webhook.api.names import MAX_JOBS
from webhook.core.chain_usage import shift_usage
from webhook.core.fit import check_fit, check_min
from webhook.core.quantity import NANO
from webhook.core.quota import QuotaNode, QuotaTree
from webhook.core.resources import Resources, total
from webhook.core.workload import Workload

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


class Reclaimer(ReclaimIndex):
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

    # Planning ---------------------------------------------------------------------------------------------
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
        chosen: list[Candidate] = []
        current = blockers
        fits = False
        spent = False
        for candidate in self._stream(chain, blockers, within, preemptor.priority if own else None):
            if candidate.key in self._gone:
                continue  # taken by an earlier plan: not a candidate, so not counted against the budget (6447c72)
            if self._budget is not None and self.visits >= self._budget:
                spent = True
                break
            self.visits += 1
            if candidate.key == preemptor.key:
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
        if chain.keys[0] in self._ordered:  # a Block quota's fresh jobs are ahead of its preemptor: kept in
            for candidate in self._fresh.get(chain.keys[0], ()):
                if candidate.key not in self._gone:
                    self._gone.add(candidate.key)
                    sums = self._totals[chain.keys[0]][True]
                    for resource, amount in candidate.delta.items():
                        sums[resource] -= amount
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
