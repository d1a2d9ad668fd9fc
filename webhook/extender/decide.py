"""The filter and prioritize decisions over a read-only view of the extender's cache.

:func:`decide` reads the cluster only through :class:`ClusterView` (the cache is one), within one
synchronous call, so nothing changes under it; it changes nothing there either - it returns the decision,
the placement to record and when the pod was first seen, and the caller
(:class:`~webhook.extender.state.ExtenderState`) records them. The rules themselves are the core's:
pod-level quota (:mod:`webhook.core.podquota`), placement by unit (:mod:`webhook.core.unitplacement` over
:func:`~webhook.core.placement.place`), and verdicts kept by :func:`~webhook.core.placement.placement_key`
(:class:`VerdictCache`).

**Fast path.** A request with 5,000 node names costs one dictionary lookup per name, in C: the node -> unit
map is cached per policy, ``place`` sees one representative node per unit, and its verdict by unit is kept
per policy and placement key, so a burst of pods into the same unit decides once. Unit counts are tallied
as pod events and placements arrive, so a request does not walk the namespace's pods either. A pod's
request is parsed once per shape and only when a quota or a policy counts it; a pod that neither governs
costs its metadata and a few set operations over the names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass
from itertools import chain, filterfalse
from typing import Protocol

from webhook.api.objects import Obj
from webhook.core.assumed import scheduling_mark
from webhook.core.dra import ClaimKey, PodDevices
from webhook.core.placement import (
    NodeView,
    PlacementKey,
    PodView,
    ResourcePolicy,
    place,
    place_unmanaged,
    placement_key,
)
from webhook.core.podquota import POD_QUOTA_REFUSAL, Usage, explain_blockers, pod_quota_blockers, quota_key
from webhook.core.profiles import needs_full_scan
from webhook.core.quota import QuotaTree
from webhook.core.resources import EMPTY, Resources
from webhook.core.unitplacement import MISSING, UnitKey, UnitVerdict, group_by_unit, verdict_by_unit
from webhook.core.waiting import WaitingPod
from webhook.extender.claims import ClaimBook
from webhook.extender.decision import UNKNOWN_NODE, Assumption, Decision
from webhook.extender.pods import RequestCache, pod_key, priority_of
from webhook.extender.reserved import explain_held
from webhook.workloads.registry import queued_by_a_job

NO_DEVICES = PodDevices()
VERDICTS_PER_POLICY = 256
"""How many verdicts (by placement key) are kept per policy before they are dropped and recomputed."""


class ClusterView(Protocol):
    """What a decision reads of the cache (:class:`~webhook.extender.cache.ExtenderCache`)."""

    @property
    def nodes(self) -> Mapping[str, NodeView]: ...
    @property
    def virtual(self) -> Set[str]: ...
    @property
    def tree(self) -> QuotaTree | None: ...
    @property
    def assume_ttl(self) -> float: ...
    @property
    def first_seen(self) -> Mapping[str, float]: ...
    @property
    def requests(self) -> RequestCache:
        """Parsed requests by shape (a memo: reading through it changes nothing a decision reads)."""
        ...

    @property
    def claims(self) -> ClaimBook:
        """The DRA claims pods hold (reading what a pod's claims add changes nothing)."""
        ...

    def policy_for(self, view: PodView) -> ResourcePolicy | None: ...
    def quota_usages(self, key: str) -> tuple[Usage, ...]: ...
    def loose_usages(self, key: str, now: float) -> tuple[Usage, ...] | None: ...
    def unit_indices(
        self, policy: ResourcePolicy, names: Sequence[str], given: Mapping[str, NodeView] | None
    ) -> tuple[list[int | None], set[int | None]]: ...
    def unit_counts(self, policy: ResourcePolicy, for_pod: PodView) -> tuple[int, ...]: ...


class VerdictCache:
    """Per policy, its :class:`~webhook.core.unitplacement.UnitVerdict` by
    :func:`~webhook.core.placement.placement_key` (dropped when the policy object changes)."""

    def __init__(self) -> None:
        self._by_policy: dict[str, tuple[ResourcePolicy, dict[PlacementKey, UnitVerdict]]] = {}

    def of(self, policy: ResourcePolicy) -> dict[PlacementKey, UnitVerdict]:
        """The verdicts kept for ``policy`` (the caller empties it when it holds :data:`VERDICTS_PER_POLICY`)."""
        entry = self._by_policy.get(policy.key)
        if entry is None or entry[0] is not policy:
            entry = (policy, {})
            self._by_policy[policy.key] = entry
        return entry[1]

    def keep_policies(self, live: set[str]) -> None:
        for key in [key for key in self._by_policy if key not in live]:
            del self._by_policy[key]

    def clear(self) -> None:
        self._by_policy.clear()


@dataclass(frozen=True, slots=True)
class Outcome:
    """A decision and what to record of it."""

    decision: Decision
    assumption: Assumption | None = None
    """The placement to record, should this be a filter that lets the pod through."""
    first_seen: float | None = None
    """When the pod was first seen waiting, to record if the cache has no time for it yet."""
    waiting: WaitingPod | None = None
    """A pod refused for pod-level quota: to keep until room appears (:mod:`webhook.extender.waits`)."""


def decide(
    view: ClusterView,
    verdicts: VerdictCache,
    verb: str,
    pod: Obj,
    names: Sequence[str],
    *,
    pod_view: PodView,
    now: float,
    given: Mapping[str, NodeView] | None,
    sampled_by_scheduler: Callable[[Sequence[str]], bool],
) -> Outcome:
    """The ``verb`` ("filter" or "prioritize") decision for ``pod`` over the node ``names``.

    The pod's request is read (quantities parsed) only when something counts it: its quota, or the
    placement a policy pod leaves behind. ``sampled_by_scheduler`` is asked, for a filter of a policy a
    sample could mislead (:func:`~webhook.core.profiles.needs_full_scan`), whether the scheduler cut the
    names to its default sample.
    """
    key = pod_key(pod_view)
    policy = view.policy_for(pod_view)
    # Prioritize only sees nodes the filter passed, so a pod its quota refuses never gets there.
    tree = view.tree
    quota = quota_key(tree, pod_view.namespace) if verb == "filter" else None
    counted = verb == "filter" and (quota is not None or policy is not None)
    # What the pod requests itself, and with the devices its DRA claims add (those no pod holds yet).
    own = view.requests.request(pod, pod_view.key) if counted else EMPTY
    loose = not queued_by_a_job(pod)
    devices = NO_DEVICES if quota is None else view.claims.devices(pod)
    if devices.unknown or devices.problem:
        return Outcome(_uncounted(verb, pod_view, names, devices, tree=tree, quota=quota))
    request = own + devices.resources if devices.resources else own
    if quota is not None and request:
        assert tree is not None
        blockers = pod_quota_blockers(tree, quota, request, *view.quota_usages(key))
        reason = explain_blockers(blockers) if blockers else ""
        held = view.loose_usages(key, now) if loose and not blockers else None
        if held is not None:
            blockers = pod_quota_blockers(tree, quota, request, *held)
            reason = explain_held(blockers) if blockers else ""
        if blockers:
            decision = Decision(
                verb,
                pod_view.key,
                unresolvable=dict.fromkeys(names, reason),
                nodes=len(names),
                quota=blockers[0].quota,
                summary=reason,
            )
            waiting = WaitingPod(
                key, pod_view.namespace, pod_view.name, pod_view.uid, request, priority_of(pod), pod_view.created or now
            )
            return Outcome(decision, waiting=waiting)
    # A placement is charged what the pod requests itself; its claims are charged by claim, once each.
    if policy is None:
        assume = quota is not None and bool(request or devices.claims)
        decision = _unmanaged(view, verb, pod_view, names, given, assume=assume)
        if not decision.assumed:
            return Outcome(decision)
        assumption = Assumption(pod_view, decision.passing[0], now + view.assume_ttl, own,
                                mark=scheduling_mark(pod), loose=loose, claims=devices.claims)
        return Outcome(decision, assumption)
    return _managed(
        view, verdicts, verb, pod_view, key=key, request=own, policy=policy, names=names, now=now,
        given=given, sampled_by_scheduler=sampled_by_scheduler,
        mark=scheduling_mark(pod) if verb == "filter" else "", loose=loose, claims=devices.claims,
    )


def uncounted_reason(devices: PodDevices) -> str:
    """Why a pod whose DRA claims cannot be counted (yet) is refused: its quota cannot be checked."""
    if devices.problem:
        return f"{POD_QUOTA_REFUSAL} cannot count the pod's devices: {devices.problem}"
    return f"{POD_QUOTA_REFUSAL}: {devices.unknown}; the pod is tried again once it is"


def _uncounted(verb: str, pod: PodView, names: Sequence[str], devices: PodDevices, *, tree: QuotaTree | None,
               quota: str | None) -> Decision:
    """The filter's refusal of a pod whose DRA claims cannot be counted (yet): its quota cannot be checked."""
    reason = uncounted_reason(devices)
    return Decision(verb, pod.key, unresolvable=dict.fromkeys(names, reason), nodes=len(names),
                    quota=None if tree is None or quota is None else tree.nodes[quota].full_name, summary=reason)


def _known(
    nodes: Mapping[str, NodeView], names: Sequence[str], given: Mapping[str, NodeView] | None
) -> tuple[dict[str, str], dict[str, NodeView]]:
    """Names the node cache lacks: ``(failed reasons, views taken from the request's Node objects)``."""
    if all(map(nodes.__contains__, names)):  # the usual case, checked in C
        return {}, {}
    missing = [name for name in names if name not in nodes]
    extra = {name: given[name] for name in missing if name in given} if given else {}
    return {name: UNKNOWN_NODE for name in missing if name not in extra}, extra


def _unmanaged(
    view: ClusterView,
    verb: str,
    pod: PodView,
    names: Sequence[str],
    given: Mapping[str, NodeView] | None,
    *,
    assume: bool = False,
) -> Decision:
    """A pod no policy selects: every node but the virtual ones (unless it opted in); ``assume`` marks
    the decision as one whose placement is recorded (its quota counts it)."""
    nodes = view.nodes
    failed, extra = _known(nodes, names, given)
    virtual_names: Set[str] = view.virtual
    if extra:
        virtual_names = virtual_names | {name for name, node in extra.items() if node.is_virtual}
    virtual = [] if virtual_names.isdisjoint(names) else [name for name in names if name in virtual_names]
    unresolvable: dict[str, str] = {}
    summary = "no ResourcePolicy selects the pod"
    refused: set[str] = set(failed)
    if virtual:
        verdict = place_unmanaged(pod, [nodes.get(name) or extra[name] for name in virtual])
        unresolvable.update(verdict.unresolvable)
        refused.update(name for name in virtual if name not in verdict.passing)
        summary = verdict.summary
    passing = tuple(names) if not refused else tuple(filterfalse(refused.__contains__, names))
    return Decision(
        verb,
        pod.key,
        passing=passing,
        failed=failed,
        unresolvable=unresolvable,
        nodes=len(names),
        summary=summary,
        assumed=assume and bool(passing),
    )


def wait_start(view: ClusterView, pod: PodView, key: str, now: float) -> float | None:
    """Where ``pod``'s wait for a unit is measured from (``TimeoutOrExceedMax``): ``None`` when the pod has a
    creation time (:func:`place` reads that), else when the extender first saw it, ``now`` the first time."""
    return None if pod.created is not None else view.first_seen.get(key, now)


def _lookup(view: ClusterView, name: str, given: Mapping[str, NodeView] | None) -> NodeView | None:
    node = view.nodes.get(name)
    if node is None and given is not None:
        node = given.get(name)
    return node


def unit_verdict(
    view: ClusterView,
    verdicts: VerdictCache,
    policy: ResourcePolicy,
    pod: PodView,
    groups: Mapping[UnitKey, Sequence[str]],
    *,
    counts: tuple[int, ...],
    now: float,
    first_seen: float | None,
    given: Mapping[str, NodeView] | None,
) -> UnitVerdict:
    """:func:`place` over one representative node per unit present, by unit; kept by
    :func:`~webhook.core.placement.placement_key` when the key says the verdict may be kept."""
    representative = {index: _lookup(view, group[0], given) for index, group in groups.items()}
    candidates = {index: node for index, node in representative.items() if node is not None}
    cache_key = placement_key(policy, candidates, counts)
    if cache_key is None:
        placement = place(policy, pod, list(candidates.values()), counts, now, pod_first_seen=first_seen)
        return verdict_by_unit(policy, placement, candidates)
    kept = verdicts.of(policy)
    verdict = kept.get(cache_key)
    if verdict is None:
        placement = place(policy, pod, list(candidates.values()), counts, now, pod_first_seen=first_seen)
        verdict = verdict_by_unit(policy, placement, candidates)
        if len(kept) >= VERDICTS_PER_POLICY:
            kept.clear()
        kept[cache_key] = verdict
    return verdict


def _managed(
    view: ClusterView,
    verdicts: VerdictCache,
    verb: str,
    pod: PodView,
    *,
    key: str,
    request: Resources,
    policy: ResourcePolicy,
    names: Sequence[str],
    now: float,
    given: Mapping[str, NodeView] | None,
    sampled_by_scheduler: Callable[[Sequence[str]], bool],
    mark: str = "",
    loose: bool = False,
    claims: tuple[ClaimKey, ...] = (),
) -> Outcome:
    indices, present = view.unit_indices(policy, names, given)
    groups = group_by_unit(names, indices, present)
    unknown = groups.pop(MISSING, ())
    counts = view.unit_counts(policy, pod)
    first_seen = wait_start(view, pod, key, now)
    verdict = unit_verdict(
        view, verdicts, policy, pod, groups, counts=counts, now=now, first_seen=first_seen, given=given
    )
    chosen = verdict.unit_index
    passing_groups: list[Sequence[str]] = []
    failed: dict[str, str] = dict.fromkeys(unknown, UNKNOWN_NODE) if verb == "filter" else {}
    unresolvable: dict[str, str] = {}
    score_groups: dict[int, list[str]] = {}
    passing_score = 0
    for index, group in groups.items():
        score = verdict.scores[index]
        if index in verdict.passing:
            passing_groups.append(group)
            passing_score = score
        elif verb == "filter":
            if index in verdict.failed:
                failed.update(dict.fromkeys(group, verdict.failed[index]))
            else:
                unresolvable.update(dict.fromkeys(group, verdict.unresolvable[index]))
        if score and verb != "filter":
            score_groups.setdefault(score, []).extend(group)
    # Every passing node lies in one unit, so this is that unit's group as it is (a tuple: no copy).
    passing = tuple(passing_groups[0] if len(passing_groups) == 1 else chain.from_iterable(passing_groups))
    summary = verdict.summary
    if chosen is not None and summary.endswith(" candidate node(s)"):
        # place() saw one representative per unit: count the real candidates.
        summary = f"{summary.rsplit(': ', 1)[0]}: {len(passing)} candidate node(s)"
    assumption = None
    if passing and verb == "filter":
        assumption = Assumption(pod, passing[0], now + view.assume_ttl, request, policy.key, chosen, mark, loose,
                                claims)
    decision = Decision(
        verb,
        pod.key,
        passing=passing,
        failed=failed,
        unresolvable=unresolvable,
        score_groups=score_groups,
        nodes=len(names),
        policy=policy.key,
        unit=None if chosen is None else policy.describe_unit(chosen),
        summary=summary,
        assumed=assumption is not None,
        retry_at=verdict.retry_at,
        passing_score=passing_score,
        scheduler_sampled=verb == "filter" and needs_full_scan(policy) and sampled_by_scheduler(names),
    )
    return Outcome(decision, assumption, first_seen)
