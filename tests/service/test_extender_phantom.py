"""No phantom charge (issue 34, docs/pod-quota.md): a pod the extender let through and counts (assumed) is
forgotten once it is seen deleted before its binding, or given up on by the scheduler; pods refused for
pod-level quota meanwhile are sent back to the scheduler as soon as room appears - only as many as the room
can take, oldest first, rate-limited."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tests.service.extender_support import Cluster, pod, seed_quota_tree
from webhook.api.names import PLACEMENT_RETRY_ANNOTATION
from webhook.extender.audit import CHECK_AFTER, Auditor
from webhook.extender.waits import WOKEN_HOLD
from webhook.extender.wake import TokenBucket, Waker
from webhook.kube.client import KubeApiError

ECS = ("ecs-0", "ecs-1", "ecs-2", "ecs-3")
REFUSED_BIND = {"type": "PodScheduled", "status": "False", "reason": "SchedulerError",
                "message": "binding rejected: denied", "lastTransitionTime": "2024-05-01T12:00:01Z"}


class Api:
    """The pods as the API server has them (``None``: deleted), and the touches the waker sent."""

    def __init__(self) -> None:
        self.pods: dict[tuple[str, str], Mapping[str, Any] | None] = {}
        self.reads: list[tuple[str, str]] = []
        self.touched: list[tuple[str, str, dict[str, Any]]] = []
        self.gone: set[str] = set()

    async def read(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        self.reads.append((namespace, name))
        return self.pods.get((namespace, name))

    async def touch(self, namespace: str, name: str, body: dict[str, Any]) -> Any:
        if name in self.gone:
            raise KubeApiError(404, "NotFound", f"pods {name!r} not found")
        self.touched.append((namespace, name, body))
        return {}


def team_at_its_max() -> tuple[Cluster, Api, Auditor, Waker]:
    """Team (max 30 CPU) runs 20 bound; ``placed`` (10) passed the filter and is assumed; ``late`` (10) was
    refused for quota meanwhile."""
    cluster = Cluster()
    cluster.state.set_trees([seed_quota_tree()])
    cluster.add(pod("running", "20", node_name="ecs-0", uid="uid-running"))
    api = Api()
    auditor = Auditor(cluster.state, api.read, lambda: cluster.now)
    waker = Waker(cluster.state, api.touch, lambda: cluster.now, gather=0)
    cluster.state.on_room = waker.notify
    placed = pod("placed", "10", uid="uid-placed")
    api.pods[("team", "placed")] = placed
    assert cluster.filter(placed, ECS).passing
    late = pod("late", "10", uid="uid-late", created="2024-05-01T11:00:00Z")
    assert cluster.filter(late, ECS).passing == ()
    assert cluster.state.waiting == 1
    return cluster, api, auditor, waker


async def test_a_pod_deleted_before_its_binding_stops_counting_and_the_refused_pod_is_sent_back() -> None:
    cluster, api, auditor, waker = team_at_its_max()
    api.pods[("team", "placed")] = None  # deleted before the scheduler bound it
    assert await auditor.audit_once() == 0  # too young to look at: its binding normally arrives within ms
    assert api.reads == []
    cluster.now += CHECK_AFTER
    assert await auditor.audit_once() == 1
    assert "uid-placed" not in cluster.state.assumed
    assert cluster.state.cache.waits.pending  # the room it freed is for the pod that waits
    assert await waker.wake_once() == 1
    ((namespace, name, body),) = api.touched
    assert (namespace, name) == ("team", "late")
    assert body["metadata"]["uid"] == "uid-late"  # never a re-created pod of the same name
    assert PLACEMENT_RETRY_ANNOTATION in body["metadata"]["annotations"]
    # The scheduler tries it again: it fits now.
    assert cluster.filter(pod("late", "10", uid="uid-late"), ECS).passing


async def test_a_pod_the_scheduler_gave_up_on_stops_counting() -> None:
    cluster, api, auditor, _ = team_at_its_max()
    api.pods[("team", "placed")] = pod("placed", "10", uid="uid-placed", status={"conditions": [REFUSED_BIND]})
    cluster.now += CHECK_AFTER
    assert await auditor.audit_once() == 1
    assert cluster.filter(pod("late", "10", uid="uid-late"), ECS).passing


async def test_a_pod_still_on_its_way_keeps_counting_and_is_looked_at_less_and_less() -> None:
    cluster, api, auditor, waker = team_at_its_max()
    cluster.now += CHECK_AFTER
    assert await auditor.audit_once() == 0  # nothing written since the filter: the binding may be on its way
    assert len(api.reads) == 1
    assert await auditor.audit_once() == 0
    assert len(api.reads) == 1  # not again at once
    cluster.now += CHECK_AFTER
    await auditor.audit_once()
    assert len(api.reads) == 2
    cluster.now += CHECK_AFTER  # the next look is 2 x CHECK_AFTER after the last
    await auditor.audit_once()
    assert len(api.reads) == 2
    api.pods[("team", "placed")] = pod("placed", "10", uid="uid-placed", node_name="ecs-1")
    cluster.now += CHECK_AFTER
    assert await auditor.audit_once() == 0  # bound: it counts until the watch brings the binding
    assert "uid-placed" in cluster.state.assumed
    assert await waker.wake_once() == 0 and api.touched == []


async def test_a_placement_made_again_while_the_pod_was_read_is_kept() -> None:
    cluster, _, _, _ = team_at_its_max()

    async def read_while_placed_again(namespace: str, name: str) -> Mapping[str, Any] | None:
        assert cluster.filter(pod("placed", "10", uid="uid-placed"), ECS).passing  # a new scheduling attempt
        return None

    auditor = Auditor(cluster.state, read_while_placed_again, lambda: cluster.now)
    cluster.now += CHECK_AFTER
    assert await auditor.audit_once() == 0
    assert "uid-placed" in cluster.state.assumed


async def test_an_expired_placement_wakes_the_waiting_pod_too() -> None:
    cluster, api, _, waker = team_at_its_max()
    cluster.now += cluster.state.assume_ttl
    assert await waker.wake_once() == 1
    assert [name for _, name, _ in api.touched] == ["late"]


async def test_no_more_pods_are_woken_than_the_room_can_take_oldest_first() -> None:
    cluster = Cluster()
    cluster.state.set_trees([seed_quota_tree()])
    cluster.add(pod("big", "30", node_name="ecs-0", uid="uid-big"))
    api = Api()
    waker = Waker(cluster.state, api.touch, lambda: cluster.now, gather=0)
    notified: list[int] = []
    cluster.state.on_room = lambda: notified.append(1)
    for index in range(50):  # a burst of refusals
        refused = pod(f"w{index:02}", "10", uid=f"uid-w{index:02}", created=f"2024-05-01T11:{index:02}:00Z")
        assert cluster.filter(refused, ECS).passing == ()
    assert cluster.state.waiting == 50
    assert await waker.wake_once() == 0  # no room, no touch
    cluster.state.delete_pod(pod("big", "30", node_name="ecs-0", uid="uid-big"))
    assert notified  # room appeared while pods wait
    # 30 CPU free in Team (max 30): three pods of 10, the three oldest, and no more.
    assert await waker.wake_once() == 3
    assert [name for _, name, _ in api.touched] == ["w00", "w01", "w02"]
    assert await waker.wake_once() == 0  # the woken pods hold that room until the scheduler tries them
    # One is tried and placed; the other two never come back: after WOKEN_HOLD their room is free again.
    assert cluster.filter(pod("w00", "10", uid="uid-w00"), ECS).passing
    cluster.now += WOKEN_HOLD
    assert await waker.wake_once() == 2
    assert [name for _, name, _ in api.touched][3:] == ["w03", "w04"]


async def test_touches_are_rate_limited() -> None:
    cluster = Cluster()
    cluster.state.set_trees([seed_quota_tree()])
    api = Api()
    waker = Waker(cluster.state, api.touch, lambda: cluster.now, bucket=TokenBucket(5, 4), gather=0)
    cluster.add(pod("big", "30", node_name="ecs-0", uid="uid-big"))
    for index in range(10):
        assert cluster.filter(pod(f"w{index}", "1", uid=f"uid-w{index}"), ECS).passing == ()
    cluster.state.delete_pod(pod("big", "30", node_name="ecs-0", uid="uid-big"))
    assert await waker.wake_once() == 4  # the burst
    assert await waker.wake_once() == 0  # no token left
    cluster.now += 1.0  # five more a second
    assert await waker.wake_once() == 4  # capped by the burst again
    assert len(api.touched) == 8


async def test_a_woken_pod_that_is_gone_is_dropped() -> None:
    cluster, api, _, waker = team_at_its_max()
    api.gone.add("late")
    cluster.now += cluster.state.assume_ttl
    assert await waker.wake_once() == 1
    assert api.touched == []
    assert not cluster.state.wake_pending


async def test_room_appearing_while_nobody_waits_costs_nothing() -> None:
    cluster = Cluster()
    cluster.state.set_trees([seed_quota_tree()])
    notified: list[int] = []
    cluster.state.on_room = lambda: notified.append(1)
    cluster.add(pod("a", "10", node_name="ecs-0", uid="uid-a"))
    cluster.state.delete_pod(pod("a", "10", node_name="ecs-0", uid="uid-a"))
    assert notified == []


async def test_a_pod_bound_as_placed_frees_nothing() -> None:
    # Its charge moves from the placement to the bound pod: no room, no wake pass.
    cluster, _, _, _ = team_at_its_max()
    notified: list[int] = []
    cluster.state.on_room = lambda: notified.append(1)
    cluster.bind(pod("placed", "10", uid="uid-placed"), "ecs-1")
    assert notified == []
