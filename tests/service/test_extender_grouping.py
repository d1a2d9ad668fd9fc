"""The filter's grouping of the scheduler's node names by unit (the cache's unit indices, then the core's
``group_by_unit``) is exactly
the plain per-name grouping - whatever the order of the names, the units' sizes and the unknown nodes."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.service.extender_support import eci, ecs, node, policy, virtual_node
from webhook.core.placement import ResourcePolicy
from webhook.core.unitplacement import FEW_OUTSIDE, MISSING, Grouping, UnitKey, group_by_unit
from webhook.extender.state import ExtenderState

POOLS = ("a", "b", "c", "none")
"""``a``, ``b`` and ``c`` are the policy's ECS units 0, 1 and 2; ``none`` is in no unit."""


def state_with(pools: list[str]) -> ExtenderState:
    state = ExtenderState()
    state.replace_nodes([node(f"n{index}", pool=pool) for index, pool in enumerate(pools)] + [virtual_node()])
    state.set_policies([policy(units=[ecs(pool="a"), ecs(pool="b"), ecs(pool="c"), eci(max=4)])])
    return state


def reference(state: ExtenderState, names: list[str]) -> dict[UnitKey, tuple[str, ...]]:
    units = {"a": 0, "b": 1, "c": 2, "none": None}
    groups: dict[UnitKey, list[str]] = {}
    for name in names:
        view = state.nodes.get(name)
        if view is None:
            unit: UnitKey = MISSING
        elif view.is_virtual:
            unit = 3
        else:
            unit = units[view.labels["pool"]]
        groups.setdefault(unit, []).append(name)
    return {unit: tuple(members) for unit, members in groups.items()}


def group(state: ExtenderState, rule: ResourcePolicy, names: list[str]) -> Grouping:
    """What the filter does with the names."""
    indices, present = state.cache.unit_indices(rule, names, None)
    return group_by_unit(names, indices, present)


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[str], list[str]]:
    """Node pools - mostly one pool, as a real unit is, sometimes a mix - and the names asked about."""
    size = draw(st.integers(min_value=0, max_value=FEW_OUTSIDE * 3))
    main = draw(st.sampled_from(POOLS))
    mixed = draw(st.booleans())
    pools = [draw(st.sampled_from(POOLS)) if mixed or draw(st.integers(0, 20)) == 0 else main for _ in range(size)]
    known = [f"n{index}" for index in range(size)] + ["virtual-kubelet"]
    names = draw(st.permutations(known))
    kept = [name for name in names if draw(st.integers(0, 9)) > 0]
    ghosts = [f"ghost-{index}" for index in range(draw(st.integers(0, 3)))]
    for ghost in ghosts:
        kept.insert(draw(st.integers(0, len(kept))), ghost)
    return pools, kept


@settings(suppress_health_check=[HealthCheck.too_slow])  # drawing a cluster of pools is slow on a busy machine
@given(clusters())
def test_grouping_by_unit_is_the_plain_grouping(cluster: tuple[list[str], list[str]]) -> None:
    pools, names = cluster
    state = state_with(pools)
    rule = state.policies("team")[0]
    grouping = group(state, rule, names)
    expected = reference(state, names)
    assert grouping == expected
    assert list(grouping) == list(expected)  # the groups in order of first appearance
    assert group(state, rule, names) == expected  # again, from the filled cache


def test_a_unit_with_a_few_nodes_among_many_is_picked_out_in_order() -> None:
    pools = ["a"] * 300 + ["b"] * 3 + ["a"] * 100
    state = state_with(pools)
    names = [f"n{index}" for index in reversed(range(len(pools)))] + ["virtual-kubelet"]
    grouping = group(state, state.policies("team")[0], names)
    assert grouping[1] == ("n302", "n301", "n300")
    assert grouping[3] == ("virtual-kubelet",)
    assert len(grouping[0]) == 400 and grouping[0][:2] == ("n402", "n401") and "n301" not in grouping[0]
    assert list(grouping) == [0, 1, 3]
