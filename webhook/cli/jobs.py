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
from collections.abc import Sequence
from typing import TYPE_CHECKING

from webhook.api.objects import Obj, meta
from webhook.api.statuses import FINAL, STARTED, JobStatus
from webhook.cli.common import run_on_cluster
from webhook.readmodel.commandline import command_parser

if TYPE_CHECKING:
    from webhook.readmodel.context import Ctx
    from webhook.readmodel.output import Column
    from webhook.readmodel.served import Served


# kq list ------------------------------------------------------------------------------------------------------------


def _summaries_for(ctx: Ctx, args: argparse.Namespace, served: Served | None = None) -> list[Obj]:
    """The jobs ``kq list`` shows, as ``-o json`` gives them. Every namespace's come from the controller's
    summaries when it serves them (docs/queueing.md, "Reading every job"; ``served`` when already asked), else
    from the API as one namespace's always do."""
    if args.all_namespaces and not args.direct:
        if served is None:
            from webhook.readmodel.served import served_summaries  # noqa: PLC0415

            served = served_summaries(ctx.api, None)
        if served.jobs is not None:
            return served.jobs  # the modules below are not even imported: some 0.1 s of kq's start
        if served.problem is not None:
            ctx.note(f"the controller's job summaries are unavailable ({served.problem}); reading every job "
                     "from the API server instead")
    from webhook.readmodel.eta import published_estimates  # noqa: PLC0415
    from webhook.readmodel.fetch import load_snapshot  # noqa: PLC0415
    from webhook.readmodel.jobs import job_summary  # noqa: PLC0415
    from webhook.readmodel.view import job_views  # noqa: PLC0415

    if args.all_namespaces:
        snapshot = load_snapshot(ctx.api, None, now=ctx.now())
        etas = published_estimates(snapshot.queues)
        return [job_summary(view, etas) for view in job_views(snapshot)]
    namespace = ctx.namespace
    snapshot = load_snapshot(ctx.api, [namespace], now=ctx.now())
    etas = published_estimates(snapshot.queues)
    return [job_summary(view, etas) for view in job_views(snapshot) if view.namespace == namespace]


def _list(ctx: Ctx, args: argparse.Namespace) -> int:
    from webhook.readmodel.listing import STATUS_CELL, list_rows, select  # noqa: PLC0415
    from webhook.readmodel.output import to_json, to_yaml  # noqa: PLC0415

    wanted = {s.upper() for s in args.status.split(",")} if args.status else None
    wide = args.output == "wide"
    served = None
    if args.all_namespaces and not args.direct and args.output in (None, "wide") and not args.watch:
        from webhook.kube.collector import collector_paused  # noqa: PLC0415
        from webhook.readmodel.served import served_rows  # noqa: PLC0415

        # The rows as the controller lays them out for kubectl get. Their objects (some 20 a job) hold no cycle:
        # each collection the decoding triggers would walk them all for nothing (half of kq's CPU).
        with collector_paused():
            answer = served_rows(ctx.api, None)
            if answer.rows is not None:
                table_rows = answer.rows
                if wanted is not None:
                    table_rows = [row for row in table_rows if row[1][STATUS_CELL] in wanted]
                return _print_table(ctx, args, *select(table_rows, wide=wide, all_namespaces=True))
        served = answer.summaries
    jobs = _summaries_for(ctx, args, served)
    if wanted is not None:
        jobs = [job for job in jobs if job["status"] in wanted]
    if args.output in ("json", "yaml"):
        data = {"items": jobs}
        ctx.print((to_json if args.output == "json" else to_yaml)(data).rstrip("\n"))
        return 0
    if args.watch:
        return _watch(ctx, args, jobs, wide)
    return _print_table(ctx, args, *list_rows(jobs, ctx.now(), wide=wide, all_namespaces=args.all_namespaces))


def _print_table(ctx: Ctx, args: argparse.Namespace, columns: list[Column], rows: Sequence[Sequence[str]]) -> int:
    from webhook.readmodel.output import WIDE, table  # noqa: PLC0415

    if not rows:
        where = "any namespace" if args.all_namespaces else f"namespace {ctx.namespace}"
        ctx.note(f"No jobs in {where}.")
        return 0
    ctx.print(table(columns, rows, max(ctx.width, WIDE) if args.output == "wide" else ctx.width).rstrip("\n"))
    return 0


def _key(job: Obj) -> tuple[str, str, str]:
    return str(job["namespace"]), str(job["kind"]), str(job["name"])


def _watch(ctx: Ctx, args: argparse.Namespace, jobs: list[Obj], wide: bool) -> int:
    """Print the table, then a line for every job whose row changes (``DELETED`` when it goes), until Ctrl-C."""
    from webhook.readmodel.listing import list_rows  # noqa: PLC0415
    from webhook.readmodel.output import WIDE, layout, render  # noqa: PLC0415

    columns, rows = list_rows(jobs, ctx.now(), wide=wide, all_namespaces=args.all_namespaces)
    widths = layout(columns, rows, max(ctx.width, WIDE) if wide else ctx.width)
    ctx.print(render(columns, rows, widths).rstrip("\n"))
    headers = [c.header for c in columns]
    status, eta = headers.index("STATUS"), headers.index("ETA")

    def moved(before: tuple[str, ...], after: tuple[str, ...]) -> bool:
        """A row changed, the ETA (it counts down) and the AGE apart."""
        return before[:eta] + before[eta + 1:-1] != after[:eta] + after[eta + 1:-1]

    previous = {_key(job): row for job, row in zip(jobs, rows, strict=True)}
    rounds = 1
    while not args.watch_rounds or rounds < args.watch_rounds:
        ctx.sleep(args.interval)
        jobs = _summaries_for(ctx, args)
        columns, rows = list_rows(jobs, ctx.now(), wide=wide, all_namespaces=args.all_namespaces)
        current = {_key(job): row for job, row in zip(jobs, rows, strict=True)}
        changed = [row for key, row in current.items() if key not in previous or moved(previous[key], row)]
        for key, row in previous.items():
            if key not in current:
                changed.append((*row[:status], "DELETED", *row[status + 1 :]))
        if changed:
            ctx.print(render(columns, changed, widths, header=False).rstrip("\n"))
        previous = current
        rounds += 1
    return 0


# kq get ---------------------------------------------------------------------------------------------------------------


def _get(ctx: Ctx, args: argparse.Namespace) -> int:
    from webhook.readmodel.fetch import job_events  # noqa: PLC0415
    from webhook.readmodel.jobs import describe_job, find_job, sorted_events  # noqa: PLC0415
    from webhook.readmodel.output import to_json, to_yaml  # noqa: PLC0415

    snapshot, _, view = find_job(ctx, args.job)
    if args.output in ("json", "yaml"):
        ctx.print((to_json if args.output == "json" else to_yaml)(dict(view.obj)).rstrip("\n"))
        return 0
    events = sorted_events(job_events(ctx.api, view.namespace, view.name, str(meta(view.obj).get("uid") or "")))
    ctx.print(describe_job(view, snapshot, events, ctx.now(), ctx.width))
    return 0


# kq delete ---------------------------------------------------------------------------------------------------------


def _delete(ctx: Ctx, args: argparse.Namespace) -> int:
    from webhook.readmodel.fetch import CliError, ref_of, served_kinds  # noqa: PLC0415
    from webhook.readmodel.jobs import not_found_message, split_ref  # noqa: PLC0415
    from webhook.readmodel.kubeapi import ApiError  # noqa: PLC0415
    from webhook.readmodel.view import find_adapter  # noqa: PLC0415

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
            from webhook.readmodel.fetch import load_snapshot  # noqa: PLC0415
            from webhook.readmodel.view import job_views  # noqa: PLC0415

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
    from webhook.readmodel.fetch import CliError, load_snapshot  # noqa: PLC0415
    from webhook.readmodel.view import job_views  # noqa: PLC0415

    started = ctx.now()
    last = ""
    while True:
        views = job_views(load_snapshot(ctx.api, [namespace], now=ctx.now()))
        view = next((v for v in views if v.namespace == namespace and v.name == name and v.kind == kind), None)
        if view is None:
            raise CliError(f"{kind} {name} disappeared from namespace {namespace}")
        line = view.status.value
        if view.status == JobStatus.QUEUING and view.position is not None:
            line += f" (position {view.position} in quota {view.quota})"
        elif view.status in STARTED:
            line += f" ({view.running}/{view.expected} pods running)"
        if line != last:
            ctx.print(f"{name}: {line}")
            last = line
        if view.status == JobStatus.RUNNING or view.status in FINAL:
            return 1 if view.status == JobStatus.FAILED else 0
        if timeout and ctx.now() - started >= timeout:
            raise CliError(f"{name} is still {view.status} after {timeout:g}s; see why: kq why {name} -n {namespace}")
        ctx.sleep(interval)


# Registration ------------------------------------------------------------------------------------------------------


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = command_parser(
        subparsers,
        "list",
        "List the jobs of a namespace: QUEUING = held by the queue, BACKOFF = released but did not start in time, "
        "held again until its retry, PENDING = admitted but not every pod runs, "
        "RUNNING, SUCCEEDED, FAILED. QUEUE is the job's quota; POSITION its place in that quota's queue; ETA "
        "when a waiting job should start (~ the estimate, < only a latest time known, ? none), as the controller "
        "estimates it (kq why JOB says on what).",
        ["kq list", "kq list -A", "kq list -n user-a -o wide", "kq list --status QUEUING -o json", "kq list --watch"],
    )
    parser.add_argument(
        "-o", "--output", choices=("wide", "json", "yaml"), help="wide table (up to 120 columns), JSON or YAML"
    )
    parser.add_argument("-w", "--watch", action="store_true", help="keep printing rows that change (Ctrl-C stops)")
    parser.add_argument("--status", help="only these statuses, comma-separated (e.g. QUEUING,PENDING)")
    parser.add_argument("--interval", type=float, default=2.0, help=argparse.SUPPRESS)
    parser.add_argument("--watch-rounds", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument(
        "--direct", action="store_true",
        help="with -A: read every job from the API server, not the controller's summaries (slower; docs/queueing.md)",
    )
    run_on_cluster(parser, _list, all_namespaces=True)

    parser = command_parser(
        subparsers,
        "get",
        "Show one job in detail, with its pods and events (Queued, Admitted, Evicted...).",
        ["kq get pi1", "kq get pytorchjob/mnist -n team-a", "kq get pi1 -o yaml"],
    )
    parser.add_argument("job", metavar="JOB", help="[KIND/]NAME, e.g. pi1 or pytorchjob/mnist")
    parser.add_argument("-o", "--output", choices=("json", "yaml"), help="print the object itself")
    run_on_cluster(parser, _get)

    parser = command_parser(
        subparsers,
        "delete",
        "Delete jobs by name; queued or running, their pods are deleted with them.",
        ["kq delete pi1", "kq delete pi1 pi2 -n user-a", "kq delete pytorchjob/mnist"],
    )
    parser.add_argument("jobs", nargs="+", metavar="JOB", help="[KIND/]NAME")
    run_on_cluster(parser, _delete)
