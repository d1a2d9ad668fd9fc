"""The preempt verb over the extender's cache: which nodes' victims may go for a pod (docs/pod-quota.md,
"Preemption").

kube-scheduler picks its candidate nodes among those its own filters refused for room; the extender's filter
never saw them. So every rule the filter would apply to the pod once the victims went is checked here, or the
victims would be evicted in vain: the quota rules (:class:`~webhook.core.preemption.PreemptionJudge`), the
devices of its DRA claims (a pod whose claims cannot be counted yet preempts nobody), the room admitted jobs
hold for a pod no queued job accounts for (:func:`~webhook.core.preemption.held_room_blockers`), and the units
of its ResourcePolicy, or without one the virtual node's opt-in
(:func:`~webhook.core.unitplacement.preemption_refusal`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from webhook.api.objects import Obj
from webhook.core.placement import PodView, pod_view
from webhook.core.podquota import quota_key
from webhook.core.preemption import PodClaim, PreemptionJudge, held_room_blockers
from webhook.core.resources import Resources
from webhook.core.unitplacement import preemption_refusal
from webhook.extender.cache import ExtenderCache
from webhook.extender.decide import NO_DEVICES, uncounted_reason, wait_start
from webhook.extender.decision import UNKNOWN_NODE, PreemptDecision
from webhook.extender.pods import pod_key, priority_of
from webhook.extender.protocol import NodeVictims
from webhook.extender.reserved import explain_held
from webhook.workloads.registry import is_its_own_job, queued_by_a_job


@dataclass(frozen=True, slots=True)
class Victim:
    """One pod the scheduler would evict, as the rules read it."""

    claim: PodClaim
    view: PodView
    frees: tuple[str, Resources] | None
    """Where it is charged and its request, when its going frees room the check of the room admitted jobs
    hold counts: a loose pod's, or a bare Pod's the queue released (its job ends with it). ``None`` for a job's
    pod: its operator makes it again, and its job keeps its room."""


def victim_of(cache: ExtenderCache, uid: str, given: Obj | None) -> Victim | None:
    """A victim from the Pod the scheduler sent, else from the cache by uid (``None``: not known yet)."""
    if given is not None:
        view = pod_view(given)
        request, priority = cache.requests.request(given, view.key), priority_of(given)
        charged = quota_key(cache.tree, view.namespace)
        frees_room = not queued_by_a_job(given) or is_its_own_job(given)
    else:
        record = cache.pods.get(uid)
        if record is None:
            return None
        view, request, priority, charged = record.view, record.request, record.priority, record.charged
        frees_room = record.loose or record.own_job
    claim = PodClaim(view.namespace, view.name, request, priority, view.created or 0.0)
    return Victim(claim, view, (charged, request) if frees_room and charged is not None else None)


def decide_preemption(cache: ExtenderCache, pod: Obj, victims: Mapping[str, NodeVictims],
                      now: float) -> PreemptDecision:
    """Which nodes' victims may go for ``pod``. Victims are taken whole per node; a victim the cache does not
    know (by uid, unless the scheduler sent the whole Pod) keeps its node's victims where they are."""
    view = pod_view(pod)
    key = pod_key(view)
    tree = cache.tree
    quota = quota_key(tree, view.namespace)
    full_name = None if tree is None or quota is None else tree.nodes[quota].full_name
    devices = NO_DEVICES if quota is None else cache.claims.devices(pod)
    if devices.unknown or devices.problem:
        reason = uncounted_reason(devices)  # the filter refuses the pod everywhere until they count
        return PreemptDecision(view.key, {}, dict.fromkeys(victims, reason), full_name, reason)
    # What the pod would add: its own request and the devices of its claims no pod holds yet.
    request = cache.requests.request(pod, view.key) + devices.resources
    preemptor = PodClaim(view.namespace, view.name, request, priority_of(pod), view.created or now)
    judge = PreemptionJudge(tree, preemptor, *cache.quota_usages(key))
    held = cache.loose_usages(key, now) if quota is not None and not queued_by_a_job(pod) else None
    policy = cache.policy_for(view)
    counts = () if policy is None else cache.unit_counts(policy, view)
    first_seen = wait_start(cache, view, key, now)
    kept: dict[str, NodeVictims] = {}
    refused: dict[str, str] = {}
    foreign: set[str] = set()
    allowed = ""
    for node, proposed in victims.items():
        taken: list[Victim] = []
        for index, uid in enumerate(proposed.uids):
            victim = victim_of(cache, uid, None if proposed.pods is None else proposed.pods[index])
            if victim is None:
                refused[node] = f"victim uid {uid} is not in the extender's pod cache: retried later"
                break
            taken.append(victim)
            if victim.claim.namespace != view.namespace:
                foreign.add(victim.claim.key)
        if node in refused:
            continue
        node_view = cache.nodes.get(node)
        refusal = UNKNOWN_NODE if node_view is None else preemption_refusal(
            policy, view, node_view, [victim.view for victim in taken], counts, now=now, pod_first_seen=first_seen)
        if refusal:
            refused[node] = refusal
            continue
        verdict = judge.judge([victim.claim for victim in taken])
        if not verdict.allowed:
            refused[node] = verdict.reason
            continue
        if held is not None and tree is not None and quota is not None:
            blockers = held_room_blockers(tree, quota, request, held, _freeing(taken))
            if blockers:
                refused[node] = explain_held(blockers)
                continue
        kept[node] = proposed
        allowed = allowed or verdict.reason
    summary = next(iter(refused.values())) if refused else allowed or "no candidate node"
    return PreemptDecision(view.key, kept, refused, full_name, summary, tuple(sorted(foreign)))


def _freeing(taken: Sequence[Victim]) -> list[tuple[str, Resources]]:
    return [victim.frees for victim in taken if victim.frees is not None]
