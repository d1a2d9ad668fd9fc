"""``kq why JOB``: the exact reason a job waits (:mod:`webhook.readmodel.explain` computes it), as text or as
JSON for tools."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from webhook.cli.common import add_connection_flags, command
from webhook.readmodel.commandline import rate_flag, subparser
from webhook.readmodel.explain import AHEAD_SHOWN, answer_job, answer_json

if TYPE_CHECKING:
    from webhook.readmodel.context import Ctx


def _why(ctx: Ctx, args: argparse.Namespace) -> int:
    from webhook.readmodel.jobs import find_job  # noqa: PLC0415

    snapshot, views, view = find_job(ctx, args.job, complete=True, with_events=True)
    answer = answer_job(snapshot, views, view, ctx.now(), ctx.width, oversellrate=args.oversellrate,
                        ahead=args.ahead)
    if args.output == "json":
        from webhook.readmodel.output import to_json  # noqa: PLC0415

        ctx.print(to_json(answer_json(answer, view)).rstrip("\n"))
        return 0
    ctx.print(answer.text)
    return 0


def register(subparsers: Any) -> None:
    parser = subparser(
        subparsers,
        "why",
        "explain why a job waits: quota level, resource, shortfall, who is ahead, reclaim",
        "Explain exactly why a job waits, with the same decision code the queue controller runs: the quota "
        "level and resource that block it (request, used, limit, shortfall), who is ahead of it, whether "
        "reclaiming borrowed capacity could help, and when it should start (the queue replayed forward with "
        "the jobs' run times; docs/eta.md).",
        ["kq why pi2", "kq why pi2 -n user-a", "kq why pytorchjob/mnist --oversellrate 1", "kq why pi2 -o json"],
    )
    parser.add_argument("-o", "--output", choices=("json",),
                        help="JSON: the job's place, blockers, text and start estimate (estimatedStart, "
                        "estimatedStartLatest, estimateBasis)")
    parser.add_argument("job", metavar="JOB", help="[KIND/]NAME, e.g. pi2 or pytorchjob/mnist")
    parser.add_argument(
        "--oversellrate",
        type=rate_flag,
        default=None,
        metavar="RATE",
        help="the controller's --oversellrate (default: read from its events, else 2)",
    )
    parser.add_argument(
        "--ahead",
        type=int,
        default=AHEAD_SHOWN,
        metavar="N",
        help=f"list at most N of the jobs ahead of it, nearest the head first (default {AHEAD_SHOWN}; 0 = all)",
    )
    add_connection_flags(parser)
    parser.set_defaults(handler=command(_why))
