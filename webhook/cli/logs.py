"""``kq logs JOB [-f] [--tail N] [--since D] [-i POD | --all]``: a job's logs, from its chief pod by default.

The first pod in :func:`~webhook.readmodel.logs.pod_order` is the default. With several pods every line is
prefixed with ``[pod]``; with ``-f`` their streams are followed at the same time. Why a pod's logs cannot be
read (a kwok node without a log server...) is :func:`~webhook.readmodel.logs.explain_log_error`'s one line.
"""

from __future__ import annotations

import argparse
import queue
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from webhook.api.objects import RAN_PHASES, Obj, pod_phase
from webhook.api.statuses import FINAL
from webhook.cli.common import run_on_cluster
from webhook.core import duration
from webhook.readmodel.commandline import command_parser

if TYPE_CHECKING:
    from webhook.readmodel.context import Ctx
    from webhook.readmodel.kubeapi import KubeApi
    from webhook.readmodel.view import JobView


def parse_duration(text: str) -> int:
    """``90s``, ``5m``, ``1h30m``, ``2h`` or plain seconds -> seconds; ``ArgumentTypeError`` otherwise.

    The grammar is :data:`webhook.core.duration.CLOCK` (whole numbers, so the seconds are whole).
    """
    try:
        return int(duration.parse_duration(text.strip(), duration.CLOCK))
    except duration.DurationError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration; use e.g. 30s, 5m, 1h or 1h30m") from None


def stream_pods(
    api: KubeApi,
    namespace: str,
    pods: Sequence[Obj],
    query: Sequence[tuple[str, str]],
    *,
    write: Callable[[str], None],
    fail: Callable[[str], None],
    prefix: bool,
) -> int:
    """Copy the pods' logs to ``write`` line by line (``[pod] `` before each when ``prefix``), every pod's
    stream at once (a thread each) so followed streams interleave as they come. Failures go to ``fail`` as
    one line per pod; returns the number of pods that failed."""
    from webhook.readmodel.kubeapi import ApiError  # noqa: PLC0415
    from webhook.readmodel.logs import explain_log_error, log_path, pod_name  # noqa: PLC0415

    lines: queue.Queue[tuple[str, str | None, str | None]] = queue.Queue()
    line: str | None

    def pump(pod: Obj) -> None:
        name = pod_name(pod)
        try:
            for line in api.stream_lines(log_path(namespace, name), query):
                lines.put((name, line, None))
        except ApiError as error:
            lines.put((name, None, explain_log_error(api, pod, error)))
        except Exception as error:  # a broken stream must not hang the others
            lines.put((name, None, f"cannot read the logs of pod {name}: {error}"))
        finally:
            lines.put((name, None, None))

    if len(pods) == 1:
        # One pod: no thread, so Ctrl-C and broken pipes stop it at once.
        name = pod_name(pods[0])
        try:
            for text in api.stream_lines(log_path(namespace, name), query):
                write(f"[{name}] {text}" if prefix else text)
        except ApiError as error:
            fail(explain_log_error(api, pods[0], error))
            return 1
        return 0
    threads = [threading.Thread(target=pump, args=(pod,), daemon=True) for pod in pods]
    for thread in threads:
        thread.start()
    open_streams, failures = len(threads), 0
    while open_streams:
        source, line, problem = lines.get()
        if line is not None:
            write(f"[{source}] {line}" if prefix else line)
        elif problem is not None:
            failures += 1
            fail(problem)
        else:
            open_streams -= 1
    return failures


def _wait_for_pods(ctx: Ctx, args: argparse.Namespace) -> JobView:
    """The job's view once it has a running pod (``-f`` on a job that has not started); notes on stderr."""
    from webhook.readmodel.jobs import find_job  # noqa: PLC0415

    announced = ""
    while True:
        _, _, view = find_job(ctx, args.job)
        if any(pod_phase(pod) in RAN_PHASES for pod in view.pods):
            return view
        if view.status in FINAL:
            return view
        state = view.status + (f" at position {view.position}" if view.position is not None else "")
        if state != announced:
            ctx.note(f"waiting for {view.name} to start: it is {state} (kq why {view.name})")
            announced = state
        ctx.sleep(args.interval)


def _logs(ctx: Ctx, args: argparse.Namespace) -> int:
    from webhook.readmodel.fetch import CliError  # noqa: PLC0415
    from webhook.readmodel.jobs import find_job  # noqa: PLC0415
    from webhook.readmodel.logs import choose_pods, log_query  # noqa: PLC0415

    _, _, view = find_job(ctx, args.job)
    started = [pod for pod in view.pods if pod_phase(pod) != "Pending"]
    if not view.pods or (args.follow and not started and view.status not in FINAL):
        if not args.follow:
            hint = f" at position {view.position}" if view.position is not None else ""
            raise CliError(
                f"{view.name} has no pods yet: it is {view.status}{hint}; see `kq why {view.name}`, or follow with "
                f"`kq logs {view.name} -f` to wait for it"
            )
        view = _wait_for_pods(ctx, args)
    try:
        pods = choose_pods(view.pods, args.pod, args.all)
    except ValueError as error:
        raise CliError(str(error)) from None
    query = log_query(args.container, args.follow, args.tail, args.since, args.timestamps)
    prefix = len(pods) > 1 or args.prefix

    def write(line: str) -> None:
        ctx.out.write(line + "\n")
        ctx.out.flush()

    failures = stream_pods(
        ctx.api, view.namespace, pods, query, write=write, fail=lambda text: ctx.note(f"error: {text}"), prefix=prefix
    )
    return 1 if failures else 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = command_parser(
        subparsers,
        "logs",
        "Print a job's logs: its chief (or first) pod by default, one pod with -i, every pod with --all "
        "(each line prefixed with [pod]).",
        ["kq logs pi1", "kq logs pi1 -f", "kq logs mnist --all --tail 20", "kq logs mnist -i worker-1 --since 10m"],
    )
    parser.add_argument("job", metavar="JOB", help="[KIND/]NAME")
    parser.add_argument("-f", "--follow", action="store_true", help="keep streaming (waits for the job to start)")
    parser.add_argument("--tail", type=int, default=None, metavar="N", help="only the last N lines of each pod")
    parser.add_argument("--since", type=parse_duration, default=None, metavar="D", help="only lines newer than D (5m)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("-i", "--instance", dest="pod", metavar="POD", help="this pod (name, or its unique ending)")
    which.add_argument("--all", action="store_true", help="every pod of the job")
    parser.add_argument("-c", "--container", help="container (default: the pod's first)")
    parser.add_argument("--timestamps", action="store_true", help="prefix each line with its time")
    parser.add_argument("--prefix", action="store_true", help="prefix lines with [pod] even for one pod")
    parser.add_argument("--interval", type=float, default=2.0, help=argparse.SUPPRESS)
    run_on_cluster(parser, _logs)
