"""The HTTP service: routes, AdmissionReview in and out, bad input, readiness; a fuzz of both endpoints."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from prometheus_client import REGISTRY

import webhook.admission.app as app_module
from tests.builders import seed_tree
from tests.service import helpers
from tests.service.helpers import batch_job, review
from tests.strategies import examples
from webhook.admission.app import make_app, respond
from webhook.admission.state import AdmissionState, Settings, StateStore


def store(ready: bool = True) -> StateStore:
    return StateStore(AdmissionState(tree=seed_tree()), ready=ready)


@pytest.fixture
async def client() -> AsyncIterator[TestClient[Any, Any]]:
    app = make_app(store(), Settings(max_body_bytes=64 * 1024))
    async with TestClient(TestServer(app)) as test_client:
        yield test_client


async def test_mutate_over_http_returns_the_review_with_uid_and_patch(client: TestClient[Any, Any]) -> None:
    resp = await client.post("/mutate?timeout=5s", data=orjson.dumps(review(batch_job(), uid="abc-123")))
    assert resp.status == 200
    assert resp.content_type == "application/json"
    body = await resp.json()
    assert body["apiVersion"] == "admission.k8s.io/v1"
    assert body["kind"] == "AdmissionReview"
    assert body["response"]["uid"] == "abc-123"
    assert body["response"]["patchType"] == "JSONPatch"
    ops = orjson.loads(base64.b64decode(body["response"]["patch"]))
    assert {"op": "add", "path": "/spec/suspend", "value": True} in ops


async def test_validate_over_http_never_returns_a_patch(client: TestClient[Any, Any]) -> None:
    resp = await client.post("/validate", data=orjson.dumps(review(batch_job())))
    body = await resp.json()
    assert body["response"] == {"uid": "req-1", "allowed": True}


async def test_health_and_readiness(client: TestClient[Any, Any]) -> None:
    assert (await client.get("/healthz")).status == 200
    assert (await client.get("/readyz")).status == 200


async def test_not_ready_until_caches_synced() -> None:
    not_ready = store(ready=False)
    async with TestClient(TestServer(make_app(not_ready, Settings()))) as test_client:
        assert (await test_client.get("/readyz")).status == 503
        refused = await (await test_client.post("/mutate", data=orjson.dumps(review(batch_job())))).json()
        assert refused["response"]["allowed"] is False
        assert refused["response"]["status"]["message"].startswith("kube-queue is starting: caches not ready")
        not_ready.ready = True
        assert (await test_client.get("/readyz")).status == 200
        accepted = await (await test_client.post("/mutate", data=orjson.dumps(review(batch_job())))).json()
        assert accepted["response"]["allowed"] is True


@pytest.mark.parametrize(
    ("body", "status"),
    [
        (b"", 400),
        (b"{not json", 400),
        (b"[]", 400),
        (b'"AdmissionReview"', 400),
        (orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}), 400),
        (orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}), 400),
        (orjson.dumps({"kind": "Pod", "request": {"kind": {"kind": "Job"}}}), 400),
    ],
)
async def test_unusable_bodies_without_a_uid_get_a_400(client: TestClient[Any, Any], body: bytes, status: int) -> None:
    for path in ("/mutate", "/validate"):
        resp = await client.post(path, data=body)
        assert resp.status == status
        assert "error" in await resp.json()


@pytest.mark.parametrize(
    "breakage",
    [
        {"apiVersion": "admission.k8s.io/v1beta1"},
        {"kind": "Pod"},
    ],
)
async def test_wrong_review_kind_with_a_uid_gets_a_refusal(
    client: TestClient[Any, Any], breakage: dict[str, str]
) -> None:
    body = review(batch_job(), uid="u-9")
    body.update(breakage)
    resp = await client.post("/mutate", data=orjson.dumps(body))
    assert resp.status == 200
    out = await resp.json()
    assert out["response"]["uid"] == "u-9"
    assert out["response"]["allowed"] is False
    assert out["response"]["status"]["code"] == 400


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("kind", None),
        ("kind", "Job"),
        ("operation", "PATCH"),
        ("operation", None),
        ("object", "not an object"),
        ("userInfo", []),
        ("namespace", 7),
    ],
)
async def test_missing_or_mistyped_fields_get_a_refusal_naming_the_field(
    client: TestClient[Any, Any], field: str, value: object
) -> None:
    body = review(batch_job())
    body["request"][field] = value
    out = await (await client.post("/validate", data=orjson.dumps(body))).json()
    assert out["response"]["allowed"] is False
    assert field in out["response"]["status"]["message"]


async def test_oversized_body_is_refused_with_413(client: TestClient[Any, Any]) -> None:
    big = review(batch_job())
    big["request"]["object"]["metadata"]["annotations"] = {"pad": "x" * (128 * 1024)}
    resp = await client.post("/mutate", data=orjson.dumps(big))
    assert resp.status == 413


async def test_unknown_paths_and_methods(client: TestClient[Any, Any]) -> None:
    assert (await client.post("/admit", data=b"{}")).status == 404
    assert (await client.get("/mutate")).status == 405


def test_handler_failure_becomes_a_refusal_not_a_500(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: object) -> dict[str, Any]:
        raise RuntimeError("bug")

    monkeypatch.setitem(app_module.HANDLERS, "mutate", boom)
    status, payload = respond("mutate", orjson.dumps(review(batch_job())), AdmissionState(), Settings())
    out = orjson.loads(payload)
    assert status == 200
    assert out["response"]["allowed"] is False
    assert "internal error" in out["response"]["status"]["message"]


# Fuzz ----------------------------------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)


def _mangled_reviews() -> st.SearchStrategy[Any]:
    """Real reviews with one field of the request or object replaced by arbitrary JSON."""
    kinds = st.sampled_from(["Job", "Pod", "TFJob", "ElasticQuotaTree", "ResourcePolicy", "Queue"])
    request_fields = st.sampled_from(
        ["kind", "uid", "operation", "object", "oldObject", "userInfo", "namespace", "name", "subResource"]
    )
    object_paths = st.sampled_from(
        [
            ("metadata",),
            ("spec",),
            ("spec", "template"),
            ("spec", "suspend"),
            ("spec", "parallelism"),
            ("metadata", "labels"),
            ("spec", "root"),
        ]
    )

    @st.composite
    def build(draw: st.DrawFn) -> Any:
        kind = draw(kinds)
        builders: dict[str, Callable[..., dict[str, Any]]] = {
            "Job": helpers.batch_job,
            "Pod": helpers.pod,
            "TFJob": helpers.tfjob,
            "ElasticQuotaTree": lambda: {
                "kind": "ElasticQuotaTree",
                "metadata": {"name": "t", "namespace": "kube-system"},
                "spec": {"root": {"name": "root"}},
            },
            "ResourcePolicy": lambda: {
                "kind": "ResourcePolicy",
                "metadata": {"name": "r", "namespace": "user-a"},
                "spec": {"units": []},
            },
            "Queue": lambda: {"kind": "Queue", "metadata": {"name": "q", "namespace": "kube-queue"}, "spec": {}},
        }
        obj = builders[kind]()
        operation = draw(st.sampled_from(["CREATE", "UPDATE", "DELETE"]))
        body: Any = review(
            obj, kind=kind, operation=operation, old=obj if operation != "CREATE" else None, namespace="user-a"
        )
        choice = draw(st.integers(0, 2))
        if choice == 0:
            body["request"][draw(request_fields)] = draw(json_values)
        elif choice == 1 and isinstance(body["request"].get("object"), dict):
            path = draw(object_paths)
            target = body["request"]["object"]
            for step in path[:-1]:
                target = target.setdefault(step, {}) if isinstance(target, dict) else {}
            if isinstance(target, dict):
                target[path[-1]] = draw(json_values)
        else:
            body = draw(json_values)
        return body

    return build()


FUZZ_STATE = AdmissionState(tree=seed_tree())


@hsettings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(endpoint=st.sampled_from(["mutate", "validate"]), body=_mangled_reviews())
def test_fuzz_handlers_never_fail(endpoint: str, body: Any) -> None:
    status, payload = respond(endpoint, orjson.dumps(body), FUZZ_STATE, Settings())
    assert status in (200, 400)
    out = orjson.loads(payload)
    if status == 200:
        assert out["kind"] == "AdmissionReview"
        assert isinstance(out["response"]["uid"], str)
        assert out["response"]["status"]["code"] != 500 if not out["response"]["allowed"] else True


@hsettings(max_examples=examples(200), deadline=None)
@given(endpoint=st.sampled_from(["mutate", "validate"]), body=st.binary(max_size=200))
def test_fuzz_raw_bytes_never_fail(endpoint: str, body: bytes) -> None:
    status, _ = respond(endpoint, body, FUZZ_STATE, Settings())
    assert status in (200, 400)


@hsettings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(endpoint=st.sampled_from(["/mutate", "/validate"]), body=_mangled_reviews())
async def test_fuzz_over_http_never_500(endpoint: str, body: Any) -> None:
    async with TestClient(TestServer(make_app(store(), Settings()))) as test_client:
        resp = await test_client.post(endpoint, data=orjson.dumps(body))
        assert resp.status in (200, 400)
        await resp.read()


async def test_a_stalled_body_is_cut_off_with_408(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app_module, "BODY_READ_SECONDS", 0.2)
    async with TestClient(TestServer(make_app(store(), Settings()))) as test_client:
        reader, writer = await asyncio.open_connection(test_client.host, test_client.port)
        writer.write(
            b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
        )
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), timeout=30)
        writer.close()
        await writer.wait_closed()
    assert b" 408 " in status_line


async def test_a_body_sent_in_parts_is_read_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app_module, "BODY_READ_SECONDS", 5.0)
    body = orjson.dumps(review(batch_job(), uid="in-parts"))
    async with TestClient(TestServer(make_app(store(), Settings()))) as test_client:
        reader, writer = await asyncio.open_connection(test_client.host, test_client.port)
        writer.write(
            b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body[:10]
        )
        await writer.drain()
        await asyncio.sleep(0.1)  # the handler starts with the body incomplete and waits for the rest
        writer.write(body[10:])
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), timeout=30)
        writer.close()
        await writer.wait_closed()
    head, _, payload = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ")
    assert orjson.loads(payload)["response"]["uid"] == "in-parts"


def _sample(name: str, labels: dict[str, str]) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_every_request_is_counted_and_timed(client: TestClient[Any, Any]) -> None:
    counted = {"endpoint": "mutate", "kind": "Job", "decision": "patched"}
    before = _sample("kube_queue_webhook_requests_total", counted)
    timed = _sample("kube_queue_webhook_request_duration_seconds_count", {"endpoint": "mutate"})
    for _ in range(2):  # the second one uses the series the first created
        resp = await client.post("/mutate", data=orjson.dumps(review(batch_job())))
        assert resp.status == 200
    assert _sample("kube_queue_webhook_requests_total", counted) == before + 2
    assert _sample("kube_queue_webhook_request_duration_seconds_count", {"endpoint": "mutate"}) >= timed + 2


async def test_the_managed_paths_take_the_namespace_as_labelled(client: TestClient[Any, Any]) -> None:
    job = batch_job(namespace="just-joined", suspend=False)
    plain = await (await client.post("/mutate", data=orjson.dumps(review(job)))).json()
    assert "patch" not in plain["response"]
    routed = await (await client.post("/mutate/managed", data=orjson.dumps(review(job)))).json()
    ops = orjson.loads(base64.b64decode(routed["response"]["patch"]))
    assert {"op": "add", "path": "/spec/suspend", "value": True} in ops
    assert (await client.post("/validate/managed", data=orjson.dumps(review(job)))).status == 200
    assert (await client.post("/mutate/elsewhere", data=orjson.dumps(review(job)))).status == 404
