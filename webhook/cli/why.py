"""``kq why JOB``: the exact reason a job waits (:mod:`webhook.readmodel.explain` computes it), as text or as
JSON for tools."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import TYPE_CHECKING

from webhook.api.objects import Obj, mapping
from webhook.api.statuses import WAITING
from webhook.cli.common import run_on_cluster
from webhook.readmodel.commandline import add_rate_flag, command_parser
from webhook.readmodel.explain import AHEAD_SHOWN, answer_job, answer_json
from webhook.readmodel.served import NOT_DECIDED, NOT_WAITING

if TYPE_CHECKING:
    from webhook.readmodel.context import Ctx


def _why(ctx: Ctx, args: argparse.Namespace) -> int:
    from webhook.readmodel.fetch import JobNotFound  # noqa: PLC0415
    from webhook.readmodel.jobs import split_ref  # noqa: PLC0415
    from webhook.readmodel.loose_why import WORKLOAD_KINDS  # noqa: PLC0415

    kind_text, name = split_ref(args.job)
    if kind_text is not None and kind_text.lower() in WORKLOAD_KINDS:
        return _why_loose(ctx, args, kind_text, name, None)
    try:
        return _why_job(ctx, args)
    except JobNotFound as error:
        return _why_loose(ctx, args, kind_text, name, error)


def _why_job(ctx: Ctx, args: argparse.Namespace) -> int:
    from webhook.readmodel.jobs import find_job  # noqa: PLC0415

    complete = True
    if args.oversellrate is None and not args.direct:
        served = _served(ctx, args)
        why = served.get("why") if served is not None else None
        if isinstance(why, Mapping):  # served_why made sure it is an object when there is one
            return _show(ctx, args, why)
        # A job that does not wait is explained from its namespace alone.
        complete = served is None or _unexplained(served) != NOT_WAITING
    snapshot, views, view = find_job(ctx, args.job, complete=complete, with_events=True)
    if not complete and view.status in WAITING:  # it waits again since the controller answered
        snapshot, views, view = find_job(ctx, args.job, complete=True, with_events=True)
    answer = answer_job(snapshot, views, view, ctx.now(), ctx.width, oversellrate=args.oversellrate,
                        ahead=args.ahead)
    if args.output == "json":
        return _show(ctx, args, answer_json(answer, view))
    ctx.print(answer.text)
    return 0


def _why_loose(ctx: Ctx, args: argparse.Namespace, kind_text: str | None, name: str,
               not_a_job: Exception | None) -> int:
    """A workload or pod the queue does not hold (docs/pod-quota.md); ``not_a_job``: the error to raise when
    there is none either."""
    from webhook.readmodel.fetch import CliError  # noqa: PLC0415
    from webhook.readmodel.loose_why import explain_loose  # noqa: PLC0415

    answer = explain_loose(ctx.api, ctx.namespace, kind_text, name, now=ctx.now(), width=ctx.width)
    if answer is None:
        if not_a_job is not None:
            raise not_a_job
        raise CliError(f"{kind_text} {name!r} not found in namespace {ctx.namespace}")
    if answer.job is not None:  # a job's pod: the job is what waits or runs
        ctx.note(f"pod {name} belongs to {answer.job[0]} {answer.job[1]}; explaining that job")
        args.job = f"{answer.job[0].lower()}/{answer.job[1]}"
        return _why_job(ctx, args)
    if args.output == "json":
        return _show(ctx, args, dict(answer.body or {}))
    ctx.print(answer.text)
    return 0


def _served(ctx: Ctx, args: argparse.Namespace) -> Obj | None:
    """The controller's answer (docs/queueing.md, "Why a job waits, from the controller"); ``None`` when it
    gives none."""
    from webhook.readmodel.fetch import CliError  # noqa: PLC0415
    from webhook.readmodel.jobs import split_ref  # noqa: PLC0415
    from webhook.readmodel.served import served_why  # noqa: PLC0415
    from webhook.readmodel.view import find_adapter  # noqa: PLC0415

    kind_text, name = split_ref(args.job)
    adapter = find_adapter(kind_text) if kind_text is not None else None
    if kind_text is not None and adapter is None:
        raise CliError(f"unknown kind {kind_text!r}: use job, pytorchjob, tfjob, mpijob, rayjob or pod")
    served = served_why(ctx.api, ctx.namespace, name, adapter.kind if adapter is not None else None,
                        width=ctx.width, ahead=args.ahead)
    if served.body is None and served.problem is not None:
        ctx.note(f"the controller's answer is unavailable ({served.problem}); reading every job from the API "
                 "server instead")
    elif served.body is not None and _unexplained(served.body) == NOT_DECIDED:
        message = mapping(served.body.get("unexplained")).get("message", "")
        ctx.note(f"{message}; reading every job from the API server instead")
    return served.body


def _unexplained(body: Obj) -> str | None:
    """Why the controller's answer has no explanation (``served_why`` made sure it says, when it has none)."""
    unexplained = body.get("unexplained")
    return str(unexplained["reason"]) if isinstance(unexplained, dict) else None


def _show(ctx: Ctx, args: argparse.Namespace, why: Obj) -> int:
    """Print ``kq why -o json``'s answer, or its text."""
    if args.output == "json":
        from webhook.readmodel.output import to_json  # noqa: PLC0415

        ctx.print(to_json(why).rstrip("\n"))
    else:
        ctx.print(str(why["explanation"]))
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = command_parser(
        subparsers,
        "why",
        "Explain exactly why a job waits, with the same decision code the queue controller runs: the quota "
        "level and resource that block it (request, used, limit, shortfall), who is ahead of it, whether "
        "reclaiming borrowed capacity could help, and when it should start (the queue replayed forward with "
        "the jobs' run times; docs/eta.md). For a Deployment, StatefulSet, ReplicaSet, DaemonSet or a pod no job "
        "accounts for, whose pods are not queued: its quota, which pods wait and why, and which reclaim took.",
        ["kq why pi2", "kq why pi2 -n user-a", "kq why pytorchjob/mnist --oversellrate 1", "kq why pi2 -o json",
         "kq why deployment/web"],
    )
    parser.add_argument("-o", "--output", choices=("json",),
                        help="JSON: the job's place, blockers, text and start estimate (estimatedStart, "
                        "estimatedStartLatest, estimateBasis)")
    parser.add_argument("job", metavar="JOB", help="[KIND/]NAME, e.g. pi2, pytorchjob/mnist or deployment/web")
    add_rate_flag(parser, "read from its events, else 2")
    parser.add_argument(
        "--ahead",
        type=int,
        default=AHEAD_SHOWN,
        metavar="N",
        help=f"list at most N of the jobs ahead of it, nearest the head first (default {AHEAD_SHOWN}; 0 = all)",
    )
    parser.add_argument(
        "--direct", action="store_true",
        help="compute the answer here from every job read from the API server, not the controller's (slower; "
        "the start estimate is replayed now, not taken from the controller's last refresh; docs/queueing.md)",
    )
    run_on_cluster(parser, _why)
