""":func:`~webhook.core.placement.place` by unit rather than by node.

``place`` only ever looks at which unit of the policy a candidate node is in, so the extender groups the
scheduler's candidate names by unit (:func:`group_by_unit`), hands ``place`` one representative node per
unit, and gives every node its representative's verdict (:func:`verdict_by_unit`). A request with 5,000 node
names then costs a lookup per name, and a verdict can be kept by
:func:`~webhook.core.placement.placement_key` for the next pod.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from operator import eq

from webhook.core.placement import (
    MAX_SCORE,
    NodeView,
    Placement,
    PodView,
    ResourcePolicy,
    count_pods_per_unit,
    place,
    place_unmanaged,
)

UnitKey = int | None
"""A 0-based unit index of a policy, or ``None`` for "in no unit"."""
Grouping = dict[UnitKey, tuple[str, ...]]
"""Node names by the unit of a policy they lie in, each group in the order the names came."""
MISSING = -2
"""The unit "index" of a node nobody knows (neither the node cache nor the request describes it)."""
FEW_OUTSIDE = 64
"""At most this many names outside the largest unit are picked out one by one (see :func:`group_by_unit`)."""


def group_by_unit(
    names: Sequence[str], indices: Sequence[int | None], present: set[int | None] | None = None
) -> Grouping:
    """``names`` by their unit (``indices[i]`` is the unit of ``names[i]``: an index, ``None`` for no unit,
    :data:`MISSING` for an unknown node), each group in input order, the groups in order of first appearance.
    ``present`` is ``set(indices)`` when the caller has it already.

    Cut in C where it counts: usually nearly every name lies in one unit - the pool the scheduler found room
    in - and the few others (the virtual node) are picked out by position (``list.index``) and deleted from a
    copy; with more than :data:`FEW_OUTSIDE` outside the unit of the middle name, each unit present is
    selected (``compress``). (The scheduler's names come in a different order on every call - its filter runs
    in parallel - so a grouping cannot be kept by the list.)
    """
    if present is None:
        present = set(indices)
    if len(present) <= 1:
        return {indices[0]: tuple(names)} if indices else {}
    order = sorted(present, key=indices.index)
    largest = indices[len(indices) // 2]  # the largest unit, most likely: counted, not assumed
    if len(indices) - indices.count(largest) > FEW_OUTSIDE:
        return {index: tuple(compress(names, map(eq, indices, repeat(index)))) for index in order}
    groups: Grouping = {}
    outside: list[int] = []
    for index in order:
        if index == largest:
            continue
        positions: list[int] = []
        start = 0
        for _ in range(indices.count(index)):
            start = indices.index(index, start)
            positions.append(start)
            start += 1
        groups[index] = tuple(names[position] for position in positions)
        outside.extend(positions)
    rest = list(names)
    for position in sorted(outside, reverse=True):
        del rest[position]
    groups[largest] = tuple(rest)
    return {index: groups[index] for index in order}


@dataclass(frozen=True, slots=True)
class UnitVerdict:
    """:func:`~webhook.core.placement.place`'s verdict by unit rather than by node: what every candidate of a
    unit gets. It carries over to any request with the same :func:`~webhook.core.placement.placement_key`."""

    passing: frozenset[UnitKey]
    failed: Mapping[UnitKey, str]
    """Resolvable refusals, already worded for the scheduler (:func:`policy_reason`)."""
    unresolvable: Mapping[UnitKey, str]
    scores: Mapping[UnitKey, int]
    """0..10 per unit."""
    unit_index: int | None
    summary: str
    retry_at: float | None


_WAITED = re.compile(r" \(waited [^)]*\)")


def policy_reason(policy: ResourcePolicy, reason: str) -> str:
    """A node's refusal as the scheduler shows it: names the policy, and never changes while the pod waits.

    The core's ``TimeoutOrExceedMax`` reason tells how long the pod has waited; that part is dropped here
    (the log line keeps it). A reason that changed on every attempt would change the pod's PodScheduled
    condition each time, and each such update sends the pod straight back to an idle scheduler: a retry
    storm, and an Event per attempt.
    """
    reason = _WAITED.sub("", reason)
    return reason if policy.key in reason else f"ResourcePolicy {policy.key}: {reason}"


def verdict_by_unit(
    policy: ResourcePolicy, placement: Placement, representative: Mapping[UnitKey, NodeView]
) -> UnitVerdict:
    """A per-node :class:`Placement` of one ``representative`` node per unit, as a :class:`UnitVerdict`."""
    passing: set[UnitKey] = set()
    failed: dict[UnitKey, str] = {}
    unresolvable: dict[UnitKey, str] = {}
    scores: dict[UnitKey, int] = {}
    for index, node in representative.items():
        scores[index] = min(MAX_SCORE, max(0, placement.scores.get(node.name, 0)))
        if node.name in placement.passing:
            passing.add(index)
        elif node.name in placement.failed:
            failed[index] = policy_reason(policy, placement.failed[node.name])
        else:
            unresolvable[index] = policy_reason(policy, placement.unresolvable.get(node.name, ""))
    return UnitVerdict(
        frozenset(passing), failed, unresolvable, scores, placement.unit_index, placement.summary, placement.retry_at
    )


def preemption_refusal(
    policy: ResourcePolicy | None,
    pod: PodView,
    node: NodeView,
    victims: Sequence[PodView],
    unit_counts: Sequence[int],
    *,
    now: float,
    pod_first_seen: float | None = None,
) -> str:
    """Why evicting ``victims`` from ``node`` would still leave ``pod`` off that node under ``policy``; ``""``
    when the pod could use it then (docs/pod-quota.md, "Preemption").

    kube-scheduler's preemption picks among the nodes its own filters refused for room, which the extender's
    filter never saw. With the victims gone the node has room, so it is :func:`place`'s only candidate, and
    its unit counts the victims of the policy no more. A node in no unit, a unit still at its ``max``, or a
    unit the pod may not move on to yet (``ExceedMax``, a ``TimeoutOrExceedMax`` timeout not reached) would
    refuse the pod after the eviction too: those victims would go in vain. A pod no policy governs may not
    use a virtual node unless it opted in (:func:`place_unmanaged`), full or not.
    """
    if policy is None:
        unmanaged = place_unmanaged(pod, [node])
        return "" if unmanaged.passing else unmanaged.unresolvable[node.name]
    freed = count_pods_per_unit(policy, victims, {node.name: node}, now=now, for_pod=pod)
    counts = [max(0, count - gone) for count, gone in zip(unit_counts, freed, strict=True)]
    placement = place(policy, pod, [node], counts, now, pod_first_seen=pod_first_seen)
    if placement.passing:
        return ""
    return policy_reason(policy, placement.all_failed[node.name])
