"""How the admission app is served: TLS context, server settings; the event loop (uvloop when installed) is
:func:`webhook.kube.serving.run`'s choice.

``kq serve`` and ``bench/webhook_bench.py`` both use these, so the benchmark measures the service as deployed.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from pathlib import Path

from aiohttp import web

from webhook.admission.app import make_app
from webhook.admission.state import Settings, StateStore
from webhook.kube.serving import LOOP_ENV, LoopChoice, choose_loop, freeze_heap, run, tls_context

__all__ = ["LOOP_ENV", "LoopChoice", "choose_loop", "run", "run_forever", "settle_heap", "start"]

log = logging.getLogger(__name__)

SHUTDOWN_SECONDS = 5.0
"""How long open requests get to finish when the service stops."""


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
