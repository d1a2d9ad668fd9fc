"""The extender's unit counts - tallied from pod events, plus assumed placements - equal the core's
``count_pods_per_unit`` over every pod, after any sequence of events."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.service.extender_support import bound, node, pod, policy, virtual_node
from tests.strategies import examples
from webhook.core.placement import pod_view
from webhook.core.resources import EMPTY
from webhook.extender.decision import Assumption
from webhook.extender.state import ExtenderState

NODES = [node("a-0", pool="a"), node("a-1", pool="a"), node("b-0", pool="b"), virtual_node()]
NODE_NAMES = ["a-0", "a-1", "b-0", "virtual-kubelet", "gone"]
LABEL_VALUES = st.sampled_from(["x", "y"])
LABELS = st.dictionaries(st.sampled_from(["app", "version", "placed"]), LABEL_VALUES, max_size=3)
STAMPS = st.sampled_from(["2024-05-01T10:00:00Z", "2024-05-01T12:00:00Z", None])
NOW = st.sampled_from([0.0, 100.0, 200.0])


@st.composite
def units(draw: st.DrawFn) -> list[dict[str, Any]]:
    choices: list[list[dict[str, str]]] = [[{"pool": "a"}, {"pool": "b"}], [{"pool": "a"}], [{}]]
    selectors: list[dict[str, str]] = draw(st.sampled_from(choices))
    out: list[dict[str, Any]] = []
    for selector in selectors:
        unit: dict[str, Any] = {"resource": "ecs", "nodeSelector": selector}
        if draw(st.booleans()):
            unit["podLabels"] = {"placed": draw(LABEL_VALUES)}
        out.append(unit)
    eci: dict[str, Any] = {"resource": "eci", "max": draw(st.integers(0, 3))}
    if draw(st.booleans()):
        eci["podAnnotations"] = {"note": "eci"}
    out.append(eci)
    return out


@st.composite
def policies(draw: st.DrawFn) -> dict[str, Any]:
    return policy(
        units=draw(units()),
        selector=draw(st.sampled_from([{}, {"app": "x"}])),
        matchLabelKeys=draw(st.sampled_from([[], ["version"]])),
        ignoreTerminatingPod=draw(st.booleans()),
        ignorePreviousPod=draw(st.booleans()),
    )


@st.composite
def pods(draw: st.DrawFn, index: int) -> dict[str, Any]:
    obj = pod(
        f"p{index}",
        namespace=draw(st.sampled_from(["team", "team", "other"])),
        labels=draw(LABELS),
        node_name=draw(st.sampled_from([None, None, *NODE_NAMES])),
        uid=f"uid-{index}",
        created=draw(STAMPS),
        phase=draw(st.sampled_from(["Pending", "Pending", "Succeeded"])),
        deleting=draw(st.booleans()),
    )
    if draw(st.integers(0, 4)) == 0:
        obj["metadata"]["uid"] = ""  # a pod without a uid: never found among assumptions
    return obj


OPS = st.sampled_from(["add", "add", "assume", "assume", "bind", "delete", "relabel", "expire", "marks"])


def check(state: ExtenderState, for_pods: list[dict[str, Any]], now: float) -> None:
    (live,) = state.policies("team")
    for obj in for_pods:
        view = pod_view(obj)
        assert state.unit_counts(live, view, now) == state.unit_counts_reference(live, view, now), obj["metadata"]


@settings(max_examples=examples(300), deadline=None)
@given(st.data())
def test_tallied_counts_equal_the_cores_after_any_events(data: st.DataObject) -> None:
    state = ExtenderState()
    state.replace_nodes(NODES)
    state.set_policies([data.draw(policies())])
    objs = [data.draw(pods(index)) for index in range(data.draw(st.integers(1, 10)))]
    for_pods = [*objs[:3], pod("new", labels=data.draw(LABELS))]
    now = data.draw(NOW)
    check(state, for_pods, now)  # the tally is built here, then kept by the events below
    for _ in range(data.draw(st.integers(1, 25))):
        op = data.draw(OPS)
        obj = data.draw(st.sampled_from(objs))
        view = pod_view(obj)
        key = view.uid or view.key
        if op == "add":
            state.upsert_pod(obj)
        elif op == "assume" and view.node_name is None:
            expires = data.draw(st.sampled_from([50.0, 150.0]))
            state.cache.assume(key, Assumption(view, data.draw(st.sampled_from(NODE_NAMES)), expires, EMPTY, "team/rp"))
        elif op == "bind":
            placed = bound(obj, data.draw(st.sampled_from(NODE_NAMES)))
            state.upsert_pod(placed)
            objs[objs.index(obj)] = placed
        elif op == "delete":
            state.delete_pod(obj)
        elif op == "relabel":
            name = data.draw(st.sampled_from(["a-1", "b-0"]))
            state.upsert_node(node(name, pool=data.draw(st.sampled_from(["a", "b", "c"]))))
        elif op == "expire":
            now = data.draw(NOW)
            state.expire(now)
        elif op == "marks":  # the unit's marks land on the pod
            state.upsert_pod(
                {**obj, "metadata": {**obj["metadata"], "labels": {**obj["metadata"]["labels"], "placed": "x"}}}
            )
        check(state, for_pods, now)
