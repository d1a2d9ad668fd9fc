"""The extender's HTTP service (aiohttp): ``POST /extender/filter`` and ``POST /extender/prioritize``.

Also ``GET /healthz`` (the process answers), ``GET /readyz`` (every watch has listed) and ``GET /metrics``
(Prometheus). Handlers decode with orjson, decide synchronously on the in-memory state (no API call per
request), encode with orjson, and log one ``key=value`` line per decision.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from time import perf_counter

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, Counter, Histogram, generate_latest

from webhook.extender.nudge import Nudger
from webhook.extender.protocol import ProtocolError, filter_error, filter_reply, parse_args, priority_reply
from webhook.extender.state import Decision, ExtenderState

log = logging.getLogger("webhook.extender")

PREFIX = "/extender"
"""The scheduler's ``urlPrefix`` ends with this; it appends ``/filter`` and ``/prioritize``."""
MAX_BODY_BYTES = 256 * 1024 * 1024
"""Without ``nodeCacheCapable`` the scheduler sends whole Node objects: thousands of them are large."""

STATE: web.AppKey[ExtenderState] = web.AppKey("extender_state", ExtenderState)
CLOCK: web.AppKey[Callable[[], float]] = web.AppKey("extender_clock")
NUDGER: web.AppKey[Nudger | None] = web.AppKey("extender_nudger")

REQUESTS = Counter(
    "kube_queue_extender_requests",
    "Scheduler extender requests, by verb and result (passed, refused, scored, error, bad_request).",
    ["verb", "result"],
)
DURATION = Histogram(
    "kube_queue_extender_request_duration_seconds",
    "Time to answer one extender request (decode, decide, encode).",
    ["verb"],
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5),
)


def _value(value: object) -> str:
    text = str(value)
    if not text or any(ch in text for ch in ' "=\n'):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"'
    return text


def log_line(fields: dict[str, object]) -> str:
    """``key=value`` pairs, values quoted when they hold spaces, quotes or ``=``."""
    return " ".join(f"{key}={_value(value)}" for key, value in fields.items())


def _log_decision(decision: Decision, seconds: float) -> None:
    fields: dict[str, object] = {"component": "extender", **decision.log_fields()}
    fields["duration_ms"] = f"{seconds * 1000:.2f}"
    if decision.verb == "filter":
        log.info("%s", log_line(fields))
    elif log.isEnabledFor(logging.DEBUG):
        log.debug("%s", log_line(fields))


def _json(body: bytes, status: int = 200) -> web.Response:
    return web.Response(body=body, status=status, content_type="application/json")


async def handle_filter(request: web.Request) -> web.Response:
    state = request.app[STATE]
    raw = await request.read()
    started = perf_counter()
    try:
        args = parse_args(raw)
    except ProtocolError as error:
        REQUESTS.labels("filter", "bad_request").inc()
        log.warning("component=extender verb=filter event=bad_request error=%s", _value(str(error)))
        return _json(filter_error(f"kube-queue extender: {error}"), status=400)
    if not state.ready:
        REQUESTS.labels("filter", "error").inc()
        message = "kube-queue extender is starting: its watches have not listed yet; the pod is retried"
        log.info("component=extender verb=filter pod=%s event=not_ready", args.pod_key())
        return _json(filter_error(message))
    try:
        decision = state.filter(args.pod, args.node_names, request.app[CLOCK](), args.nodes)
    except Exception as error:
        REQUESTS.labels("filter", "error").inc()
        log.exception("component=extender verb=filter pod=%s event=failed", args.pod_key())
        return _json(filter_error(f"kube-queue extender failed on {args.pod_key()}: {error!r}"))
    body = filter_reply(args, decision.passing, decision.failed, decision.unresolvable)
    nudger = request.app[NUDGER]
    if nudger is not None and decision.retry_at is not None and not decision.passing:
        metadata = args.pod.get("metadata") or {}
        nudger.schedule(
            str(metadata.get("namespace") or ""),
            str(metadata.get("name") or ""),
            str(metadata.get("uid") or ""),
            decision.retry_at,
        )
    seconds = perf_counter() - started
    REQUESTS.labels("filter", "passed" if decision.passing else "refused").inc()
    DURATION.labels("filter").observe(seconds)
    _log_decision(decision, seconds)
    return _json(body)


async def handle_prioritize(request: web.Request) -> web.Response:
    state = request.app[STATE]
    raw = await request.read()
    started = perf_counter()
    try:
        args = parse_args(raw)
    except ProtocolError as error:
        REQUESTS.labels("prioritize", "bad_request").inc()
        log.warning("component=extender verb=prioritize event=bad_request error=%s", _value(str(error)))
        return _json(b"[]", status=400)
    if not state.ready:
        REQUESTS.labels("prioritize", "error").inc()
        return _json(priority_reply(args.node_names, {}))
    try:
        decision = state.prioritize(args.pod, args.node_names, request.app[CLOCK]())
    except Exception:
        REQUESTS.labels("prioritize", "error").inc()
        log.exception("component=extender verb=prioritize pod=%s event=failed", args.pod_key())
        return _json(priority_reply(args.node_names, {}))
    body = priority_reply(args.node_names, decision.score_groups)
    seconds = perf_counter() - started
    REQUESTS.labels("prioritize", "scored").inc()
    DURATION.labels("prioritize").observe(seconds)
    _log_decision(decision, seconds)
    return _json(body)


async def handle_healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def handle_readyz(request: web.Request) -> web.Response:
    if request.app[STATE].ready:
        return web.Response(text="ok")
    return web.Response(status=503, text="watches still listing")


async def handle_metrics(request: web.Request) -> web.Response:
    return web.Response(body=generate_latest(REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST})


def make_app(
    state: ExtenderState, clock: Callable[[], float] = time.time, nudger: Nudger | None = None
) -> web.Application:
    """The extender's routes over ``state`` (``clock`` gives epoch seconds; ``nudger`` wakes pods whose
    ``TimeoutOrExceedMax`` wait ends)."""
    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app[STATE] = state
    app[CLOCK] = clock
    app[NUDGER] = nudger
    app.router.add_post(f"{PREFIX}/filter", handle_filter)
    app.router.add_post(f"{PREFIX}/prioritize", handle_prioritize)
    app.router.add_get("/healthz", handle_healthz)
    app.router.add_get("/readyz", handle_readyz)
    app.router.add_get("/metrics", handle_metrics)
    return app
