"""ResourcePolicy placement: parsing, unit membership, counting and the per-pod decision."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webhook.api.objects import read_time
from webhook.core import placement_policy, selectors
from webhook.core.placement import (
    DEFAULT_TIMEOUT_SECONDS,
    MAX_UNITS,
    VIRTUAL_NODE_TOLERATION,
    AssumedPod,
    NodeView,
    Placement,
    PodView,
    PolicyError,
    ResourcePolicy,
    Taint,
    TryNextPolicy,
    Unit,
    UnitResource,
    count_pods_per_unit,
    counts_towards,
    deletion_cost,
    format_duration,
    node_view,
    parse_duration,
    parse_policy,
    place,
    place_unmanaged,
    pod_view,
    policy_for_pod,
    unit_of_node,
    unit_patch,
    validate_policy,
)
from webhook.core.selectors import FrozenLabels

NS = "user-a"
T0 = 1_700_000_000.0
"""An arbitrary fixed instant (epoch seconds); tests never read a clock."""

# Builders ---------------------------------------------------------------------------------------------------


def policy_obj(
    units: list[dict[str, Any]] | None = None,
    *,
    name: str = "rp",
    namespace: str = NS,
    created: str | None = "2024-01-01T00:00:00Z",
    **spec: Any,
) -> dict[str, Any]:
    """A ResourcePolicy JSON object; ``spec`` keys are the API's spellings."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if created is not None:
        metadata["creationTimestamp"] = created
    body: dict[str, Any] = {
        "units": units if units is not None else [{"resource": "ecs", "nodeSelector": {"pool": "ecs"}}]
    }
    body.update(spec)
    return {
        "apiVersion": "scheduling.alibabacloud.com/v1alpha1",
        "kind": "ResourcePolicy",
        "metadata": metadata,
        "spec": body,
    }


def policy(units: list[dict[str, Any]] | None = None, **kwargs: Any) -> ResourcePolicy:
    return parse_policy(policy_obj(units, **kwargs))


def ecs(pool: str = "ecs", max: int | None = None, **extra: Any) -> dict[str, Any]:
    unit: dict[str, Any] = {"resource": "ecs", "nodeSelector": {"pool": pool}, **extra}
    if max is not None:
        unit["max"] = max
    return unit


def eci(max: int | None = None, **extra: Any) -> dict[str, Any]:
    unit: dict[str, Any] = {"resource": "eci", **extra}
    if max is not None:
        unit["max"] = max
    return unit


def node(name: str, pool: str = "ecs", **labels: str) -> NodeView:
    return NodeView(name=name, labels={"pool": pool, **labels})


def vnode(name: str = "virtual-kubelet", **labels: str) -> NodeView:
    return NodeView(
        name=name,
        labels={"type": "virtual-kubelet", **labels},
        taints=(Taint("virtual-kubelet.io/provider", "alibabacloud", "NoSchedule"),),
    )


def pod(
    name: str = "p",
    *,
    node_name: str | None = None,
    namespace: str = NS,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    terminating: bool = False,
    finished: bool = False,
    created: float | None = None,
) -> PodView:
    return PodView(
        namespace=namespace,
        name=name,
        uid=f"uid-{namespace}-{name}",
        labels=labels or {},
        annotations=annotations or {},
        node_name=node_name,
        terminating=terminating,
        finished=finished,
        created=created,
    )


# Parsing and validation --------------------------------------------------------------------------------------


def test_parse_full_policy() -> None:
    parsed = parse_policy(
        policy_obj(
            [
                ecs("a", podLabels={"unit": "first"}, podAnnotations={"note": "any text: ok"}),
                ecs("b", max=10),
                eci(max=4, nodeSelector={"zone": "z1"}),
            ],
            selector={"app": "web"},
            strategy="prefer",
            whenTryNextUnits={"policy": "TimeoutOrExceedMax", "timeout": "1m30s"},
            ignorePreviousPod=True,
            ignoreTerminatingPod=False,
            matchLabelKeys=["pod-template-hash"],
            preemptPolicy="AfterAllUnits",  # an ACK field this project does not use: ignored
        )
        | {"metadata": {"name": "rp", "namespace": NS, "uid": "u1", "creationTimestamp": "2024-01-01T00:00:00Z"}}
    )
    assert parsed.key == f"{NS}/rp" and parsed.uid == "u1"
    assert parsed.created == read_time("2024-01-01T00:00:00Z") == 1704067200.0
    assert parsed.selector == {"app": "web"}
    assert parsed.when_try_next is TryNextPolicy.TIMEOUT_OR_EXCEED_MAX and parsed.timeout == 90.0
    assert parsed.ignore_previous_pod and not parsed.ignore_terminating_pod
    assert parsed.match_label_keys == ("pod-template-hash",)
    assert parsed.units == (
        Unit(
            UnitResource.ECS,
            FrozenLabels({"pool": "a"}),
            None,
            FrozenLabels({"unit": "first"}),
            FrozenLabels({"note": "any text: ok"}),
        ),
        Unit(UnitResource.ECS, FrozenLabels({"pool": "b"}), 10),
        Unit(UnitResource.ECI, FrozenLabels({"zone": "z1"}), 4),
    )
    assert parsed.has_eci_unit
    assert hash(parsed) == hash(
        parse_policy(
            policy_obj(
                [
                    ecs("a", podLabels={"unit": "first"}, podAnnotations={"note": "any text: ok"}),
                    ecs("b", max=10),
                    eci(max=4, nodeSelector={"zone": "z1"}),
                ],
                selector={"app": "web"},
                whenTryNextUnits={"policy": "TimeoutOrExceedMax", "timeout": "90s"},
                ignorePreviousPod=True,
                ignoreTerminatingPod=False,
                matchLabelKeys=["pod-template-hash"],
            )
            | {"metadata": {"name": "rp", "namespace": NS, "uid": "u1", "creationTimestamp": "2024-01-01T00:00:00Z"}}
        )
    )
    with pytest.raises(AttributeError):
        parsed.units = ()  # type: ignore[misc]


def test_parse_defaults() -> None:
    parsed = parse_policy({"metadata": {"name": "rp", "namespace": NS}, "spec": {"units": [eci()]}})
    assert parsed.selector == {} and parsed.strategy == "prefer"
    assert parsed.when_try_next is TryNextPolicy.LACK_RESOURCE_OR_EXCEED_MAX
    assert parsed.timeout == DEFAULT_TIMEOUT_SECONDS == 900.0
    assert not parsed.ignore_previous_pod and parsed.ignore_terminating_pod
    assert parsed.match_label_keys == () and parsed.created is None
    assert parsed.units == (Unit(UnitResource.ECI),)
    assert parse_policy(policy_obj([ecs()], whenTryNextUnits={})).timeout == 900.0
    assert not policy([ecs()]).has_eci_unit


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        ("nope", "<object>: expected a ResourcePolicy (a map), got str"),
        ({"metadata": {"name": "x"}}, "spec: required"),
        ({"spec": []}, "spec: expected a map, got list"),
        ({"apiVersion": "v1", "spec": {"units": [eci()]}}, "apiVersion: expected scheduling.alibabacloud.com/v1alpha1"),
        ({"kind": "Pod", "spec": {"units": [eci()]}}, "kind: expected ResourcePolicy, got 'Pod'"),
        ({"metadata": "x", "spec": {"units": [eci()]}}, "metadata: expected a map, got str"),
        ({"metadata": {"name": 3}, "spec": {"units": [eci()]}}, "metadata.name: expected a string, got int"),
        (
            {"metadata": {"creationTimestamp": "yesterday"}, "spec": {"units": [eci()]}},
            "metadata.creationTimestamp: timestamp 'yesterday' is not RFC 3339",
        ),
        (policy_obj(selector={"app": 1}), "spec.selector['app']: a value must be a string, got int"),
        (policy_obj(selector=["app"]), "spec.selector: expected a map"),
        (policy_obj(strategy="spread"), "spec.strategy: 'spread' is not supported: the only strategy is prefer"),
        (policy_obj([]), "spec.units: needs at least one unit"),
        ({"spec": {}}, "spec.units: required, a list of at least one unit"),
        (policy_obj(units={"resource": "ecs"}), "spec.units: expected a list of units, got dict"),  # type: ignore[arg-type]
        (policy_obj(["ecs"]), "spec.units[0]: expected a map, got str"),  # type: ignore[list-item]
        (policy_obj([None]), "spec.units[0]: required"),  # type: ignore[list-item]
        (policy_obj([{"max": 1}]), "spec.units[0].resource: required, one of ecs, eci"),
        (policy_obj([ecs(), {"resource": "gpu"}]), "spec.units[1].resource: 'gpu' is not a known unit resource"),
        (policy_obj([{"resource": 1}]), "spec.units[0].resource: 1 is not a known unit resource"),
        (policy_obj([ecs(max=-1)]), "spec.units[0].max: must be >= 0 (a count of pods), got -1"),
        (policy_obj([ecs(max="4")]), "spec.units[0].max: expected a whole number of pods >= 0, got '4'"),  # type: ignore[arg-type]
        (policy_obj([ecs(max=True)]), "spec.units[0].max: expected a whole number of pods >= 0, got True"),
        (policy_obj([ecs(max=1.5)]), "spec.units[0].max: expected a whole number"),  # type: ignore[arg-type]
        (policy_obj([eci(nodeSelector="zone=a")]), "spec.units[0].nodeSelector: expected a map"),
        (policy_obj([eci(podLabels={"a": "b c"})]), "spec.units[0].podLabels['a']: value 'b c'"),
        (policy_obj([eci(podAnnotations={"a": 1})]), "spec.units[0].podAnnotations['a']: a value must be a string"),
        (
            policy_obj(whenTryNextUnits={"policy": "Always"}),
            "spec.whenTryNextUnits.policy: 'Always' is not one of LackResourceOrExceedMax, ExceedMax, "
            "TimeoutOrExceedMax",
        ),
        (policy_obj(whenTryNextUnits="ExceedMax"), "spec.whenTryNextUnits: expected a map, got str"),
        (
            policy_obj(whenTryNextUnits={"policy": "TimeoutOrExceedMax", "timeout": "1 minute"}),
            "spec.whenTryNextUnits.timeout: duration '1 minute' is not a number with a unit",
        ),
        (
            policy_obj(whenTryNextUnits={"policy": "TimeoutOrExceedMax", "timeout": 60}),
            "spec.whenTryNextUnits.timeout: expected a duration string such as 30s, 1m or 1h30m, got int",
        ),
        (
            policy_obj(whenTryNextUnits={"timeout": "-1m"}),
            "spec.whenTryNextUnits.timeout: duration '-1m' must not be negative",
        ),
        (policy_obj(ignorePreviousPod="yes"), "spec.ignorePreviousPod: expected true or false, got 'yes'"),
        (policy_obj(ignoreTerminatingPod=0), "spec.ignoreTerminatingPod: expected true or false, got 0"),
        (policy_obj(matchLabelKeys="rev"), "spec.matchLabelKeys: expected a list of label keys, got str"),
        (policy_obj(matchLabelKeys=["ok", "not ok"]), "spec.matchLabelKeys[1]: key 'not ok'"),
        (
            policy_obj([ecs("a"), eci(), ecs("a", max=3)]),
            "spec.units[2]: can never be used: every ecs node it selects is taken first by spec.units[0]",
        ),
        (
            policy_obj([{"resource": "ecs"}, ecs("b")]),
            "spec.units[1]: can never be used: every ecs node it selects is taken first by spec.units[0]",
        ),
    ],
)
def test_validation_names_the_field_and_the_rule(obj: object, expected: str) -> None:
    problems = validate_policy(obj)
    assert any(problem.startswith(expected) for problem in problems), problems
    with pytest.raises(PolicyError) as caught:
        parse_policy(obj)
    assert caught.value.problems == tuple(problems)
    assert str(caught.value).startswith("invalid ResourcePolicy: ")


def test_units_with_overlapping_but_not_shadowed_selectors_are_valid() -> None:
    # unit 2 selects nodes unit 1 does not take (its selector is broader), and eci never shadows ecs.
    assert validate_policy(policy_obj([ecs("a"), {"resource": "ecs"}, eci(), eci(nodeSelector={"z": "1"})])) == [
        "spec.units[3]: can never be used: every eci node it selects is taken first by spec.units[2] "
        "(a node belongs to the first unit that matches)"
    ]
    assert validate_policy(policy_obj([ecs("a"), {"resource": "ecs"}, eci(nodeSelector={"z": "1"}), eci()])) == []


def _counting_matches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the selector comparisons validation makes (the unit check's only operation)."""
    calls = [0]
    real = selectors.matches_labels

    def counting(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
        calls[0] += 1
        return real(selector, labels)

    monkeypatch.setattr(placement_policy, "matches_labels", counting)
    return calls


def test_unit_validation_is_bounded_by_the_unit_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 17 hole 4: 5,000 units took 11 s (a pairwise check on the admission event loop).
    calls = _counting_matches(monkeypatch)
    # The worst case the limit allows: no unit shadows another, so every pair is compared once.
    assert validate_policy(policy_obj([ecs(f"p{index}") for index in range(MAX_UNITS)])) == []
    assert calls[0] == MAX_UNITS * (MAX_UNITS - 1) // 2
    calls[0] = 0
    problems = validate_policy(policy_obj([ecs(f"p{index}") for index in range(5000)]))
    assert problems == [
        f"spec.units: 5000 units; at most {MAX_UNITS} are allowed (every pod tries the units in order): merge "
        "units with the same nodes, or split the pods among policies by selector"
    ]
    assert calls[0] == 0  # refused on its length alone


def test_shadowed_units_are_never_compared_again(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _counting_matches(monkeypatch)
    units = [{"resource": "ecs"}, *(ecs(f"p{index}") for index in range(MAX_UNITS - 1))]
    problems = validate_policy(policy_obj(units))
    assert len(problems) == MAX_UNITS - 1  # every unit after the catch-all is unreachable
    assert calls[0] == MAX_UNITS - 1  # each compared with the catch-all only: linear


_SELECTORS = st.dictionaries(st.sampled_from("abc"), st.sampled_from("xy"), max_size=2)


@given(st.lists(st.tuples(st.sampled_from(["ecs", "eci"]), _SELECTORS), min_size=1, max_size=8))
def test_unreachable_units_match_the_pairwise_definition(units: list[tuple[str, dict[str, str]]]) -> None:
    objects = [{"resource": resource, "nodeSelector": selector} for resource, selector in units]
    expected = []
    for later, (resource, selector) in enumerate(units):
        for earlier, (other, shadow) in enumerate(units[:later]):
            if other == resource and all(selector.get(key) == value for key, value in shadow.items()):
                expected.append(f"spec.units[{later}]: can never be used: every {resource} node it selects is "
                                f"taken first by spec.units[{earlier}] (a node belongs to the first unit that matches)")
                break
    assert validate_policy(policy_obj(objects)) == expected


def test_every_problem_is_listed_at_once() -> None:
    problems = validate_policy(
        policy_obj(
            [{"resource": "gpu", "max": -2}, ecs(max=1)],
            strategy="spread",
            whenTryNextUnits={"policy": "Sometimes", "timeout": "soon"},
        )
    )
    assert [problem.split(":")[0] for problem in problems] == [
        "spec.strategy",
        "spec.units[0].resource",
        "spec.units[0].max",
        "spec.whenTryNextUnits.policy",
        "spec.whenTryNextUnits.timeout",
    ]


def test_explicit_nulls_read_as_defaults() -> None:
    parsed = parse_policy(
        policy_obj(
            [{"resource": "ecs", "nodeSelector": None, "max": None}],
            selector=None,
            strategy=None,
            whenTryNextUnits=None,
            ignorePreviousPod=None,
            matchLabelKeys=None,
        )
    )
    assert parsed.units == (Unit(UnitResource.ECS),) and parsed.selector == {}


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 12) | st.floats(allow_nan=True) | st.text(max_size=10),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=25,
)
_unit_like = st.fixed_dictionaries(
    {},
    optional={
        "resource": st.sampled_from(["ecs", "eci", "ECS", "gpu", ""]) | _json,
        "nodeSelector": st.dictionaries(st.sampled_from(["pool", "zone", "bad key"]), st.sampled_from(["a", ""]))
        | _json,
        "max": st.integers(-2, 8) | _json,
        "podLabels": st.dictionaries(st.sampled_from(["l", "-x"]), st.sampled_from(["v", "v v"])) | _json,
        "podAnnotations": st.dictionaries(st.text(max_size=4), st.text(max_size=4)) | _json,
    },
)
_policy_like = st.fixed_dictionaries(
    {},
    optional={
        "apiVersion": st.sampled_from(["scheduling.alibabacloud.com/v1alpha1", "v1"]) | _json,
        "kind": st.sampled_from(["ResourcePolicy", "Pod"]) | _json,
        "metadata": st.fixed_dictionaries(
            {},
            optional={
                "name": st.text(max_size=5) | _json,
                "namespace": st.just(NS) | _json,
                "creationTimestamp": st.sampled_from(["2024-01-01T00:00:00Z", "2024-13-01", "now"]) | _json,
            },
        )
        | _json,
        "spec": st.fixed_dictionaries(
            {},
            optional={
                "selector": st.dictionaries(st.sampled_from(["app", "x/"]), st.sampled_from(["web", "a b"])) | _json,
                "strategy": st.sampled_from(["prefer", "spread"]) | _json,
                "units": st.lists(_unit_like | _json, max_size=4) | _json,
                "whenTryNextUnits": st.fixed_dictionaries(
                    {},
                    optional={
                        "policy": st.sampled_from([p.value for p in TryNextPolicy] + ["x"]) | _json,
                        "timeout": st.sampled_from(["1m", "30s", "1h30m", ".5s", "1", "-1s", "5x", ""]) | _json,
                    },
                )
                | _json,
                "ignorePreviousPod": st.booleans() | _json,
                "ignoreTerminatingPod": st.booleans() | _json,
                "matchLabelKeys": st.lists(st.sampled_from(["rev", "bad key", "a/b"]) | _json, max_size=3) | _json,
            },
        )
        | _json,
    },
)


@given(obj=_json | _policy_like)
def test_junk_never_crashes_validation_and_valid_always_parses(obj: object) -> None:
    problems = validate_policy(obj)
    assert all(isinstance(problem, str) and problem for problem in problems)
    if problems:
        with pytest.raises(PolicyError):
            parse_policy(obj)
    else:
        parsed = parse_policy(obj)
        assert parsed.units and all(unit.max is None or unit.max >= 0 for unit in parsed.units)
        assert parsed.timeout >= 0


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0", 0.0),
        ("30s", 30.0),
        ("1m", 60.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        ("+2m", 120.0),
        ("500ms", 0.5),
        ("1m0.5s", 60.5),
        (".5s", 0.5),
        ("10us", 1e-5),
        ("10µs", 1e-5),
        ("3ns", 3e-9),
    ],
)
def test_parse_duration_follows_go(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "1", "m", "1d", "1m 30s", "-1s", "+", "s1", "1.2.3s", None, 60, "9" * 400 + "h"])
def test_parse_duration_refuses(text: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (45, "45s"), (0.5, "0.5s"), (60, "1m"), (90, "1m30s"), (3600, "1h"), (3661, "1h1m1s")],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_read_time() -> None:
    assert read_time("1970-01-01T00:01:00Z") == 60.0
    assert read_time("1970-01-01T01:01:00+01:00") == 60.0
    assert read_time("1970-01-01T00:01:00") == 60.0  # naive reads as UTC
    with pytest.raises(ValueError, match="not RFC 3339"):
        read_time("Monday")
    with pytest.raises(ValueError, match="got int"):
        read_time(5)


# Which policy, which unit ------------------------------------------------------------------------------------


def test_policy_for_pod_picks_namespace_and_selector_then_oldest() -> None:
    web_new = policy(name="web-new", selector={"app": "web"}, created="2024-02-01T00:00:00Z")
    web_old = policy(name="web-old", selector={"app": "web"}, created="2024-01-01T00:00:00Z")
    all_pods = policy(name="all", created="2024-03-01T00:00:00Z")
    other_ns = policy(name="elsewhere", namespace="user-b", created="2020-01-01T00:00:00Z")
    web = pod(labels={"app": "web"})
    assert policy_for_pod([web_new, web_old, all_pods, other_ns], web) is web_old
    assert policy_for_pod([web_new, all_pods], web) is web_new
    assert policy_for_pod([web_new, web_old, all_pods], pod(labels={"app": "db"})) is all_pods
    assert policy_for_pod([web_new, web_old, other_ns], pod(labels={"app": "db"})) is None
    assert policy_for_pod([], web) is None
    assert policy_for_pod([other_ns], pod(namespace="user-b")) is other_ns


def test_policy_for_pod_breaks_ties_by_name_and_treats_unknown_age_as_newest() -> None:
    b = policy(name="b")
    a = policy(name="a")
    undated = policy(name="0-undated", created=None)
    assert policy_for_pod([b, a, undated], pod()) is a
    assert policy_for_pod([undated, policy(name="z-undated", created=None)], pod()) is undated


@pytest.mark.parametrize(
    ("candidate", "expected"),
    [
        (node("n1", "a"), 0),
        (node("n2", "b"), 1),
        (node("n3", "c"), None),
        (NodeView("bare"), None),
        (vnode(), 2),
        (vnode(zone="z1"), 2),
        # A virtual node never joins an ecs unit, even when it carries the unit's labels.
        (vnode(pool="a"), 2),
    ],
)
def test_node_belongs_to_first_matching_unit_of_its_kind(candidate: NodeView, expected: int | None) -> None:
    rp = policy([ecs("a"), ecs("b"), eci()])
    assert unit_of_node(rp, candidate) == expected


def test_first_matching_unit_wins_and_catch_all_ecs_leaves_the_virtual_node_to_eci() -> None:
    rp = policy([{"resource": "ecs"}, eci(nodeSelector={"zone": "z1"}), eci()])
    assert unit_of_node(rp, node("n", "anything")) == 0
    assert unit_of_node(rp, vnode(zone="z1")) == 1
    assert unit_of_node(rp, vnode(zone="z2")) == 2
    only_ecs = policy([{"resource": "ecs"}])
    assert unit_of_node(only_ecs, vnode()) is None


# Counting ---------------------------------------------------------------------------------------------------

NODES = {n.name: n for n in (node("e1", "a"), node("e2", "a"), node("e3", "b"), node("x1", "none"), vnode("v1"))}


def counts(
    rp: ResourcePolicy,
    pods: Sequence[PodView],
    *,
    for_pod: PodView | None = None,
    assumed: Mapping[str, AssumedPod] | None = None,
    now: float = T0,
) -> tuple[int, ...]:
    return count_pods_per_unit(rp, pods, NODES, now=now, for_pod=for_pod, assumed=assumed)


def test_counts_bound_pods_per_unit() -> None:
    rp = policy([ecs("a"), ecs("b"), eci(max=4)])
    pods = [
        pod("p1", node_name="e1"),
        pod("p2", node_name="e2"),
        pod("p3", node_name="e3"),
        pod("p4", node_name="v1"),
        pod("p5", node_name="v1"),
        pod("p6", node_name="x1"),  # node in no unit
        pod("p7", node_name="gone"),  # node not in the cache
        pod("p8"),  # pending, not assumed
    ]
    assert counts(rp, pods) == (2, 1, 2)


@pytest.mark.parametrize(
    ("spec", "counted", "expected"),
    [
        ({}, pod("x", node_name="e1", namespace="user-b"), 0),
        ({"selector": {"app": "web"}}, pod("x", node_name="e1", labels={"app": "db"}), 0),
        ({"selector": {"app": "web"}}, pod("x", node_name="e1", labels={"app": "web", "v": "1"}), 1),
        ({}, pod("x", node_name="e1", terminating=True), 0),
        ({"ignoreTerminatingPod": True}, pod("x", node_name="e1", terminating=True), 0),
        ({"ignoreTerminatingPod": False}, pod("x", node_name="e1", terminating=True), 1),
        ({}, pod("x", node_name="e1", finished=True), 0),
        ({"ignoreTerminatingPod": False}, pod("x", node_name="e1", finished=True), 0),
        # The policy was created at 2024-01-01T00:00:00Z == 1704067200.
        ({"ignorePreviousPod": True}, pod("x", node_name="e1", created=1704067199.0), 0),
        ({"ignorePreviousPod": True}, pod("x", node_name="e1", created=1704067200.0), 1),
        ({"ignorePreviousPod": True}, pod("x", node_name="e1", created=None), 1),
        ({"ignorePreviousPod": False}, pod("x", node_name="e1", created=1.0), 1),
    ],
)
def test_counting_rules(spec: dict[str, Any], counted: PodView, expected: int) -> None:
    rp = policy([ecs("a")], **spec)
    assert counts(rp, [counted]) == (expected,)


def test_ignore_previous_pod_needs_the_policy_creation_time() -> None:
    rp = policy([ecs("a")], ignorePreviousPod=True, created=None)
    assert counts(rp, [pod("old", node_name="e1", created=1.0)]) == (1,)


def test_match_label_keys_count_per_distinct_value_combination() -> None:
    rp = policy([ecs("a")], matchLabelKeys=["rev", "shard"])
    pods = [
        pod("a1", node_name="e1", labels={"rev": "1", "shard": "x"}),
        pod("a2", node_name="e2", labels={"rev": "1", "shard": "x"}),
        pod("b1", node_name="e1", labels={"rev": "2", "shard": "x"}),
        pod("c1", node_name="e1", labels={"rev": "1"}),
        pod("d1", node_name="e1"),
    ]
    assert counts(rp, pods, for_pod=pod("new", labels={"rev": "1", "shard": "x"})) == (2,)
    assert counts(rp, pods, for_pod=pod("new", labels={"rev": "2", "shard": "x"})) == (1,)
    # An absent label is a value of its own.
    assert counts(rp, pods, for_pod=pod("new", labels={"rev": "1"})) == (1,)
    assert counts(rp, pods, for_pod=pod("new")) == (1,)
    # Without the pod being placed, every pod of the policy counts.
    assert counts(rp, pods) == (5,)
    # Without matchLabelKeys the revision does not matter.
    assert counts(policy([ecs("a")]), pods, for_pod=pod("new", labels={"rev": "9"})) == (5,)


def test_pod_never_counts_itself() -> None:
    rp = policy([ecs("a")])
    me = pod("me", node_name="e1")
    assert counts(rp, [me, pod("other", node_name="e1")], for_pod=me) == (1,)
    # Identity by namespace/name when a uid is missing.
    no_uid = PodView(namespace=NS, name="me", node_name="e1")
    assert counts(rp, [no_uid], for_pod=PodView(namespace=NS, name="me")) == (0,)
    assert counts(rp, [no_uid], for_pod=PodView(namespace=NS, name="you")) == (1,)


def test_unit_pod_labels_and_annotations_gate_counting_of_bound_pods() -> None:
    rp = policy([ecs("a", podLabels={"unit": "a"}, podAnnotations={"cost": "low"}), eci()])
    marked = pod("m", node_name="e1", labels={"unit": "a"}, annotations={"cost": "low"})
    half = pod("h", node_name="e1", labels={"unit": "a"})
    bare = pod("b", node_name="e2")
    on_eci = pod("v", node_name="v1")
    assert counts(rp, [marked, half, bare, on_eci]) == (1, 1)


def test_assumed_pods_count_until_bound_or_expired() -> None:
    rp = policy([ecs("a", podLabels={"unit": "a"}), eci(max=4)])
    waiting = pod("w")  # not bound, not labelled yet: the extender labels it when it binds
    assumed = {waiting.uid: AssumedPod(waiting.uid, "v1", expires_at=T0 + 30)}
    assert counts(rp, [waiting], assumed=assumed, now=T0) == (0, 1)
    assert counts(rp, [waiting], assumed=assumed, now=T0 + 29.9) == (0, 1)
    assert counts(rp, [waiting], assumed=assumed, now=T0 + 30) == (0, 0)
    assumed_on_e1 = {waiting.uid: AssumedPod(waiting.uid, "e1", expires_at=T0 + 30)}
    assert counts(rp, [waiting], assumed=assumed_on_e1) == (1, 0)
    # Once bound, the bound node counts, not the assumption (and only once).
    bound = pod("w", node_name="v1")
    assert counts(rp, [bound], assumed=assumed_on_e1) == (0, 1)
    # Assumptions of pods that are gone, or on unknown nodes, do not count.
    ghost = {"uid-gone": AssumedPod("uid-gone", "v1", T0 + 30)}
    assert counts(rp, [waiting], assumed=ghost) == (0, 0)
    assert counts(rp, [waiting], assumed={waiting.uid: AssumedPod(waiting.uid, "nope", T0 + 30)}) == (0, 0)
    # A pod without a uid cannot be matched to an assumption.
    anonymous = PodView(namespace=NS, name="anon")
    assert counts(rp, [anonymous], assumed={"": AssumedPod("", "v1", T0 + 30)}) == (0, 0)


def test_counts_towards_is_the_shared_membership_rule() -> None:
    rp = policy([ecs("a")], selector={"app": "web"})
    assert counts_towards(rp, pod(labels={"app": "web"}))
    assert not counts_towards(rp, pod(labels={"app": "web"}), for_pod=pod(labels={"app": "web"}))
    assert not counts_towards(rp, pod(labels={"app": "web"}, terminating=True))


# The decision -----------------------------------------------------------------------------------------------

E1, E2, E3, V1, X1 = node("e1", "a"), node("e2", "a"), node("e3", "b"), vnode("v1"), node("x1", "none")


@pytest.mark.parametrize(
    ("units", "candidates", "unit_counts", "passing", "unit_index"),
    [
        # The first unit with a candidate and room wins.
        ([ecs("a"), eci(max=4)], [E1, E2, V1], (0, 0), ("e1", "e2"), 0),
        ([ecs("a", max=6), eci(max=4)], [E1, V1], (5, 0), ("e1",), 0),
        # At max: move on.
        ([ecs("a", max=6), eci(max=4)], [E1, V1], (6, 0), ("v1",), 1),
        ([ecs("a", max=0), eci()], [E1, V1], (0, 0), ("v1",), 1),
        # No candidate in unit 1: move on (LackResourceOrExceedMax).
        ([ecs("a"), eci(max=4)], [V1], (6, 0), ("v1",), 1),
        ([ecs("a"), ecs("b"), eci(max=4)], [E3, V1], (0, 0, 0), ("e3",), 1),
        # Everything at max or lacking.
        ([ecs("a"), eci(max=4)], [V1], (6, 4), (), None),
        ([ecs("a"), eci(max=4)], [], (0, 0), (), None),
        # Counts above max (the policy was edited down) are still "at max".
        ([ecs("a", max=2), eci(max=4)], [E1, V1], (5, 0), ("v1",), 1),
    ],
)
def test_lack_resource_or_exceed_max(
    units: list[dict[str, Any]],
    candidates: list[NodeView],
    unit_counts: tuple[int, ...],
    passing: tuple[str, ...],
    unit_index: int | None,
) -> None:
    result = place(policy(units), pod(), candidates, unit_counts, T0)
    assert result.passing == passing
    assert result.unit_index == unit_index
    assert set(result.passing) | set(result.all_failed) == {c.name for c in candidates}
    assert not set(result.failed) & set(result.unresolvable)


def test_reasons_name_the_unit_and_the_cap() -> None:
    rp = policy([ecs("a", max=6), ecs("b"), eci(max=4)])
    result = place(rp, pod(), [E1, E3, V1, X1], (6, 0, 0), T0)
    assert result.passing == ("e3",) and result.unit_index == 1
    assert result.unresolvable == {
        "e1": "unit 1 (ecs) is at its max of 6 pods",
        "x1": f"node belongs to no unit of ResourcePolicy {NS}/rp",
    }
    assert result.failed == {"v1": "unit 2 (ecs) is preferred and still has room"}
    assert result.summary == f"ResourcePolicy {NS}/rp: unit 2 (ecs) has room (no max): 1 candidate node(s)"
    assert result.retry_at is None


def test_later_unit_at_max_reports_the_cap_not_the_preference() -> None:
    rp = policy([ecs("a"), eci(max=4)])
    result = place(rp, pod(), [E1, V1], (3, 4), T0)
    assert result.passing == ("e1",)
    assert result.unresolvable == {"v1": "unit 2 (eci) is at its max of 4 pods"}
    assert result.failed == {}


def test_summary_when_no_unit_can_take_the_pod() -> None:
    rp = policy([ecs("a"), eci(max=4)])
    result = place(rp, pod(), [V1], (6, 4), T0)
    assert result.passing == () and result.unit_index is None
    assert result.unresolvable == {"v1": "unit 2 (eci) is at its max of 4 pods"}
    assert result.summary == (
        f"ResourcePolicy {NS}/rp: no unit can take the pod: unit 1 (ecs) has no node with room (no max), "
        "unit 2 (eci) is at its max of 4 pods"
    )


@pytest.mark.parametrize(
    ("candidates", "unit_counts", "passing", "unit_index"),
    [
        # Unit 1 has a candidate: use it.
        ([E1, V1], (0, 0), ("e1",), 0),
        # Unit 1 lacks a candidate but is below max: wait (no node passes, not even eci).
        ([V1], (3, 0), (), None),
        # Unit 1 at max: move on.
        ([V1], (6, 0), ("v1",), 1),
        ([E1, V1], (6, 0), ("v1",), 1),
        # Unit 2 at max too: nothing.
        ([V1], (6, 4), (), None),
    ],
)
def test_exceed_max_moves_on_only_at_max(
    candidates: list[NodeView], unit_counts: tuple[int, ...], passing: tuple[str, ...], unit_index: int | None
) -> None:
    rp = policy([ecs("a", max=6), eci(max=4)], whenTryNextUnits={"policy": "ExceedMax"})
    result = place(rp, pod(), candidates, unit_counts, T0)
    assert (result.passing, result.unit_index) == (passing, unit_index)


def test_exceed_max_waiting_reason_and_unlimited_unit_never_overflows() -> None:
    rp = policy([ecs("a", max=6), eci(max=4)], whenTryNextUnits={"policy": "ExceedMax"})
    result = place(rp, pod(), [V1], (3, 0), T0)
    reason = "unit 1 (ecs) has no node with room (3 of its max 6 pods); whenTryNextUnits ExceedMax moves on only at max"
    assert result.unresolvable == {"v1": reason}
    assert result.summary == f"ResourcePolicy {NS}/rp: waiting for unit 1 (ecs): {reason}"
    assert result.retry_at is None
    unlimited = policy([ecs("a"), eci()], whenTryNextUnits={"policy": "ExceedMax"})
    assert place(unlimited, pod(), [V1], (1000, 0), T0).passing == ()


def test_timeout_or_exceed_max_waits_then_moves_on() -> None:
    rp = policy([ecs("a", max=6), eci(max=4)], whenTryNextUnits={"policy": "TimeoutOrExceedMax", "timeout": "1m"})
    early = place(rp, pod(), [V1], (3, 0), T0 + 20, pod_first_seen=T0)
    assert early.passing == () and early.unit_index is None
    assert early.unresolvable == {
        "v1": "unit 1 (ecs) has no node with room (3 of its max 6 pods); whenTryNextUnits TimeoutOrExceedMax "
        "moves on after 1m (waited 20s)"
    }
    assert early.retry_at == T0 + 60
    just_before = place(rp, pod(), [V1], (3, 0), T0 + 59.5, pod_first_seen=T0)
    assert just_before.passing == ()
    on_time = place(rp, pod(), [V1], (3, 0), T0 + 60, pod_first_seen=T0)
    assert on_time.passing == ("v1",) and on_time.unit_index == 1 and on_time.retry_at is None
    # At max, no waiting at all.
    assert place(rp, pod(), [V1], (6, 0), T0, pod_first_seen=T0).passing == ("v1",)
    # A candidate in unit 1 is always preferred, however long the pod waited.
    assert place(rp, pod(), [E1, V1], (3, 0), T0 + 3600, pod_first_seen=T0).passing == ("e1",)


def test_timeout_clock_starts_at_first_seen_else_creation_else_now() -> None:
    rp = policy([ecs("a"), eci()], whenTryNextUnits={"policy": "TimeoutOrExceedMax", "timeout": "30s"})
    old_pod = pod(created=T0 - 3600)
    assert place(rp, old_pod, [V1], (0, 0), T0).passing == ("v1",)
    assert place(rp, old_pod, [V1], (0, 0), T0, pod_first_seen=T0 - 10).passing == ()
    fresh = place(rp, pod(), [V1], (0, 0), T0)
    assert fresh.passing == () and fresh.retry_at == T0 + 30
    # A first-seen time in the future (clock skew) reads as no wait, not a negative one.
    skewed = place(rp, pod(), [V1], (0, 0), T0, pod_first_seen=T0 + 5)
    assert "(waited 0s)" in skewed.unresolvable["v1"]


def test_timeout_or_exceed_max_with_zero_timeout_behaves_like_lack_resource() -> None:
    rp = policy([ecs("a"), eci()], whenTryNextUnits={"policy": "TimeoutOrExceedMax", "timeout": "0s"})
    assert place(rp, pod(), [V1], (0, 0), T0, pod_first_seen=T0).passing == ("v1",)


def test_waiting_for_a_unit_still_reports_later_caps() -> None:
    rp = policy([ecs("a"), ecs("b", max=2), eci()], whenTryNextUnits={"policy": "ExceedMax"})
    result = place(rp, pod(), [E3, V1], (0, 2, 0), T0)
    assert result.passing == ()
    assert result.unresolvable["e3"] == "unit 2 (ecs) is at its max of 2 pods"
    assert result.unresolvable["v1"].startswith("unit 1 (ecs) has no node with room (no max)")


def test_nodes_in_no_unit_never_pass() -> None:
    rp = policy([ecs("a")])
    result = place(rp, pod(), [X1, V1], (0,), T0)
    assert result.passing == ()
    assert result.unresolvable == {
        "x1": f"node belongs to no unit of ResourcePolicy {NS}/rp",
        "v1": f"node belongs to no unit of ResourcePolicy {NS}/rp",
    }


def test_scores_rank_usable_units_in_order() -> None:
    rp = policy([ecs("a", max=6), ecs("b"), ecs("c"), eci(max=4)])
    e4 = node("e4", "c")
    candidates = [E1, E3, e4, V1, X1]
    chosen_first = place(rp, pod(), candidates, (0, 0, 0, 0), T0)
    assert chosen_first.scores == {"e1": 10, "e3": 9, "e4": 8, "v1": 7, "x1": 0}
    first_full = place(rp, pod(), candidates, (6, 0, 0, 4), T0)
    assert first_full.unit_index == 1
    assert first_full.scores == {"e1": 0, "e3": 10, "e4": 9, "v1": 0, "x1": 0}
    assert all(0 <= score <= 10 for score in first_full.scores.values())


def test_scores_stay_within_range_with_many_units() -> None:
    units = [ecs(f"p{index}") for index in range(12)]
    nodes = [node(f"n{index}", f"p{index}") for index in range(12)]
    result = place(policy(units), pod(), nodes, (0,) * 12, T0)
    assert result.scores["n0"] == 10 and result.scores["n10"] == 0 and result.scores["n11"] == 0


def test_place_refuses_counts_of_the_wrong_length() -> None:
    with pytest.raises(ValueError, match=r"expected 2 unit counts for user-a/rp, got 1"):
        place(policy([ecs("a"), eci()]), pod(), [E1], (0,), T0)


def test_placement_is_immutable() -> None:
    result = place(policy([ecs("a")]), pod(), [E1, X1], (0,), T0)
    with pytest.raises(TypeError):
        result.unresolvable["x1"] = "changed"  # type: ignore[index]
    with pytest.raises(AttributeError):
        result.passing = ()  # type: ignore[misc]
    assert isinstance(hash(result), int)
    assert Placement(passing=()).all_failed == {}


# The issue's scenario at the decision level ------------------------------------------------------------------


def _schedule(
    rp: ResourcePolicy,
    nodes: Sequence[NodeView],
    capacity: Mapping[str, int],
    pending: Sequence[PodView],
    *,
    bind: bool = True,
) -> tuple[dict[str, str], dict[str, str], dict[str, AssumedPod]]:
    """Place pods one by one as the scheduler would: candidates are the nodes with room; the extender filter
    passes some; the best-scored passing node is chosen. ``bind=False`` leaves pods unbound (only assumed),
    as when many pods are scheduled before any binding is observed."""
    by_name = {n.name: n for n in nodes}
    bound: list[PodView] = []
    assumed: dict[str, AssumedPod] = {}
    where: dict[str, str] = {}
    why: dict[str, str] = {}
    for incoming in pending:
        waiting_or_bound = [*bound, *(p for p in pending if p.uid in assumed)]
        used = {
            name: sum(1 for p in waiting_or_bound if (p.node_name or assumed[p.uid].node_name) == name)
            for name in by_name
        }
        candidates = [n for n in nodes if used[n.name] < capacity[n.name]]
        unit_counts = count_pods_per_unit(rp, waiting_or_bound, by_name, now=T0, for_pod=incoming, assumed=assumed)
        result = place(rp, incoming, candidates, unit_counts, T0)
        if not result.passing:
            why[incoming.name] = result.summary
            continue
        chosen = max(result.passing, key=lambda name: result.scores[name])
        where[incoming.name] = chosen
        if bind:
            bound.append(
                PodView(
                    namespace=incoming.namespace,
                    name=incoming.name,
                    uid=incoming.uid,
                    labels=incoming.labels,
                    node_name=chosen,
                )
            )
        else:
            assumed[incoming.uid] = AssumedPod(incoming.uid, chosen, expires_at=T0 + 30)
    return where, why, assumed


@pytest.mark.parametrize("bind", [True, False], ids=["bound-one-by-one", "assumed-not-yet-bound"])
def test_issue_scenario_six_on_ecs_four_on_eci_then_the_cap(bind: bool) -> None:
    rp = policy([{"resource": "ecs"}, eci(max=4)], selector={"app": "pi"})
    nodes = [node("ecs-1", "x"), node("ecs-2", "y"), vnode("virtual-kubelet")]
    capacity = {"ecs-1": 3, "ecs-2": 3, "virtual-kubelet": 1000}
    pods = [pod(f"pi-{index}", labels={"app": "pi"}) for index in range(12)]
    where, why, _ = _schedule(rp, nodes, capacity, pods, bind=bind)
    on_ecs = [name for name, node_name in where.items() if node_name.startswith("ecs-")]
    on_eci = [name for name, node_name in where.items() if node_name == "virtual-kubelet"]
    assert on_ecs == [f"pi-{index}" for index in range(6)]
    assert on_eci == [f"pi-{index}" for index in range(6, 10)]
    assert set(why) == {"pi-10", "pi-11"}
    assert "unit 2 (eci) is at its max of 4 pods" in why["pi-10"]
    assert "unit 1 (ecs) has no node with room" in why["pi-11"]


def test_issue_scenario_scale_in_removes_eci_pods_first() -> None:
    costs = {index: deletion_cost(index, 2) for index in range(2)}
    assert costs[0] > costs[1]
    # A ReplicaSet deletes the lowest cost first: the eci pods (unit 2) go first.
    pods = [("ecs-pod", costs[0]), ("eci-pod", costs[1])]
    assert min(pods, key=lambda item: item[1])[0] == "eci-pod"


# Patches, deletion cost, unmanaged pods, views ----------------------------------------------------------------


def test_unit_patch_returns_fresh_copies() -> None:
    rp = policy([ecs("a", podLabels={"unit": "a"}, podAnnotations={"note": "x"}), eci()])
    labels, annotations = unit_patch(rp.units[0])
    assert (labels, annotations) == ({"unit": "a"}, {"note": "x"})
    labels["unit"] = "changed"
    assert unit_patch(rp.units[0])[0] == {"unit": "a"}
    assert unit_patch(rp.units[1]) == ({}, {})


@pytest.mark.parametrize("n_units", [1, 2, 3, 5])
def test_deletion_cost_is_highest_for_the_first_unit(n_units: int) -> None:
    costs = [deletion_cost(index, n_units) for index in range(n_units)]
    assert costs == sorted(costs, reverse=True) and len(set(costs)) == n_units
    assert costs[-1] == 0
    assert all(-(2**31) <= cost < 2**31 for cost in costs)


@pytest.mark.parametrize(("index", "n_units"), [(-1, 2), (2, 2), (0, 0)])
def test_deletion_cost_refuses_indices_outside_the_policy(index: int, n_units: int) -> None:
    with pytest.raises(ValueError, match="outside"):
        deletion_cost(index, n_units)


def test_unmanaged_pods_never_use_virtual_nodes() -> None:
    result = place_unmanaged(pod(), [E1, V1, X1])
    assert result.passing == ("e1", "x1")
    assert set(result.unresolvable) == {"v1"}
    assert "virtual node (type=virtual-kubelet)" in result.unresolvable["v1"]
    assert result.failed == {} and result.unit_index is None
    assert set(result.scores.values()) == {0} and set(result.scores) == {"e1", "v1", "x1"}
    assert result.summary == "no ResourcePolicy selects the pod: virtual nodes refused"


def test_unmanaged_pod_that_opted_into_eci_may_use_virtual_nodes() -> None:
    result = place_unmanaged(pod(labels={"alibabacloud.com/eci": "true"}), [E1, V1])
    assert result.passing == ("e1", "v1") and result.unresolvable == {}
    assert place_unmanaged(pod(labels={"alibabacloud.com/eci": "false"}), [V1]).passing == ()
    assert place_unmanaged(pod(), [E1]).summary == "no ResourcePolicy selects the pod"


def test_views_from_kubernetes_json() -> None:
    seen = pod_view(
        {
            "metadata": {
                "namespace": NS,
                "name": "p",
                "uid": "u",
                "labels": {"app": "web", "bad": 1},
                "annotations": {"a": "b"},
                "creationTimestamp": "1970-01-01T00:01:00Z",
                "deletionTimestamp": "1970-01-01T00:02:00Z",
            },
            "spec": {"nodeName": "e1"},
            "status": {"phase": "Running"},
        }
    )
    assert seen == PodView(
        namespace=NS,
        name="p",
        uid="u",
        labels={"app": "web"},
        annotations={"a": "b"},
        node_name="e1",
        terminating=True,
        created=60.0,
    )
    assert pod_view({"status": {"phase": "Succeeded"}}).finished
    empty = pod_view({"metadata": {"creationTimestamp": "garbage", "labels": "x"}, "spec": {"nodeName": ""}})
    assert empty == PodView(namespace="", name="")
    seen_node = node_view(
        {
            "metadata": {"name": "v1", "labels": {"type": "virtual-kubelet"}},
            "spec": {
                "taints": [
                    {"key": "virtual-kubelet.io/provider", "value": "alibabacloud", "effect": "NoSchedule"},
                    "junk",
                ]
            },
        }
    )
    assert seen_node.is_virtual and seen_node.taints == (Taint("virtual-kubelet.io/provider", "alibabacloud"),)
    assert node_view({}) == NodeView(name="")
    assert not node_view({"metadata": {"name": "n"}, "spec": {"taints": "x"}}).is_virtual


def test_views_are_frozen_and_hashable() -> None:
    view = PodView(namespace=NS, name="p", labels={"a": "b"})
    assert isinstance(view.labels, FrozenLabels) and view.key == f"{NS}/p"
    assert hash(view) == hash(PodView(namespace=NS, name="p", labels={"a": "b"}))
    with pytest.raises(AttributeError):
        view.name = "q"  # type: ignore[misc]
    assert VIRTUAL_NODE_TOLERATION["key"] == "virtual-kubelet.io/provider"
