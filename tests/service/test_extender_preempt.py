"""kube-scheduler's preemption asks the extender (``POST /extender/preempt``) which of the victims it picked may
go; the extender keeps only the nodes whose victims the quota rules let go (docs/pod-quota.md, "Preemption").
Over HTTP, in the wire format of ``k8s.io/kube-scheduler/extender/v1`` (``ExtenderPreemptionArgs`` in,
``ExtenderPreemptionResult`` out)."""

from __future__ import annotations

import logging
from typing import Any

import orjson
import pytest
from prometheus_client import REGISTRY

from tests.service.extender_support import Cluster, ecs, pod, policy, seed_quota_tree, serving
from webhook.extender.app import make_app
from webhook.extender.refusals import RefusalNotes

HIGH = 3


def cluster() -> Cluster:
    """The seed-shaped tree: Department-a (min 50, user-a/user-b) borrows 20; Department-b (min 40) > user-c
    (min 20) uses 10, Team (min 20, max 30, namespace team) nothing."""
    made = Cluster()
    made.state.set_trees([seed_quota_tree()])
    made.add(*(pod(f"a{index}", "10", namespace="user-a", node_name="ecs-0", uid=f"uid-a{index}")
               for index in range(7)))
    made.add(pod("c0", "10", namespace="user-c", node_name="ecs-1", uid="uid-c0"),
             pod("t0", "5", node_name="ecs-2", uid="uid-t0"))
    return made


def meta(node_victims: dict[str, list[str]], violations: int = 0) -> dict[str, Any]:
    return {node: {"Pods": [{"UID": uid} for uid in uids], "NumPDBViolations": violations}
            for node, uids in node_victims.items()}


def preemption_args(preemptor: dict[str, Any], victims: dict[str, Any], *, whole: bool = False) -> bytes:
    """An ``ExtenderPreemptionArgs`` body as kube-scheduler sends it (``nodeCacheCapable``: UIDs only)."""
    if whole:
        return orjson.dumps({"Pod": preemptor, "NodeNameToVictims": victims, "NodeNameToMetaVictims": None})
    return orjson.dumps({"Pod": preemptor, "NodeNameToVictims": None, "NodeNameToMetaVictims": victims})


def metric(result: str) -> float:
    value = REGISTRY.get_sample_value("kube_queue_extender_requests_total", {"verb": "preempt", "result": result})
    return value or 0.0


async def test_only_nodes_whose_victims_may_go_are_kept(caplog: pytest.LogCaptureFixture) -> None:
    made = cluster()
    urgent = pod("urgent", "10", uid="uid-urgent", priority=HIGH)
    victims = meta({
        "ecs-0": ["uid-a6"],  # Department-a borrows 20 beyond its min: it gives one back
        "ecs-1": ["uid-c0"],  # user-c (min 20) uses 10: at or under its min, keeps its pod
        "ecs-2": ["uid-t0"],  # the preemptor's own quota, which sets no preempt-policy
        "ecs-3": ["uid-nobody"],  # a pod the extender does not know: judged later, not now
    }, violations=1)
    before = metric("narrowed")
    caplog.set_level(logging.INFO, logger="webhook.extender")
    async with serving(make_app(made.state, clock=lambda: made.now)) as client:
        response = await client.post("/extender/preempt", data=preemption_args(urgent, victims))
        assert response.status == 200
        body = await response.json()
    assert body == {"NodeNameToMetaVictims": {"ecs-0": {"Pods": [{"UID": "uid-a6"}], "NumPDBViolations": 1}}}
    assert metric("narrowed") == before + 1
    (line,) = [record.getMessage() for record in caplog.records if "verb=preempt" in record.getMessage()]
    assert "pod=team/urgent nodes=4 kept=1 refused=3 quota=root/Department-b/Team" in line


async def test_no_node_left_is_an_empty_result_and_nobody_is_evicted() -> None:
    made = cluster()
    urgent = pod("urgent", "10", uid="uid-urgent", priority=HIGH)
    before = metric("refused")
    async with serving(make_app(made.state, clock=lambda: made.now)) as client:
        response = await client.post("/extender/preempt", data=preemption_args(urgent, meta({"ecs-1": ["uid-c0"]})))
        assert await response.json() == {"NodeNameToMetaVictims": {}}
    assert metric("refused") == before + 1


async def test_whole_pods_are_read_as_sent_when_the_scheduler_is_not_node_cache_capable() -> None:
    made = cluster()
    urgent = pod("urgent", "10", uid="uid-urgent", priority=HIGH)
    stranger = pod("web", "10", namespace="outside", node_name="ecs-3", uid="uid-web")  # not in the cache
    colleague = pod("t0", "5", node_name="ecs-2", uid="uid-t0")
    victims = {"ecs-3": {"Pods": [stranger], "NumPDBViolations": 0},
               "ecs-2": {"Pods": [colleague], "NumPDBViolations": 0}}
    async with serving(make_app(made.state, clock=lambda: made.now)) as client:
        response = await client.post("/extender/preempt", data=preemption_args(urgent, victims, whole=True))
        body = await response.json()
    # Under no quota, the stranger may go; the colleague of the same quota may not. The answer is in UIDs.
    assert body == {"NodeNameToMetaVictims": {"ecs-3": {"Pods": [{"UID": "uid-web"}], "NumPDBViolations": 0}}}


async def test_a_pod_under_no_quota_preempts_by_priority_alone() -> None:
    made = cluster()
    critical = pod("critical", "10", namespace="kube-system", uid="uid-critical", priority=2_000_000_000)
    async with serving(make_app(made.state, clock=lambda: made.now)) as client:
        response = await client.post("/extender/preempt", data=preemption_args(critical, meta({"ecs-1": ["uid-c0"]})))
        body = await response.json()
    assert list(body["NodeNameToMetaVictims"]) == ["ecs-1"]


def outsiders() -> Cluster:
    """The seed-shaped tree, a ResourcePolicy over ``team``'s pods (unit 1: pool a, unit 2: pool b, moving on
    only when unit 1 is at its max), and a pod of a namespace no leaf lists on ecs-0 (unit 1) and on ecs-2
    (unit 2): no quota is owed them, so only the policy can keep them."""
    made = cluster()
    made.state.set_policies([policy("rp", [ecs(pool="a"), ecs(pool="b")], when="ExceedMax")])
    made.add(pod("web-a", "20", namespace="outside", node_name="ecs-0", uid="uid-web-a"),
             pod("web-b", "20", namespace="outside", node_name="ecs-2", uid="uid-web-b"))
    return made


async def test_victims_on_a_unit_the_pods_policy_does_not_let_it_use_yet_stay(
    caplog: pytest.LogCaptureFixture,
) -> None:
    made = outsiders()
    urgent = pod("urgent", "10", uid="uid-urgent", priority=HIGH)
    caplog.set_level(logging.INFO, logger="webhook.extender")
    async with serving(make_app(made.state, clock=lambda: made.now)) as client:
        response = await client.post(
            "/extender/preempt", data=preemption_args(urgent, meta({"ecs-0": ["uid-web-a"], "ecs-2": ["uid-web-b"]})))
        body = await response.json()
    # Unit 1 is the pod's: web-a may go. On unit 2 the pod would still wait for unit 1 (ExceedMax) after web-b
    # went, so web-b stays.
    assert list(body["NodeNameToMetaVictims"]) == ["ecs-0"]
    (line,) = [record.getMessage() for record in caplog.records if "verb=preempt" in record.getMessage()]
    assert "kept=1 refused=1" in line
    assert "ResourcePolicy team/rp: unit 1 (ecs) has no node with room (no max); whenTryNextUnits ExceedMax" in line


async def test_victims_on_a_unit_the_pod_may_move_on_to_may_go() -> None:
    made = outsiders()
    made.state.set_policies([policy("rp", [ecs(pool="a"), ecs(pool="b")])])  # LackResourceOrExceedMax
    urgent = pod("urgent", "10", uid="uid-urgent", priority=HIGH)
    async with serving(make_app(made.state, clock=lambda: made.now)) as client:
        response = await client.post("/extender/preempt", data=preemption_args(urgent, meta({"ecs-2": ["uid-web-b"]})))
        body = await response.json()
    assert list(body["NodeNameToMetaVictims"]) == ["ecs-2"]


async def test_a_node_the_extender_does_not_know_keeps_its_victims_for_a_pod_under_a_policy() -> None:
    made = outsiders()
    urgent = pod("urgent", "10", uid="uid-urgent", priority=HIGH)
    whole = {"ecs-9": {"Pods": [pod("web-9", "20", namespace="outside", node_name="ecs-9", uid="uid-web-9")],
                       "NumPDBViolations": 0}}
    async with serving(make_app(made.state, clock=lambda: made.now)) as client:
        response = await client.post("/extender/preempt", data=preemption_args(urgent, whole, whole=True))
        body = await response.json()
    assert body == {"NodeNameToMetaVictims": {}}


async def test_a_pod_without_a_policy_preempts_nobody_on_the_virtual_node() -> None:
    made = cluster()
    made.add(pod("burst", "20", namespace="outside", node_name="virtual-kubelet", uid="uid-burst"))
    urgent = pod("urgent", "10", uid="uid-urgent", priority=HIGH)  # tolerates the virtual node's taint
    async with serving(make_app(made.state, clock=lambda: made.now)) as client:
        response = await client.post("/extender/preempt",
                                     data=preemption_args(urgent, meta({"virtual-kubelet": ["uid-burst"]})))
        assert await response.json() == {"NodeNameToMetaVictims": {}}


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b"{", "not JSON"),
        (b"[]", "expected an ExtenderPreemptionArgs object"),
        (b'{"Pod": 1}', "Pod is missing or not an object"),
        (b'{"Pod": {}, "NodeNameToMetaVictims": []}', "must be an object keyed by node name"),
        (b'{"Pod": {}, "NodeNameToMetaVictims": {"n": {"Pods": [{}]}}}', "a victim on node 'n' has no UID"),
        (b'{"Pod": {}, "NodeNameToMetaVictims": {"n": {"Pods": 3}}}', "Pods must be a list of objects"),
        (b'{"Pod": {}, "NodeNameToMetaVictims": {"n": {"NumPDBViolations": "x"}}}', "must be an integer"),
        (b'{"Pod": {}, "NodeNameToMetaVictims": {"n": 7}}', "must be an object"),
    ],
)
async def test_a_bad_request_is_refused_with_what_is_wrong(body: bytes, error: str) -> None:
    made = cluster()
    async with serving(make_app(made.state, clock=lambda: made.now)) as client:
        response = await client.post("/extender/preempt", data=body)
        assert response.status == 400  # the scheduler's preemption fails: nobody is evicted, the pod is retried
        assert error in await response.text()


async def test_until_its_watches_have_listed_the_extender_lets_no_preemption_through() -> None:
    made = cluster()
    made.state.ready = False
    urgent = pod("urgent", "10", uid="uid-urgent", priority=HIGH)
    async with serving(make_app(made.state, clock=lambda: made.now)) as client:
        response = await client.post("/extender/preempt", data=preemption_args(urgent, meta({"ecs-0": ["uid-a6"]})))
        assert response.status == 503


async def test_a_failure_inside_fails_the_preemption(monkeypatch: pytest.MonkeyPatch) -> None:
    made = cluster()

    def broken(*args: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(made.state, "preempt", broken)
    urgent = pod("urgent", "10", uid="uid-urgent", priority=HIGH)
    async with serving(make_app(made.state, clock=lambda: made.now)) as client:
        response = await client.post("/extender/preempt", data=preemption_args(urgent, meta({"ecs-0": ["uid-a6"]})))
        assert response.status == 500


def test_the_victims_priority_comes_from_the_pod_watch() -> None:
    # A lower-priority pod of a quota that allows preemption inside it: its priority is read from the cache.
    made = Cluster()
    made.state.set_trees([seed_quota_tree()])
    made.add(pod("low", "10", namespace="user-a", node_name="ecs-0", uid="uid-low", priority=1))
    assert made.state.cache.pods["uid-low"].priority == 1


async def test_a_pod_refused_on_every_node_is_told_why_in_an_event() -> None:
    """docs/pod-quota.md, "Preemption": the scheduler writes only "No preemption victims found"; the extender's
    ``PreemptionRefused`` Event says why. A preemption that keeps a node is not told."""
    made = cluster()
    urgent = pod("urgent", "10", uid="uid-urgent", priority=HIGH)
    sent: list[tuple[Any, ...]] = []
    notes = RefusalNotes(lambda *event: sent.append(event))
    async with serving(make_app(made.state, clock=lambda: made.now, refusals=notes)) as client:
        refused = await client.post("/extender/preempt", data=preemption_args(urgent, meta({"ecs-1": ["uid-c0"]})))
        assert await refused.json() == {"NodeNameToMetaVictims": {}}
        allowed = await client.post("/extender/preempt", data=preemption_args(urgent, meta({"ecs-0": ["uid-a6"]})))
        assert (await allowed.json())["NodeNameToMetaVictims"]
    ((target, event_type, reason, _, message),) = sent
    assert (target["kind"], target["metadata"]["uid"], event_type, reason) == (
        "Pod", "uid-urgent", "Warning", "PreemptionRefused")
    assert message.startswith("kube-queue refused kube-scheduler's preemption on every candidate node")
    assert message.endswith("(node ecs-1)"), message
    # Read by the preemptor's namespace's users: carol's pod of user-c is not named to them.
    assert "a pod of another namespace: taking it would leave root/Department-b/user-c with cpu" in message, message
    assert "c0" not in message
