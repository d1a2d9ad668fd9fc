"""The console's aiohttp application: settings, the per-request identity and API, error pages, routes.

Every API call is synchronous (:mod:`webhook.readmodel.kubeapi`, the code ``kq`` itself uses) and runs in a worker
thread, so a slow API server never blocks the pages of other users.
"""

from __future__ import annotations

import asyncio
import io
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import ParamSpec, TypeVar
from urllib.parse import quote

import aiohttp_jinja2
import jinja2
from aiohttp import web

from webhook.console.identity import (
    SESSION_COOKIE,
    Identity,
    IdentitySettings,
    NoIdentity,
    Sessions,
    http_api_for,
    identify,
)
from webhook.readmodel.context import Ctx
from webhook.readmodel.kubeapi import ApiError, KubeApi

log = logging.getLogger(__name__)
HERE = Path(__file__).resolve().parent
T = TypeVar("T")
P = ParamSpec("P")
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
TEXT_WIDTH = 100
"""Columns of the ``kq why`` / ``kq get`` text the pages show."""

ApiFactory = Callable[[Identity], KubeApi]
OPEN_APIS: web.RequestKey[list[KubeApi]] = web.RequestKey("kq_console_apis", list)
SIGN_IN_AGAIN = "Your token may have expired: sign in again with a valid one."


@dataclass
class ConsoleSettings:
    """What ``kq console`` was started with."""

    identity: IdentitySettings
    default_namespace: str = "default"
    oversellrate: Fraction | None = None
    """The controller's ``--oversellrate`` when known (else read as ``kq why`` reads it)."""
    refresh: float = 5.0
    """Seconds between refreshes of a live page when no watch event arrives (others' jobs move positions)."""
    secure_cookie: bool = False
    """Mark the session cookie ``Secure`` (served over HTTPS, e.g. behind an ingress)."""
    clock: Callable[[], float] = time.time
    api_factory: ApiFactory | None = None
    """Builds the API client of an identity (tests give a fake); default: HTTPS to the cluster."""
    sessions: Sessions = field(default_factory=Sessions)


SETTINGS: web.AppKey[ConsoleSettings] = web.AppKey("settings", ConsoleSettings)


class BadInput(ValueError):
    """A form field or query parameter that cannot be used (HTTP 422 with the message)."""

    def __init__(self, message: str, status: int = 422) -> None:
        super().__init__(message)
        self.status = status


def settings_of(request: web.Request) -> ConsoleSettings:
    return request.app[SETTINGS]


def identity_of(request: web.Request) -> Identity:
    """The identity of the request (:func:`webhook.console.identity.identify`); :class:`NoIdentity` if none."""
    settings = settings_of(request)
    return identify(settings.identity, settings.sessions, request.headers, request.cookies.get(SESSION_COOKIE))


def new_api(request: web.Request) -> KubeApi:
    """A new API client acting as the request's user; the caller closes it (:func:`close_api`)."""
    settings = settings_of(request)
    identity = identity_of(request)
    factory = settings.api_factory or (lambda who: http_api_for(settings.identity, who))
    return factory(identity)


def api_of(request: web.Request) -> KubeApi:
    """A new API client acting as the request's user, closed when the request is done."""
    api = new_api(request)
    request.setdefault(OPEN_APIS, []).append(api)
    return api


def close_api(api: KubeApi) -> None:
    """Close the client's kept-alive connection, if it has one."""
    close = getattr(api, "close", None)
    if callable(close):
        close()


def make_ctx(api: KubeApi, namespace: str | None, settings: ConsoleSettings) -> Ctx:
    """A ``kq`` command context over ``api``, so the console runs the commands' own functions."""
    return Ctx(
        api_factory=lambda: api,
        namespace_flag=namespace,
        now=settings.clock,
        out=io.StringIO(),
        err=io.StringIO(),
        width=TEXT_WIDTH,
    )


def job_href(namespace: str, kind: str, name: str) -> str:
    """The page of one job."""
    return f"/jobs/{quote(namespace)}/{quote(kind.lower())}/{quote(name)}"


def check_namespace(text: str | None, default: str) -> str:
    """A namespace from a query or form field; :class:`BadInput` saying what a namespace looks like."""
    namespace = (text if text is not None else default).strip()
    if not namespace:
        return default
    if len(namespace) > 63 or not _NAMESPACE.fullmatch(namespace):
        raise BadInput(
            f"namespace {namespace[:80]!r} is not a namespace name: lower-case letters, digits and '-', starting "
            "and ending with a letter or digit, at most 63 characters", 400)
    return namespace


def namespace_of(request: web.Request) -> str:
    return check_namespace(request.query.get("namespace"), settings_of(request).default_namespace)


async def in_thread(function: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run blocking API work off the event loop."""
    return await asyncio.to_thread(function, *args, **kwargs)


# Errors ------------------------------------------------------------------------------------------------------------


def api_problem(error: ApiError) -> tuple[int, str]:
    """The HTTP status and the sentence a user sees for an API refusal."""
    said = error.one_line()
    if error.status == 401:
        return 401, f"The cluster did not accept your credentials ({said}). {SIGN_IN_AGAIN}"
    if error.status == 403:
        return 403, f"Kubernetes RBAC does not allow you this: {said}"
    if error.status == 404:
        return 404, f"Not found: {said}"
    if error.status == 0:
        return 502, f"The console cannot reach the cluster: {said}"
    if 400 <= error.status < 500:
        return error.status, f"The cluster refused: {said}"
    return 502, f"The cluster failed to answer: {said}"


def cli_problem(text: str) -> int:
    """The HTTP status of a ``kq`` error line (they embed the API's ``(403 Forbidden)``...)."""
    for code in (401, 403, 409):
        if f"({code} " in text:
            return code
    if "Unauthorized" in text:
        return 401
    if "forbidden" in text.lower():
        return 403
    if "already exists" in text:
        return 409
    if "not found" in text or "(404 " in text:
        return 404
    if "cannot reach" in text:
        return 502
    return 422


def _wants_html(request: web.Request) -> bool:
    return "text/html" in request.headers.get("Accept", "") or request.method == "GET"


def error_page(request: web.Request, status: int, message: str) -> web.Response:
    if not _wants_html(request):
        return web.Response(status=status, text=message + "\n")
    context = page_context(request, status=status, message=message)
    return aiohttp_jinja2.render_template("error.html", request, context, status=status)


@web.middleware
async def errors_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Every expected failure becomes a page (or text) that says what happened, with a fitting status; an
    unexpected one is logged and answered with a 500 that says where to look."""
    from webhook.readmodel.fetch import CliError  # noqa: PLC0415
    from webhook.readmodel.submit import SubmitError  # noqa: PLC0415

    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except NoIdentity as error:
        if request.method == "GET" and not request.path.startswith("/events"):
            target = "/login" if request.path == "/" else f"/login?next={quote(request.path_qs, safe='/?=')}"
            raise web.HTTPSeeOther(target) from None
        return error_page(request, 401, f"Not signed in: {error}.")
    except BadInput as error:
        return error_page(request, error.status, str(error))
    except SubmitError as error:
        return error_page(request, 422, str(error))
    except ApiError as error:
        status, message = api_problem(error)
        return error_page(request, status, message)
    except CliError as error:
        status = cli_problem(str(error))
        message = str(error)
        if status == 401:
            message += ". " + SIGN_IN_AGAIN
        return error_page(request, status, message)
    except Exception:
        log.exception("console: %s %s failed", request.method, request.path)
        return error_page(request, 500, "The console failed unexpectedly; its log has the details.")


@web.middleware
async def close_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """The request's API clients are closed once it is answered."""
    try:
        return await handler(request)
    finally:
        for api in request.get(OPEN_APIS, ()):
            close_api(api)


@web.middleware
async def headers_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Pages are never cached (they show live state and act as one user), nor framed by another site."""
    response = await handler(request)
    response.headers.setdefault("Cache-Control", "no-store")
    response.headers.setdefault("X-Frame-Options", "DENY")
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    return response


@web.middleware
async def origin_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """A form posted from another site is refused (the session cookie is also ``SameSite=Strict``)."""
    if request.method == "POST":
        origin = request.headers.get("Origin")
        if origin and origin != "null" and origin.split("://", 1)[-1] != request.host:
            return error_page(request, 403, f"Refused: the form was posted from another site ({origin}).")
    return await handler(request)


def page_context(request: web.Request, **values: object) -> dict[str, object]:
    """What every page shows in its header: who you are and the namespace in use."""
    try:
        identity: Identity | None = identity_of(request)
    except NoIdentity:
        identity = None
    who = ""
    if identity is not None:
        who = {
            "token": identity.user or "your token",
            "proxy-token": identity.user or "your token (from the proxy)",
            "proxy-user": identity.user,
            "kubeconfig": "the kubeconfig's user (dev cluster)",
        }.get(identity.how, "")
    values.setdefault("namespace", settings_of(request).default_namespace)
    return {"identity": identity, "who": who, **values}


async def healthz(request: web.Request) -> web.Response:
    """Liveness and readiness: the process serves (it holds no cache to wait for)."""
    return web.Response(text="ok\n")


def build_app(settings: ConsoleSettings) -> web.Application:
    """The console (routes in :mod:`webhook.console.developer`, :mod:`webhook.console.operator`,
    :mod:`webhook.console.live`, :mod:`webhook.console.workloads`)."""
    from webhook.console import developer, live, operator, workloads  # noqa: PLC0415

    app = web.Application(middlewares=[close_middleware, headers_middleware, origin_middleware, errors_middleware])
    app[SETTINGS] = settings
    aiohttp_jinja2.setup(
        app,
        loader=jinja2.FileSystemLoader(str(HERE / "templates")),
        autoescape=jinja2.select_autoescape(["html", "svg"], default_for_string=True, default=True),
        undefined=jinja2.StrictUndefined,
    )
    app.router.add_static("/static/", HERE / "static", name="static")
    app.router.add_get("/healthz", healthz)
    developer.add_routes(app)
    operator.add_routes(app)
    live.add_routes(app)
    workloads.add_routes(app)
    return app
