"""``kq list``, ``kq get JOB``, ``kq delete JOB``: the developer's jobs, their status and queue position.

Status: QUEUING (held by the queue: suspended, not admitted), BACKOFF (released, did not start within the
start timeout, held again until its retry time), PENDING (admitted, not every pod running),
RUNNING, SUCCEEDED, FAILED (and SUSPENDED for a job held in a namespace kube-queue does not manage).
QUEUE is the job's leaf quota (each leaf quota is one queue, whatever the namespaces of its jobs) and
POSITION its 1-based place in that queue: from the Queue's ``status.queueItemDetails`` when current, else
computed with the core's queue order.
"""

from __future__ import annotations

import argparse
import datetime
import difflib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from webhook.api.names import QUEUE_NAMESPACE
from webhook.api.objects import Obj, created_of, event_time, meta, name_of, pod_phase, pod_spec
from webhook.cli.common import Ctx, add_connection_flags, command, subparser

if TYPE_CHECKING:
    from webhook.cli.eta import Published
    from webhook.cli.view import JobView, Snapshot

FINAL = ("SUCCEEDED", "FAILED")


def iso(seconds: float | None) -> str | None:
    if not seconds:
        return None
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# Finding jobs ----------------------------------------------------------------------------------------------------


def split_ref(text: str) -> tuple[str | None, str]:
    """``pytorchjob/mnist`` -> (``pytorchjob``, ``mnist``); ``mnist`` -> (None, ``mnist``)."""
    kind, sep, name = text.rpartition("/")
    return (kind, name) if sep and kind else (None, text)


def find_job(
    ctx: Ctx, ref: str, *, complete: bool = False, with_events: bool = False
) -> tuple[Snapshot, list[JobView], JobView]:
    """The snapshot of the job's namespace, every view in it, and the job named ``ref`` (``[KIND/]NAME``);
    :class:`CliError` with suggestions when there is no such job or the name is ambiguous."""
    from webhook.cli.fetch import CliError, load_snapshot  # noqa: PLC0415
    from webhook.cli.view import find_adapter, job_views  # noqa: PLC0415

    kind_text, name = split_ref(ref)
    adapter = None
    if kind_text is not None:
        adapter = find_adapter(kind_text)
        if adapter is None:
            raise CliError(f"unknown kind {kind_text!r}: use job, pytorchjob, tfjob, mpijob, rayjob or pod")
    namespace = ctx.namespace
    snapshot = load_snapshot(ctx.api, [namespace], now=ctx.now(), complete=complete, with_events=with_events)
    views = job_views(snapshot)
    local = [view for view in views if view.namespace == namespace]
    matches = [v for v in local if v.name == name and (adapter is None or v.kind == adapter.kind)]
    if len(matches) == 1:
        return snapshot, views, matches[0]
    if len(matches) > 1:
        kinds = " and ".join(f"a {view.kind}" for view in matches)
        example = f"{matches[0].kind.lower()}/{name}"
        raise CliError(f"{name} is {kinds} in namespace {namespace}: say which, e.g. `kq why {example}`")
    raise CliError(not_found_message(ctx, name, namespace, [v.name for v in local], snapshot))


def not_found_message(ctx: Ctx, name: str, namespace: str, names: Sequence[str], snapshot: Snapshot) -> str:
    """``job pi3 not found in namespace user-a; did you mean pi2? ...`` (or where the job is)."""
    from webhook.cli.fetch import ref_of, served_kinds  # noqa: PLC0415
    from webhook.cli.kubeapi import ApiError  # noqa: PLC0415

    elsewhere: list[str] = []
    for source in served_kinds(ctx.api):
        if source.adapter.kind == "Pod":
            continue
        try:
            found = ctx.api.list(ref_of(source), None, field_selector=f"metadata.name={name}")
        except ApiError:
            continue
        elsewhere += [str(o["metadata"]["namespace"]) for o in found if o["metadata"].get("namespace") != namespace]
    elsewhere.sort()
    message = f"job {name!r} not found in namespace {namespace}"
    if elsewhere:
        return f"{message}; it is in namespace {elsewhere[0]}: add -n {elsewhere[0]}"
    close = difflib.get_close_matches(name, sorted(set(names)), n=3, cutoff=0.5)
    if close:
        return f"{message}; did you mean {' or '.join(close)}? (kq list -n {namespace})"
    if names:
        return f"{message}; its jobs: kq list -n {namespace}"
    return f"{message}, which has no jobs (kq list -A lists every namespace)"


# kq list ------------------------------------------------------------------------------------------------------------


def _position(view: JobView) -> str:
    return str(view.position) if view.position is not None else "-"


def _queue(view: JobView) -> str:
    return view.leaf_name or "-"


def list_rows(
    views: Sequence[JobView], now: float, *, wide: bool, all_namespaces: bool, etas: Published | None = None
) -> tuple[list[Any], list[list[str]]]:
    """The columns and rows of ``kq list``; ETA is when a waiting job should start, as its Queue's status says
    (``etas``: :func:`webhook.cli.eta.published_estimates`; docs/eta.md)."""
    from webhook.cli.eta import eta_cell  # noqa: PLC0415
    from webhook.cli.output import Column, age, describe  # noqa: PLC0415

    columns = []
    if all_namespaces:
        columns.append(Column("NAMESPACE", shrink=3, min_width=9))
    columns += [
        Column("NAME", shrink=4, min_width=12),
        Column("KIND", shrink=5),
        Column("STATUS"),
        Column("QUEUE", shrink=2, min_width=8),
        Column("POSITION", right=True),
        Column("ETA", right=True),
    ]
    if wide:
        columns += [Column("PRIORITY", right=True), Column("PODS", right=True), Column("REQUEST", shrink=1)]
    columns.append(Column("AGE", right=True))
    rows = []
    for view in views:
        row = [view.namespace] if all_namespaces else []
        row += [view.name, view.kind, view.status, _queue(view), _position(view), eta_cell(view, etas or {}, now)]
        if wide:
            request = describe(view.request) if view.request is not None else "-"
            row += [str(view.priority), f"{view.running}/{view.expected}", request]
        row.append(age(view.created, now))
        rows.append(row)
    return columns, rows


def job_summary(view: JobView, etas: Published | None = None) -> dict[str, Any]:
    """One job of ``kq list -o json|yaml`` (with the controller's start estimate of a waiting job)."""
    start, latest = (etas or {}).get((view.kind, view.namespace, view.name), (None, None))
    estimates = {"estimatedStart": iso(start), "estimatedStartLatest": iso(latest)}
    return {
        "name": view.name,
        "namespace": view.namespace,
        "kind": view.kind,
        "apiVersion": view.source.api_version,
        "status": view.status,
        "quota": view.quota,
        "queue": view.queue,
        "position": view.position,
        "priority": view.priority,
        "pods": {"running": view.running, "expected": view.expected},
        "request": view.request.to_spec() if view.request is not None else None,
        "created": iso(view.created),
        "admittedAt": iso(view.admitted_at),
        **{name: value for name, value in estimates.items() if value is not None},
    }


def _views_for(ctx: Ctx, args: argparse.Namespace) -> tuple[list[JobView], Published]:
    """The jobs ``kq list`` shows, and the start estimates their Queues publish."""
    from webhook.cli.eta import published_estimates  # noqa: PLC0415
    from webhook.cli.fetch import load_snapshot  # noqa: PLC0415
    from webhook.cli.view import job_views  # noqa: PLC0415

    if args.all_namespaces:
        snapshot = load_snapshot(ctx.api, None, now=ctx.now())
        return job_views(snapshot), published_estimates(snapshot.queues)
    namespace = ctx.namespace
    snapshot = load_snapshot(ctx.api, [namespace], now=ctx.now())
    return ([view for view in job_views(snapshot) if view.namespace == namespace],
            published_estimates(snapshot.queues))


def _list(ctx: Ctx, args: argparse.Namespace) -> int:
    from webhook.cli.output import WIDE, table, to_json, to_yaml  # noqa: PLC0415

    views, etas = _views_for(ctx, args)
    if args.status:
        wanted = {s.upper() for s in args.status.split(",")}
        views = [view for view in views if view.status in wanted]
    if args.output in ("json", "yaml"):
        data = {"items": [job_summary(view, etas) for view in views]}
        ctx.print((to_json if args.output == "json" else to_yaml)(data).rstrip("\n"))
        return 0
    wide = args.output == "wide"
    if args.watch:
        return _watch(ctx, args, views, wide, etas)
    columns, rows = list_rows(views, ctx.now(), wide=wide, all_namespaces=args.all_namespaces, etas=etas)
    if not rows:
        where = "any namespace" if args.all_namespaces else f"namespace {ctx.namespace}"
        ctx.note(f"No jobs in {where}.")
        return 0
    ctx.print(table(columns, rows, max(ctx.width, WIDE) if wide else ctx.width).rstrip("\n"))
    return 0


def _watch(ctx: Ctx, args: argparse.Namespace, views: list[JobView], wide: bool, etas: Published) -> int:
    """Print the table, then a line for every job whose row changes (``DELETED`` when it goes), until Ctrl-C."""
    from webhook.cli.output import WIDE, layout, render  # noqa: PLC0415

    columns, rows = list_rows(views, ctx.now(), wide=wide, all_namespaces=args.all_namespaces, etas=etas)
    widths = layout(columns, rows, max(ctx.width, WIDE) if wide else ctx.width)
    ctx.print(render(columns, rows, widths).rstrip("\n"))
    headers = [c.header for c in columns]
    status, eta = headers.index("STATUS"), headers.index("ETA")

    def moved(before: list[str], after: list[str]) -> bool:
        """A row changed, the ETA (it counts down) and the AGE apart."""
        return before[:eta] + before[eta + 1:-1] != after[:eta] + after[eta + 1:-1]

    previous = {(v.namespace, v.kind, v.name): row for v, row in zip(views, rows, strict=True)}
    rounds = 1
    while not args.watch_rounds or rounds < args.watch_rounds:
        ctx.sleep(args.interval)
        views, etas = _views_for(ctx, args)
        columns, rows = list_rows(views, ctx.now(), wide=wide, all_namespaces=args.all_namespaces, etas=etas)
        current = {(v.namespace, v.kind, v.name): row for v, row in zip(views, rows, strict=True)}
        changed = [row for key, row in current.items() if key not in previous or moved(previous[key], row)]
        for key, row in previous.items():
            if key not in current:
                changed.append([*row[:status], "DELETED", *row[status + 1 :]])
        if changed:
            ctx.print(render(columns, changed, widths, header=False).rstrip("\n"))
        previous = current
        rounds += 1
    return 0


# kq get ---------------------------------------------------------------------------------------------------------------


def _status_line(view: JobView) -> str:
    if view.status == "QUEUING" and view.position is not None:
        return f"QUEUING, position {view.position} in quota {view.quota}"
    if view.status == "QUEUING" and view.eviction:
        return "QUEUING (evicted by reclaim, back in its queue)"
    if view.status == "BACKOFF" and view.backoff is not None:
        note = view.backoff
        return f"BACKOFF ({'gave up' if note.gave_up else 'retrying'} after {note.attempts} failed start(s))"
    return view.status


def describe_job(view: JobView, snapshot: Snapshot, events: Sequence[Obj], now: float,
                 width: int = 80) -> str:
    """The text of ``kq get JOB``."""
    from webhook.cli.output import age, describe, table, wrap  # noqa: PLC0415
    from webhook.cli.waiting import leaf_policies  # noqa: PLC0415

    lines: list[str] = []

    def field(label: str, value: str) -> None:
        lines.append(wrap(value, 13, width, lead=f"{label + ':':<13}"))

    field("Name", view.name)
    field("Namespace", view.namespace)
    field("Kind", f"{view.kind} ({view.source.api_version})")
    field("Status", _status_line(view))
    if view.queue:
        policy = ""
        tree = snapshot.tree
        if tree is not None and view.leaf is not None:
            policy = f" (policy {leaf_policies(tree, snapshot.queues)[view.leaf.key].value})"
        field("Queue", f"{QUEUE_NAMESPACE}/{view.queue}{policy}")
    else:
        field("Queue", "- (namespace not managed by kube-queue)")
    field("Quota", view.quota or "-")
    field("Priority", str(view.priority))
    if view.workload is not None:
        pod_sets = [p for p in view.workload.pod_sets if p.count]
        named = len(pod_sets) > 1
        sets = "; ".join(f"{p.name + ': ' if named else ''}{p.count} × {describe(p.per_pod)}" for p in pod_sets)
        field("Request", f"{describe(view.workload.request)}" + (f" ({sets})" if sets else ""))
    elif view.size_error:
        field("Request", f"cannot be sized: {view.size_error}")
    field("Pods", f"{view.running} of {view.expected} running")
    field("Created", f"{iso(view.created)} ({age(view.created, now)} ago)")
    if view.admitted_at:
        field("Admitted", f"{iso(view.admitted_at)} ({age(view.admitted_at, now)} ago)")
    if view.eviction:
        by = view.eviction.get("by")
        field("Evicted", f"{view.eviction.get('reason', '')}" + (f" (for {by})" if by else ""))
    if view.backoff is not None:
        field("Backoff", f"{view.backoff.category}: {view.backoff.reason} (attempt {view.backoff.attempts})")
    if view.pods:
        from webhook.cli.output import Column  # noqa: PLC0415

        rows = []
        for pod in sorted(view.pods, key=name_of):
            node = pod_spec(pod).get("nodeName") or "-"
            rows.append([name_of(pod), str(pod_phase(pod) or "-"), str(node), age(created_of(pod), now)])
        cols = [
            Column("POD", shrink=1, min_width=12),
            Column("PHASE"),
            Column("NODE", shrink=2),
            Column("AGE", right=True),
        ]
        lines.append("")
        lines.append(table(cols, rows, width).rstrip("\n"))
    lines.append("")
    if not events:
        lines.append("Events:      <none>")
    else:
        lines.append("Events:")
        reason_width = min(18, max(len(str(event.get("reason") or "")) for event in events)) + 2
        for event in events:
            stamp = event_time(event)
            kind, reason = str(event.get("type") or ""), str(event.get("reason") or "")
            head = f"  {age(stamp, now):>6}  {kind:<8}{reason:<{reason_width}}"
            lines.append(wrap(str(event.get("message") or ""), len(head), width, lead=head))
    return "\n".join(lines)


def sorted_events(events: Sequence[Obj]) -> list[Obj]:
    return sorted(events, key=event_time)


def _get(ctx: Ctx, args: argparse.Namespace) -> int:
    from webhook.cli.fetch import job_events  # noqa: PLC0415
    from webhook.cli.output import to_json, to_yaml  # noqa: PLC0415

    snapshot, _, view = find_job(ctx, args.job)
    if args.output in ("json", "yaml"):
        ctx.print((to_json if args.output == "json" else to_yaml)(dict(view.obj)).rstrip("\n"))
        return 0
    events = sorted_events(job_events(ctx.api, view.namespace, view.name, str(meta(view.obj).get("uid") or "")))
    ctx.print(describe_job(view, snapshot, events, ctx.now(), ctx.width))
    return 0


# kq delete ---------------------------------------------------------------------------------------------------------


def _delete(ctx: Ctx, args: argparse.Namespace) -> int:
    from webhook.cli.fetch import CliError, ref_of, served_kinds  # noqa: PLC0415
    from webhook.cli.kubeapi import ApiError  # noqa: PLC0415
    from webhook.cli.view import find_adapter  # noqa: PLC0415

    namespace = ctx.namespace
    sources = served_kinds(ctx.api)
    failed = 0
    for ref in args.jobs:
        kind_text, name = split_ref(ref)
        wanted = find_adapter(kind_text) if kind_text else None
        if kind_text and wanted is None:
            raise CliError(f"unknown kind {kind_text!r}: use job, pytorchjob, tfjob, mpijob, rayjob or pod")
        found = []
        for source in sources:
            if wanted is not None and source.adapter.kind != wanted.kind:
                continue
            if wanted is None and source.adapter.kind == "Pod":
                continue  # a bare name means a job; plain Pods need pod/NAME
            try:
                ctx.api.get(ref_of(source), name, namespace)
            except ApiError as error:
                if error.not_found:
                    continue
                raise
            found.append(source)
        if not found:
            from webhook.cli.fetch import load_snapshot  # noqa: PLC0415
            from webhook.cli.view import job_views  # noqa: PLC0415

            snapshot = load_snapshot(ctx.api, [namespace], now=ctx.now(), kinds=sources)
            names = [v.name for v in job_views(snapshot) if v.namespace == namespace]
            ctx.note("error: " + not_found_message(ctx, name, namespace, names, snapshot))
            failed += 1
            continue
        if len(found) > 1:
            kinds = " and ".join(source.adapter.kind for source in found)
            ctx.note(f"error: {name} is a {kinds} in namespace {namespace}: say which, e.g. "
                     f"`kq delete {found[0].adapter.kind.lower()}/{name}`")
            failed += 1
            continue
        source = found[0]
        ctx.api.delete(ref_of(source), name, namespace)
        group = source.adapter.group or "core"
        ctx.print(f"{source.adapter.kind.lower()}.{group}/{name} deleted from namespace {namespace}")
    return 1 if failed else 0


# Waiting for a job (kq submit --wait) --------------------------------------------------------------------------


def wait_for(ctx: Ctx, namespace: str, name: str, kind: str, *, timeout: float, interval: float = 2.0) -> int:
    """Print the job's status whenever it changes until it runs or finishes; 1 when it failed or ``timeout``
    seconds (0 = no limit) passed."""
    from webhook.cli.fetch import CliError, load_snapshot  # noqa: PLC0415
    from webhook.cli.view import job_views  # noqa: PLC0415

    started = ctx.now()
    last = ""
    while True:
        views = job_views(load_snapshot(ctx.api, [namespace], now=ctx.now()))
        view = next((v for v in views if v.namespace == namespace and v.name == name and v.kind == kind), None)
        if view is None:
            raise CliError(f"{kind} {name} disappeared from namespace {namespace}")
        line = view.status
        if view.status == "QUEUING" and view.position is not None:
            line += f" (position {view.position} in quota {view.quota})"
        elif view.status in ("PENDING", "RUNNING"):
            line += f" ({view.running}/{view.expected} pods running)"
        if line != last:
            ctx.print(f"{name}: {line}")
            last = line
        if view.status in ("RUNNING", *FINAL):
            return 1 if view.status == "FAILED" else 0
        if timeout and ctx.now() - started >= timeout:
            raise CliError(f"{name} is still {view.status} after {timeout:g}s; see why: kq why {name} -n {namespace}")
        ctx.sleep(interval)


# Registration ------------------------------------------------------------------------------------------------------


def register(subparsers: Any) -> None:
    parser = subparser(
        subparsers,
        "list",
        "list jobs with status (QUEUING/BACKOFF/PENDING/RUNNING/SUCCEEDED/FAILED) and queue position",
        "List the jobs of a namespace: QUEUING = held by the queue, BACKOFF = released but did not start in time, "
        "held again until its retry, PENDING = admitted but not every pod runs, "
        "RUNNING, SUCCEEDED, FAILED. QUEUE is the job's quota; POSITION its place in that quota's queue; ETA "
        "when a waiting job should start (~ the estimate, < only a latest time known, ? none), as the controller "
        "estimates it (kq why JOB says on what).",
        ["kq list", "kq list -A", "kq list -n user-a -o wide", "kq list --status QUEUING -o json", "kq list --watch"],
        aliases=["ls"],
    )
    parser.add_argument(
        "-o", "--output", choices=("wide", "json", "yaml"), help="wide table (up to 120 columns), JSON or YAML"
    )
    parser.add_argument("-w", "--watch", action="store_true", help="keep printing rows that change (Ctrl-C stops)")
    parser.add_argument("--status", help="only these statuses, comma-separated (e.g. QUEUING,PENDING)")
    parser.add_argument("--interval", type=float, default=2.0, help=argparse.SUPPRESS)
    parser.add_argument("--watch-rounds", type=int, default=0, help=argparse.SUPPRESS)
    add_connection_flags(parser, all_namespaces=True)
    parser.set_defaults(handler=command(_list))

    parser = subparser(
        subparsers,
        "get",
        "show one job: status, queue, request, pods and events",
        "Show one job in detail, with its pods and events (Queued, Admitted, Evicted...).",
        ["kq get pi1", "kq get pytorchjob/mnist -n team-a", "kq get pi1 -o yaml"],
    )
    parser.add_argument("job", metavar="JOB", help="[KIND/]NAME, e.g. pi1 or pytorchjob/mnist")
    parser.add_argument("-o", "--output", choices=("json", "yaml"), help="print the object itself")
    add_connection_flags(parser)
    parser.set_defaults(handler=command(_get))

    parser = subparser(
        subparsers,
        "delete",
        "delete jobs (their pods go too)",
        "Delete jobs by name; queued or running, their pods are deleted with them.",
        ["kq delete pi1", "kq delete pi1 pi2 -n user-a", "kq delete pytorchjob/mnist"],
    )
    parser.add_argument("jobs", nargs="+", metavar="JOB", help="[KIND/]NAME")
    add_connection_flags(parser)
    parser.set_defaults(handler=command(_delete))
