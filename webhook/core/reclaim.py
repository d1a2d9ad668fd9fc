"""Reclaim: evict borrowers so that a quota gets back its guaranteed ``min`` (MISSION.md part 4).

A quota may use up to its ``max`` while others are idle; that use beyond ``min`` is *borrowed*. When a job
(the *preemptor*) does not fit although its quota would stay within ``min`` after admitting it
(:func:`webhook.core.fit.within_min`), the owner takes its guarantee back by evicting admitted jobs of other
quotas that borrow. The rules, in the order they are applied:

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
* **Never below min.** Evicting a job must not take its quota below ``min`` in any resource the job holds,
  at its leaf and at each ancestor below the lowest common ancestor with the preemptor (above that, the
  preemptor's own admission replaces what is freed). A quota that is over ``min`` in CPU but at ``min`` in
  GPU therefore keeps a job that holds GPUs. ``kube-queue/max-jobs`` is a cap, not a guarantee: ignored here.
* **No more than needed.** Victims are taken until the preemptor fits; then each chosen victim, in reverse
  order of choice, is given back if the preemptor still fits without evicting it.
* **Only if it works.** When even the whole eligible set does not make the preemptor fit, nothing is
  evicted (the result is ``None``).
* **Inside one quota**, a job may also preempt strictly lower-priority jobs of its own leaf, but only when
  the leaf's attribute ``preempt-policy`` is ``PreemptLowerPriority``; this does not need the preemptor to
  be within ``min``. Borrowers of other quotas are taken before the quota's own jobs.

"Fits" is :func:`webhook.core.fit.check_fit` with the same oversell rate as admission: with a rate above 1
reclaim frees capacity against ``max × rate`` too, so it evicts only what admission would otherwise refuse
(and pod-level quota still keeps running pods within ``max``).

The plan is atomic: the caller evicts the victims and admits the preemptor in the same step
(:attr:`ReclaimPlan.used_after` includes the preemptor). Admitting it in a later pass would let the evicted
jobs, created earlier, win the freed capacity back and start an eviction loop. Evicted jobs go back to their
queues at their original place (queue order depends on priority and creation time only).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from types import MappingProxyType

from webhook.core.fit import (
    Blocker,
    add_usage,
    check_fit,
    check_min,
    quota_chain,
    remove_usage,
    validate_rate,
)
from webhook.core.quota import PREEMPT_LOWER_PRIORITY, PREEMPT_POLICY, QuotaNode, QuotaTree
from webhook.core.resources import EMPTY, MAX_JOBS, Resources, total
from webhook.core.workload import Workload

__all__ = ["ReclaimPlan", "explain_reclaim", "plan_reclaim"]


@dataclass(frozen=True, slots=True)
class ReclaimPlan:
    """Whom to evict so that ``preemptor`` fits, and the usage afterwards."""

    preemptor: Workload
    victims: tuple[Workload, ...]
    """In the order they were chosen (the first is the most evictable)."""
    reason: str
    """Who reclaims what from whom, for events and logs:
    ``root/Department-b reclaims cpu=10, memory=10Gi from root/Department-a by evicting Job/user-a/a4``."""
    used_after: Mapping[str, Resources]
    """Usage once the victims are evicted and the preemptor is admitted."""
    used_after_eviction: Mapping[str, Resources]
    """Usage once the victims are evicted, before the preemptor is admitted."""


@dataclass(frozen=True, slots=True)
class _Candidate:
    workload: Workload
    chain: tuple[QuotaNode, ...]
    guarded: tuple[QuotaNode, ...]
    """Levels of the victim's chain below the lowest common ancestor with the preemptor (min applies)."""
    same_quota: bool

    @property
    def sort_key(self) -> tuple[bool, int, float, str, str]:
        workload = self.workload
        admitted_at = workload.admitted_at if workload.admitted_at is not None else workload.created
        return (self.same_quota, workload.priority, -admitted_at, workload.key.namespace, workload.key.name)


def _relieves(candidate: _Candidate, blockers: tuple[Blocker, ...]) -> bool:
    names = {node.full_name for node in candidate.chain}
    request = candidate.workload.request_with_count
    return any(blocker.quota in names and request.get_or_zero(blocker.resource) > 0 for blocker in blockers)


def _keeps_min(candidate: _Candidate, used: Mapping[str, Resources]) -> bool:
    request = candidate.workload.request
    for node in candidate.guarded:
        usage = used.get(node.key, EMPTY)
        for resource, amount in request.items():
            if amount <= 0 or resource == MAX_JOBS:
                continue
            guaranteed = node.min.get(resource)
            if guaranteed is not None and usage.get_or_zero(resource) - amount < guaranteed:
                return False
    return True


def _reason(
    preemptor: Workload,
    leaf: QuotaNode,
    victims: list[_Candidate],
    contested: tuple[str, ...],
) -> str:
    clauses: list[str] = []
    groups: dict[str, list[_Candidate]] = {}
    for victim in victims:
        groups.setdefault(victim.chain[0].full_name, []).append(victim)
    for quota, members in groups.items():
        freed = total(member.workload.request_with_count for member in members).only(contested)
        keys = ", ".join(f"{member.workload.key} (priority {member.workload.priority})" for member in members)
        if members[0].same_quota:
            clauses.append(
                f"{leaf.full_name}: {preemptor.key} (priority {preemptor.priority}) preempts "
                f"lower-priority {keys}, freeing {freed.describe()}"
            )
        else:
            clauses.append(f"{leaf.full_name} reclaims {freed.describe()} from {quota} by evicting {keys}")
    return "; ".join(clauses)


def _plan(
    tree: QuotaTree,
    used: Mapping[str, Resources],
    admitted: Iterable[Workload],
    preemptor: Workload,
    oversell_rate: Fraction | int,
) -> ReclaimPlan | str:
    """The plan, or a sentence saying why there is none."""
    rate = validate_rate(oversell_rate)
    chain = quota_chain(tree, preemptor.quota)
    if chain is None:
        return f"no reclaim: quota {preemptor.quota!r} of {preemptor.key} is not in the ElasticQuotaTree"
    leaf = chain[0]
    fit = check_fit(tree, used, preemptor, rate)
    if fit.fits:
        return f"no reclaim: {preemptor.key} fits without evicting anything"
    hopeless = [blocker for blocker in fit.blockers if blocker.never_fits]
    if hopeless:
        return f"no reclaim: evicting cannot help, {hopeless[0].explain()}"
    entitled = check_min(tree, used, preemptor)
    short = {blocker.quota for blocker in entitled.blockers}
    # How many levels of the preemptor's chain, from the leaf up, stay within min after its admission.
    within = next((depth for depth, node in enumerate(chain) if node.full_name in short), len(chain))
    preempt_own = leaf.attributes.get(PREEMPT_POLICY) == PREEMPT_LOWER_PRIORITY
    if within == 0 and not preempt_own:
        return (
            f"no reclaim: {preemptor.key} would take its quota beyond the guaranteed min "
            f"({entitled.explain()}), so it may only use idle capacity"
        )

    depth_of = {node.key: depth for depth, node in enumerate(chain)}
    candidates: list[_Candidate] = []
    for workload in admitted:
        if workload.key == preemptor.key:
            continue
        victim_chain = quota_chain(tree, workload.quota)
        if victim_chain is None:
            continue
        same_quota = victim_chain[0].key == leaf.key
        if same_quota:
            if not (preempt_own and workload.priority < preemptor.priority):
                continue
        else:
            meet = next(depth_of[node.key] for node in victim_chain if node.key in depth_of)
            if within < meet:
                continue  # the preemptor is over min at a level it would take capacity back through
        guarded = tuple(node for node in victim_chain if node.key not in depth_of)
        candidates.append(_Candidate(workload, victim_chain, guarded, same_quota))
    candidates.sort(key=lambda candidate: candidate.sort_key)

    contested = tuple(sorted({blocker.resource for blocker in fit.blockers}))
    current: Mapping[str, Resources] = used
    blockers = fit.blockers
    chosen: list[_Candidate] = []
    fits = False
    for candidate in candidates:
        if not _relieves(candidate, blockers):
            continue
        if not candidate.same_quota and not _keeps_min(candidate, current):
            continue
        current = remove_usage(tree, current, candidate.workload)
        chosen.append(candidate)
        after = check_fit(tree, current, preemptor, rate)
        if after.fits:
            fits = True
            break
        blockers = after.blockers
    if not fits:
        scopes = []
        if within:
            scopes.append("borrowers of other quotas, none taken below its min")
        if preempt_own:
            scopes.append("lower-priority jobs of its own quota")
        limit = "" if entitled.fits else f"; it may only reclaim below the level where {entitled.explain()}"
        return (
            f"no reclaim: evicting every eligible job ({' and '.join(scopes)}) would not make "
            f"{preemptor.key} fit: {fit.explain()}{limit}"
        )

    for index in range(len(chosen) - 1, -1, -1):
        restored = add_usage(tree, current, chosen[index].workload)
        if check_fit(tree, restored, preemptor, rate).fits:
            current = restored
            del chosen[index]

    return ReclaimPlan(
        preemptor=preemptor,
        victims=tuple(candidate.workload for candidate in chosen),
        reason=_reason(preemptor, leaf, chosen, contested),
        used_after=MappingProxyType(add_usage(tree, current, preemptor)),
        used_after_eviction=MappingProxyType(dict(current)),
    )


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
    plan = _plan(tree, used, admitted, preemptor, oversell_rate)
    return plan if isinstance(plan, ReclaimPlan) else None


def explain_reclaim(
    tree: QuotaTree,
    used: Mapping[str, Resources],
    admitted: Iterable[Workload],
    preemptor: Workload,
    oversell_rate: Fraction | int,
) -> str:
    """The plan's :attr:`~ReclaimPlan.reason`, or one line saying why nothing can be reclaimed for
    ``preemptor`` (for ``kq why`` and logs)."""
    plan = _plan(tree, used, admitted, preemptor, oversell_rate)
    return plan.reason if isinstance(plan, ReclaimPlan) else plan
