"""Label maps and label selectors: matching and validation."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webhook.core.selectors import (
    EMPTY_LABELS,
    EVERYTHING,
    NOTHING,
    FrozenLabels,
    FrozenMap,
    LabelSelector,
    Operator,
    Requirement,
    SelectorError,
    label_key_problem,
    label_value_problem,
    matches_labels,
    parse_label_map,
    parse_label_selector,
    validate_label_map,
    validate_label_selector,
)

LABELS = {"app": "web", "tier": "front", "example.com/team": "a"}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ({}, True),
        ({"app": "web"}, True),
        ({"app": "web", "tier": "front"}, True),
        ({"app": "db"}, False),
        ({"app": "web", "zone": "x"}, False),
        ({"example.com/team": "a"}, True),
        ({"app": ""}, False),
    ],
)
def test_equality_map_needs_every_pair(selector: dict[str, str], expected: bool) -> None:
    assert matches_labels(selector, LABELS) is expected


def test_empty_labels_match_only_empty_selector() -> None:
    assert matches_labels({}, {})
    assert not matches_labels({"a": "b"}, {})


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ({}, True),
        ({"matchLabels": {"app": "web"}}, True),
        ({"matchLabels": {"app": "db"}}, False),
        ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["db", "web"]}]}, True),
        ({"matchExpressions": [{"key": "app", "operator": "In", "values": ["db"]}]}, False),
        ({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["x"]}]}, False),
        ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["db"]}]}, True),
        ({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]}, False),
        ({"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["x"]}]}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}, True),
        ({"matchExpressions": [{"key": "zone", "operator": "Exists"}]}, False),
        ({"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]}, True),
        ({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist", "values": []}]}, False),
        (
            {
                "matchLabels": {"app": "web"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["back"]}],
            },
            False,
        ),
        (
            {
                "matchLabels": {"app": "web"},
                "matchExpressions": [
                    {"key": "tier", "operator": "In", "values": ["front"]},
                    {"key": "example.com/team", "operator": "Exists"},
                ],
            },
            True,
        ),
    ],
)
def test_label_selector_matching(selector: dict[str, Any], expected: bool) -> None:
    assert parse_label_selector(selector).matches(LABELS) is expected


def test_missing_selector_matches_nothing_and_empty_matches_everything() -> None:
    assert parse_label_selector(None) is NOTHING
    assert not NOTHING.matches({})
    assert not NOTHING.is_everything
    assert parse_label_selector({}) is EVERYTHING
    assert EVERYTHING.matches({}) and EVERYTHING.is_everything
    assert parse_label_selector({"matchLabels": {}, "matchExpressions": []}) is EVERYTHING
    assert not parse_label_selector({"matchLabels": {"a": "b"}}).is_everything


def test_parsed_selector_is_an_immutable_value() -> None:
    first = parse_label_selector({"matchExpressions": [{"key": "a", "operator": "In", "values": ["x", "y"]}]})
    second = parse_label_selector({"matchExpressions": [{"key": "a", "operator": "In", "values": ["y", "x"]}]})
    assert first == second and hash(first) == hash(second)
    assert first.match_expressions == (Requirement("a", Operator.IN, frozenset({"x", "y"})),)
    with pytest.raises(AttributeError):
        first.matches_nothing = True  # type: ignore[misc]
    assert LabelSelector(match_labels=FrozenLabels({"a": "b"})).matches({"a": "b"})


@pytest.mark.parametrize(
    ("selector", "fragment"),
    [
        ("app=web", "selector: expected a LabelSelector map, got str"),
        ({"matchLabels": ["a"]}, "selector.matchLabels: expected a map"),
        ({"matchExpressions": {"key": "a"}}, "selector.matchExpressions: expected a list, got dict"),
        ({"matchExpressions": ["a"]}, "selector.matchExpressions[0]: expected a map"),
        ({"matchExpressions": [{"operator": "Exists"}]}, "selector.matchExpressions[0].key: required"),
        (
            {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]},
            "selector.matchExpressions[0].operator: 'Gt' is not one of In, NotIn, Exists, DoesNotExist",
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": ["In"]}]},
            "selector.matchExpressions[0].operator: ['In'] is not one of",
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "In", "values": []}]},
            "selector.matchExpressions[0].values: operator In needs at least one value",
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "NotIn"}]},
            "selector.matchExpressions[0].values: operator NotIn needs at least one value",
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
            "selector.matchExpressions[0].values: operator Exists takes no values",
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "In", "values": "x"}]},
            "selector.matchExpressions[0].values: expected a list of strings, got str",
        ),
        (
            {"matchExpressions": [{"key": "a", "operator": "In", "values": ["ok", 3]}]},
            "selector.matchExpressions[0].values[1]: a value must be a string, got int",
        ),
        (
            {"matchExpressions": [{"key": "-bad", "operator": "Exists"}]},
            "selector.matchExpressions[0].key: key '-bad'",
        ),
    ],
)
def test_selector_problems_name_the_field(selector: object, fragment: str) -> None:
    problems = validate_label_selector(selector)
    assert any(fragment in problem for problem in problems), problems
    with pytest.raises(SelectorError) as caught:
        parse_label_selector(selector)
    assert caught.value.problems == tuple(problems)
    assert fragment in str(caught.value)


def test_every_problem_is_listed_not_just_the_first() -> None:
    problems = validate_label_selector(
        {
            "matchLabels": {"ok": "fine", "bad key!": "v"},
            "matchExpressions": [{"key": "a", "operator": "Nope"}, {"key": "b", "operator": "In"}],
        },
        "spec.selector",
    )
    assert len(problems) == 3
    assert problems[0].startswith("spec.selector.matchLabels['bad key!']")
    assert problems[1].startswith("spec.selector.matchExpressions[0].operator")
    assert problems[2].startswith("spec.selector.matchExpressions[1].values")


@pytest.mark.parametrize(
    "key",
    ["app", "a", "app.kubernetes.io/name", "example.com/x_y.z-1", "A1", "k" * 63, "a.b/" + "c" * 63],
)
def test_valid_label_keys(key: str) -> None:
    assert label_key_problem(key) is None


@pytest.mark.parametrize(
    ("key", "fragment"),
    [
        (5, "must be a string"),
        ("", "name part must not be empty"),
        ("example.com/", "name part must not be empty"),
        ("/name", "prefix before '/' must not be empty"),
        ("Example.com/name", "must be a DNS subdomain"),
        ("ex_ample.com/name", "must be a DNS subdomain"),
        ("a/b/c", "must be a DNS subdomain"),
        ("x" * 254 + "/name", "must be a DNS subdomain"),
        ("k" * 64, "at most 63 characters"),
        ("-app", "start and end with an alphanumeric"),
        ("app-", "start and end with an alphanumeric"),
        ("has space", "start and end with an alphanumeric"),
    ],
)
def test_invalid_label_keys(key: object, fragment: str) -> None:
    problem = label_key_problem(key)
    assert problem is not None and fragment in problem


@pytest.mark.parametrize("value", ["", "web", "v1.2_3-x", "v" * 63])
def test_valid_label_values(value: str) -> None:
    assert label_value_problem(value) is None


@pytest.mark.parametrize(
    ("value", "fragment"),
    [(1, "must be a string"), (None, "must be a string"), ("v" * 64, "at most 63"), ("a b", "alphanumerics")],
)
def test_invalid_label_values(value: object, fragment: str) -> None:
    problem = label_value_problem(value)
    assert problem is not None and fragment in problem


def test_label_map_validation_and_parsing() -> None:
    assert validate_label_map(None, "x") == []
    assert validate_label_map({"a": "b"}, "x") == []
    assert validate_label_map("a=b", "x") == ["x: expected a map of string keys to string values, got str"]
    assert validate_label_map({"a": 1}, "x") == ["x['a']: a value must be a string, got int"]
    # Annotation-style maps accept any text as a value, but still want strings and valid keys.
    assert validate_label_map({"note": "free text: ok!"}, "x", values_are_labels=False) == []
    assert validate_label_map({"note": 1}, "x", values_are_labels=False) == [
        "x['note']: a value must be a string, got int"
    ]
    assert validate_label_map({"bad key": "v"}, "x", values_are_labels=False)[0].startswith("x['bad key']")
    assert parse_label_map(None, "x") is EMPTY_LABELS
    assert parse_label_map({}, "x") is EMPTY_LABELS
    assert parse_label_map({"a": "b"}, "x") == {"a": "b"}
    with pytest.raises(SelectorError, match=r"x\['a'\]: value 'not ok'"):
        parse_label_map({"a": "not ok"}, "x")


def test_frozen_labels_behave_as_immutable_hashable_mappings() -> None:
    source = {"a": "1", "b": "2"}
    labels = FrozenLabels(source)
    source["c"] = "3"
    assert dict(labels) == {"a": "1", "b": "2"}
    assert len(labels) == 2 and labels["a"] == "1" and list(labels) == ["a", "b"]
    assert labels == {"b": "2", "a": "1"}
    assert labels == FrozenLabels({"b": "2", "a": "1"})
    assert hash(labels) == hash(FrozenLabels({"b": "2", "a": "1"}))
    assert labels != ["a", "b"]
    assert FrozenLabels.of(labels) is labels
    assert FrozenLabels.of(None) == {}
    copy = labels.to_dict()
    copy["z"] = "9"
    assert "z" not in labels
    assert repr(labels) == "FrozenLabels({'a': '1', 'b': '2'})"
    with pytest.raises(TypeError):
        labels["a"] = "x"  # type: ignore[index]
    scores = FrozenMap({"n1": 10})
    assert scores["n1"] == 10 and repr(scores) == "FrozenMap({'n1': 10})"


_junk = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
_expression = st.fixed_dictionaries(
    {},
    optional={
        "key": st.sampled_from(["a", "b/c", "-x", ""]) | _junk,
        "operator": st.sampled_from([op.value for op in Operator] + ["Gt", ""]) | _junk,
        "values": st.lists(st.sampled_from(["x", "y", "bad value"]), max_size=3) | _junk,
    },
)
_selector_like = st.fixed_dictionaries(
    {},
    optional={
        "matchLabels": st.dictionaries(st.sampled_from(["a", "b"]), st.sampled_from(["x", "y"])) | _junk,
        "matchExpressions": st.lists(_expression | _junk, max_size=3) | _junk,
    },
)


@given(
    selector=_junk | _selector_like, labels=st.dictionaries(st.sampled_from(["a", "b/c"]), st.sampled_from(["x", "y"]))
)
def test_junk_never_crashes_and_valid_means_parseable(selector: object, labels: dict[str, str]) -> None:
    problems = validate_label_selector(selector)
    assert all(isinstance(problem, str) and problem.startswith("selector") for problem in problems)
    if problems:
        with pytest.raises(SelectorError):
            parse_label_selector(selector)
    else:
        assert isinstance(parse_label_selector(selector).matches(labels), bool)
