"""The extender over HTTP: the scheduler's wire format exactly, readiness, bad input, TLS, metrics."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import orjson
import pytest

from tests.service.extender_support import args, eci, ecs, node, pod, policy, serving, virtual_node
from webhook import pki
from webhook.extender.app import make_app
from webhook.extender.state import ExtenderState
from webhook.kube.serving import tls_context

NOW = 1_714_564_800.0  # 2024-05-01T12:00:00Z
NAMES = ["ecs-0", "ecs-1", "ecs-2", "virtual-kubelet"]
FILTER_KEYS = {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}


def make_state(ready: bool = True) -> ExtenderState:
    state = ExtenderState()
    state.replace_nodes([node("ecs-0", pool="a"), node("ecs-1", pool="a"), node("ecs-2"), virtual_node()])
    state.set_policies([policy(units=[ecs(pool="a"), eci(max=1)])])
    state.ready = ready
    return state


@pytest.fixture
async def client() -> AsyncIterator[aiohttp.ClientSession]:
    async with serving(make_app(make_state(), clock=lambda: NOW)) as session:
        yield session


async def test_filter_answers_with_the_go_field_names_and_echoes_passing_nodes(client: aiohttp.ClientSession) -> None:
    resp = await client.post("/extender/filter", data=args(pod("web-1", "10"), NAMES))
    assert resp.status == 200
    assert resp.content_type == "application/json"
    body = orjson.loads(await resp.read())
    assert set(body) == FILTER_KEYS
    assert body["NodeNames"] == ["ecs-0", "ecs-1"]
    assert body["Nodes"] is None
    assert body["Error"] == ""
    # Nodes pass, so the refusals (virtual-kubelet: a later unit; ecs-2: in no unit) are not sent: the
    # scheduler only reads them when no node is left.
    assert body["FailedNodes"] == {}
    assert body["FailedAndUnresolvableNodes"] == {}


async def test_when_no_node_passes_every_node_comes_back_with_its_reason(client: aiohttp.ClientSession) -> None:
    resp = await client.post("/extender/filter", data=args(pod("web-1", "10"), ["ecs-2", "ghost"]))
    body = orjson.loads(await resp.read())
    assert body["NodeNames"] == []
    assert body["FailedAndUnresolvableNodes"] == {"ecs-2": "node belongs to no unit of ResourcePolicy team/rp"}
    assert "not yet in the extender's node cache" in body["FailedNodes"]["ghost"]


async def test_a_refused_pod_still_gets_an_empty_node_list_and_every_reason(client: aiohttp.ClientSession) -> None:
    first = await client.post("/extender/filter", data=args(pod("web-1", "10"), ["ecs-2", "virtual-kubelet"]))
    assert orjson.loads(await first.read())["NodeNames"] == ["virtual-kubelet"]
    resp = await client.post("/extender/filter", data=args(pod("web-2", "10"), ["ecs-2", "virtual-kubelet"]))
    body = orjson.loads(await resp.read())
    assert body["NodeNames"] == []
    assert body["FailedAndUnresolvableNodes"]["virtual-kubelet"] == (
        "ResourcePolicy team/rp: unit 2 (eci) is at its max of 1 pods"
    )


async def test_prioritize_scores_every_input_node_from_0_to_10(client: aiohttp.ClientSession) -> None:
    resp = await client.post("/extender/prioritize", data=args(pod("web-1", "10"), NAMES))
    assert resp.status == 200
    body = orjson.loads(await resp.read())
    assert all(set(entry) == {"Host", "Score"} for entry in body)
    assert {entry["Host"]: entry["Score"] for entry in body} == {
        "ecs-0": 10,
        "ecs-1": 10,
        "ecs-2": 0,
        "virtual-kubelet": 9,
    }
    assert len(body) == len(NAMES)


async def test_keys_are_read_case_insensitively_like_go(client: aiohttp.ClientSession) -> None:
    data = orjson.dumps({"pod": pod("web-1", "10"), "nodenames": ["ecs-0", "ecs-2"]})
    body = orjson.loads(await (await client.post("/extender/filter", data=data)).read())
    assert body["NodeNames"] == ["ecs-0"]


async def test_full_node_objects_get_full_node_objects_back(client: aiohttp.ClientSession) -> None:
    nodes = [node("ecs-0", pool="a"), node("brand-new", pool="a"), virtual_node()]
    data = orjson.dumps({"Pod": pod("web-1", "10"), "Nodes": {"items": nodes}, "NodeNames": None})
    body = orjson.loads(await (await client.post("/extender/filter", data=data)).read())
    assert body["NodeNames"] is None
    assert [n["metadata"]["name"] for n in body["Nodes"]["items"]] == ["ecs-0", "brand-new"]


async def test_a_node_the_cache_has_not_seen_fails_resolvably(client: aiohttp.ClientSession) -> None:
    body = orjson.loads(await (await client.post("/extender/filter", data=args(pod("w"), ["ecs-0", "ghost"]))).read())
    assert body["NodeNames"] == ["ecs-0"]
    body = orjson.loads(await (await client.post("/extender/filter", data=args(pod("w"), ["ghost"]))).read())
    assert body["NodeNames"] == []
    assert "not yet in the extender's node cache" in body["FailedNodes"]["ghost"]


async def test_bad_bodies_are_refused_with_a_reason(client: aiohttp.ClientSession) -> None:
    resp = await client.post("/extender/filter", data=b"{not json")
    assert resp.status == 400
    assert "not JSON" in orjson.loads(await resp.read())["Error"]
    resp = await client.post("/extender/filter", data=orjson.dumps({"NodeNames": ["a"]}))
    assert resp.status == 400
    assert "Pod" in orjson.loads(await resp.read())["Error"]
    resp = await client.post("/extender/prioritize", data=orjson.dumps({"Pod": {}, "NodeNames": [1]}))
    assert resp.status == 400


async def test_until_the_watches_have_listed_the_filter_answers_with_an_error() -> None:
    state = make_state(ready=False)
    async with serving(make_app(state, clock=lambda: NOW)) as test_client:
        body = orjson.loads(await (await test_client.post("/extender/filter", data=args(pod("w"), NAMES))).read())
        assert body["NodeNames"] is None
        assert "starting" in body["Error"]
        assert (await test_client.get("/readyz")).status == 503
        state.ready = True
        assert (await test_client.get("/readyz")).status == 200
        assert (await test_client.get("/healthz")).status == 200


async def test_metrics_count_requests_by_verb_and_result(client: aiohttp.ClientSession) -> None:
    await client.post("/extender/filter", data=args(pod("w"), NAMES))
    text = await (await client.get("/metrics")).text()
    assert 'kube_queue_extender_requests_total{result="passed",verb="filter"}' in text
    assert "kube_queue_extender_request_duration_seconds_bucket" in text


async def test_the_extender_serves_https_with_a_given_certificate(tmp_path: Path) -> None:
    ca_cert, ca_key = pki.make_ca("test-ca")
    cert, key = pki.issue_cert(ca_cert, ca_key, "extender", ip_addresses=["127.0.0.1"])
    (tmp_path / "tls.crt").write_bytes(cert)
    (tmp_path / "tls.key").write_bytes(key)
    context = tls_context(tmp_path / "tls.crt", tmp_path / "tls.key")
    trust = ssl.create_default_context(cadata=ca_cert.decode())
    async with (
        serving(make_app(make_state(), clock=lambda: NOW), ssl_context=context) as session,
        session.post("/extender/filter", data=args(pod("w", "10"), NAMES), ssl=trust) as resp,
    ):
        assert resp.status == 200
        assert orjson.loads(await resp.read())["NodeNames"] == ["ecs-0", "ecs-1"]
