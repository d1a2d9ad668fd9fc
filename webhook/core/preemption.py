"""Which pods kube-scheduler's preemption may take for a pod of a quota (docs/pod-quota.md, "Preemption").

kube-scheduler's DefaultPreemption picks, for each candidate node, lower-priority pods whose removal lets the
preemptor fit that node; it knows nothing of quotas. Before it evicts anyone it asks the extender (its
``preemptVerb``), which hands each node's set to :meth:`PreemptionJudge.judge`. A node keeps its set whole or
not at all: the scheduler chose the set so that the pod fits the node, and a part of it may not be enough.

The rules are job reclaim's (docs/reclaim.md), for pods, from :mod:`webhook.core.guarantee`:

* **No quota, no quota rule.** Without a usable tree, or for a preemptor whose namespace no leaf lists, only
  Kubernetes' priorities decide. A victim whose namespace no leaf lists may go: no quota is owed it.
* **The preemptor's own quota** (its leaf): a victim may go only when the leaf sets ``preempt-policy:
  PreemptLowerPriority``, the victim's priority is strictly lower, and the preemptor stays within its
  leaf's ``min`` - or, beyond it, the leaf uses more than its ``min`` of a contended resource the victim
  holds (checked victim by victim in eviction order: lowest priority, then newest). A quota at its
  guarantee does not churn its own running pods for work that would take it beyond ``min``.
* **Another quota**: only for a preemptor that stays within its ``min`` at every level below the lowest
  common ancestor of the two quotas; only a victim that holds a contended resource; and only while taking
  the node's victims leaves every level of the victim's quota below that ancestor at or above ``min`` in
  each contended resource they hold. Resources nobody contends do not protect it.
* **Always within max**: after the node's victims go, the preemptor must fit ``max`` at every level of its
  chain (pod-level quota, :func:`webhook.core.podquota.pod_quota_blockers`); otherwise the extender's filter
  would refuse it on that node anyway and the victims would be evicted for nothing. A preemptor no queued
  job accounts for (a Deployment's pod) must also fit the room admitted jobs leave (:func:`held_room_blockers`).

*Contended* resources are every resource the preemptor requests (a positive amount; never
``kube-queue/max-jobs``): the node lacks some of them, but which ones only the scheduler knows, so a victim's
quota is protected in each. *Usage* is pod-level usage (bound, unfinished pods and the extender's assumed
placements, :mod:`webhook.core.podquota`), what the extender counts; the preemptor's own placement is left
out by the caller.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from webhook.core.chain_usage import ChainTally
from webhook.core.guarantee import borrows, guaranteed, guarded_min, keeps_min
from webhook.core.podquota import (
    MutableUsage,
    QuotaBlocker,
    Usage,
    charge,
    checked,
    explain_blockers,
    pod_quota_blockers,
    quota_key,
)
from webhook.core.quantity import format_quantity
from webhook.core.quota import PREEMPT_LOWER_PRIORITY, PREEMPT_POLICY, QuotaTree
from webhook.core.resources import is_binary_resource

__all__ = ["PodClaim", "PreemptionJudge", "PreemptionVerdict", "held_room_blockers", "judge_preemption"]


@dataclass(frozen=True, slots=True)
class PodClaim:
    """A pod as the preemption rules read it: where it is, its priority, its request (nano-units) and its
    creation time (epoch seconds; the newest of equal priority goes first)."""

    namespace: str
    name: str
    request: Mapping[str, int]
    priority: int = 0
    created: float = 0.0

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class PreemptionVerdict:
    """Whether a node's victims may go, and why (or why not), in one line for the log."""

    allowed: bool
    reason: str


def _fmt(resource: str, amount: int) -> str:
    return format_quantity(amount, is_binary_resource(resource))


class PreemptionJudge:
    """The rules for one preemptor over one usage snapshot (``usages`` are added up, as
    :func:`~webhook.core.podquota.pod_quota_blockers` adds them); :meth:`judge` answers for one node's victims.
    What does not depend on the victims (the preemptor's chain, how far up it stays within ``min``, the
    usage per node) is computed once, for the many candidate nodes of one request."""

    def __init__(self, tree: QuotaTree | None, preemptor: PodClaim, *usages: Usage) -> None:
        self.tree = tree
        self.preemptor = preemptor
        self.usages = usages
        self.leaf = None if tree is None else quota_key(tree, preemptor.namespace)
        self.wanted = checked(preemptor.request)
        self.contended = tuple(resource for resource, _ in self.wanted)
        self._use = ChainTally()
        self._mins: dict[str, dict[str, int]] = {}
        self.keys: tuple[str, ...] = ()
        self.within = 0
        """How many levels of the preemptor's chain, from the leaf up, stay within ``min`` once it is admitted."""
        self.own = False
        """Whether its leaf lets a pod preempt the leaf's lower-priority pods (``preempt-policy``)."""
        self._verdicts: dict[tuple[tuple[str, tuple[tuple[str, int], ...], int, float], ...], PreemptionVerdict] = {}
        """Verdicts by what they read of the victims: candidate nodes often hold victims of the same shapes
        (pods of one Deployment or Job), judged once."""
        if tree is None or self.leaf is None:
            return
        for key, node in tree.nodes.items():
            self._mins[key] = guarded_min(node)
            sums: dict[str, int] = {}
            for usage in usages:
                for resource, amount in usage.get(key, {}).items():
                    sums[resource] = sums.get(resource, 0) + amount
            self._use[key] = sums
        chain = tree.chain(self.leaf)
        self.keys = tuple(node.key for node in chain)
        competing = len(chain) - 1 if len(chain) > 1 else len(chain)
        owed = {node.key: guaranteed(node) for node in chain}
        self.within = self._use.within(self.keys, competing, self.wanted, owed)
        self.own = chain[0].attributes.get(PREEMPT_POLICY) == PREEMPT_LOWER_PRIORITY

    def judge(self, victims: Sequence[PodClaim]) -> PreemptionVerdict:
        """Whether all of ``victims`` (one node's) may go for the preemptor (see the module's rules). Victims
        alike in all the rules read - namespace, request, priority, and the creation time of pods of the
        preemptor's own quota (their order) - get the verdict given first (its reason names that node's
        victim)."""
        tree, leaf = self.tree, self.leaf
        shape = tuple(sorted(
            (claim.namespace, tuple(sorted(claim.request.items())), claim.priority,
             claim.created if tree is not None and leaf is not None and quota_key(tree, claim.namespace) == leaf
             else 0.0)
            for claim in victims
        ))
        verdict = self._verdicts.get(shape)
        if verdict is None:
            verdict = self._verdicts[shape] = self._judge(victims)
        return verdict

    def _judge(self, victims: Sequence[PodClaim]) -> PreemptionVerdict:
        preemptor = self.preemptor
        tree = self.tree
        if not victims:
            return PreemptionVerdict(False, "the scheduler named no victim on this node")
        if tree is None:
            return PreemptionVerdict(True, "no quota tree: Kubernetes' priorities alone decide")
        if self.leaf is None:
            return PreemptionVerdict(True, f"{preemptor.key} is under no quota: Kubernetes' priorities alone decide")
        leaf = tree.nodes[self.leaf]
        own: list[PodClaim] = []
        others: list[tuple[PodClaim, tuple[str, ...]]] = []
        removed = ChainTally()
        for victim in victims:
            victim_leaf = quota_key(tree, victim.namespace)
            if victim_leaf is None:
                continue  # no quota is owed it
            keys = tuple(node.key for node in tree.chain(victim_leaf))
            removed.shift(keys, dict(checked(victim.request)), +1)
            if victim_leaf == self.leaf:
                own.append(victim)
            else:
                others.append((victim, keys))
        refusal = self._own_quota(leaf.full_name, own) or self._other_quotas(others, removed)
        if refusal:
            return PreemptionVerdict(False, refusal)
        taken = {key: {resource: -amount for resource, amount in amounts.items()} for key, amounts in removed.items()}
        blockers = pod_quota_blockers(tree, self.leaf, preemptor.request, *self.usages, taken)
        if blockers:
            return PreemptionVerdict(
                False,
                f"{preemptor.key} would still be over its quota with these victims gone: {explain_blockers(blockers)}",
            )
        return PreemptionVerdict(
            True, f"{len(victims)} victim(s) may go for {preemptor.key} ({leaf.full_name}), first {victims[0].key}"
        )

    def _own_quota(self, leaf_name: str, own: list[PodClaim]) -> str:
        """Why a victim of the preemptor's own leaf may not go (``""`` when all may)."""
        if not own:
            return ""
        preemptor = self.preemptor
        if not self.own:
            return (
                f"{own[0].key} is in {leaf_name}, the quota of {preemptor.key}, which does not set "
                f"{PREEMPT_POLICY}: {PREEMPT_LOWER_PRIORITY}: a pod preempts no pod of its own quota otherwise"
            )
        for victim in own:
            if victim.priority >= preemptor.priority:
                return (
                    f"{victim.key} (priority {victim.priority}) is not of lower priority than {preemptor.key} "
                    f"(priority {preemptor.priority}) in their quota {leaf_name}"
                )
        if self.within:
            return ""
        leaf = self.keys[0]
        usage = dict(self._use[leaf])
        for victim in sorted(own, key=lambda claim: (claim.priority, -claim.created, claim.key)):
            if not borrows(self._mins[leaf], usage, victim.request, self.contended):
                return (
                    f"{preemptor.key} would take {leaf_name} beyond its min, and {leaf_name} does not use more "
                    f"than its min of what {victim.key} holds of {', '.join(self.contended)}: a quota at its "
                    "guarantee does not preempt its own pods for work beyond it"
                )
            for resource, amount in victim.request.items():
                usage[resource] = usage.get(resource, 0) - amount
        return ""

    def _other_quotas(self, others: list[tuple[PodClaim, tuple[str, ...]]], removed: ChainTally) -> str:
        """Why a victim of another quota may not go (``""`` when all may). ``removed``: what all the node's
        victims hold, by node key."""
        if not others:
            return ""
        assert self.tree is not None
        nodes = self.tree.nodes
        depth = {key: index for index, key in enumerate(self.keys)}
        after = ChainTally({key: dict(usage) for key, usage in self._use.items()})
        for key, amounts in removed.items():
            after.shift((key,), amounts, -1)
        for victim, keys in others:
            index = next(i for i, key in enumerate(keys) if key in depth)
            meet, guarded = depth[keys[index]], keys[:index]
            if self.within < meet:
                beyond = nodes[self.keys[self.within]].full_name
                return (
                    f"{self.preemptor.key} would take {beyond} beyond its guaranteed min: it may take pods of "
                    f"another quota ({victim.key}, {nodes[keys[0]].full_name}) only within its min"
                )
            held = [(resource, victim.request[resource]) for resource in self.contended
                    if victim.request.get(resource, 0) > 0]
            if not held:
                return (
                    f"{victim.key} ({nodes[keys[0]].full_name}) holds none of what {self.preemptor.key} asks for "
                    f"({', '.join(self.contended) or 'nothing'})"
                )
            after.shift(guarded, dict(held), +1)  # keeps_min takes it away again: what is left once all go
            kept = keeps_min(self._mins, after, guarded, held)
            after.shift(guarded, dict(held), -1)
            if not kept:
                return f"{victim.key}: {self._below_min(after, guarded, held)}"
        return ""

    def _below_min(self, after: ChainTally, guarded: tuple[str, ...], held: list[tuple[str, int]]) -> str:
        """The first level and resource that taking the victims leaves below ``min``, in words."""
        assert self.tree is not None
        for key in guarded:
            for resource, _ in held:
                floor = self._mins[key].get(resource)
                left = after[key].get(resource, 0)
                if floor is not None and left < floor:
                    return (
                        f"taking it would leave {self.tree.nodes[key].full_name} with {resource} "
                        f"{_fmt(resource, left)} < min {_fmt(resource, floor)}: a quota at or under its min in "
                        "what is contended keeps its pods"
                    )
        return "taking it would leave its quota below its min"  # pragma: no cover - keeps_min said so


def judge_preemption(
    tree: QuotaTree | None, preemptor: PodClaim, victims: Sequence[PodClaim], *usages: Usage
) -> PreemptionVerdict:
    """Whether one node's ``victims`` may go for ``preemptor`` (:class:`PreemptionJudge` for one node)."""
    return PreemptionJudge(tree, preemptor, *usages).judge(victims)


def held_room_blockers(
    tree: QuotaTree,
    quota: str,
    request: Mapping[str, int],
    held: Sequence[Usage],
    freeing: Sequence[tuple[str, Mapping[str, int]]],
) -> tuple[QuotaBlocker, ...]:
    """Where a preemptor no queued job accounts for would still not fit the room admitted jobs leave once the
    node's victims went (docs/pod-quota.md, "Preemption"): the filter's rule for such a pod, ``reserved +
    loose pods + the pod <= max`` (``held``), with the victims that free some of it (quota key, request)
    taken out: loose pods, and bare Pods the queue released (their jobs end with them). A job's pod frees
    none of it: the job's operator makes it again, and the job keeps its reservation."""
    freed: MutableUsage = {}
    for key, victim_request in freeing:
        charge(freed, tree, key, victim_request.items(), -1)
    return pod_quota_blockers(tree, quota, request, *held, freed)
