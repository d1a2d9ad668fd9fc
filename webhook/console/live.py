"""Live pages: Server-Sent Events pushed from Kubernetes watches.

``/events/jobs`` and ``/events/job/...`` watch the namespace's jobs and pods (as the user) and, whenever one
changes (or every ``refresh`` seconds, since other namespaces' jobs move positions), re-render the page's
fragment and send it when it changed. ``/events/logs/...`` follows the job's chief pod's log line by line
(``kq logs -f``), waiting first until the job has started.

Watches and log streams are blocking reads on worker threads; they stop at the next line or watch timeout
after the page goes away.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import aiohttp_jinja2
from aiohttp import web

from webhook.api.objects import RAN_PHASES, pod_phase
from webhook.api.statuses import FINAL
from webhook.console.app import (
    BadInput,
    api_of,
    api_problem,
    in_thread,
    namespace_of,
    new_api,
    settings_of,
)
from webhook.console.identity import NoIdentity

if TYPE_CHECKING:
    from webhook.readmodel.kubeapi import KubeApi

log = logging.getLogger(__name__)
WATCH_SECONDS = 20
"""Server-side timeout of one watch request (a watch thread notices a closed page at most this late)."""
HEARTBEAT = 15.0
LOG_TAIL = 500


class EventStream:
    """One open ``text/event-stream`` response."""

    def __init__(self, response: web.StreamResponse) -> None:
        self.response = response

    async def send(self, event: str, data: str) -> None:
        lines = data.split("\n") or [""]
        payload = f"event: {event}\n" + "".join(f"data: {line}\n" for line in lines) + "\n"
        await self.response.write(payload.encode())

    async def comment(self) -> None:
        await self.response.write(b": keep-alive\n\n")


async def open_stream(request: web.Request) -> EventStream:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store",
                                           "X-Accel-Buffering": "no"})
    await response.prepare(request)
    return EventStream(response)


def problem_text(error: Exception) -> str:
    """The sentence a live page shows when its update fails."""
    from webhook.readmodel.fetch import CliError  # noqa: PLC0415
    from webhook.readmodel.kubeapi import ApiError  # noqa: PLC0415

    if isinstance(error, ApiError):
        return api_problem(error)[1]
    if isinstance(error, (CliError, BadInput)):
        return str(error)
    return "the update failed; the console's log has the details"


class Watches:
    """Threads watching API collections; each event (or failure) calls ``changed`` on the event loop."""

    def __init__(self, api_factory: Callable[[], KubeApi], paths: Iterable[str], changed: Callable[[], None]) -> None:
        self.stop = threading.Event()
        self._loop = asyncio.get_running_loop()
        self._changed = changed
        self._threads = [
            threading.Thread(target=self._run, args=(api_factory, path), daemon=True, name=f"console-watch {path}")
            for path in paths
        ]
        for thread in self._threads:
            thread.start()

    def _notify(self) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed
            self._loop.call_soon_threadsafe(self._changed)

    def _run(self, api_factory: Callable[[], KubeApi], path: str) -> None:
        from webhook.readmodel.kubeapi import ApiError  # noqa: PLC0415

        query = [("watch", "true"), ("timeoutSeconds", str(WATCH_SECONDS))]
        while not self.stop.is_set():
            try:
                api = api_factory()
                for _ in api.stream_lines(path, query):
                    if self.stop.is_set():
                        return
                    self._notify()
            except ApiError:
                # No watch (not allowed, or a server without it): the page still refreshes on its timer.
                self.stop.wait(WATCH_SECONDS)
            except Exception:
                log.debug("console: watch of %s failed", path, exc_info=True)
                self.stop.wait(5)

    def close(self) -> None:
        self.stop.set()


async def push_fragments(
    request: web.Request, render: Callable[[], str], watch_paths: Iterable[str]
) -> web.StreamResponse:
    """Send ``update`` (the rendered fragment) whenever it changes, ``problem`` when it cannot be rendered."""
    from webhook.readmodel.fetch import CliError  # noqa: PLC0415
    from webhook.readmodel.kubeapi import ApiError  # noqa: PLC0415

    settings = settings_of(request)
    stream = await open_stream(request)
    wake = asyncio.Event()
    watches = Watches(lambda: new_api(request), list(watch_paths), wake.set)
    last = None
    try:
        while True:
            try:
                html = await in_thread(render)
                event = "update"
            except NoIdentity as error:
                html, event = f"Not signed in: {error}.", "problem"
            except (ApiError, CliError, BadInput) as error:
                html, event = problem_text(error), "problem"
            except Exception as error:
                log.exception("console: live update of %s failed", request.path)
                html, event = problem_text(error), "problem"
            if html != last:
                await stream.send(event, html)
                last = html
            else:
                await stream.comment()
            wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), timeout=min(settings.refresh, HEARTBEAT))
            await asyncio.sleep(0.2)  # let a burst of watch events settle into one update
    except (ConnectionResetError, asyncio.CancelledError):
        pass
    finally:
        watches.close()
    return stream.response


async def jobs_events(request: web.Request) -> web.StreamResponse:
    from webhook.console.developer import load_rows  # noqa: PLC0415
    from webhook.readmodel.kubeapi import JOBS, PODS  # noqa: PLC0415

    namespace = namespace_of(request)
    settings = settings_of(request)
    api = api_of(request)

    def render() -> str:
        rows = load_rows(api, namespace, settings.clock())
        return aiohttp_jinja2.render_string("jobs_table.html", request, {"rows": rows, "namespace": namespace})

    return await push_fragments(request, render, [JOBS.path(namespace), PODS.path(namespace)])


def _job_key(request: web.Request) -> tuple[str, str, str]:
    from webhook.console.developer import _job_key as key  # noqa: PLC0415

    return key(request)


async def job_events(request: web.Request) -> web.StreamResponse:
    from webhook.console.developer import load_detail  # noqa: PLC0415
    from webhook.readmodel.kubeapi import JOBS, PODS  # noqa: PLC0415

    namespace, kind, name = _job_key(request)
    settings = settings_of(request)
    api = api_of(request)

    def render() -> str:
        detail = load_detail(api, namespace, kind, name, settings)
        return aiohttp_jinja2.render_string("job_detail.html", request, {"detail": detail, "job": detail.row})

    return await push_fragments(request, render, [JOBS.path(namespace), PODS.path(namespace)])


def _started_pod(api: KubeApi, namespace: str, kind: str, name: str, settings: object) -> tuple[str, str | None]:
    """``(status line, pod to read)``: the chief pod once the job has a started pod, else ``None``."""
    from webhook.console.app import ConsoleSettings, make_ctx  # noqa: PLC0415
    from webhook.readmodel.jobs import find_job  # noqa: PLC0415
    from webhook.readmodel.logs import choose_pods, pod_name  # noqa: PLC0415

    assert isinstance(settings, ConsoleSettings)
    _, _, view = find_job(make_ctx(api, namespace, settings), f"{kind}/{name}")
    started = [p for p in view.pods if pod_phase(p) in RAN_PHASES]
    if started:
        pod = choose_pods(started, None, False)[0]
        return f"following the log of pod {pod_name(pod)}", pod_name(pod)
    state = view.status + (f" at position {view.position}" if view.position is not None else "")
    if view.status in FINAL:
        return f"{view.name} is {state} and has no pod left to read", ""
    return f"waiting for {view.name} to start: it is {state}", None


async def log_events(request: web.Request) -> web.StreamResponse:
    """``status`` lines while the job waits, then one ``line`` event per log line, then ``end``."""
    from webhook.readmodel.kubeapi import ApiError  # noqa: PLC0415
    from webhook.readmodel.logs import explain_log_error, log_path, log_query  # noqa: PLC0415

    namespace, kind, name = _job_key(request)
    settings = settings_of(request)
    api = api_of(request)
    stream = await open_stream(request)
    stop = threading.Event()
    try:
        last = ""
        pod: str | None = None
        while pod is None:
            try:
                status, pod = await in_thread(_started_pod, api, namespace, kind, name, settings)
            except Exception as error:
                await stream.send("problem", problem_text(error))
                return stream.response
            if status != last:
                await stream.send("status", status)
                last = status
            if pod is None:
                await asyncio.sleep(min(settings.refresh, 2.0))
        if not pod:
            await stream.send("end", last)
            return stream.response
        lines: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        reader = new_api(request)
        chosen = pod

        def pump() -> None:
            def put(event: str, data: str) -> None:
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(lines.put_nowait, (event, data))

            try:
                for line in reader.stream_lines(log_path(namespace, chosen), log_query(None, True, LOG_TAIL, None)):
                    if stop.is_set():
                        return
                    put("line", line)
                put("end", f"the log of pod {chosen} ended")
            except ApiError as error:
                put("problem", explain_log_error(reader, {"metadata": {"name": chosen}}, error))
            except Exception:
                log.debug("console: log stream of %s failed", chosen, exc_info=True)
                put("problem", f"the log of pod {chosen} could not be read to the end")

        threading.Thread(target=pump, daemon=True, name=f"console-log {chosen}").start()
        while True:
            try:
                event, data = await asyncio.wait_for(lines.get(), timeout=HEARTBEAT)
            except TimeoutError:
                await stream.comment()
                continue
            await stream.send(event, data)
            if event in ("end", "problem"):
                return stream.response
    except (ConnectionResetError, asyncio.CancelledError):
        return stream.response
    finally:
        stop.set()


def add_routes(app: web.Application) -> None:
    app.router.add_get("/events/jobs", jobs_events)
    app.router.add_get("/events/job/{namespace}/{kind}/{name}", job_events)
    app.router.add_get("/events/logs/{namespace}/{kind}/{name}", log_events)

