"""How the admission app is served: event loop, TLS context and server settings.

``kq serve`` and ``bench/webhook_bench.py`` both use these, so the benchmark measures the service as deployed.

The event loop is uvloop when it is installed (a dependency on Linux and macOS): it spends less CPU per request
than the standard loop in the socket and TLS transport, which is most of what a request costs besides the
decision. Without uvloop (``pip install --no-deps``, Windows) the standard asyncio loop serves the same way;
``KQ_EVENT_LOOP=asyncio`` forces it. The choice is logged at start.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import ssl
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web

from webhook.admission.app import make_app
from webhook.admission.state import Settings, StateStore
from webhook.kube.serving import freeze_heap, tls_context

log = logging.getLogger(__name__)

T = TypeVar("T")

SHUTDOWN_SECONDS = 5.0
"""How long open requests get to finish when the service stops."""
LOOP_ENV = "KQ_EVENT_LOOP"
"""Environment variable: ``asyncio`` forces the standard event loop; unset or ``uvloop`` prefers uvloop."""


@dataclass(frozen=True)
class LoopChoice:
    """The event loop a service runs on: ``factory`` is ``None`` for the standard asyncio loop."""

    name: str
    """``uvloop 0.23.0`` or ``asyncio``."""
    reason: str
    """Why this one (``installed``, ``uvloop is not installed``, ``KQ_EVENT_LOOP=asyncio``)."""
    factory: Callable[[], asyncio.AbstractEventLoop] | None = None


def choose_loop() -> LoopChoice:
    """uvloop when it can be imported and is not turned off by :data:`LOOP_ENV`, else the standard loop."""
    wanted = os.environ.get(LOOP_ENV, "").strip().lower()
    if wanted == "asyncio":
        return LoopChoice("asyncio", f"{LOOP_ENV}=asyncio")
    try:
        uvloop = importlib.import_module("uvloop")
    except ImportError:
        return LoopChoice("asyncio", "uvloop is not installed")
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return LoopChoice(f"uvloop {getattr(uvloop, '__version__', '?')}", "installed", factory)


def run(main: Coroutine[Any, Any, T], choice: LoopChoice | None = None) -> T:
    """Run ``main`` to completion on the chosen event loop (as :func:`asyncio.run` does), logging the choice."""
    choice = choice or choose_loop()
    log.info("component=serve event=event_loop loop=%r reason=%r", choice.name, choice.reason)
    with asyncio.Runner(loop_factory=choice.factory) as runner:
        return runner.run(main)


def settle_heap() -> int:
    """Freeze the start-up heap (:func:`webhook.kube.serving.freeze_heap`) and log how much was frozen."""
    frozen = freeze_heap()
    log.info("component=serve event=heap_frozen objects=%d", frozen)
    return frozen


def app_runner(app: web.Application) -> web.AppRunner:
    """The runner for the admission port: no access log (a line per request would cost more than the decision;
    decisions other than "allowed" are logged by the handler)."""
    return web.AppRunner(app, access_log=None, shutdown_timeout=SHUTDOWN_SECONDS)


async def start(app: web.Application, host: str, port: int, context: ssl.SSLContext) -> web.AppRunner:
    """Set up ``app`` and listen on ``host:port`` with TLS; the caller cleans the runner up. When the port
    cannot be bound, the app's background work (already started by the set-up) is stopped before the error
    propagates."""
    runner = app_runner(app)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port, ssl_context=context).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner


async def _serve_until_cancelled(
    store: StateStore, settings: Settings, *, host: str, port: int, cert: Path, key: Path
) -> None:
    runner = await start(make_app(store, settings), host, port, tls_context(cert, key))
    settle_heap()
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def run_forever(store: StateStore, settings: Settings, *, host: str, port: int, cert: Path, key: Path) -> None:
    """Serve the admission app alone (no caches, no plugins) until the process is stopped; for benchmarks."""
    run(_serve_until_cancelled(store, settings, host=host, port=port, cert=cert, key=key))
