"""Marks on bound pods: the unit's podLabels/podAnnotations on pods the extender placed, and the deletion
cost that makes a shrinking ReplicaSet remove the later units' pods first; the Marker that sends them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from tests.service.test_extender_objects import Cluster, eci, ecs, pod, policy
from webhook.core.placement import DELETION_COST_ANNOTATION, deletion_cost, unit_deletion_cost
from webhook.extender.decision import MarkPatch
from webhook.extender.marker import Marker
from webhook.kube.client import KubeApiError

ONLY_VIRTUAL = ("ecs-2", "virtual-kubelet")
MARKED_ECI = {**eci(max=2), "podLabels": {"placed": "eci"}, "podAnnotations": {"note": "burst"}}


def marked_cluster() -> Cluster:
    return Cluster(policy(units=[{**ecs(pool="a"), "podLabels": {"placed": "ecs"}}, MARKED_ECI]))


def test_a_placed_pod_gets_its_units_marks_and_deletion_cost_once_bound() -> None:
    cluster = marked_cluster()
    obj = pod("p")
    cluster.add(obj)
    assert cluster.filter(obj, ONLY_VIRTUAL).passing == ("virtual-kubelet",)
    assert cluster.state.marks_patch(obj["metadata"]["uid"]) is None  # not bound yet: nothing to do
    cluster.bind(obj, "virtual-kubelet")
    patch = cluster.state.marks_patch(obj["metadata"]["uid"])
    assert patch is not None
    assert patch.labels == {"placed": "eci"}
    assert patch.annotations == {"note": "burst", DELETION_COST_ANNOTATION: "-100"}
    assert patch.unit == "unit 2 (eci)"
    assert patch.body() == {
        "metadata": {
            "labels": {"placed": "eci"},
            "annotations": {"note": "burst", DELETION_COST_ANNOTATION: "-100"},
            "uid": obj["metadata"]["uid"],
        }
    }


def test_earlier_units_cost_more_to_delete_and_the_first_needs_no_write() -> None:
    cluster = Cluster(policy(units=[ecs(pool="a"), ecs(pool="b"), eci()]))
    costs = {}
    for node_name in ("ecs-0", "ecs-2", "virtual-kubelet"):
        obj = pod(f"on-{node_name}", node_name=node_name)
        cluster.add(obj)
        patch = cluster.state.marks_patch(obj["metadata"]["uid"])
        costs[node_name] = None if patch is None else patch.annotations[DELETION_COST_ANNOTATION]
    assert costs == {"ecs-0": None, "ecs-2": "-100", "virtual-kubelet": "-200"}


def test_a_wrong_cost_in_the_first_unit_is_reset_to_zero() -> None:
    cluster = Cluster(policy(units=[ecs(pool="a"), eci()]))
    obj = pod("p", node_name="ecs-0", annotations={DELETION_COST_ANNOTATION: "-100"})
    cluster.add(obj)
    patch = cluster.state.marks_patch(obj["metadata"]["uid"])
    assert patch is not None
    assert patch.annotations == {DELETION_COST_ANNOTATION: "0"}


def test_unit_deletion_cost_keeps_the_cores_order() -> None:
    for n_units in range(1, 5):
        costs = [unit_deletion_cost(index, n_units) for index in range(n_units)]
        core = [deletion_cost(index, n_units) for index in range(n_units)]
        assert costs[0] == 0
        assert [a - b for a, b in zip(costs, core, strict=True)] == [costs[0] - core[0]] * n_units


def test_a_bound_pod_the_extender_did_not_place_gets_the_deletion_cost_only() -> None:
    cluster = marked_cluster()
    obj = pod("p", node_name="virtual-kubelet")
    cluster.add(obj)
    patch = cluster.state.marks_patch(obj["metadata"]["uid"])
    assert patch is not None
    assert patch.labels == {}
    assert patch.annotations == {DELETION_COST_ANNOTATION: "-100"}


def test_pods_without_a_policy_or_on_no_unit_are_left_alone() -> None:
    cluster = Cluster(policy(units=[ecs(pool="a"), eci()], selector={"app": "web"}))
    stranger = pod("db", labels={"app": "db"}, node_name="ecs-0")
    outside = pod("web", labels={"app": "web"}, node_name="ecs-2")
    cluster.add(stranger, outside)
    assert cluster.state.marks_patch(stranger["metadata"]["uid"]) is None
    assert cluster.state.marks_patch(outside["metadata"]["uid"]) is None


def test_a_pod_carrying_its_marks_needs_nothing() -> None:
    cluster = Cluster(policy(units=[ecs(pool="a"), eci()]))
    first = pod("p", node_name="ecs-0")
    second = pod("q", node_name="virtual-kubelet", annotations={DELETION_COST_ANNOTATION: "-100"})
    cluster.add(first, second)
    assert cluster.state.marks_patch(first["metadata"]["uid"]) is None
    assert cluster.state.marks_patch(second["metadata"]["uid"]) is None


def test_until_its_marks_arrive_a_placed_pod_counts_as_marked() -> None:
    cluster = marked_cluster()
    first = pod("first")
    cluster.add(first)
    cluster.place(first, ONLY_VIRTUAL)  # bound, but the patch with podLabels has not landed yet
    second = pod("second")
    assert cluster.place(second, ONLY_VIRTUAL) == "virtual-kubelet"
    assert cluster.filter(pod("third"), ONLY_VIRTUAL).passing == ()


def test_a_policy_that_appears_later_asks_for_the_deletion_cost_of_pods_already_bound() -> None:
    cluster = Cluster()
    wanted: list[str] = []
    cluster.state.on_marks_needed = wanted.append
    obj = pod("p", node_name="virtual-kubelet")
    cluster.add(obj)
    assert wanted == []
    cluster.state.set_policies([policy(units=[ecs(), eci()])])
    assert wanted == [obj["metadata"]["uid"]]


class FakeApi:
    """Records patches; fails the first ``failures`` calls with ``error``."""

    def __init__(self, cluster: Cluster, failures: int = 0, error: Exception | None = None) -> None:
        self.cluster = cluster
        self.failures = failures
        self.error = error or KubeApiError(500, "InternalError", "etcd is slow")
        self.calls: list[MarkPatch] = []

    async def __call__(self, patch: MarkPatch) -> Any:
        self.calls.append(patch)
        if self.failures:
            self.failures -= 1
            raise self.error
        # The watch reports the patched pod.
        key = patch.uid
        view = self.cluster.state.pod(key)
        assert view is not None
        obj = pod(
            view.name,
            uid=view.uid,
            labels={**view.labels, **patch.labels},
            annotations={**view.annotations, **patch.annotations},
            node_name=view.node_name,
        )
        self.cluster.state.upsert_pod(obj)
        return {}


async def no_sleep(seconds: float) -> None:
    await asyncio.sleep(0)


async def run_marker(cluster: Cluster, api: FakeApi, act: Callable[[], object]) -> Marker:
    marker = Marker(cluster.state, api, workers=2, retry_delay=0.0, sleep=no_sleep)
    task = asyncio.create_task(marker.run())
    try:
        act()
        for _ in range(50):
            await marker.idle()
            await asyncio.sleep(0)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return marker


async def test_the_marker_patches_each_placed_pod_once() -> None:
    cluster = marked_cluster()
    api = FakeApi(cluster)
    obj = pod("p")

    def act() -> None:
        cluster.add(obj)
        cluster.place(obj, ONLY_VIRTUAL)
        cluster.add(obj | {"status": {"phase": "Running"}, "spec": {**obj["spec"], "nodeName": "virtual-kubelet"}})

    marker = await run_marker(cluster, api, act)
    assert len(api.calls) == 1
    assert marker.patched == 1
    view = cluster.state.pod(obj["metadata"]["uid"])
    assert view is not None
    assert view.labels["placed"] == "eci"
    assert view.annotations[DELETION_COST_ANNOTATION] == "-100"
    assert cluster.state.marks_patch(obj["metadata"]["uid"]) is None


async def test_the_marker_retries_failed_patches() -> None:
    cluster = marked_cluster()
    api = FakeApi(cluster, failures=2)
    obj = pod("p")
    marker = await run_marker(cluster, api, lambda: cluster.place(obj, ONLY_VIRTUAL))
    assert len(api.calls) == 3
    assert marker.patched == 1


async def test_the_marker_drops_a_pod_that_is_gone() -> None:
    cluster = marked_cluster()
    api = FakeApi(cluster, failures=5, error=KubeApiError(404, "NotFound", "pods \"p\" not found"))
    obj = pod("p")
    marker = await run_marker(cluster, api, lambda: cluster.place(obj, ONLY_VIRTUAL))
    assert len(api.calls) == 1
    assert marker.patched == 0


async def test_a_burst_of_events_for_one_pod_sends_one_patch_even_before_the_watch_catches_up() -> None:
    cluster = marked_cluster()
    calls: list[MarkPatch] = []

    async def slow_api(patch: MarkPatch) -> Any:  # the patched pod never comes back through the watch
        calls.append(patch)
        await asyncio.sleep(0)
        return {}

    obj = pod("p", node_name="virtual-kubelet")

    def act() -> None:
        for _ in range(5):
            cluster.add(obj)

    marker = Marker(cluster.state, slow_api, workers=4, retry_delay=0.0, sleep=no_sleep)
    task = asyncio.create_task(marker.run())
    try:
        act()
        for _ in range(20):
            await marker.idle()
            await asyncio.sleep(0)
        act()  # more events, same need: already sent
        for _ in range(20):
            await marker.idle()
            await asyncio.sleep(0)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert len(calls) == 1
