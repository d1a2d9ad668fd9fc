"""``kq serve``'s read API (docs/security.md, "The controller's read API") on its own HTTPS port, as the API
server's aggregator reaches it: only the front proxy's certificate makes the user it names believed; anyone else,
with a forged user header, another CA's certificate or the front-proxy CA's certificate under another name, is
refused. The admission webhook on the same port still answers callers without a certificate."""

from __future__ import annotations

import asyncio
import http.client
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import orjson
import pytest
from aiohttp import web
from prometheus_client import REGISTRY

from tests.clirun import NOW, seed_api
from tests.ports import free_port
from webhook import pki
from webhook.admission import server
from webhook.admission.app import make_app
from webhook.admission.state import Settings, StateStore
from webhook.api.names import TABLE_MEDIA_TYPE
from webhook.api.objects import Obj, name_of, namespace_of
from webhook.cli import readapi
from webhook.controller import decide
from webhook.controller.controller import Controller
from webhook.controller.decide import PassRecord
from webhook.controller.model import TrackedJob
from webhook.controller.plugin import RunningController
from webhook.core.workload import WorkloadKey
from webhook.kube.frontproxy import FRONT_PROXY, FrontProxy, front_proxy_of, trust_front_proxy
from webhook.kube.serving import tls_context
from webhook.readmodel.explained import WhyInputs
from webhook.readmodel.fetch import load_snapshot
from webhook.readmodel.served import NOT_DECIDED, NOT_WAITING
from webhook.readmodel.summaries import SummaryInputs
from webhook.readmodel.view import KindSource, ViewContext, job_views
from webhook.readmodel.waiting import pass_inputs

PATH = "/apis/visibility.kube-queue.x-k8s.io/v1alpha1/jobsummaries"
FRONT_PROXY_NAME = "front-proxy-client"


@dataclass
class Pki:
    directory: Path
    serving_ca: bytes

    def pair(self, name: str, cert_key: tuple[bytes, bytes]) -> tuple[str, str]:
        cert, key = self.directory / f"{name}.crt", self.directory / f"{name}.key"
        cert.write_bytes(cert_key[0])
        key.write_bytes(cert_key[1])
        return str(cert), str(key)


@dataclass
class Served:
    port: int
    pki: Pki
    front_proxy: tuple[str, str]
    wrong_name: tuple[str, str]
    foreign: tuple[str, str]
    running: RunningController


def _inputs() -> SummaryInputs:
    snapshot = load_snapshot(seed_api(), None, now=NOW)
    context = ViewContext(snapshot.tree, snapshot.priority_classes, snapshot.devices, NOW)
    return SummaryInputs([(source, obj, None) for source, obj in snapshot.jobs], {}, context, None, {})


@pytest.fixture
async def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Served]:
    serving_ca, serving_ca_key = pki.make_ca("kq-serving-ca")
    front_ca, front_ca_key = pki.make_ca("front-proxy-ca")
    other_ca, other_ca_key = pki.make_ca("cluster-ca")
    keys = Pki(tmp_path, serving_ca)
    cert, key = keys.pair("serving", pki.issue_cert(serving_ca, serving_ca_key, "kube-queue-webhook",
                                                     ip_addresses=("127.0.0.1",)))
    context = tls_context(Path(cert), Path(key))
    front = FrontProxy(front_ca.decode(), frozenset({FRONT_PROXY_NAME}))
    trust_front_proxy(context, front)
    inputs = _inputs()

    async def collect(controller: Controller) -> Callable[[], SummaryInputs]:
        return lambda: inputs

    monkeypatch.setattr(readapi, "_collect", collect)
    running = RunningController()
    app = web.Application()
    app[FRONT_PROXY] = front
    readapi.ReadApi(running).add_routes(app)
    port = free_port()
    runner = await server.start_apart(app, make_app(StateStore(ready=True), Settings()), "127.0.0.1", port, context)
    try:
        yield Served(
            port, keys,
            front_proxy=keys.pair("front", pki.issue_cert(front_ca, front_ca_key, FRONT_PROXY_NAME, server=False,
                                                          client=True)),
            wrong_name=keys.pair("other-name", pki.issue_cert(front_ca, front_ca_key, "someone", server=False,
                                                              client=True)),
            foreign=keys.pair("foreign", pki.issue_cert(other_ca, other_ca_key, FRONT_PROXY_NAME, server=False,
                                                        client=True, organizations=("system:masters",))),
            running=running,
        )
    finally:
        await runner.cleanup()


def _get(served: Served, path: str, cert: tuple[str, str] | None, headers: dict[str, str]) -> tuple[int, Any]:
    context = ssl.create_default_context(cadata=served.pki.serving_ca.decode())
    if cert is not None:
        context.load_cert_chain(*cert)
    connection = http.client.HTTPSConnection("127.0.0.1", served.port, context=context, timeout=30)
    try:
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        body = response.read()
        return response.status, orjson.loads(body) if response.getheader("Content-Type", "").startswith(
            "application/json") else body
    finally:
        connection.close()


async def ask(served: Served, path: str = PATH, cert: tuple[str, str] | None = None,
              headers: dict[str, str] | None = None) -> tuple[int, Any]:
    return await asyncio.to_thread(_get, served, path, cert, headers or {})


ALICE = {"X-Remote-User": "alice", "X-Remote-Group": "developers"}


class _Estimates:
    """The start estimates' service as far as the read API touches it: what it was told of reads."""

    def __init__(self) -> None:
        self.told: list[bool] = []

    def reading(self, busy: bool) -> None:
        self.told.append(busy)


def _controller() -> Controller:
    return cast(Controller, SimpleNamespace(eta=_Estimates()))


async def test_the_front_proxy_is_answered_with_every_job_or_one_namespaces(
        served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(readapi, "READER_GRACE_SECONDS", 0.01)
    served.running.controller, served.running.loop = _controller(), asyncio.get_running_loop()
    before = REGISTRY.get_sample_value("kube_queue_read_api_seconds_count", {"scope": "cluster"}) or 0
    status, answer = await ask(served, cert=served.front_proxy, headers=ALICE)
    assert status == 200, answer
    assert REGISTRY.get_sample_value("kube_queue_read_api_seconds_count", {"scope": "cluster"}) == before + 1
    names = {(item["job"]["namespace"], item["job"]["name"]) for item in answer["items"]}
    assert ("user-a", "pi2") in names and ("user-c", "pend") in names
    # The start estimates' replay was held while the answer was built, and let go after.
    told = cast(_Estimates, served.running.controller.eta).told
    for _ in range(500):
        if len(told) > 1:
            break
        await asyncio.sleep(0.01)
    assert told == [True, False]
    status, answer = await ask(served, PATH.replace("/jobsummaries", "/namespaces/user-c/jobsummaries"),
                               cert=served.front_proxy, headers=ALICE)
    assert status == 200 and {item["job"]["namespace"] for item in answer["items"]} == {"user-c"}


async def test_the_replay_stays_held_while_the_reader_takes_in_the_answer(
        served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(readapi, "READER_GRACE_SECONDS", 60.0)
    served.running.controller, served.running.loop = _controller(), asyncio.get_running_loop()
    status, _ = await ask(served, cert=served.front_proxy, headers=ALICE)
    assert status == 200
    assert cast(_Estimates, served.running.controller.eta).told == [True]  # let go only after the grace


@pytest.mark.parametrize("who", ["nobody", "forged header", "front-proxy CA, another name", "no user named"])
async def test_anyone_but_the_front_proxy_naming_a_user_is_refused(served: Served, who: str) -> None:
    served.running.controller, served.running.loop = _controller(), asyncio.get_running_loop()
    cert, headers = {
        "nobody": (None, {}),
        "forged header": (None, {"X-Remote-User": "system:admin", "X-Remote-Group": "system:masters"}),
        "front-proxy CA, another name": (served.wrong_name, {"X-Remote-User": "system:admin"}),
        "no user named": (served.front_proxy, {}),
    }[who]
    status, answer = await ask(served, cert=cert, headers=headers)
    assert status == 401 and answer["reason"] == "Unauthorized", answer
    assert "kq list -A" in answer["message"]


async def test_a_certificate_of_another_ca_does_not_even_connect(served: Served) -> None:
    # A user's client certificate of the cluster's CA, with the front proxy's name and system:masters: the
    # handshake fails (the port trusts the front-proxy CA alone, not the system's CAs either).
    with pytest.raises((ssl.SSLError, ConnectionError)):
        await ask(served, cert=served.foreign, headers={"X-Remote-User": "system:admin"})


async def test_the_webhook_side_still_answers_a_caller_without_a_certificate(served: Served) -> None:
    status, _ = await ask(served, "/readyz")
    assert status == 200


async def test_without_a_controller_the_front_proxy_is_told_to_ask_again(served: Served) -> None:
    status, answer = await ask(served, cert=served.front_proxy, headers=ALICE)
    assert status == 503 and "ask again" in answer["message"]


async def test_discovery_is_served_to_the_aggregator() -> None:
    app = web.Application()
    readapi.ReadApi(RunningController()).add_routes(app)
    routes = {route.resource.canonical for route in app.router.routes() if route.resource is not None}
    assert readapi.VERSION_PATH in routes and readapi.GROUP_PATH in routes


def test_the_serving_port_trusts_the_front_proxy_ca_alone(tmp_path: Path) -> None:
    ca, ca_key = pki.make_ca("kq-serving-ca")
    cert, key = pki.issue_cert(ca, ca_key, "kube-queue-webhook")
    (tmp_path / "tls.crt").write_bytes(cert)
    (tmp_path / "tls.key").write_bytes(key)
    context = tls_context(tmp_path / "tls.crt", tmp_path / "tls.key")
    assert context.get_ca_certs() == []  # no system CA either
    assert context.verify_mode is ssl.CERT_NONE
    front_ca, _ = pki.make_ca("front-proxy-ca")
    trust_front_proxy(context, FrontProxy(front_ca.decode(), frozenset({FRONT_PROXY_NAME})))
    subjects = [str(entry["subject"]) for entry in context.get_ca_certs()]
    assert len(subjects) == 1 and "front-proxy-ca" in subjects[0], subjects
    assert ssl.VerifyMode(context.verify_mode) is ssl.CERT_OPTIONAL


def test_the_front_proxy_is_read_from_the_api_servers_configmap() -> None:
    ca, _ = pki.make_ca("front-proxy-ca")
    front = front_proxy_of({
        "requestheader-client-ca-file": ca.decode(),
        "requestheader-allowed-names": '["front-proxy-client"]',
        "requestheader-username-headers": '["X-Remote-User"]',
        "requestheader-group-headers": '["X-Remote-Group"]',
    })
    assert front == FrontProxy(ca.decode(), frozenset({"front-proxy-client"}), ("X-Remote-User",),
                               ("X-Remote-Group",))
    assert front_proxy_of({"client-ca-file": ca.decode()}) is None
    assert front_proxy_of({"requestheader-client-ca-file": ca.decode(), "requestheader-allowed-names": "not json"}
                          ) == FrontProxy(ca.decode(), frozenset())


def test_a_follower_serves_the_estimates_its_queues_publish() -> None:
    start, latest = "2026-12-06T08:00:00Z", "2026-12-06T08:30:00Z"
    queues = {"q": {"status": {"queueItemDetails": {"active": [
        {"name": "a", "namespace": "ns", "position": 1, "estimatedStart": start, "estimatedStartLatest": latest},
        {"name": "b", "namespace": "ns", "kind": "PyTorchJob", "position": 2, "estimatedStartLatest": latest},
        {"name": "c", "namespace": "ns", "position": 3},
    ]}}}}
    assert readapi.published_estimates(queues) == {
        WorkloadKey("Job", "ns", "a"): {"estimatedStart": start, "estimatedStartLatest": latest},
        WorkloadKey("PyTorchJob", "ns", "b"): {"estimatedStartLatest": latest},
    }


def _why_inputs(namespace: str, name: str, *, decided: bool) -> WhyInputs:
    """What the route reads for one job, from the seed's cluster, with a pass over it (``decided``) or none."""
    snapshot = load_snapshot(seed_api(), None, now=NOW, complete=True)
    assert snapshot.tree is not None and snapshot.tree_pods is not None
    views = job_views(snapshot)
    record = None
    if decided:
        tracked, loose, protected = pass_inputs(snapshot, views)
        decisions = decide.decide(snapshot.tree, tracked, snapshot.queues, oversell_rate=Fraction(1),
                                  strict_priority=False, now=NOW, loose=loose, protected=protected)
        record = PassRecord(snapshot.tree, tracked, loose, protected, decisions, NOW)
    context = ViewContext(snapshot.tree, snapshot.priority_classes, snapshot.devices, NOW)
    found: list[tuple[KindSource, Obj, TrackedJob | str | None, int]] = [
        (source, obj, None, 0) for source, obj in snapshot.jobs
        if namespace_of(obj) == namespace and name_of(obj) == name]
    return WhyInputs(found, context, record, Fraction(1), "--oversellrate", {})


@pytest.fixture
async def one_job(served: Served, monkeypatch: pytest.MonkeyPatch) -> Served:
    """The route for one job answers from :func:`_why_inputs` (the last pass decided)."""
    async def collect(controller: Controller, namespace: str, name: str) -> WhyInputs:
        return _why_inputs(namespace, name, decided=namespace != "user-b")

    monkeypatch.setattr(readapi, "_collect_one", collect)
    served.running.controller, served.running.loop = _controller(), asyncio.get_running_loop()
    return served


def _one(namespace: str, name: str, query: str = "") -> str:
    return f"{PATH.replace('/jobsummaries', f'/namespaces/{namespace}/jobsummaries')}/{name}{query}"


async def test_one_waiting_job_is_answered_with_why_it_waits(one_job: Served) -> None:
    before = REGISTRY.get_sample_value("kube_queue_read_api_seconds_count", {"scope": "job"}) or 0
    status, answer = await ask(one_job, _one("user-a", "pi2", "?width=90&ahead=1"), one_job.front_proxy, ALICE)
    assert status == 200, answer
    assert REGISTRY.get_sample_value("kube_queue_read_api_seconds_count", {"scope": "job"}) == before + 1
    assert answer["kind"] == "JobSummary" and answer["job"]["name"] == "pi2" and answer["job"]["position"] == 2
    why = answer["why"]
    assert why["position"] == 2 and why["status"] == "QUEUING" and len(why["ahead"]) == 1
    assert why["explanation"].startswith("Job user-a/pi2 is QUEUING: position 2 of")
    assert max(len(line) for line in why["explanation"].splitlines()) <= 90


async def test_a_job_that_does_not_wait_or_that_no_pass_saw_is_left_to_kq(one_job: Served) -> None:
    status, answer = await ask(one_job, _one("user-a", "pi1"), one_job.front_proxy, ALICE)
    assert status == 200 and answer["unexplained"]["reason"] == NOT_WAITING and "why" not in answer
    status, answer = await ask(one_job, _one("user-b", "big"), one_job.front_proxy, ALICE)
    assert status == 200 and answer["unexplained"]["reason"] == NOT_DECIDED and "why" not in answer


async def test_a_missing_job_a_bad_parameter_and_a_forged_user_are_refused(one_job: Served) -> None:
    status, answer = await ask(one_job, _one("user-a", "pi3"), one_job.front_proxy, ALICE)
    assert status == 404 and answer["reason"] == "NotFound"
    status, answer = await ask(one_job, _one("user-a", "pi2", "?width=wide"), one_job.front_proxy, ALICE)
    assert status == 400 and "whole numbers" in answer["message"]
    status, answer = await ask(one_job, _one("user-a", "pi2"), None, {"X-Remote-User": "system:admin"})
    assert status == 401 and "kq why" in answer["message"]
    status, answer = await ask(one_job, _one("user-a", "pi2"), one_job.wrong_name, {"X-Remote-User": "alice"})
    assert status == 401


TABLE = {**ALICE, "Accept": f"{TABLE_MEDIA_TYPE},application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"}
"""What kubectl get asks for."""


async def test_who_accepts_a_table_gets_one_and_a_wrong_include_object_is_refused(
        served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(readapi, "READER_GRACE_SECONDS", 0.01)
    served.running.controller, served.running.loop = _controller(), asyncio.get_running_loop()
    status, listed = await ask(served, cert=served.front_proxy, headers=ALICE)
    assert status == 200 and listed["kind"] == "JobSummaryList"
    status, table = await ask(served, cert=served.front_proxy, headers=TABLE)
    assert status == 200 and table["kind"] == "Table", table
    rows = {(row["object"]["metadata"]["namespace"], row["cells"][0]): row["cells"] for row in table["rows"]}
    assert rows.keys() == {(item["job"]["namespace"], item["job"]["name"]) for item in listed["items"]}
    assert rows[("user-a", "pi2")][1:4] == ["Job", "QUEUING", "Department-a"]
    status, table = await ask(served, f"{PATH}?includeObject=None", served.front_proxy, TABLE)
    assert status == 200 and all(row.keys() == {"cells"} for row in table["rows"])
    status, refused = await ask(served, f"{PATH}?includeObject=Everything", served.front_proxy, TABLE)
    assert status == 400 and "includeObject is one of None, Metadata, Object" in refused["message"]
    # The answer still goes to the front proxy alone.
    status, refused = await ask(served, headers={**TABLE, "X-Remote-User": "system:admin"})
    assert status == 401


async def test_one_job_as_a_table_of_one_row(one_job: Served) -> None:
    status, table = await ask(one_job, _one("user-a", "pi2"), one_job.front_proxy, TABLE)
    assert status == 200 and table["kind"] == "Table", table
    (row,) = table["rows"]
    assert row["cells"][:5] == ["pi2", "Job", "QUEUING", "Department-a", "2"]
    assert row["object"]["metadata"] == {"name": "pi2", "namespace": "user-a"}
    status, answer = await ask(one_job, _one("user-a", "pi3"), one_job.front_proxy, TABLE)
    assert status == 404 and answer["reason"] == "NotFound"
