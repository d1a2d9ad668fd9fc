"""Resource lists: parsing, arithmetic, comparison against limits, scaling and canonical output."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.builders import res
from webhook.api.names import MAX_JOBS
from webhook.core import resources as resources_module
from webhook.core.quantity import NANO
from webhook.core.resources import EMPTY, ResourceError, Resources, is_binary_resource, shared, total

GI = 1024**3


def test_of_understands_aliases_and_whole_units() -> None:
    r = res(cpu=10, memory="10Gi", gpu=1, max_jobs=2)
    assert dict(r) == {"cpu": 10 * NANO, "memory": 10 * GI * NANO, "nvidia.com/gpu": NANO, MAX_JOBS: 2 * NANO}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (None, {}),
        ({}, {}),
        ({"cpu": "100m"}, {"cpu": 100_000_000}),
        ({"cpu": 2, "memory": "1Gi"}, {"cpu": 2 * NANO, "memory": GI * NANO}),
        ({"nvidia.com/gpu": "4"}, {"nvidia.com/gpu": 4 * NANO}),
    ],
)
def test_parse_reads_kubernetes_resource_lists(spec: dict[str, Any] | None, expected: dict[str, int]) -> None:
    assert dict(Resources.parse(spec)) == expected


@pytest.mark.parametrize(
    ("spec", "fragments"),
    [
        ({"cpu": "ten"}, ["'cpu'", "'ten'"]),
        ({"memory": "10Gb"}, ["'memory'", "'10Gb'"]),
        ({"cpu": 1.5}, ["'cpu'", "1.5", "float"]),
        ({"cpu": True}, ["'cpu'", "boolean"]),
        ({"": "1"}, ["non-empty"]),
        ({3: "1"}, ["'3'", "non-empty strings"]),
        ("cpu=1", ["mapping", "cpu=1"]),
        (["cpu"], ["mapping"]),
    ],
)
def test_parse_names_the_bad_resource(spec: Any, fragments: list[str]) -> None:
    with pytest.raises(ResourceError) as caught:
        Resources.parse(spec)
    for fragment in fragments:
        assert fragment in str(caught.value)


def test_mapping_protocol_equality_and_hash() -> None:
    a = res(cpu=1, memory="1Gi")
    b = Resources({"memory": GI * NANO, "cpu": NANO})
    assert a == b
    assert hash(a) == hash(b)
    assert len({a, b}) == 1
    assert a != res(cpu=1)
    assert a != {"cpu": NANO, "memory": GI * NANO}  # a plain dict is not a Resources
    assert len(a) == 2
    assert sorted(a) == ["cpu", "memory"]
    assert a["cpu"] == NANO
    assert a.get_or_zero("cpu") == NANO
    assert a.get_or_zero("nvidia.com/gpu") == 0
    assert "cpu" in a
    assert repr(a) == "Resources({'cpu': '1', 'memory': '1Gi'})"


@pytest.mark.parametrize(
    ("left", "right", "expected"),
    [
        (res(cpu=1), res(cpu=2), res(cpu=3)),
        (res(cpu=1), res(memory="1Gi"), res(cpu=1, memory="1Gi")),
        (EMPTY, res(cpu=1), res(cpu=1)),
        (res(cpu=1), EMPTY, res(cpu=1)),
        (EMPTY, EMPTY, EMPTY),
        (EMPTY, {"cpu": NANO}, res(cpu=1)),
        (res(cpu=1), {"cpu": -NANO}, res(cpu=0)),
    ],
)
def test_addition(left: Resources, right: Resources, expected: Resources) -> None:
    result = left + right
    assert isinstance(result, Resources)
    assert result == expected


def test_addition_does_not_mutate_operands() -> None:
    left, right = res(cpu=1), res(cpu=2)
    _ = left + right
    assert left == res(cpu=1)
    assert right == res(cpu=2)


@pytest.mark.parametrize(
    ("left", "right", "expected"),
    [
        (res(cpu=3), res(cpu=1), res(cpu=2)),
        (res(cpu=1), res(cpu=3), res(cpu=-2)),
        (res(cpu=1), res(memory="1Gi"), Resources({"cpu": NANO, "memory": -GI * NANO})),
        (res(cpu=1), EMPTY, res(cpu=1)),
        (EMPTY, res(cpu=1), res(cpu=-1)),
    ],
)
def test_subtraction(left: Resources, right: Resources, expected: Resources) -> None:
    assert left - right == expected


def test_multiplication_both_ways() -> None:
    assert res(cpu=2, memory="1Gi") * 3 == res(cpu=6, memory="3Gi")
    assert 3 * res(cpu=2) == res(cpu=6)
    assert res(cpu=2) * 0 == res(cpu=0)


@pytest.mark.parametrize(
    ("resources", "rate", "expected"),
    [
        (res(cpu=10), 2, res(cpu=20)),
        (res(cpu=10), 1, res(cpu=10)),
        (res(cpu=10), Fraction(3, 2), res(cpu=15)),
        (res(cpu="1n"), Fraction(1, 2), res(cpu=0)),  # rounds down
        (res(cpu="3n"), Fraction(1, 2), res(cpu="1n")),
        (res(memory="1Gi"), Fraction(1, 4), res(memory="256Mi")),
    ],
)
def test_scale_rounds_down(resources: Resources, rate: Fraction | int, expected: Resources) -> None:
    assert resources.scale(rate) == expected


def test_clamp_only_and_without_zeros() -> None:
    mixed = Resources({"cpu": -NANO, "memory": 0, "nvidia.com/gpu": NANO})
    assert mixed.clamp_min_zero() == Resources({"cpu": 0, "memory": 0, "nvidia.com/gpu": NANO})
    assert mixed.without_zeros() == Resources({"cpu": -NANO, "nvidia.com/gpu": NANO})
    assert mixed.only(["cpu", "pods"]) == Resources({"cpu": -NANO})
    assert mixed.any_negative()
    assert not mixed.clamp_min_zero().any_negative()


@pytest.mark.parametrize(
    ("resources", "zero"),
    [(EMPTY, True), (Resources({"cpu": 0}), True), (res(cpu=1), False), (Resources({"cpu": -1}), False)],
)
def test_is_zero(resources: Resources, zero: bool) -> None:
    assert resources.is_zero() is zero


@pytest.mark.parametrize(
    ("request_", "limit", "absent_is_unlimited", "over"),
    [
        (res(cpu=1), res(cpu=1), True, ()),
        (res(cpu=2), res(cpu=1), True, ("cpu",)),
        (res(cpu=1, memory="2Gi"), res(cpu=1, memory="1Gi"), True, ("memory",)),
        (res(cpu=2, memory="2Gi"), res(cpu=1, memory="1Gi"), True, ("cpu", "memory")),
        (res(gpu=1), res(cpu=1), True, ()),  # absent from the limit: unlimited
        (res(gpu=1), res(cpu=1), False, ("nvidia.com/gpu",)),  # absent from the limit: zero
        (res(gpu=0), res(cpu=1), False, ()),  # nothing asked, nothing exceeded
        (Resources({"cpu": -NANO}), res(cpu=0), False, ()),
        (EMPTY, EMPTY, False, ()),
        (res(cpu=1), Resources({"cpu": -NANO}), True, ("cpu",)),
    ],
)
def test_fits_within_unless_some_amount_is_over(
    request_: Resources, limit: Resources, absent_is_unlimited: bool, over: tuple[str, ...]
) -> None:
    assert request_.fits_within(limit, absent_is_unlimited) is (not over)


@pytest.mark.parametrize(
    ("resources", "spec"),
    [
        (EMPTY, {}),
        (res(cpu=10, memory="10Gi", gpu=4), {"cpu": "10", "memory": "10Gi", "nvidia.com/gpu": "4"}),
        (res(cpu="500m", memory="1.5Gi"), {"cpu": "500m", "memory": "1536Mi"}),
        (res(cpu=2000), {"cpu": "2k"}),
        (Resources.parse({"ephemeral-storage": "2Gi", "hugepages-2Mi": "4Mi"}),
         {"ephemeral-storage": "2Gi", "hugepages-2Mi": "4Mi"}),
        (res(max_jobs=3), {MAX_JOBS: "3"}),
    ],
)
def test_to_spec_is_canonical_and_sorted(resources: Resources, spec: dict[str, str]) -> None:
    assert resources.to_spec() == spec
    assert list(resources.to_spec()) == sorted(spec)
    assert Resources.parse(resources.to_spec()) == resources


def test_describe() -> None:
    assert res(memory="1Gi", cpu=2).describe() == "cpu=2, memory=1Gi"
    assert EMPTY.describe() == "nothing"


@pytest.mark.parametrize(
    ("name", "binary"),
    [
        ("memory", True),
        ("ephemeral-storage", True),
        ("hugepages-2Mi", True),
        ("cpu", False),
        ("nvidia.com/gpu", False),
        (MAX_JOBS, False),
    ],
)
def test_is_binary_resource(name: str, binary: bool) -> None:
    assert is_binary_resource(name) is binary


def test_total() -> None:
    assert total([res(cpu=1), res(cpu=2, memory="1Gi"), EMPTY]) == res(cpu=3, memory="1Gi")
    assert total([]) == EMPTY


amounts = st.dictionaries(
    st.sampled_from(["cpu", "memory", "nvidia.com/gpu", MAX_JOBS]),
    st.integers(min_value=-(10**20), max_value=10**20),
)


@given(a=amounts, b=amounts)
def test_add_then_subtract_is_the_identity_on_present_names(a: dict[str, int], b: dict[str, int]) -> None:
    left, right = Resources(a), Resources(b)
    back = (left + right) - right
    for name in set(a) | set(b):
        assert back.get_or_zero(name) == left.get_or_zero(name)


@given(a=amounts)
def test_to_spec_round_trips(a: dict[str, int]) -> None:
    assert Resources.parse(Resources(a).to_spec()) == Resources(a)


def test_views_and_get_read_the_underlying_amounts_without_exposing_them() -> None:
    r = res(cpu=1, memory="1Gi")
    assert list(r.keys()) == ["cpu", "memory"]
    assert list(r.values()) == [NANO, GI * NANO]
    assert dict(r.items()) == {"cpu": NANO, "memory": GI * NANO}
    assert r.get("cpu") == NANO
    assert r.get("gpu") is None
    assert r.get("gpu", 0) == 0
    assert "memory" in r
    assert "gpu" not in r
    with pytest.raises(TypeError):  # the views' mapping is a read-only proxy
        r.items().mapping["cpu"] = 5  # type: ignore[attr-defined]
    assert r == res(cpu=1, memory="1Gi")


def test_equal_lists_are_shared_and_the_table_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = Resources.of(cpu=2, memory="1Gi"), Resources.of(cpu=2, memory="1Gi")
    assert first is not second
    assert shared(first) is shared(second) and shared(second) == second
    monkeypatch.setattr(resources_module, "SHARED_KEPT", 4)
    monkeypatch.setattr(resources_module, "_shared", {})
    for cpu in range(10):
        assert shared(Resources.of(cpu=cpu + 10)) == Resources.of(cpu=cpu + 10)
    assert len(resources_module._shared) <= 4
