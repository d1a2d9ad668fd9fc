"""``kq serve`` end to end against a fake apiserver: TLS, list + watch caches, readiness, live state."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import dataclasses
import gc
import importlib
import logging
import socket
import ssl
import sys
import types
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from tests.builders import SEED_TREE_SPEC
from tests.kubefake import Kind
from tests.ports import free_port
from tests.service.apiserver_http import HttpApiserver
from tests.service.helpers import batch_job, review
from webhook.admission import server
from webhook.admission.review import decoded_patch
from webhook.admission.state import Settings
from webhook.api.objects import Obj
from webhook.cli import serve as serve_module
from webhook.cli.certs import write_certs
from webhook.cli.serve import ServeOptions, serve
from webhook.kube.client import KubeClient
from webhook.kube.serving import tls_context

TREES: Kind = ("scheduling.sigs.k8s.io", "v1beta1", "elasticquotatrees")
TREE: dict[str, Any] = {
    "apiVersion": "scheduling.sigs.k8s.io/v1beta1",
    "kind": "ElasticQuotaTree",
    "metadata": {"name": "elasticquotatree", "namespace": "kube-system", "resourceVersion": "5"},
    "spec": SEED_TREE_SPEC,
}


def kubeconfig(path: Path, port: int) -> Path:
    path.write_text(
        f"""apiVersion: v1
kind: Config
clusters: [{{name: fake, cluster: {{server: "http://127.0.0.1:{port}"}}}}]
users: [{{name: tester, user: {{token: test-token}}}}]
contexts: [{{name: fake, context: {{cluster: fake, user: tester}}}}]
current-context: fake
"""
    )
    return path


@pytest.fixture
async def apiserver() -> AsyncIterator[tuple[HttpApiserver, int]]:
    fake = HttpApiserver({"test-token": "tester"})
    fake.put(TREES, copy.deepcopy(TREE))
    server = TestServer(fake.app, host="127.0.0.1")
    await server.start_server()
    assert server.port is not None
    try:
        yield fake, server.port
    finally:
        await server.close()


async def wait_ready(session: aiohttp.ClientSession, base: str, ssl_context: ssl.SSLContext) -> None:
    for _ in range(400):
        with contextlib.suppress(aiohttp.ClientError):
            async with session.get(f"{base}/readyz", ssl=ssl_context) as resp:
                if resp.status == 200:
                    return
        await asyncio.sleep(0.05)
    raise AssertionError("the service never became ready")


def tls_options(tmp_path: Path, api_port: int) -> tuple[ServeOptions, ssl.SSLContext]:
    """``serve`` on a free loopback port with fresh certificates, talking to the fake apiserver on
    ``api_port``; and a client TLS context that trusts its CA."""
    written = write_certs(tmp_path / "certs", [], ["127.0.0.1"])
    options = ServeOptions(
        host="127.0.0.1",
        port=free_port(),
        cert=written["tls.crt"],
        key=written["tls.key"],
        kubeconfig=str(kubeconfig(tmp_path / "kubeconfig", api_port)),
        settings=Settings(),
    )
    return options, ssl.create_default_context(cafile=str(written["ca.crt"]))


def install_plugin(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plugin (as the extender or controller would be) that adds a route to the same server."""
    plugin = types.ModuleType("kq_test_plugin")

    async def ping(request: web.Request) -> web.Response:
        return web.Response(text="pong")

    async def attach(app: web.Application, client: KubeClient, args: argparse.Namespace) -> None:
        app.router.add_get("/ping", ping)

    plugin.attach = attach  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "kq_test_plugin", plugin)
    monkeypatch.setattr(serve_module, "PLUGIN_MODULES", ("kq_test_plugin",))


async def test_serve_answers_over_tls_from_watched_state(
    apiserver: tuple[HttpApiserver, int], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake, api_port = apiserver
    install_plugin(monkeypatch)
    options, client_tls = tls_options(tmp_path, api_port)
    port = options.port
    stop = asyncio.Event()
    task = asyncio.create_task(serve(options, stop))
    base = f"https://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session:
            await wait_ready(session, base, client_tls)
            async with session.post(f"{base}/mutate", data=orjson.dumps(review(batch_job())), ssl=client_tls) as resp:
                out = await resp.json()
            assert {"op": "add", "path": "/spec/suspend", "value": True} in decoded_patch(out)
            async with session.get(f"{base}/ping", ssl=client_tls) as resp:
                assert await resp.text() == "pong"

            # The tree is deleted: the watch carries it to the state, and user-a is no longer managed.
            fake.remove(TREES, "elasticquotatree", "kube-system")
            for _ in range(400):
                async with session.post(
                    f"{base}/mutate", data=orjson.dumps(review(batch_job())), ssl=client_tls
                ) as resp:
                    out = await resp.json()
                if not decoded_patch(out):
                    break
                await asyncio.sleep(0.05)
            assert decoded_patch(out) == []
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=30)
    watched = {seen.path for seen in fake.seen if "watch=true" in seen.query}
    assert watched == {
        "/apis/scheduling.sigs.k8s.io/v1beta1/namespaces/kube-system/elasticquotatrees",
        "/apis/scheduling.alibabacloud.com/v1alpha1/resourcepolicies",
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        "/api/v1/namespaces",
        "/api/v1/limitranges",
        "/apis/resource.k8s.io/v1/deviceclasses",
        "/apis/node.k8s.io/v1/runtimeclasses",
    }
    assert all("allowWatchBookmarks=true" in seen.query for seen in fake.seen if "watch=true" in seen.query)


async def test_admission_is_refused_until_the_caches_have_listed(
    apiserver: tuple[HttpApiserver, int], tmp_path: Path
) -> None:
    # Issue 17 hole 3: after a restart the service answered /mutate before its caches listed, and a job
    # created in that window passed untouched (not held, no quota label).
    fake, api_port = apiserver
    fake.lists_open.clear()
    options, client_tls = tls_options(tmp_path, api_port)
    base = f"https://127.0.0.1:{options.port}"
    stop = asyncio.Event()
    task = asyncio.create_task(serve(options, stop))
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(400):  # listening, but the lists are held
                with contextlib.suppress(aiohttp.ClientError):
                    async with session.get(f"{base}/healthz", ssl=client_tls) as resp:
                        if resp.status == 200:
                            break
                await asyncio.sleep(0.05)
            async with session.get(f"{base}/readyz", ssl=client_tls) as resp:
                assert resp.status == 503
            for endpoint in ("mutate", "validate"):
                body = orjson.dumps(review(batch_job()))
                async with session.post(f"{base}/{endpoint}", data=body, ssl=client_tls) as resp:
                    assert resp.status == 200
                    out = await resp.json()
                assert out["response"]["allowed"] is False
                assert "kube-queue is starting: caches not ready" in out["response"]["status"]["message"]
                assert "retry" in out["response"]["status"]["message"]
                assert out["response"]["status"]["code"] == 503
            fake.lists_open.set()
            await wait_ready(session, base, client_tls)
            async with session.post(f"{base}/mutate", data=orjson.dumps(review(batch_job())), ssl=client_tls) as resp:
                out = await resp.json()
            assert {"op": "add", "path": "/spec/suspend", "value": True} in decoded_patch(out)
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=30)


def uvloop_installed() -> bool:
    try:
        importlib.import_module("uvloop")
    except ImportError:
        return False
    return True


def test_choose_loop_prefers_uvloop_when_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    if not uvloop_installed():
        pytest.skip("uvloop is not installed here")
    monkeypatch.delenv(server.LOOP_ENV, raising=False)
    choice = server.choose_loop()
    assert choice.name.startswith("uvloop ")
    assert choice.factory is not None


def test_choose_loop_falls_back_to_asyncio_without_uvloop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(server.LOOP_ENV, raising=False)
    monkeypatch.setitem(sys.modules, "uvloop", None)  # makes `import uvloop` raise ImportError
    choice = server.choose_loop()
    assert (choice.name, choice.reason, choice.factory) == ("asyncio", "uvloop is not installed", None)


def test_event_loop_variable_forces_the_standard_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(server.LOOP_ENV, "asyncio")
    choice = server.choose_loop()
    assert (choice.name, choice.reason, choice.factory) == ("asyncio", "KQ_EVENT_LOOP=asyncio", None)


def test_kq_serve_runs_on_the_chosen_loop_and_logs_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)
    seen: list[str] = []

    async def fake_serve(options: ServeOptions, stop: asyncio.Event | None = None) -> None:
        seen.append(type(asyncio.get_running_loop()).__module__)

    monkeypatch.setattr(serve_module, "options_from_args", lambda args: ServeOptions())
    monkeypatch.setattr(serve_module, "serve", fake_serve)
    with caplog.at_level(logging.INFO, logger="webhook.kube.serving"):
        assert serve_module.run(argparse.Namespace()) == 0
    assert [module.split(".")[0] for module in seen] == ["asyncio"]
    assert "component=serve event=event_loop loop='asyncio' reason='uvloop is not installed'" in caplog.text


async def mutate_once_on_this_loop(tmp_path: Path) -> tuple[str, list[Obj]]:
    """Start a fake apiserver and ``serve`` on the running loop, send one mutate over TLS, stop; return the
    loop's module and the patch."""
    fake = HttpApiserver({"test-token": "tester"})
    fake.put(TREES, copy.deepcopy(TREE))
    api = TestServer(fake.app, host="127.0.0.1")
    await api.start_server()
    assert api.port is not None
    options, client_tls = tls_options(tmp_path, api.port)
    port = options.port
    stop = asyncio.Event()
    task = asyncio.create_task(serve(options, stop))
    try:
        async with aiohttp.ClientSession() as session:
            await wait_ready(session, f"https://127.0.0.1:{port}", client_tls)
            body = orjson.dumps(review(batch_job()))
            async with session.post(f"https://127.0.0.1:{port}/mutate", data=body, ssl=client_tls) as resp:
                out = await resp.json()
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=30)
        await api.close()
    return type(asyncio.get_running_loop()).__module__, decoded_patch(out)


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_the_service_answers_the_same_on_either_loop(
    loop: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if loop == "uvloop" and not uvloop_installed():
        pytest.skip("uvloop is not installed here")
    if loop == "asyncio":
        monkeypatch.setitem(sys.modules, "uvloop", None)
    module, patch = server.run(mutate_once_on_this_loop(tmp_path))
    assert module.split(".")[0] == loop
    assert {"op": "add", "path": "/spec/suspend", "value": True} in patch


@pytest.fixture(autouse=True)
def unfreeze_heap() -> Iterator[None]:
    """``serve`` freezes the heap it starts with (see ``settle_heap``); give the next test a normal one."""
    yield
    gc.unfreeze()


def test_settle_heap_takes_start_up_objects_out_of_collections(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="webhook.admission.server"):
        frozen = server.settle_heap()
    assert frozen > 0
    assert gc.get_freeze_count() > 0
    assert f"component=serve event=heap_frozen objects={frozen}" in caplog.text


async def test_a_port_in_use_stops_what_the_set_up_started(tmp_path: Path) -> None:
    written = write_certs(tmp_path / "certs", [], ["127.0.0.1"])
    app = web.Application()
    events: list[str] = []

    async def background(app: web.Application) -> AsyncIterator[None]:
        events.append("started")
        yield
        events.append("stopped")

    app.cleanup_ctx.append(background)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(OSError):
            await server.start(
                app, "127.0.0.1", taken.getsockname()[1], tls_context(written["tls.crt"], written["tls.key"])
            )
    assert events == ["started", "stopped"]


def test_kq_extender_runs_on_the_chosen_loop_and_logs_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from webhook.cli import extender as extender_cli  # noqa: PLC0415

    monkeypatch.setenv(server.LOOP_ENV, "asyncio")
    seen: list[str] = []

    async def fake_serve(options: object, stop: asyncio.Event | None = None) -> None:
        seen.append(type(asyncio.get_running_loop()).__module__)

    monkeypatch.setattr(extender_cli, "serve", fake_serve)
    parser = argparse.ArgumentParser()
    extender_cli.register(parser.add_subparsers())
    args = parser.parse_args(["extender", "--host", "127.0.0.1", "--port", "0"])  # the real flags and defaults
    with caplog.at_level(logging.INFO, logger="webhook.kube.serving"):
        assert extender_cli.run(args) == 0
    assert [module.split(".")[0] for module in seen] == ["asyncio"]
    assert "component=extender event=event_loop loop='asyncio' reason='KQ_EVENT_LOOP=asyncio'" in caplog.text


async def test_the_webhook_and_the_controller_share_one_watch_per_kind(
    apiserver: tuple[HttpApiserver, int], tmp_path: Path
) -> None:
    """``kq serve`` with its controller watches each kind once (webhook/kube/shared.py): the controller reads
    the webhook's trees, policies, PriorityClasses and Namespaces, and still acts on them (it makes the tree's
    Queues, and a tree change reaches it)."""
    from webhook.controller.settings import add_controller_args  # noqa: PLC0415

    fake, api_port = apiserver
    options, client_tls = tls_options(tmp_path, api_port)
    parser = argparse.ArgumentParser()
    add_controller_args(parser)
    options = dataclasses.replace(options, args=parser.parse_args(["--no-leader-elect"]))
    queues: Kind = ("scheduling.x-k8s.io", "v1alpha1", "queues")
    stop = asyncio.Event()
    task = asyncio.create_task(serve(options, stop))
    try:
        async with aiohttp.ClientSession() as session:
            await wait_ready(session, f"https://127.0.0.1:{options.port}", client_tls)
        for _ in range(400):
            if fake.select(queues, "kube-queue", None, None):
                break
            await asyncio.sleep(0.05)
        assert fake.select(queues, "kube-queue", None, None), "the controller made no Queue from the shared tree"
        tree = copy.deepcopy(fake.get(TREES, "elasticquotatree", "kube-system"))
        tree["spec"]["root"]["children"][0]["namespaces"].append("joined-later")
        fake.replace(TREES, "elasticquotatree", "kube-system", tree)
        for _ in range(400):
            if any("joined-later" in str(queue) for queue in fake.select(queues, "kube-queue", None, None)):
                break
            await asyncio.sleep(0.05)
        assert any("joined-later" in str(queue) for queue in fake.select(queues, "kube-queue", None, None)), (
            "a change of the shared tree did not reach the controller")
    finally:
        stop.set()
        await asyncio.wait_for(task, timeout=30)
    watches = [seen.path for seen in fake.seen if "watch=true" in seen.query]
    assert len(watches) == len(set(watches)), sorted(path for path in watches if watches.count(path) > 1)
    shared = {
        "/apis/scheduling.sigs.k8s.io/v1beta1/namespaces/kube-system/elasticquotatrees",
        "/apis/scheduling.alibabacloud.com/v1alpha1/resourcepolicies",
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        "/api/v1/namespaces",
    }
    assert shared <= set(watches)
    assert "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/kube-queue/queues" in watches  # the controller ran
    lists = [seen.path for seen in fake.seen if seen.method == "GET" and "watch=true" not in seen.query]
    assert all(lists.count(path) == 1 for path in shared), {path: lists.count(path) for path in shared}
