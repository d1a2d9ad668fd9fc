"""A pod waiting out a TimeoutOrExceedMax timeout is touched when the wait ends, so the scheduler tries it
again then instead of minutes later."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.service.extender_support import Cluster, args, eci, ecs, pod, policy, serving
from webhook.api.names import PLACEMENT_RETRY_ANNOTATION
from webhook.extender.app import make_app
from webhook.extender.nudge import Nudger
from webhook.kube.client import KubeApiError

ONLY_OTHERS = ("ecs-2", "ecs-3", "virtual-kubelet")


class Touches:
    def __init__(self, error: Exception | None = None) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self.done = asyncio.Event()
        self.error = error

    async def __call__(self, namespace: str, name: str, body: dict[str, Any]) -> Any:
        self.calls.append((namespace, name, body))
        self.done.set()
        if self.error is not None:
            raise self.error
        return {}


async def test_a_waiting_pod_is_touched_once_its_timeout_has_passed() -> None:
    cluster = Cluster(policy(units=[ecs(pool="a"), eci()], when="TimeoutOrExceedMax", timeout="30s"))
    touches = Touches()
    # The pod was created 30 s minus a hair before "now": its wait ends almost at once.
    cluster.now = 1_714_564_800.0 + 29.99
    nudger = Nudger(touches, clock=lambda: cluster.now)
    app = make_app(cluster.state, clock=lambda: cluster.now, nudger=nudger)
    waiting = pod("p", uid="uid-p")
    async with serving(app) as client:
        resp = await client.post("/extender/filter", data=args(waiting, ONLY_OTHERS))
        assert (await resp.json())["NodeNames"] == []
        assert nudger.waiting == 1
        await asyncio.wait_for(touches.done.wait(), timeout=10)
    await nudger.close()
    ((namespace, name, body),) = touches.calls
    assert (namespace, name) == ("team", "p")
    assert body["metadata"]["uid"] == "uid-p"
    assert body["metadata"]["annotations"][PLACEMENT_RETRY_ANNOTATION] == "2024-05-01T12:00:30.000000Z"
    assert nudger.sent == 1


async def test_a_pod_refiltered_keeps_one_timer_and_close_cancels_it() -> None:
    cluster = Cluster(policy(units=[ecs(pool="a"), eci()], when="TimeoutOrExceedMax", timeout="1h"))
    touches = Touches()
    nudger = Nudger(touches, clock=lambda: cluster.now)
    app = make_app(cluster.state, clock=lambda: cluster.now, nudger=nudger)
    async with serving(app) as client:
        for _ in range(3):
            await client.post("/extender/filter", data=args(pod("p", uid="uid-p"), ONLY_OTHERS))
        assert nudger.waiting == 1
    await nudger.close()
    assert nudger.waiting == 0
    assert touches.calls == []


async def test_no_timer_for_pods_that_pass_or_never_wait() -> None:
    cluster = Cluster(policy(units=[ecs(pool="a"), eci()], when="ExceedMax"))
    nudger = Nudger(Touches(), clock=lambda: cluster.now)
    app = make_app(cluster.state, clock=lambda: cluster.now, nudger=nudger)
    async with serving(app) as client:
        await client.post("/extender/filter", data=args(pod("waits-for-max"), ONLY_OTHERS))
        await client.post("/extender/filter", data=args(pod("passes"), ("ecs-0",)))
    assert nudger.waiting == 0
    await nudger.close()


async def test_a_failed_touch_is_logged_not_raised() -> None:
    touches = Touches(error=KubeApiError(404, "NotFound", "gone"))
    nudger = Nudger(touches, clock=lambda: 100.0)
    nudger.schedule("team", "p", "uid-p", 100.0 - 1)
    await asyncio.wait_for(touches.done.wait(), timeout=10)
    await asyncio.sleep(0)
    await nudger.close()
    assert nudger.sent == 0
