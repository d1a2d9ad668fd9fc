"""``kq serve`` answers admission requests from a thread of its own (issue 21): a long synchronous stretch on
the main event loop (a controller pass over 10,000 waiting jobs) no longer holds them up."""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web

from tests.ports import free_port
from tests.service.helpers import batch_job, review
from webhook.admission import server
from webhook.admission.app import make_app
from webhook.admission.state import Settings, StateStore
from webhook.cli.certs import write_certs
from webhook.kube.serving import tls_context


def ask(port: int, cafile: Path, path: str, body: bytes | None, out: dict[str, Any], done: threading.Event) -> None:
    """One HTTPS request from a plain blocking client (no event loop of the test's)."""
    try:
        connection = http.client.HTTPSConnection(
            "127.0.0.1", port, context=ssl.create_default_context(cafile=str(cafile)), timeout=30
        )
        connection.request("POST" if body is not None else "GET", path, body=body,
                           headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        out["status"], out["body"] = response.status, response.read()
        connection.close()
    except OSError as error:
        out["error"] = error
    finally:
        done.set()


async def test_admission_is_answered_while_the_main_loop_is_held(tmp_path: Path) -> None:
    written = write_certs(tmp_path / "certs", [], ["127.0.0.1"])
    port = free_port()
    app = web.Application()
    served = await server.start_apart(app, make_app(StateStore(ready=True), Settings()), "127.0.0.1", port,
                                      tls_context(written["tls.crt"], written["tls.key"]))
    try:
        out: dict[str, Any] = {}
        done = threading.Event()
        threading.Thread(target=ask, args=(port, written["ca.crt"], "/mutate", orjson.dumps(review(batch_job())),
                                           out, done), daemon=True).start()
        # Hold this (the main) event loop without awaiting, as a long controller pass does, until the answer
        # came: served from this loop, the request could not be answered before the wait gave up.
        answered = done.wait(timeout=30)
        assert answered, "no answer while the main event loop was held"
        assert out.get("status") == 200, out
        assert orjson.loads(out["body"])["response"]["allowed"] is True
    finally:
        await served.cleanup()
    assert not any(thread.name == server.Served.THREAD_NAME for thread in threading.enumerate())


async def test_a_route_and_key_of_the_main_app_are_served_too(tmp_path: Path) -> None:
    written = write_certs(tmp_path / "certs", [], ["127.0.0.1"])
    port = free_port()
    greeting = web.AppKey("greeting", str)

    async def ping(request: web.Request) -> web.Response:
        return web.Response(text=request.app[greeting])

    app = web.Application()
    app[greeting] = "pong"
    app.router.add_get("/ping", ping)
    served = await server.start_apart(app, make_app(StateStore(ready=True), Settings()), "127.0.0.1", port,
                                      tls_context(written["tls.crt"], written["tls.key"]))
    try:
        out: dict[str, Any] = {}
        done = threading.Event()
        thread = threading.Thread(target=ask, args=(port, written["ca.crt"], "/ping", None, out, done), daemon=True)
        thread.start()
        assert done.wait(timeout=30)
        assert (out.get("status"), out.get("body")) == (200, b"pong"), out
    finally:
        await served.cleanup()


async def test_a_port_in_use_stops_the_background_work(tmp_path: Path) -> None:
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
            await server.start_apart(app, make_app(StateStore(ready=True), Settings()), "127.0.0.1",
                                     taken.getsockname()[1], tls_context(written["tls.crt"], written["tls.key"]))
    assert events == ["started", "stopped"]
    assert not any(thread.name == server.Served.THREAD_NAME for thread in threading.enumerate())
