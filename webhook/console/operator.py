"""The operator's page: the quota tree as a picture, the queues with their depth and oldest wait, and the
controller's recent decisions from its Events.

The numbers are ``kq top quota``'s (:func:`webhook.readmodel.usage.quota_usage`), ``kq queue list``'s
(:func:`webhook.readmodel.queues.queue_rows`) and the controller's own Events; the picture is SVG drawn on the
server (``templates/quota.svg``) from :func:`quota_bars`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import aiohttp_jinja2
from aiohttp import web

from webhook.api.names import CONTROLLER_COMPONENT, QUEUE_NAMESPACE
from webhook.api.objects import Obj, event_time, involved_object, name_of
from webhook.api.statuses import WAITING
from webhook.console.app import api_of, in_thread, page_context, settings_of

if TYPE_CHECKING:
    from webhook.readmodel.kubeapi import KubeApi
    from webhook.readmodel.usage import NodeUsage
    from webhook.readmodel.view import JobView

BAR_WIDTH = 360
"""Pixels of a bar at the largest amount of its row (max, or whatever is larger)."""
ROW_HEIGHT = 26
EVENTS_SHOWN = 40


@dataclass(frozen=True, slots=True)
class Bar:
    """One node and resource of the tree, in pixels and in words."""

    quota: str
    """The node's name (on its first row only)."""
    full_name: str
    depth: int
    resource: str
    y: int
    min_x: float
    max_x: float | None
    used_x: float
    within_x: float
    """The end of used-within-min (used and min, whichever is smaller)."""
    request_x: float
    text: str
    """``min 60 · max 100 · used 20 · borrowed 0 · requested 80``."""


@dataclass(frozen=True, slots=True)
class QuotaPicture:
    bars: tuple[Bar, ...]
    height: int
    label_width: int
    source: str


def quota_bars(usages: Sequence[NodeUsage], source: str) -> QuotaPicture:
    """Geometry of the tree picture: a row per node and resource, scaled to the larger of its max, min,
    used and requested; marks at min and max; used within min and borrowed beyond it as two fills."""
    from webhook.readmodel.output import quantity, resource_name  # noqa: PLC0415
    from webhook.readmodel.usage import displayed_resources  # noqa: PLC0415

    bars: list[Bar] = []
    y = 0
    for usage in usages:
        node = usage.node
        for index, name in enumerate(displayed_resources(usage)):
            low = node.min.get_or_zero(name)
            high = node.max.get(name)
            used = usage.used.get_or_zero(name)
            requested = usage.request.get_or_zero(name)
            scale = max(high or 0, low, used, requested) or 1

            def x(amount: int, scale: int = scale) -> float:
                return round(BAR_WIDTH * amount / scale, 1)

            words = [f"min {quantity(name, low)}", f"max {quantity(name, high) if high is not None else 'none'}",
                     f"used {quantity(name, used)}", f"borrowed {quantity(name, max(0, used - low))}",
                     f"requested {quantity(name, requested)}"]
            bars.append(Bar(
                quota=node.name if index == 0 else "",
                full_name=node.full_name,
                depth=usage.depth,
                resource=resource_name(name),
                y=y,
                min_x=x(low),
                max_x=x(high) if high is not None else None,
                used_x=x(used),
                within_x=x(min(used, low)),
                request_x=x(requested),
                text=" · ".join(words),
            ))
            y += ROW_HEIGHT
    depth = max((usage.depth for usage in usages), default=0)
    return QuotaPicture(tuple(bars), max(y, ROW_HEIGHT), 150 + 14 * depth, source)


@dataclass(frozen=True, slots=True)
class QueueRow:
    name: str
    quota: str
    namespace: str
    policy: str
    depth: str
    oldest: str


@dataclass(frozen=True, slots=True)
class Decision:
    age: str
    kind: str
    reason: str
    target: str
    message: str


@dataclass
class OperatorView:
    picture: QuotaPicture | None = None
    tree_problem: str = ""
    fairness: list[str] = field(default_factory=list)
    """Under each fair-sharing parent, each child's share beside its fair part (``kq top quota``'s lines)."""
    queues: list[QueueRow] = field(default_factory=list)
    queues_problem: str = ""
    jobs_problem: str = ""
    decisions: list[Decision] = field(default_factory=list)
    events_problem: str = ""


def oldest_waits(views: Sequence[JobView] | None, now: float) -> dict[str, str]:
    """Queue name -> how long its oldest waiting job has waited (since it was created)."""
    from webhook.readmodel.output import age  # noqa: PLC0415

    oldest: dict[str, float] = {}
    for view in views or ():
        if view.status in WAITING and view.queue:
            oldest[view.queue] = min(oldest.get(view.queue, view.created), view.created)
    return {name: age(created, now) for name, created in oldest.items()}


def _decisions(events: Sequence[Obj], now: float) -> list[Decision]:
    from webhook.readmodel.output import age  # noqa: PLC0415
    from webhook.readmodel.waiting import controller_events  # noqa: PLC0415

    out = []
    for event in controller_events(events)[:EVENTS_SHOWN]:
        target = involved_object(event)
        out.append(Decision(
            age=age(event_time(event), now),
            kind=str(event.get("type") or ""),
            reason=str(event.get("reason") or ""),
            target=f"{target.get('kind', '')} {target.get('namespace', '')}/{target.get('name', '')}",
            message=str(event.get("message") or ""),
        ))
    return out


def load_operator(api: KubeApi, now: float) -> OperatorView:
    """Everything the page shows; each part that cannot be read says why instead."""
    from webhook.readmodel.fetch import CliError, load_snapshot, read_tree  # noqa: PLC0415
    from webhook.readmodel.kubeapi import EVENTS, QUEUES, ApiError  # noqa: PLC0415
    from webhook.readmodel.queues import fair_lines, queue_rows  # noqa: PLC0415
    from webhook.readmodel.usage import quota_usage  # noqa: PLC0415
    from webhook.readmodel.view import Snapshot, job_views  # noqa: PLC0415

    page = OperatorView()
    views: list[JobView] | None = None
    try:
        views = job_views(load_snapshot(api, None, now=now))
    except CliError as error:
        page.jobs_problem = str(error)
    tree_obj, problem = read_tree(api)
    snapshot = Snapshot(now=now, tree_obj=tree_obj)
    tree = snapshot.tree
    if tree is None:
        page.tree_problem = problem or snapshot.problem or "there is no ElasticQuotaTree in kube-system"
    else:
        usages, source = quota_usage(tree, tree_obj, views)
        page.picture = quota_bars(usages, source)
        page.fairness = fair_lines(tree, usages)
    try:
        queues = {name_of(obj): obj for obj in api.list(QUEUES, QUEUE_NAMESPACE)}
    except ApiError as error:
        queues = {}
        page.queues_problem = f"cannot list the Queues in {QUEUE_NAMESPACE}: {error.one_line()}"
    _, rows = queue_rows(queues, tree, now)
    waits = oldest_waits(views, now)
    page.queues = [
        QueueRow(name=row[0], quota=row[1], namespace=row[2], policy=row[3], depth=row[4],
                 oldest=waits.get(row[0], "-" if views is not None else "?"))
        for row in rows
    ]
    try:
        events = api.list(EVENTS, None, field_selector=f"source={CONTROLLER_COMPONENT}")
    except ApiError as error:
        events = []
        page.events_problem = f"cannot list the controller's Events: {error.one_line()}"
    page.decisions = _decisions(events, now)
    return page


async def operator_page(request: web.Request) -> web.Response:
    api = api_of(request)
    view = await in_thread(load_operator, api, settings_of(request).clock())
    context = page_context(request, page=view, bar_width=BAR_WIDTH, row_height=ROW_HEIGHT)
    return aiohttp_jinja2.render_template("operator.html", request, context)


def add_routes(app: web.Application) -> None:
    app.router.add_get("/operator", operator_page)
