"""The developer's pages: sign in, their jobs, one job (``kq get`` + ``kq why``), submit, delete.

The rows come from :func:`webhook.readmodel.view.job_views` (what ``kq list`` shows), the explanation from
:func:`webhook.readmodel.explain.answer_job` (what ``kq why`` prints) and the objects from the builders of
:mod:`webhook.readmodel.submit` (what ``kq submit`` creates).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import quote

import aiohttp_jinja2
from aiohttp import web

from webhook.api.objects import Doc, Obj, mapping, meta, pod_phase
from webhook.api.statuses import WAITING, JobStatus
from webhook.console.app import (
    BadInput,
    ConsoleSettings,
    api_of,
    check_namespace,
    close_api,
    in_thread,
    job_href,
    make_ctx,
    namespace_of,
    page_context,
    settings_of,
)
from webhook.console.forms import SubmitForm, parse_submit_form
from webhook.console.identity import SESSION_COOKIE, TokenError, clean_token

if TYPE_CHECKING:
    from webhook.readmodel.eta import Published
    from webhook.readmodel.kubeapi import KubeApi
    from webhook.readmodel.view import JobView



@dataclass(frozen=True, slots=True)
class JobRow:
    """One row of the jobs table."""

    name: str
    namespace: str
    kind: str
    status: JobStatus
    queue: str
    position: str
    eta: str
    """When a waiting job should start, as ``kq list``'s ETA column says it (docs/eta.md)."""
    pods: str
    request: str
    age: str

    @property
    def href(self) -> str:
        return job_href(self.namespace, self.kind, self.name)

    @property
    def waiting(self) -> bool:
        return self.status in WAITING


def rows_of(views: Sequence[JobView], now: float, etas: Published | None = None) -> list[JobRow]:
    """The table rows: the columns of ``kq list -o wide`` (:func:`webhook.readmodel.listing.list_rows`), the ETA from
    ``etas`` (the Queues' published estimates)."""
    from webhook.readmodel.jobs import job_summary  # noqa: PLC0415
    from webhook.readmodel.listing import list_rows  # noqa: PLC0415

    _, rows = list_rows([job_summary(view, etas) for view in views], now, wide=True, all_namespaces=False)
    # NAME, KIND, STATUS, QUEUE, POSITION, ETA, PRIORITY, PODS, REQUEST, AGE
    return [
        JobRow(name=row[0], namespace=view.namespace, kind=row[1], status=view.status, queue=row[3], position=row[4],
               eta=row[5], pods=row[7], request=row[8], age=row[9])
        for view, row in zip(views, rows, strict=True)
    ]


def load_rows(api: KubeApi, namespace: str, now: float) -> list[JobRow]:
    """The jobs of ``namespace`` as ``kq list -n NAMESPACE`` reads them."""
    from webhook.readmodel.eta import published_estimates  # noqa: PLC0415
    from webhook.readmodel.fetch import load_snapshot  # noqa: PLC0415
    from webhook.readmodel.view import job_views  # noqa: PLC0415

    snapshot = load_snapshot(api, [namespace], now=now)
    views = [v for v in job_views(snapshot) if v.namespace == namespace]
    return rows_of(views, now, published_estimates(snapshot.queues))


@dataclass(frozen=True, slots=True)
class JobDetail:
    """One job: its row, ``kq get``'s text and ``kq why``'s text."""

    row: JobRow
    described: str
    why: str
    running: bool


def load_detail(api: KubeApi, namespace: str, kind: str, name: str, settings: ConsoleSettings) -> JobDetail:
    """``kq get`` and ``kq why`` of one job, computed by their own functions."""
    from webhook.console.app import TEXT_WIDTH  # noqa: PLC0415
    from webhook.readmodel.explain import answer_job  # noqa: PLC0415
    from webhook.readmodel.fetch import job_events  # noqa: PLC0415
    from webhook.readmodel.jobs import describe_job, find_job, sorted_events  # noqa: PLC0415

    ctx = make_ctx(api, namespace, settings)
    snapshot, views, view = find_job(ctx, f"{kind}/{name}", complete=True, with_events=True)
    now = settings.clock()
    why = answer_job(snapshot, views, view, now, TEXT_WIDTH, oversellrate=settings.oversellrate).text
    events = sorted_events(job_events(api, view.namespace, view.name, str(meta(view.obj).get("uid") or "")))
    described = describe_job(view, snapshot, events, now, TEXT_WIDTH)
    started = any(pod_phase(pod) not in (None, "Pending") for pod in view.pods)
    from webhook.readmodel.eta import published_estimates  # noqa: PLC0415

    return JobDetail(rows_of([view], now, published_estimates(snapshot.queues))[0], described, why, started)


# Sign in ------------------------------------------------------------------------------------------------------------


def _safe_next(text: str | None) -> str:
    """Only a path of this site (never ``//host`` or a URL): where to go after signing in."""
    if not text or not text.startswith("/") or text.startswith("//") or "\\" in text:
        return "/jobs"
    return text


async def login_form(request: web.Request) -> web.Response:
    context = page_context(request, next=_safe_next(request.query.get("next")), problem="")
    return aiohttp_jinja2.render_template("login.html", request, context)


def whoami(api: KubeApi) -> str:
    """The user name the cluster gives these credentials (a SelfSubjectReview); "" when it cannot say.
    :class:`~webhook.readmodel.kubeapi.ApiError` 401 when it refuses them."""
    from webhook.readmodel.kubeapi import ApiError  # noqa: PLC0415

    body: Doc = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    try:
        answer = api.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", body=body)
    except ApiError as error:
        if error.status == 401:
            raise
        return ""
    info = mapping(mapping(answer.get("status")).get("userInfo"))
    return str(info.get("username") or "")


async def login(request: web.Request) -> web.StreamResponse:
    from webhook.console.identity import Identity  # noqa: PLC0415
    from webhook.readmodel.kubeapi import ApiError  # noqa: PLC0415
    from webhook.readmodel.kubeconfig import Credentials  # noqa: PLC0415

    settings = settings_of(request)
    form = await request.post()
    target = _safe_next(str(form.get("next") or ""))
    raw = form.get("token")
    if not isinstance(raw, str):
        raise BadInput("paste a bearer token: the form sent no token field", 400)
    try:
        token = clean_token(raw)
    except TokenError as error:
        context = page_context(request, next=target, problem=str(error))
        return aiohttp_jinja2.render_template("login.html", request, context, status=400)
    factory = settings.api_factory
    identity = Identity("token", Credentials(token=token))
    if factory is None:
        from webhook.console.identity import http_api_for  # noqa: PLC0415

        api = http_api_for(settings.identity, identity)
    else:
        api = factory(identity)
    try:
        user = await in_thread(whoami, api)
    except ApiError as error:
        close_api(api)
        problem = f"The cluster does not accept this token ({error.one_line()}): paste a valid one."
        context = page_context(request, next=target, problem=problem)
        return aiohttp_jinja2.render_template("login.html", request, context, status=401)
    close_api(api)
    old = request.cookies.get(SESSION_COOKIE)
    settings.sessions.close(old)
    key = settings.sessions.open(token, user)
    response = web.HTTPSeeOther(target)
    response.set_cookie(SESSION_COOKIE, key, httponly=True, samesite="Strict", secure=settings.secure_cookie,
                        path="/")
    raise response


async def logout(request: web.Request) -> web.StreamResponse:
    settings_of(request).sessions.close(request.cookies.get(SESSION_COOKIE))
    response = web.HTTPSeeOther("/login")
    response.del_cookie(SESSION_COOKIE, path="/")
    raise response


# Jobs ----------------------------------------------------------------------------------------------------------------


async def index(request: web.Request) -> web.StreamResponse:
    raise web.HTTPSeeOther("/jobs")


async def jobs_page(request: web.Request) -> web.Response:
    namespace = namespace_of(request)
    api = api_of(request)
    rows = await in_thread(load_rows, api, namespace, settings_of(request).clock())
    from webhook.console.workloads import load_workloads  # noqa: PLC0415

    workloads, problems = await in_thread(load_workloads, api, namespace)
    notice = request.query.get("notice", "")[:300]
    context = page_context(request, namespace=namespace, rows=rows, notice=notice, workloads=workloads,
                           workload_problems=problems)
    return aiohttp_jinja2.render_template("jobs.html", request, context)


def _job_key(request: web.Request) -> tuple[str, str, str]:
    from webhook.readmodel.view import find_adapter  # noqa: PLC0415

    namespace = check_namespace(request.match_info["namespace"], "")
    kind = request.match_info["kind"]
    if find_adapter(kind) is None:
        from webhook.workloads.registry import all_adapters  # noqa: PLC0415

        known = ", ".join(sorted(adapter.kind.lower() for adapter in all_adapters()))
        raise BadInput(f"unknown kind {kind[:40]!r}: use one of {known}", 404)
    return namespace, kind, request.match_info["name"]


async def job_page(request: web.Request) -> web.Response:
    namespace, kind, name = _job_key(request)
    api = api_of(request)
    detail = await in_thread(load_detail, api, namespace, kind, name, settings_of(request))
    context = page_context(request, namespace=namespace, detail=detail, job=detail.row)
    return aiohttp_jinja2.render_template("job.html", request, context)


def delete_job(api: KubeApi, namespace: str, kind: str, name: str) -> str:
    """Delete one job (background propagation: its pods go too); the line ``kq delete`` prints."""
    from webhook.readmodel.fetch import ref_of, served_kinds  # noqa: PLC0415
    from webhook.readmodel.view import find_adapter  # noqa: PLC0415

    adapter = find_adapter(kind)
    assert adapter is not None
    source = next((s for s in served_kinds(api) if s.adapter.kind == adapter.kind), None)
    if source is None:
        raise BadInput(f"the cluster does not serve {adapter.kind}", 404)
    api.delete(ref_of(source), name, namespace)
    return f"{adapter.kind} {name} deleted from namespace {namespace}"


async def delete(request: web.Request) -> web.StreamResponse:
    namespace, kind, name = _job_key(request)
    api = api_of(request)
    said = await in_thread(delete_job, api, namespace, kind, name)
    raise web.HTTPSeeOther(f"/jobs?namespace={quote(namespace)}&notice={quote(said)}")


# Submit --------------------------------------------------------------------------------------------------------------


async def submit_form(request: web.Request) -> web.Response:
    namespace = namespace_of(request)
    form = SubmitForm(namespace=namespace)
    context = page_context(request, namespace=namespace, form=form, problem="", preview="", kinds=_kinds())
    return aiohttp_jinja2.render_template("submit.html", request, context)


def _kinds() -> list[tuple[str, str]]:
    from webhook.readmodel.submit import KINDS  # noqa: PLC0415

    return [(key, f"{kind} ({api_version})") for key, (api_version, kind, _) in KINDS.items()]


def create_job(api: KubeApi, obj: Doc, settings: ConsoleSettings) -> Obj:
    """Create the object as ``kq submit`` does (its messages for a name taken, a kind not served...)."""
    from webhook.readmodel.submit import create_object  # noqa: PLC0415 - kq submit's own create, with its messages

    namespace = str(meta(obj)["namespace"])
    return create_object(make_ctx(api, namespace, settings), obj)


async def submit(request: web.Request) -> web.StreamResponse:
    from webhook.readmodel.fetch import CliError  # noqa: PLC0415
    from webhook.readmodel.output import to_yaml  # noqa: PLC0415
    from webhook.readmodel.submit import SubmitError, build_job  # noqa: PLC0415

    settings = settings_of(request)
    raw = await request.post()
    fields = {key: value for key, value in raw.items() if isinstance(value, str)}
    form = SubmitForm.from_fields(fields, settings.default_namespace)
    action = fields.get("action", "preview")

    def again(problem: str, status: int) -> web.Response:
        context = page_context(request, namespace=form.namespace or settings.default_namespace, form=form,
                               problem=problem, preview="", kinds=_kinds())
        return aiohttp_jinja2.render_template("submit.html", request, context, status=status)

    try:
        options = parse_submit_form(form)
        obj = build_job(options)
    except (BadInput, SubmitError) as error:
        return again(str(error), 422)
    if action != "create":
        context = page_context(request, namespace=options.namespace, form=form, problem="", preview=to_yaml(obj),
                               kinds=_kinds())
        return aiohttp_jinja2.render_template("submit.html", request, context)
    api = api_of(request)
    try:
        created = await in_thread(create_job, api, obj, settings)
    except CliError as error:
        from webhook.console.app import cli_problem  # noqa: PLC0415

        return again(str(error), cli_problem(str(error)))
    name = str(meta(created).get("name") or meta(obj).get("name") or "")
    kind = str(created.get("kind") or obj["kind"])
    notice = f"{kind} {name} created in namespace {options.namespace}"
    raise web.HTTPSeeOther(f"/jobs?namespace={quote(options.namespace)}&notice={quote(notice)}")


def add_routes(app: web.Application) -> None:
    app.router.add_get("/", index)
    app.router.add_get("/login", login_form)
    app.router.add_post("/login", login)
    app.router.add_post("/logout", logout)
    app.router.add_get("/jobs", jobs_page)
    app.router.add_get("/jobs/{namespace}/{kind}/{name}", job_page)
    app.router.add_post("/jobs/{namespace}/{kind}/{name}/delete", delete)
    app.router.add_get("/submit", submit_form)
    app.router.add_post("/submit", submit)
