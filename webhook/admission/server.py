"""How the admission app is served: TLS context, server settings; the event loop (uvloop when installed) is
:func:`webhook.kube.serving.run`'s choice.

``kq serve`` and ``bench/webhook_bench.py`` both use these, so the benchmark measures the service as deployed.

``kq serve`` answers admission requests from a thread of their own (:func:`start_apart`): the queue controller
shares the process, and its passes compute for long stretches without awaiting (hundreds of ms with 10,000
waiting jobs on a loaded machine). On one event loop every admission request waited for the pass in progress,
and under a burst of creates the API server's webhook timeout expired (issue 21: ``bench/burst_bench.py``).
On its own loop in its own thread a request waits at most for the interpreter's thread switch (a few ms).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import ssl
import threading
from pathlib import Path

from aiohttp import web

from webhook.admission.app import make_app
from webhook.admission.state import Settings, StateStore
from webhook.kube.serving import LOOP_ENV, LoopChoice, choose_loop, freeze_heap, run, tls_context

__all__ = [
    "LOOP_ENV", "LoopChoice", "Served", "choose_loop", "run", "run_forever", "settle_heap", "start", "start_apart",
]

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


class Served:
    """An app whose background work runs on the caller's event loop while ``admission`` (an app with the
    admission routes and no background work) is served on ``host:port`` from a thread with its own loop.
    :meth:`cleanup` stops both: the port first, then the background work."""

    THREAD_NAME = "kq-admission"

    def __init__(self, runner: web.AppRunner) -> None:
        self.runner = runner
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None

    async def _listen(self, admission: web.Application, host: str, port: int, context: ssl.SSLContext) -> None:
        """Start the thread; returns once it listens (raises what binding raised)."""
        listening: concurrent.futures.Future[None] = concurrent.futures.Future()
        factory = choose_loop().factory

        def serve() -> None:
            try:
                with asyncio.Runner(loop_factory=factory) as loop_runner:
                    loop_runner.run(self._serve(admission, host, port, context, listening))
            except BaseException as error:
                log.exception("component=serve event=admission_thread_failed")
                if not listening.done():
                    listening.set_exception(error)

        self._thread = threading.Thread(target=serve, name=self.THREAD_NAME, daemon=True)
        self._thread.start()
        await asyncio.wrap_future(listening)

    async def _serve(self, admission: web.Application, host: str, port: int, context: ssl.SSLContext,
                     listening: concurrent.futures.Future[None]) -> None:
        runner = app_runner(admission)
        try:
            await runner.setup()
            await web.TCPSite(runner, host, port, ssl_context=context).start()
        except BaseException as error:
            await runner.cleanup()
            listening.set_exception(error)
            return
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        listening.set_result(None)
        try:
            await self._stop.wait()
        finally:
            await runner.cleanup()

    async def cleanup(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, SHUTDOWN_SECONDS + 5)
        await self.runner.cleanup()


def share_routes(app: web.Application, admission: web.Application) -> None:
    """Serve ``app``'s routes that ``admission`` does not have (a plugin's) from ``admission`` too, with
    ``app``'s keys: their handlers then run on the admission thread's loop, so they must not await objects of
    the main loop (hand such work over with ``asyncio.run_coroutine_threadsafe``)."""
    have = {(route.method, route.resource.canonical) for route in admission.router.routes() if route.resource}
    for route in app.router.routes():
        if route.resource is not None and (route.method, route.resource.canonical) not in have:
            admission.router.add_route(route.method, route.resource.canonical, route.handler)
    for key, value in app.items():
        if key not in admission:
            admission[key] = value


async def start_apart(
    app: web.Application, admission: web.Application, host: str, port: int, context: ssl.SSLContext
) -> Served:
    """Set up ``app`` (its background work starts on this loop, it listens nowhere) and serve ``admission``
    on ``host:port`` with TLS from a thread of its own; the caller cleans up the result. When the port cannot
    be bound, ``app``'s background work is stopped before the error propagates."""
    runner = app_runner(app)
    await runner.setup()
    served = Served(runner)
    try:
        share_routes(app, admission)
        await served._listen(admission, host, port, context)
    except BaseException:
        await served.cleanup()  # the thread ends once it gave up binding; then the background work stops
        raise
    return served


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
