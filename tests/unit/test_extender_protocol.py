"""The extender wire format: ExtenderArgs in, ExtenderFilterResult and HostPriorityList out, Go field names."""

from __future__ import annotations

import contextlib

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from webhook.extender.protocol import (
    ExtenderArgs,
    ProtocolError,
    filter_error,
    filter_reply,
    parse_args,
    priority_reply,
)

POD = {"metadata": {"name": "p", "namespace": "ns", "uid": "u1"}, "spec": {}}


def test_node_names_are_read_as_sent() -> None:
    args = parse_args(orjson.dumps({"Pod": POD, "Nodes": None, "NodeNames": ["a", "b"]}))
    assert args == ExtenderArgs(pod=POD, node_names=["a", "b"])
    assert args.by_name
    assert args.pod_key() == "ns/p"


def test_full_node_objects_give_their_names() -> None:
    nodes = [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}]
    args = parse_args(orjson.dumps({"Pod": POD, "Nodes": {"items": nodes}}))
    assert args.node_names == ["a", "b"]
    assert not args.by_name


def test_no_nodes_at_all_is_an_empty_list() -> None:
    assert parse_args(orjson.dumps({"Pod": POD})).node_names == []


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (b"[]", "expected an ExtenderArgs object"),
        (b"nope", "not JSON"),
        (orjson.dumps({"NodeNames": []}), "Pod is missing"),
        (orjson.dumps({"Pod": POD, "NodeNames": "a"}), "list of node names"),
        (orjson.dumps({"Pod": POD, "Nodes": {"items": [1]}}), "list of Node objects"),
        (orjson.dumps({"Pod": POD, "Nodes": {"items": [{"metadata": {}}]}}), "no metadata.name"),
    ],
)
def test_bad_bodies_say_what_is_wrong(body: bytes, problem: str) -> None:
    with pytest.raises(ProtocolError, match=problem):
        parse_args(body)


def test_the_filter_reply_uses_exactly_the_go_field_names() -> None:
    args = ExtenderArgs(pod=POD, node_names=["a", "b", "c"])
    reply = orjson.loads(filter_reply(args, ["a"], {"b": "busy"}, {"c": "never"}))
    assert reply == {
        "Nodes": None,
        "NodeNames": ["a"],
        "FailedNodes": {"b": "busy"},
        "FailedAndUnresolvableNodes": {"c": "never"},
        "Error": "",
    }


def test_an_empty_pass_list_is_sent_as_an_empty_list_not_null() -> None:
    args = ExtenderArgs(pod=POD, node_names=["a"])
    assert orjson.loads(filter_reply(args, [], {}, {"a": "no"}))["NodeNames"] == []


def test_full_nodes_are_echoed_as_a_node_list() -> None:
    nodes = [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}]
    args = ExtenderArgs(pod=POD, node_names=["a", "b"], nodes=nodes)
    reply = orjson.loads(filter_reply(args, ["b"], {"a": "no"}, {}))
    assert reply["Nodes"] == {"items": [{"metadata": {"name": "b"}}]}
    assert reply["NodeNames"] is None


def test_an_error_reply_carries_only_the_error() -> None:
    assert orjson.loads(filter_error("boom")) == {
        "Nodes": None,
        "NodeNames": None,
        "FailedNodes": {},
        "FailedAndUnresolvableNodes": {},
        "Error": "boom",
    }


def test_priorities_list_every_name_with_absent_ones_at_zero() -> None:
    assert orjson.loads(priority_reply(["a", "b", "c"], {10: ["a"], 9: ["c"]})) == [
        {"Host": "a", "Score": 10},
        {"Host": "c", "Score": 9},
        {"Host": "b", "Score": 0},
    ]
    assert orjson.loads(priority_reply(["a", "b"], {})) == [{"Host": "a", "Score": 0}, {"Host": "b", "Score": 0}]
    assert orjson.loads(priority_reply([], {})) == []


@pytest.mark.parametrize("name", ['quo"te', "back\\slash", "new\nline", "ünïcode"])
def test_unusual_names_are_still_valid_json(name: str) -> None:
    assert orjson.loads(priority_reply([name, "b"], {3: [name]})) == [
        {"Host": name, "Score": 3},
        {"Host": "b", "Score": 0},
    ]


@given(st.lists(st.text(max_size=8), unique=True, max_size=6), st.data())
def test_any_names_and_groups_give_one_entry_per_name(names: list[str], data: st.DataObject) -> None:
    scores = {name: data.draw(st.integers(0, 10)) for name in names}
    groups: dict[int, list[str]] = {}
    for name, score in scores.items():
        if score:
            groups.setdefault(score, []).append(name)
    reply = orjson.loads(priority_reply(names, groups))
    assert {entry["Host"]: entry["Score"] for entry in reply} == scores
    assert len(reply) == len(names)


def test_scores_outside_1_to_10_are_a_bug() -> None:
    with pytest.raises(ValueError, match=r"0\.\.10"):
        priority_reply(["a"], {11: ["a"]})


@given(st.binary(max_size=200))
def test_any_body_is_parsed_or_refused_with_a_protocol_error(body: bytes) -> None:
    with contextlib.suppress(ProtocolError):
        parse_args(body)
