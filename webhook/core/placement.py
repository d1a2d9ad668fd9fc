"""ResourcePolicy placement: which node unit a pod may use (ECS first, then virtual nodes / ECI).

Pure decision functions that the scheduler extender calls once per pod, over small frozen snapshots it builds
from its watch caches (:class:`PodView`, :class:`NodeView`) and the placements it has made but not yet seen
bound (:class:`AssumedPod`). Times are seconds since the epoch, passed in (never read from a clock here).

A ``ResourcePolicy`` (``scheduling.alibabacloud.com/v1alpha1``, namespaced) selects pods of its namespace and
lists ordered *units* of nodes. Rules implemented here (and where this module decides what the API leaves open):

* **Unit membership.** A node belongs to the *first* unit (in order) whose ``nodeSelector`` its labels match.
  An ``eci`` unit holds only virtual nodes (label ``type: virtual-kubelet``); an ``ecs`` unit holds only
  real nodes, so a catch-all ``ecs`` unit (empty ``nodeSelector``) never swallows the virtual node and its
  ``eci`` cap. Nodes in no unit never pass for a pod under the policy.
* **Which policy.** A pod is governed by the policy of its namespace whose ``selector`` (an equality map;
  empty = every pod) matches its labels. When several match, the oldest wins (``creationTimestamp``, then
  name; a policy without a timestamp counts as newest).
* **Counting.** A unit's count is the number of the policy's pods in it: pods selected by the policy, with
  the same values of ``matchLabelKeys`` as the pod being placed (an absent label is a value of its own), not
  finished (phase ``Succeeded``/``Failed``), bound to a node of the unit - or, while not yet bound, assumed
  there by the extender and not expired. Terminating pods are skipped when ``ignoreTerminatingPod`` (default
  true); pods created before the policy when ``ignorePreviousPod``. A bound pod counts towards a unit with
  ``podLabels``/``podAnnotations`` only if it carries all of them; an assumed pod always counts (the extender
  applies the unit's labels when it binds). The pod being placed never counts itself.
* **Choice.** The pod may use the first unit that has a candidate node and is under its ``max``. An earlier
  unit is passed over when it is at ``max``, or - depending on ``whenTryNextUnits.policy`` - when it has no
  candidate node: always (``LackResourceOrExceedMax``, the default), never (``ExceedMax``: the pod waits), or
  once the pod has waited at least ``timeout`` (``TimeoutOrExceedMax``, default timeout 15 minutes).
* **Size.** A policy lists at most :data:`MAX_UNITS` units; more are refused at validation, so neither the
  webhook nor the extender spends more than a bounded time on one policy.
* **Reasons.** Units are numbered from 1 in messages (``unit 2 (eci)``) and from 0 in code
  (:attr:`Placement.unit_index`). Failures that preemption cannot fix (a unit at its max, a node in no unit,
  waiting for an earlier unit) go to :attr:`Placement.unresolvable`; the rest to :attr:`Placement.failed`.
  The two maps are disjoint, like the extender reply's ``FailedNodes`` and ``FailedAndUnresolvableNodes``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from webhook.api.names import (
    ECI_OPT_IN_LABEL,
    VIRTUAL_NODE_LABEL_KEY,
    VIRTUAL_NODE_LABEL_VALUE,
    VIRTUAL_NODE_TAINT_KEY,
    VIRTUAL_NODE_TAINT_VALUE,
)
from webhook.core.placement_policy import (
    API_VERSION,
    DEFAULT_TIMEOUT_SECONDS,
    KIND,
    MAX_UNITS,
    VIRTUAL_NODE_TOLERATION,
    PolicyError,
    PolicySet,
    ResourcePolicy,
    TryNextPolicy,
    Unit,
    UnitResource,
    format_duration,
    parse_duration,
    parse_policy,
    policy_set,
    validate_policy,
)
from webhook.core.placement_views import (
    AssumedPod,
    NodeView,
    PodView,
    Taint,
    node_view,
    pod_view,
    policy_for_pod,
    unit_of_node,
)
from webhook.core.selectors import (
    FrozenLabels,
    FrozenMap,
)

# Every placement name, the policy's (webhook.core.placement_policy) included: callers import them from here.
__all__ = [
    "API_VERSION",
    "DEFAULT_TIMEOUT_SECONDS",
    "DELETION_COST_ANNOTATION",
    "ECI_OPT_IN_LABEL",
    "KIND",
    "MAX_SCORE",
    "MAX_UNITS",
    "VIRTUAL_NODE_LABEL_KEY",
    "VIRTUAL_NODE_LABEL_VALUE",
    "VIRTUAL_NODE_TAINT_KEY",
    "VIRTUAL_NODE_TAINT_VALUE",
    "VIRTUAL_NODE_TOLERATION",
    "AssumedPod",
    "NodeView",
    "Placement",
    "PodView",
    "PolicyError",
    "PolicySet",
    "ResourcePolicy",
    "Taint",
    "TryNextPolicy",
    "Unit",
    "UnitResource",
    "count_pods_per_unit",
    "counts_towards",
    "deletion_cost",
    "format_duration",
    "node_view",
    "parse_duration",
    "parse_policy",
    "place",
    "place_unmanaged",
    "pod_view",
    "policy_for_pod",
    "policy_set",
    "unit_of_node",
    "unit_patch",
    "validate_policy",
]

DELETION_COST_ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"
MAX_SCORE = 10
"""The highest extender score (prioritize replies are 0..10)."""


# Counting -------------------------------------------------------------------------------------------------


def _label_group(policy: ResourcePolicy, pod: PodView) -> tuple[str | None, ...]:
    return tuple(pod.labels.get(key) for key in policy.match_label_keys)


def counts_towards(policy: ResourcePolicy, pod: PodView, for_pod: PodView | None = None) -> bool:
    """Whether ``pod`` is one of the policy's pods that fill units when placing ``for_pod``
    (node and unit marks aside): see the module notes."""
    if not policy.selects(pod) or pod.finished:
        return False
    if for_pod is not None and (pod.same_pod(for_pod) or _label_group(policy, pod) != _label_group(policy, for_pod)):
        return False
    if policy.ignore_terminating_pod and pod.terminating:
        return False
    return not (
        policy.ignore_previous_pod
        and policy.created is not None
        and pod.created is not None
        and pod.created < policy.created
    )


def count_pods_per_unit(
    policy: ResourcePolicy,
    pods: Iterable[PodView],
    nodes: Mapping[str, NodeView],
    *,
    now: float,
    for_pod: PodView | None = None,
    assumed: Mapping[str, AssumedPod] | None = None,
) -> tuple[int, ...]:
    """How many of the policy's pods each unit holds (index = unit index).

    ``nodes`` maps node name to view (pods on unknown nodes are not counted); ``assumed`` maps pod uid to the
    extender's not-yet-bound placements (valid while ``now < expires_at``); ``for_pod`` is the pod being
    placed (for ``matchLabelKeys``, and so that it never counts itself).
    """
    counts = [0] * len(policy.units)
    unit_by_node: dict[str, int | None] = {}
    for pod in pods:
        if not counts_towards(policy, pod, for_pod):
            continue
        node_name = pod.node_name
        if node_name is None:
            assumption = assumed.get(pod.uid) if assumed is not None and pod.uid else None
            if assumption is None or now >= assumption.expires_at:
                continue
            node_name = assumption.node_name
        if node_name not in unit_by_node:
            node = nodes.get(node_name)
            unit_by_node[node_name] = None if node is None else unit_of_node(policy, node)
        index = unit_by_node[node_name]
        if index is None:
            continue
        if pod.node_name is not None and not policy.units[index].carries_marks(pod):
            continue
        counts[index] += 1
    return tuple(counts)


# Placement ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Placement:
    """The verdict on a pod's candidate nodes.

    ``passing`` keeps the candidates' order. ``failed`` and ``unresolvable`` are disjoint (node -> reason).
    ``unit_index`` is the 0-based unit the pod may use, or ``None``. ``scores`` (0..10) covers every
    candidate: the usable units in order score 10, 9, ...; other nodes 0. ``summary`` is one line for logs
    and "why is my pod pending". ``retry_at`` is when the verdict changes by time alone (a
    ``TimeoutOrExceedMax`` timeout), so the caller can retry the pod then.
    """

    passing: tuple[str, ...]
    failed: Mapping[str, str] = field(default_factory=FrozenLabels)
    unresolvable: Mapping[str, str] = field(default_factory=FrozenLabels)
    unit_index: int | None = None
    scores: Mapping[str, int] = field(default_factory=FrozenMap[int])
    summary: str = ""
    retry_at: float | None = None

    @property
    def all_failed(self) -> dict[str, str]:
        """Every refused node with its reason."""
        return {**self.failed, **self.unresolvable}


def _unit_state(policy: ResourcePolicy, index: int, count: int, has_candidate: bool) -> str:
    unit = policy.units[index]
    described = policy.describe_unit(index)
    if unit.at_max(count):
        return f"{described} is at its max of {unit.max} pods"
    limit = "no max" if unit.max is None else f"{count} of its max {unit.max} pods"
    if has_candidate:
        return f"{described} has room ({limit})"
    return f"{described} has no node with room ({limit})"


def place(
    policy: ResourcePolicy,
    pod: PodView,
    candidates: Sequence[NodeView],
    unit_counts: Sequence[int],
    now: float,
    *,
    pod_first_seen: float | None = None,
) -> Placement:
    """Which candidate nodes the pod may use under ``policy``.

    ``candidates`` already passed the scheduler's filter plugins (a candidate has room). ``unit_counts`` comes
    from :func:`count_pods_per_unit`. ``TimeoutOrExceedMax`` measures the pod's wait from ``pod_first_seen``
    (when the extender first saw it), else from the pod's creation time, else from ``now``.

    Callers keep verdicts by :func:`placement_key`, which lists what this function reads of its inputs: a
    change here that reads something more must change the key too (a property test holds them together).
    """
    if len(unit_counts) != len(policy.units):
        raise ValueError(f"expected {len(policy.units)} unit counts for {policy.key}, got {len(unit_counts)}")
    node_unit: dict[str, int | None] = {node.name: unit_of_node(policy, node) for node in candidates}
    members: list[list[str]] = [[] for _ in policy.units]
    for name, index in node_unit.items():
        if index is not None:
            members[index].append(name)

    chosen: int | None = None
    waiting: int | None = None
    wait_reason = ""
    retry_at: float | None = None
    for index, unit in enumerate(policy.units):
        if unit.at_max(unit_counts[index]):
            continue
        if members[index]:
            chosen = index
            break
        rule = policy.when_try_next
        if rule is TryNextPolicy.LACK_RESOURCE_OR_EXCEED_MAX:
            continue
        state = _unit_state(policy, index, unit_counts[index], False)
        if rule is TryNextPolicy.EXCEED_MAX:
            waiting, wait_reason = index, f"{state}; whenTryNextUnits ExceedMax moves on only at max"
            break
        since = next(t for t in (pod_first_seen, pod.created, now) if t is not None)
        waited = max(0.0, now - since)
        if waited >= policy.timeout:
            continue
        waiting, retry_at = index, since + policy.timeout
        wait_reason = (
            f"{state}; whenTryNextUnits TimeoutOrExceedMax moves on after "
            f"{format_duration(policy.timeout)} (waited {format_duration(waited)})"
        )
        break

    usable = [
        index for index, unit in enumerate(policy.units) if members[index] and not unit.at_max(unit_counts[index])
    ]
    rank = {index: position for position, index in enumerate(usable)}
    passing: list[str] = []
    failed: dict[str, str] = {}
    unresolvable: dict[str, str] = {}
    scores: dict[str, int] = {}
    for node in candidates:
        index = node_unit[node.name]
        scores[node.name] = 0 if index not in rank else max(0, MAX_SCORE - rank[index])
        if index is None:
            unresolvable[node.name] = f"node belongs to no unit of ResourcePolicy {policy.key}"
        elif index == chosen:
            passing.append(node.name)
        elif policy.units[index].at_max(unit_counts[index]):
            unresolvable[node.name] = _unit_state(policy, index, unit_counts[index], True)
        elif chosen is not None:
            failed[node.name] = f"{policy.describe_unit(chosen)} is preferred and still has room"
        else:
            assert waiting is not None, "a usable unit after no choice means the pod waits"
            unresolvable[node.name] = wait_reason

    if chosen is not None:
        summary = (
            f"ResourcePolicy {policy.key}: "
            f"{_unit_state(policy, chosen, unit_counts[chosen], True)}: {len(passing)} candidate node(s)"
        )
    elif waiting is not None:
        summary = f"ResourcePolicy {policy.key}: waiting for {policy.describe_unit(waiting)}: {wait_reason}"
    else:
        states = ", ".join(
            _unit_state(policy, index, unit_counts[index], bool(members[index])) for index in range(len(policy.units))
        )
        summary = f"ResourcePolicy {policy.key}: no unit can take the pod: {states}"
    return Placement(
        passing=tuple(passing),
        failed=FrozenLabels(failed),
        unresolvable=FrozenLabels(unresolvable),
        unit_index=chosen,
        scores=FrozenMap(scores),
        summary=summary,
        retry_at=retry_at,
    )


PlacementKey = tuple[frozenset[int | None], tuple[int, ...]]
"""The units that have candidates, and the unit counts that show (see :func:`placement_key`)."""


def placement_key(
    policy: ResourcePolicy, units_present: Iterable[int | None], unit_counts: Sequence[int]
) -> PlacementKey | None:
    """What :func:`place` reads of its inputs besides ``policy``, when that is all it reads: which units
    (0-based, ``None`` for "in no unit") have candidates, and the counts of the units with a ``max`` (a unit
    without one shows its count nowhere). Two calls with the same policy and key give the same verdict *by
    unit*: every candidate of a unit gets what any other candidate of that unit gets, whatever its name.

    ``None`` under ``TimeoutOrExceedMax``: then the verdict also depends on the clock and on how long the pod
    has waited, and is not to be kept.
    """
    if policy.when_try_next is TryNextPolicy.TIMEOUT_OR_EXCEED_MAX:
        return None
    shown = tuple(0 if unit.max is None else count for unit, count in zip(policy.units, unit_counts, strict=True))
    return frozenset(units_present), shown


def place_unmanaged(pod: PodView, candidates: Sequence[NodeView]) -> Placement:
    """Placement of a pod no policy governs: every node passes except virtual nodes, unless the pod opted into
    ECI (label ``alibabacloud.com/eci: "true"``). Every candidate scores the same."""
    opted_in = pod.labels.get(ECI_OPT_IN_LABEL) == "true"
    passing: list[str] = []
    unresolvable: dict[str, str] = {}
    for node in candidates:
        if node.is_virtual and not opted_in:
            unresolvable[node.name] = (
                "virtual node (type=virtual-kubelet): only pods of a ResourcePolicy with an eci unit, or "
                f'labelled {ECI_OPT_IN_LABEL}: "true", may use it'
            )
        else:
            passing.append(node.name)
    return Placement(
        passing=tuple(passing),
        unresolvable=FrozenLabels(unresolvable),
        scores=FrozenMap(dict.fromkeys((node.name for node in candidates), 0)),
        summary="no ResourcePolicy selects the pod"
        + ("" if opted_in or not unresolvable else ": virtual nodes refused"),
    )


def unit_patch(unit: Unit) -> tuple[dict[str, str], dict[str, str]]:
    """The labels and annotations a pod placed in ``unit`` gets (its ``podLabels``, ``podAnnotations``)."""
    return unit.pod_labels.to_dict(), unit.pod_annotations.to_dict()


def deletion_cost(unit_index: int, n_units: int) -> int:
    """``controller.kubernetes.io/pod-deletion-cost`` for a pod in unit ``unit_index`` (0-based) of
    ``n_units``: the last unit costs 0 and each earlier unit 100 more, so scale-in removes pods of later
    units (ECI) first."""
    if n_units < 1 or not 0 <= unit_index < n_units:
        raise ValueError(f"unit index {unit_index} is outside 0..{n_units - 1}")
    return (n_units - 1 - unit_index) * 100


def unit_deletion_cost(index: int, n_units: int) -> int:
    """The pod-deletion-cost the extender writes for a pod in unit ``index``: :func:`deletion_cost` shifted so
    that the first unit costs 0 - the cost of a pod without the annotation. Pods of the preferred unit,
    usually nearly all of them, then need no write at all; pods of later units get -100, -200, ... and still
    go first when a ReplicaSet shrinks."""
    return deletion_cost(index, n_units) - deletion_cost(0, n_units)
