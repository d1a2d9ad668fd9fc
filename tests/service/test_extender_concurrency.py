"""A unit's ``max`` holds under concurrent scheduling: placements count from the filter until the watch
shows the pod bound, and stop counting when they expire, the pod goes or its binding arrives."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import orjson

from tests.service.extender_support import Cluster, args, bound, eci, ecs, pod, policy, serving
from tests.service.wire_support import post, read_response
from webhook.extender.app import MAX_BODY_BYTES, make_app
from webhook.extender.http import start_server

ONLY_VIRTUAL = ("ecs-2", "virtual-kubelet")


def capped(max_eci: int = 4, ttl: float = 30.0) -> Cluster:
    return Cluster(policy(units=[ecs(pool="a"), eci(max=max_eci)]), assume_ttl=ttl)


async def test_many_concurrent_filter_calls_never_exceed_the_cap() -> None:
    cluster = capped(max_eci=4)
    app = make_app(cluster.state, clock=lambda: cluster.now)
    async with serving(app) as client:

        async def one(index: int) -> list[str]:
            resp = await client.post("/extender/filter", data=args(pod(f"p{index}", "10"), ONLY_VIRTUAL))
            names: list[str] = orjson.loads(await resp.read())["NodeNames"]
            return names

        results = await asyncio.gather(*(one(index) for index in range(60)))
    assert sum(1 for names in results if names) == 4
    assert len(cluster.state.assumed) == 4


async def test_pipelined_filter_calls_on_one_connection_never_exceed_the_cap() -> None:
    # The answer is written before the placement is recorded (ExtenderState.decide_filter): the record must
    # still come before the next request in the same read is decided.
    cluster = capped(max_eci=3)
    app = make_app(cluster.state, clock=lambda: cluster.now)
    server = await start_server(app.routes(), "127.0.0.1", 0, max_body=MAX_BODY_BYTES)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        requests = (post("/extender/filter", args(pod(f"p{index}", "10"), ONLY_VIRTUAL)) for index in range(8))
        writer.write(b"".join(requests))  # one write: the server reads them all at once
        await writer.drain()
        answers = [orjson.loads((await read_response(reader))[2])["NodeNames"] for _ in range(8)]
        writer.close()
    finally:
        await server.close()
    assert answers == [["virtual-kubelet"]] * 3 + [[]] * 5
    assert len(cluster.state.assumed) == 3


async def test_the_cap_holds_while_bindings_arrive_in_any_order() -> None:
    rng = random.Random(7)
    cluster = capped(max_eci=5)
    app = make_app(cluster.state, clock=lambda: cluster.now)
    placed: list[dict[str, Any]] = []
    async with serving(app) as client:

        async def schedule(index: int) -> None:
            obj = pod(f"p{index}", "10")
            cluster.add(obj)  # the watch saw the pod created
            resp = await client.post("/extender/filter", data=args(obj, ONLY_VIRTUAL))
            if orjson.loads(await resp.read())["NodeNames"]:
                placed.append(obj)
            await asyncio.sleep(0)
            if placed and rng.random() < 0.5:  # some binding reaches the watch meanwhile
                cluster.bind(placed.pop(rng.randrange(len(placed))), "virtual-kubelet")

        await asyncio.gather(*(schedule(index) for index in range(40)))
    for obj in placed:
        cluster.bind(obj, "virtual-kubelet")
    on_virtual = [view for view in cluster.state.pod_views() if view.node_name == "virtual-kubelet"]
    assert len(on_virtual) == 5
    assert cluster.state.assumed == {}


def test_a_placed_pod_the_watch_has_not_reported_still_counts() -> None:
    cluster = capped(max_eci=1)
    assert cluster.filter(pod("first"), ONLY_VIRTUAL).passing == ("virtual-kubelet",)
    assert cluster.state.pod(next(iter(cluster.state.assumed))) is None  # not in the pod cache at all
    assert cluster.filter(pod("second"), ONLY_VIRTUAL).passing == ()


def test_a_pod_filtered_twice_holds_one_slot_and_never_blocks_itself() -> None:
    cluster = capped(max_eci=1)
    first = pod("first")
    assert cluster.filter(first, ONLY_VIRTUAL).passing == ("virtual-kubelet",)
    assert cluster.filter(first, ONLY_VIRTUAL).passing == ("virtual-kubelet",)
    assert len(cluster.state.assumed) == 1
    assert cluster.filter(pod("second"), ONLY_VIRTUAL).passing == ()


def test_an_assumption_expires_after_its_ttl() -> None:
    cluster = capped(max_eci=1, ttl=30)
    assert cluster.filter(pod("lost"), ONLY_VIRTUAL).passing == ("virtual-kubelet",)
    cluster.now += 29
    assert cluster.filter(pod("second"), ONLY_VIRTUAL).passing == ()
    cluster.now += 1
    assert cluster.filter(pod("third"), ONLY_VIRTUAL).passing == ("virtual-kubelet",)


def test_binding_turns_the_assumption_into_a_bound_pod() -> None:
    cluster = capped(max_eci=1, ttl=30)
    obj = pod("first")
    cluster.add(obj)
    assert cluster.place(obj, ONLY_VIRTUAL) == "virtual-kubelet"
    assert cluster.state.assumed == {}
    cluster.now += 3600  # long after any assumption would have expired
    assert cluster.filter(pod("second"), ONLY_VIRTUAL).passing == ()


def test_deleting_an_assumed_pod_frees_its_slot() -> None:
    cluster = capped(max_eci=1)
    obj = pod("first")
    cluster.add(obj)
    assert cluster.filter(obj, ONLY_VIRTUAL).passing == ("virtual-kubelet",)
    cluster.state.delete_pod(obj)
    assert cluster.filter(pod("second"), ONLY_VIRTUAL).passing == ("virtual-kubelet",)


def test_a_refused_pod_gives_up_its_previous_assumption() -> None:
    cluster = capped(max_eci=1)
    obj = pod("first")
    assert cluster.filter(obj, ONLY_VIRTUAL).passing == ("virtual-kubelet",)
    assert cluster.filter(obj, ("ecs-2",)).passing == ()  # its node filled up meanwhile
    assert cluster.state.assumed == {}


def test_a_relist_drops_assumptions_of_pods_it_shows_bound() -> None:
    cluster = capped(max_eci=2)
    obj = pod("first")
    assert cluster.filter(obj, ONLY_VIRTUAL).passing == ("virtual-kubelet",)
    cluster.state.replace_pods([bound(obj, "virtual-kubelet")])
    assert cluster.state.assumed == {}
    assert cluster.filter(pod("second"), ONLY_VIRTUAL).passing == ("virtual-kubelet",)
    assert cluster.filter(pod("third"), ONLY_VIRTUAL).passing == ()
