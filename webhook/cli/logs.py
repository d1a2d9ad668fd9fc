"""``kq logs JOB [-f] [--tail N] [--since D] [-i POD | --all]``: a job's logs, from its chief pod by default.

Pods are ordered chief first (Kubeflow ``master``/``chief``/``launcher``, Ray ``head``, Spark ``driver``), then
by replica or completion index, then by name; the first one is the default. With several pods every line is
prefixed with ``[pod]``; with ``-f`` their streams are followed at the same time.

The API server reads logs from the node's kubelet. kwok fake nodes have none: kwok's own server answers in its
place only where kwok is configured for it (a ``ClusterLogs`` or ``Logs`` object, the node's kubelet endpoint
pointing at kwok). The dev cluster is (every pod shows one generated log, see ``webhook/devcluster/podlog.py``);
on a kwok cluster that is not, reading fails and the error says so in one line.
"""

from __future__ import annotations

import argparse
import queue
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from webhook.api.names import FAKE_NODE_ANNOTATION, INDEX_LABELS, ROLE_LABELS
from webhook.api.objects import RAN_PHASES, Obj, labels_of, name_of, pod_phase, pod_spec
from webhook.cli.common import Ctx, add_connection_flags, command, subparser
from webhook.core import duration

if TYPE_CHECKING:
    from webhook.cli.kubeapi import ApiError, KubeApi

PodT = TypeVar("PodT", bound=Obj)
"""A pod as the caller holds it (``choose_pods`` gives back the same objects)."""

ROLE_RANK = ("master", "chief", "launcher", "head", "driver", "ps", "worker", "evaluator", "executor")


def parse_duration(text: str) -> int:
    """``90s``, ``5m``, ``1h30m``, ``2h`` or plain seconds -> seconds; ``ArgumentTypeError`` otherwise.

    The grammar is :data:`webhook.core.duration.CLOCK` (whole numbers, so the seconds are whole).
    """
    try:
        return int(duration.parse_duration(text.strip(), duration.CLOCK))
    except duration.DurationError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration; use e.g. 30s, 5m, 1h or 1h30m") from None


def pod_order(pod: Obj) -> tuple[int, int, str]:
    """Chief first, then by index, then by name."""
    labels = labels_of(pod)
    role = next((str(labels[key]).lower() for key in ROLE_LABELS if key in labels), "")
    rank = ROLE_RANK.index(role) if role in ROLE_RANK else len(ROLE_RANK)
    index = next((labels[key] for key in INDEX_LABELS if key in labels), None)
    number = int(index) if isinstance(index, str) and index.isdigit() else 1 << 30
    return rank, number, name_of(pod)


def pod_name(pod: Obj) -> str:
    return name_of(pod)


def choose_pods(pods: Sequence[PodT], wanted: str | None, every: bool) -> list[PodT]:
    """The pods to read: ``--all`` every one, ``-i POD`` the one named so (or the only one whose name ends with
    or contains it), else the chief/first one. ``ValueError`` naming the choices when ``-i`` matches none."""
    ordered = sorted(pods, key=pod_order)
    if every:
        return ordered
    if wanted is None:
        return ordered[:1]
    for test in (
        lambda name: name == wanted,
        lambda name: name.endswith("-" + wanted),
        lambda name: wanted in name,
    ):
        found = [pod for pod in ordered if test(pod_name(pod))]
        if len(found) == 1:
            return found
        if len(found) > 1:
            break
    names = ", ".join(pod_name(pod) for pod in ordered) or "none"
    raise ValueError(f"-i {wanted!r} names none of the job's pods ({names})")


def log_query(
    container: str | None, follow: bool, tail: int | None, since: int | None, timestamps: bool = False
) -> list[tuple[str, str]]:
    query = []
    if container:
        query.append(("container", container))
    if follow:
        query.append(("follow", "true"))
    if tail is not None and tail >= 0:
        query.append(("tailLines", str(tail)))
    if since is not None:
        query.append(("sinceSeconds", str(since)))
    if timestamps:
        query.append(("timestamps", "true"))
    return query


def log_path(namespace: str, pod: str) -> str:
    from webhook.cli.kubeapi import PODS  # noqa: PLC0415

    return PODS.path(namespace, pod, "log")


def explain_log_error(api: KubeApi, pod: Obj, error: ApiError) -> str:
    """One line saying why a pod's logs cannot be read (a kwok node has no kubelet, a container has not
    started...)."""
    from webhook.cli.kubeapi import NODES, ApiError  # noqa: PLC0415

    name = pod_name(pod)
    node = str(pod_spec(pod).get("nodeName") or "")
    said = error.one_line()
    if error.status == 400 or error.not_found:
        return f"cannot read the logs of pod {name}: {said}"
    if node and (error.status >= 500 or "10250" in said or "dial tcp" in said):
        try:
            annotations = (api.get(NODES, node).get("metadata") or {}).get("annotations") or {}
        except ApiError:
            annotations = {}
        if FAKE_NODE_ANNOTATION in annotations:
            return (
                f"cannot read the logs of pod {name}: it runs on node {node}, a kwok fake node with no kubelet and "
                f"no kwok log server configured for it (kwok ClusterLogs; `kq dev up` sets it up), so there are no "
                f"logs to read (the API server said: {said})"
            )
        return f"cannot read the logs of pod {name}: the API server could not reach the kubelet of node {node}: {said}"
    return f"cannot read the logs of pod {name}: {said}"


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
    from webhook.cli.kubeapi import ApiError  # noqa: PLC0415

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


def _wait_for_pods(ctx: Ctx, args: argparse.Namespace) -> Any:
    """The job's view once it has a running pod (``-f`` on a job that has not started); notes on stderr."""
    from webhook.cli.jobs import find_job  # noqa: PLC0415

    announced = ""
    while True:
        _, _, view = find_job(ctx, args.job)
        if any(pod_phase(pod) in RAN_PHASES for pod in view.pods):
            return view
        if view.status in ("SUCCEEDED", "FAILED"):
            return view
        state = view.status + (f" at position {view.position}" if view.position is not None else "")
        if state != announced:
            ctx.note(f"waiting for {view.name} to start: it is {state} (kq why {view.name})")
            announced = state
        ctx.sleep(args.interval)


def _logs(ctx: Ctx, args: argparse.Namespace) -> int:
    from webhook.cli.fetch import CliError  # noqa: PLC0415
    from webhook.cli.jobs import find_job  # noqa: PLC0415

    _, _, view = find_job(ctx, args.job)
    started = [pod for pod in view.pods if pod_phase(pod) != "Pending"]
    if not view.pods or (args.follow and not started and view.status not in ("SUCCEEDED", "FAILED")):
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


def register(subparsers: Any) -> None:
    parser = subparser(
        subparsers,
        "logs",
        "print or follow a job's logs (chief pod by default)",
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
    add_connection_flags(parser)
    parser.set_defaults(handler=command(_logs))
