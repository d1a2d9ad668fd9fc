"""The console's pages of work the queue does not hold: a namespace's Deployments, StatefulSets and DaemonSets
(a section of the jobs page), and one of them, or one pod, explained as ``kq why deployment/NAME`` explains it
(:func:`webhook.readmodel.loose_why.explain_loose`; docs/pod-quota.md, "Why a Deployment's pod waits").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import quote

import aiohttp_jinja2
from aiohttp import web

from webhook.console.app import (
    BadInput,
    ConsoleSettings,
    api_of,
    check_namespace,
    in_thread,
    job_href,
    page_context,
    settings_of,
)

if TYPE_CHECKING:
    from webhook.readmodel.kubeapi import KubeApi
    from webhook.readmodel.loose_why import LooseAnswer

@dataclass(frozen=True, slots=True)
class WorkloadRow:
    """One row of the jobs page's table of workloads the queue does not hold."""

    namespace: str
    kind: str
    name: str
    ready: str
    """``ready/expected`` pods (``ready/?`` for a DaemonSet not yet counted)."""
    full: bool
    """Every pod it asks for is ready."""

    @property
    def href(self) -> str:
        return workload_href(self.namespace, self.kind, self.name)


def workload_href(namespace: str, kind: str, name: str) -> str:
    return f"/workloads/{quote(namespace)}/{quote(kind.lower())}/{quote(name)}"


def load_workloads(api: KubeApi, namespace: str) -> tuple[list[WorkloadRow], list[str]]:
    """The namespace's workloads, with the kinds the user may not list and why."""
    from webhook.readmodel.loose_why import list_loose  # noqa: PLC0415

    listed, problems = list_loose(api, namespace)
    rows = [WorkloadRow(namespace, row.kind, row.name, f"{row.ready}/{'?' if row.expected is None else row.expected}",
                        row.expected is not None and row.ready >= row.expected) for row in listed]
    return rows, problems


def load_workload(api: KubeApi, namespace: str, kind: str, name: str, settings: ConsoleSettings) -> LooseAnswer:
    """``kq why KIND/NAME`` of a workload or pod; :class:`BadInput` (404) when there is none."""
    from webhook.console.app import TEXT_WIDTH  # noqa: PLC0415
    from webhook.readmodel.loose_why import explain_loose  # noqa: PLC0415

    answer = explain_loose(api, namespace, kind, name, now=settings.clock(), width=TEXT_WIDTH)
    if answer is None:
        raise BadInput(f"{kind} {name!r} not found in namespace {namespace}", 404)
    return answer


def _workload_key(request: web.Request) -> tuple[str, str, str]:
    from webhook.readmodel.loose_why import POD_NAMES, WORKLOAD_KINDS  # noqa: PLC0415

    namespace = check_namespace(request.match_info["namespace"], "")
    kind = request.match_info["kind"].lower()
    if kind not in WORKLOAD_KINDS and kind not in POD_NAMES:
        raise BadInput(f"unknown kind {kind[:40]!r}: use deployment, statefulset, replicaset, daemonset or pod", 404)
    return namespace, kind, request.match_info["name"]


async def workload_page(request: web.Request) -> web.Response:
    namespace, kind, name = _workload_key(request)
    answer = await in_thread(load_workload, api_of(request), namespace, kind, name, settings_of(request))
    if answer.job is not None:  # a job's pod: its job's page says why it waits or runs
        raise web.HTTPSeeOther(job_href(namespace, answer.job[0], answer.job[1]))
    title = answer.body["kind"] if answer.body is not None else kind
    context = page_context(request, namespace=namespace, kind=title, name=name, why=answer.text)
    return aiohttp_jinja2.render_template("workload.html", request, context)


def add_routes(app: web.Application) -> None:
    app.router.add_get("/workloads/{namespace}/{kind}/{name}", workload_page)
