"""Placement by unit: grouping names by unit, one representative per unit deciding for all of its nodes, and
the placement key a verdict may be kept by (``placement_key``, next to ``place``)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.strategies import examples
from webhook.core.placement import (
    NodeView,
    PodView,
    ResourcePolicy,
    Taint,
    TryNextPolicy,
    parse_policy,
    place,
    placement_key,
    unit_deletion_cost,
    unit_of_node,
)
from webhook.core.unitplacement import (
    FEW_OUTSIDE,
    MISSING,
    UnitKey,
    group_by_unit,
    policy_reason,
    verdict_by_unit,
)

T0 = 1_700_000_000.0
POOLS = ("a", "b", "c", "none")
SETTINGS = settings(max_examples=examples(200), deadline=None, database=None)

# Grouping -----------------------------------------------------------------------------------------------------


@st.composite
def unit_lists(draw: st.DrawFn) -> list[int | None]:
    """Units of the names asked about: mostly one unit, as a real request is, sometimes a mix."""
    values: list[int | None] = [0, 1, 2, None, MISSING]
    main = draw(st.sampled_from(values))
    size = draw(st.integers(0, FEW_OUTSIDE * 3))
    mixed = draw(st.booleans())
    return [draw(st.sampled_from(values)) if mixed or draw(st.integers(0, 20)) == 0 else main for _ in range(size)]


@SETTINGS
@given(unit_lists(), st.booleans())
def test_grouping_by_unit_is_the_plain_grouping(indices: list[int | None], known_present: bool) -> None:
    names = [f"n{position}" for position in range(len(indices))]
    expected: dict[UnitKey, list[str]] = {}
    for name, index in zip(names, indices, strict=True):
        expected.setdefault(index, []).append(name)
    grouping = group_by_unit(names, indices, set(indices) if known_present else None)
    assert grouping == {index: tuple(members) for index, members in expected.items()}
    assert list(grouping) == list(expected)  # the groups in order of first appearance


def test_a_few_names_outside_the_largest_unit_are_picked_out_in_order() -> None:
    indices: list[int | None] = [0] * 300 + [1] * 3 + [0] * 100 + [None]
    names = [f"n{position}" for position in range(len(indices))]
    grouping = group_by_unit(names, indices)
    assert grouping[1] == ("n300", "n301", "n302") and grouping[None] == ("n403",)
    assert len(grouping[0]) == 400 and "n301" not in grouping[0]
    assert list(grouping) == [0, 1, None]


# One representative per unit, and the key a verdict is kept by --------------------------------------------------


def unit_spec(draw: st.DrawFn, resource: str, pool: str | None) -> dict[str, Any]:
    unit: dict[str, Any] = {"resource": resource}
    if pool is not None:
        unit["nodeSelector"] = {"pool": pool}
    limit = draw(st.sampled_from([None, None, 0, 1, 2, 3]))
    if limit is not None:
        unit["max"] = limit
    return unit


@st.composite
def policies(draw: st.DrawFn) -> ResourcePolicy:
    pools = draw(st.lists(st.sampled_from(POOLS[:3]), min_size=1, max_size=3, unique=True))
    units = [unit_spec(draw, "ecs", pool) for pool in pools]
    if draw(st.booleans()):
        units.append(unit_spec(draw, "eci", None))
    spec: dict[str, Any] = {"units": units, "whenTryNextUnits": {"policy": draw(st.sampled_from(TryNextPolicy))}}
    if spec["whenTryNextUnits"]["policy"] is TryNextPolicy.TIMEOUT_OR_EXCEED_MAX:
        spec["whenTryNextUnits"]["timeout"] = "1m"
    return parse_policy(
        {"metadata": {"name": "rp", "namespace": "team", "creationTimestamp": "2024-01-01T00:00:00Z"}, "spec": spec}
    )


def cluster_node(name: str, pool: str) -> NodeView:
    if pool == "virtual":
        return NodeView(
            name=name,
            labels={"type": "virtual-kubelet"},
            taints=(Taint("virtual-kubelet.io/provider", "alibabacloud", "NoSchedule"),),
        )
    return NodeView(name=name, labels={"pool": pool})


@st.composite
def candidate_sets(draw: st.DrawFn, pools: list[str]) -> list[NodeView]:
    """Some nodes of every pool in ``pools``, other names each time, in any order."""
    tag = draw(st.integers(0, 10**6))
    nodes = [
        cluster_node(f"{pool}-{tag}-{index}", pool)
        for pool in pools
        for index in range(draw(st.integers(1, 3)))
    ]
    return list(draw(st.permutations(nodes)))


def representatives(policy: ResourcePolicy, candidates: list[NodeView]) -> dict[UnitKey, NodeView]:
    out: dict[UnitKey, NodeView] = {}
    for candidate in candidates:
        out.setdefault(unit_of_node(policy, candidate), candidate)
    return out


POD = PodView(namespace="team", name="p", uid="uid-p", created=T0 - 30.0)


@SETTINGS
@given(st.data())
def test_a_verdict_by_unit_is_what_every_node_of_the_unit_gets(data: st.DataObject) -> None:
    policy = data.draw(policies())
    pools = data.draw(st.lists(st.sampled_from((*POOLS, "virtual")), min_size=1, max_size=5, unique=True))
    candidates = data.draw(candidate_sets(pools))
    counts = tuple(data.draw(st.integers(0, 4)) for _ in policy.units)
    full = place(policy, POD, candidates, counts, T0)
    chosen = representatives(policy, candidates)
    verdict = verdict_by_unit(policy, place(policy, POD, list(chosen.values()), counts, T0), chosen)
    assert verdict.unit_index == full.unit_index and verdict.retry_at == full.retry_at
    for candidate in candidates:
        unit = unit_of_node(policy, candidate)
        assert full.scores[candidate.name] == verdict.scores[unit]
        if candidate.name in full.passing:
            assert unit in verdict.passing
        elif candidate.name in full.failed:
            assert verdict.failed[unit] == policy_reason(policy, full.failed[candidate.name])
        else:
            assert verdict.unresolvable[unit] == policy_reason(policy, full.unresolvable[candidate.name])


@SETTINGS
@given(st.data())
def test_calls_with_the_same_placement_key_give_the_same_verdict_by_unit(data: st.DataObject) -> None:
    policy = data.draw(policies())
    pools = data.draw(st.lists(st.sampled_from((*POOLS, "virtual")), min_size=1, max_size=5, unique=True))
    first, second = data.draw(candidate_sets(pools)), data.draw(candidate_sets(pools))
    counts = tuple(data.draw(st.integers(0, 4)) for _ in policy.units)
    # Counts of units without a max show nowhere: the key leaves them out, and so may the verdict.
    other_counts = tuple(
        count if unit.max is not None else data.draw(st.integers(0, 9))
        for unit, count in zip(policy.units, counts, strict=True)
    )
    first_units, second_units = representatives(policy, first), representatives(policy, second)
    key = placement_key(policy, first_units, counts)
    if policy.when_try_next is TryNextPolicy.TIMEOUT_OR_EXCEED_MAX:
        assert key is None  # the verdict also reads the clock and the pod's wait
        return
    assert key is not None and key == placement_key(policy, second_units, other_counts)
    later = PodView(namespace="team", name="q", uid="uid-q", created=None)  # neither pod nor time shows
    one = verdict_by_unit(policy, place(policy, POD, list(first_units.values()), counts, T0), first_units)
    two = verdict_by_unit(
        policy, place(policy, later, list(second_units.values()), other_counts, T0 + 3600.0), second_units
    )
    assert (one.passing, one.failed, one.unresolvable, one.scores, one.unit_index) == (
        two.passing, two.failed, two.unresolvable, two.scores, two.unit_index
    )
    assert one.retry_at is None and two.retry_at is None


def test_a_unit_count_that_shows_changes_the_key() -> None:
    policy = parse_policy(
        {
            "metadata": {"name": "rp", "namespace": "team"},
            "spec": {"units": [{"resource": "ecs", "nodeSelector": {"pool": "a"}}, {"resource": "eci", "max": 2}]},
        }
    )
    assert placement_key(policy, {0, 1}, (5, 1)) == placement_key(policy, [1, 0], (7, 1)) == (frozenset({0, 1}), (0, 1))
    assert placement_key(policy, {0, 1}, (5, 1)) != placement_key(policy, {0, 1}, (5, 2))
    assert placement_key(policy, {0, 1}, (5, 1)) != placement_key(policy, {1}, (5, 1))


def test_the_scheduler_s_reason_names_the_policy_and_not_the_wait() -> None:
    policy = parse_policy({"metadata": {"name": "rp", "namespace": "team"}, "spec": {"units": [{"resource": "eci"}]}})
    assert policy_reason(policy, "unit 1 (eci) is full (waited 3s)") == "ResourcePolicy team/rp: unit 1 (eci) is full"
    named = "ResourcePolicy team/rp: waiting (waited 1m2s) for unit 1"
    assert policy_reason(policy, named) == "ResourcePolicy team/rp: waiting for unit 1"


def test_the_first_unit_costs_nothing_to_write_and_later_units_go_first() -> None:
    assert [unit_deletion_cost(index, 3) for index in range(3)] == [0, -100, -200]
    assert unit_deletion_cost(0, 1) == 0
