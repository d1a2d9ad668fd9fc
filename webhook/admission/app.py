"""The aiohttp application: ``POST /mutate``, ``POST /validate``, ``GET /healthz``, ``GET /readyz``.

``/mutate/managed`` and ``/validate/managed`` are the same endpoints for the hooks whose namespace selector asks
for the managed label: a request there comes from a labelled namespace, which the handlers take as known even
when this replica's namespace watch is a moment behind (:meth:`AdmissionState.labelled`), so a job created right
after its namespace joined the tree is held on every replica.

The HTTP layer is thin: :func:`respond` turns a request body into ``(HTTP status, body)`` with the pure
handlers, so it can be tested and fuzzed without a server. Its contract:

* a usable AdmissionReview -> 200 with the response review (``uid`` echoed); before the watch caches have
  listed once (``/readyz`` answers 503 then), a refusal saying kube-queue is starting and to retry, so no job
  passes untagged in the moments after a restart;
* a review that names a ``uid`` but is otherwise unusable, or a handler failure -> 200 with a refusal
  (``allowed: false``) saying what was wrong;
* anything else (not JSON, no ``uid``) -> 400 with a JSON error; a body over the size limit -> 413; a body
  that does not arrive within 10 s -> 408.

Never a 500, never a hang: the handlers are synchronous and do no I/O. One allowed decision has an effect the
shell carries out before it answers: a tree that makes existing namespaces join is only allowed once they are
labelled managed, and a ResourcePolicy once its namespace is labelled for the placement webhook
(:mod:`webhook.admission.joining`); if they cannot be, the object is refused.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace

import orjson
from aiohttp import web

from webhook.admission import metrics
from webhook.admission.joining import (
    Labeller,
    Labelling,
    TreeReader,
    joining,
    namespace_unlisted,
    namespaces_joining,
    namespaces_routed,
    routed,
)
from webhook.admission.mutate import mutate_request
from webhook.admission.review import AdmissionRequest, AdmissionReview, ReviewError, deny, encode, parse_request
from webhook.admission.state import AdmissionState, Settings, StateStore
from webhook.admission.validate import validate_request
from webhook.api.names import MANAGED_ROUTE
from webhook.api.objects import Obj
from webhook.core.quota import QuotaTree

log = logging.getLogger(__name__)

Handler = Callable[[AdmissionRequest, AdmissionState, Settings], AdmissionReview]
HANDLERS: Mapping[str, Handler] = {"mutate": mutate_request, "validate": validate_request}

BODY_READ_SECONDS = 10.0
"""A client that stalls while sending its body is cut off (the apiserver's own timeout is at most 30 s)."""

STORE_KEY = web.AppKey("store", StateStore)
SETTINGS_KEY = web.AppKey("settings", Settings)
LABELLER_KEY: web.AppKey[Labeller] = web.AppKey("labeller")
TREE_READER_KEY: web.AppKey[TreeReader] = web.AppKey("tree_reader")


@dataclass(frozen=True, slots=True)
class Joining:
    """An allowed object that needs ``namespaces`` labelled (a tree makes them join, a ResourcePolicy routes its
    namespace's pods): its answer waits until they are."""

    request: AdmissionRequest
    review: AdmissionReview
    namespaces: tuple[str, ...]
    labelling: Labelling


@dataclass(frozen=True, slots=True)
class Unlisted:
    """A Namespace created that the tree this replica knows does not list: the answer is given again from the
    tree as stored, which may have gained it a moment ago (:func:`~webhook.admission.joining.namespace_unlisted`)."""

    namespace: str


Effect = Joining | Unlisted
"""What must be done before an allowed answer goes out."""


def _counted_already(endpoint: str, kind: str, decision: str, seconds: float) -> None:
    """The metrics of an answer given again: the first one counted the request."""


def _error(message: str) -> bytes:
    return orjson.dumps({"error": message})


def _decision(review: Obj) -> str:
    response = review.get("response")
    if not isinstance(response, Mapping):
        return "error"
    if not response.get("allowed"):
        return "denied"
    return "patched" if response.get("patch") else "allowed"


NOT_READY_MESSAGE = (
    "kube-queue is starting: caches not ready (quota tree, ResourcePolicies, PriorityClasses, namespaces "
    "have not listed yet), so it cannot tell which quota {what} belongs to; retry in a few seconds"
)
"""The refusal of every admission request before the caches have listed (issue 17, hole 3): a job admitted
then would pass untagged and unheld."""


def respond(
    endpoint: str, body: bytes, state: AdmissionState, settings: Settings, *, ready: bool = True,
    labelled: bool = False,
) -> tuple[int, bytes]:
    """``(HTTP status, response body)`` for one request to ``/mutate`` or ``/validate``. Until ``ready`` (every
    cache has listed once) every usable review is refused with :data:`NOT_READY_MESSAGE`. ``labelled``: the
    request came by a ``/managed`` path, so its namespace carries the managed label."""
    status, payload, _ = respond_with_effects(endpoint, body, state, settings, ready=ready, labelled=labelled)
    return status, payload


def respond_with_effects(
    endpoint: str, body: bytes, state: AdmissionState, settings: Settings, *, ready: bool = True,
    labelled: bool = False, again: bool = False,
) -> tuple[int, bytes, Effect | None]:
    """:func:`respond`, and what must be done before an allowed answer goes out (``None``: nothing). ``again``:
    the same request answered a second time (:class:`Unlisted`), which the metrics counted already."""
    observe = _counted_already if again else metrics.observe
    handler = HANDLERS.get(endpoint)
    if handler is None:
        return 404, _error(f"no admission endpoint {endpoint!r}; use /mutate or /validate"), None
    started = time.perf_counter()
    kind = "-"
    try:
        try:
            decoded = orjson.loads(body)
        except orjson.JSONDecodeError as error:
            observe(endpoint, "-", "bad_request", time.perf_counter() - started)
            return 400, _error(f"the body is not JSON: {error}"), None
        try:
            request = parse_request(decoded)
        except ReviewError as error:
            if error.uid is None:
                observe(endpoint, "-", "bad_request", time.perf_counter() - started)
                return 400, _error(f"not a usable AdmissionReview: {error.message}"), None
            review = deny(error.uid, f"not a usable AdmissionReview: {error.message}", 400, "BadRequest")
            observe(endpoint, "-", "denied", time.perf_counter() - started)
            return 200, encode(review), None
        kind = request.kind.kind
        if not ready:
            log.info(
                "component=admission endpoint=%s decision=not_ready operation=%s object=%r user=%s",
                endpoint,
                request.operation,
                request.display_name,
                request.username,
            )
            observe(endpoint, kind, "not_ready", time.perf_counter() - started)
            message = NOT_READY_MESSAGE.format(what=request.display_name)
            return 200, encode(deny(request.uid, message, 503, "ServiceUnavailable")), None
        if labelled:
            state = state.labelled(request.namespace)
        try:
            review = handler(request, state, settings)
        except Exception as error:
            log.exception(
                "component=admission event=handler_failed endpoint=%s uid=%s object=%r",
                endpoint,
                request.uid,
                request.display_name,
            )
            review = deny(
                request.uid,
                f"kube-queue could not check {request.display_name}: internal error ({type(error).__name__}); "
                "retry, and report it if it persists",
                500,
                "InternalError",
            )
        decision = _decision(review)
        if decision != "allowed" or log.isEnabledFor(logging.DEBUG):
            log.log(
                logging.INFO if decision != "allowed" else logging.DEBUG,
                "component=admission endpoint=%s decision=%s operation=%s object=%r user=%s",
                endpoint,
                decision,
                request.operation,
                request.display_name,
                request.username,
            )
        observe(endpoint, kind, decision, time.perf_counter() - started)
        return 200, encode(review), _effect(request, review, state, settings) if decision == "allowed" else None
    except Exception as error:  # the last line of defence: never a 500
        log.exception("component=admission event=respond_failed endpoint=%s", endpoint)
        return 400, _error(f"cannot process the request: {type(error).__name__}"), None


async def _read_body(request: web.Request) -> bytes | None:
    """The request body, or ``None`` when it did not arrive within :data:`BODY_READ_SECONDS`.

    A body that is already in full (the usual case: a review arrives with its headers) is taken without
    arming the timer, which would cost more than the rest of the read."""
    if request.content.is_eof():
        return await request.read()
    try:
        async with asyncio.timeout(BODY_READ_SECONDS):
            return await request.read()
    except TimeoutError:
        return None


async def _admit(request: web.Request) -> web.Response:
    endpoint = request.match_info["endpoint"]
    body = await _read_body(request)
    if body is None:
        return web.Response(
            status=408, body=_error("the request body did not arrive in time"), content_type="application/json"
        )
    store = request.app[STORE_KEY]
    state, settings, labelled = store.current, request.app[SETTINGS_KEY], "route" in request.match_info
    status, payload, effect = respond_with_effects(endpoint, body, state, settings, ready=store.ready,
                                                   labelled=labelled)
    if isinstance(effect, Joining):
        payload = await join_namespaces(request.app.get(LABELLER_KEY), effect)
    elif isinstance(effect, Unlisted):
        tree = await stored_tree(request.app.get(TREE_READER_KEY), effect)
        if tree is not None:
            status, payload, _ = respond_with_effects(endpoint, body, replace(state, tree=tree), settings,
                                                      ready=store.ready, labelled=labelled, again=True)
    return web.Response(status=status, body=payload, content_type="application/json")


async def stored_tree(reader: TreeReader | None, unlisted: Unlisted) -> QuotaTree | None:
    """The tree as stored when it lists the namespace ``unlisted`` creates; ``None`` when it does not, or when
    it cannot be read (the answer from this replica's tree stands; the controller labels the namespace at its
    next pass should the tree list it)."""
    if reader is None:
        return None
    try:
        tree = await reader()
    except Exception as error:
        log.warning("component=admission event=tree_read_failed namespace=%s error=%r", unlisted.namespace,
                    str(error))
        return None
    if tree is None or tree.leaf_for_namespace(unlisted.namespace) is None:
        return None
    log.info("component=admission decision=join_at_creation namespace=%s", unlisted.namespace)
    return tree


def _effect(request: AdmissionRequest, review: AdmissionReview, state: AdmissionState,
            settings: Settings) -> Effect | None:
    """What an allowed ``request`` needs before it is stored: labels, or a look at the stored tree (``None``:
    nothing)."""
    unlisted = namespace_unlisted(request, state)
    if unlisted is not None:
        return Unlisted(unlisted)
    joined = namespaces_joining(request, state, settings)
    if joined:
        return Joining(request, review, joined, joining(time.time()))
    policy_namespaces = namespaces_routed(request, state)
    return Joining(request, review, policy_namespaces, routed(time.time())) if policy_namespaces else None


async def join_namespaces(labeller: Labeller | None, joining: Joining) -> bytes:
    """Label the namespaces an allowed object needs labelled, then allow it; refuse it when they cannot be."""
    names = ", ".join(joining.namespaces)
    if labeller is None:
        return encode(joining.review)  # no API client (tests of the handlers alone): the controller labels them
    try:
        await labeller(joining.namespaces, joining.labelling)
    except Exception as error:
        log.warning("component=admission event=join_failed object=%r namespaces=%s label=%s error=%r",
                    joining.request.display_name, names, joining.labelling.label, str(error))
        return encode(deny(joining.request.uid, f"{joining.request.display_name} is not stored: {error}", 503,
                           "ServiceUnavailable"))
    log.info("component=admission decision=join object=%r namespaces=%s label=%s", joining.request.display_name,
             names, joining.labelling.label)
    return encode(joining.review)


async def _healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


async def _readyz(request: web.Request) -> web.Response:
    store = request.app[STORE_KEY]
    if not store.ready:
        return web.Response(status=503, text="caches not synced yet")
    return web.Response(text="ok")


@web.middleware
async def _errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """HTTP errors (404, 405, 413...) keep their status; anything unexpected becomes a 400, not a 500."""
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except Exception as error:
        log.exception("component=admission event=request_failed path=%s", request.path)
        return web.Response(status=400, body=_error(type(error).__name__), content_type="application/json")


def make_app(store: StateStore, settings: Settings, labeller: Labeller | None = None,
             tree_reader: TreeReader | None = None) -> web.Application:
    """The application; run it with :func:`aiohttp.web.run_app` or an ``AppRunner`` and a TLS site. ``labeller``
    labels the namespaces a tree makes join, ``tree_reader`` reads the tree as stored for a namespace created
    that this replica's tree does not list (:mod:`webhook.admission.joining`)."""
    app = web.Application(client_max_size=settings.max_body_bytes, middlewares=[_errors])
    app[STORE_KEY] = store
    app[SETTINGS_KEY] = settings
    if labeller is not None:
        app[LABELLER_KEY] = labeller
    if tree_reader is not None:
        app[TREE_READER_KEY] = tree_reader
    app.router.add_post("/{endpoint:mutate|validate}", _admit)
    app.router.add_post(f"/{{endpoint:mutate|validate}}/{{route:{MANAGED_ROUTE}}}", _admit)
    app.router.add_get("/healthz", _healthz)
    app.router.add_get("/readyz", _readyz)
    return app
