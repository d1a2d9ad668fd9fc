"""The dev cluster's pod log: one generated file that kwok serves as the log of every pod on its fake nodes.

Pods on kwok nodes run no program, so they have no output of their own. ``kq dev up`` gives kwok a
``ClusterLogs`` document (:func:`cluster_logs`, no selector: every pod, every container) naming this file, and
runs this module as the component ``kwok-pod-log``: it appends one line every ``interval`` seconds, so
``kubectl logs -f`` and ``kq logs -f`` have something to follow. Every pod therefore shows the same lines; they
say so. Once the file holds ``keep`` lines it is moved to ``pod.log.1`` and started afresh (kwok's follow
re-opens a re-created file), so it stays small.

kwok reads the file with the kubelet's reader (``k8s.io/cri-client/pkg/logs``), so each line is in the CRI
log format: ``<RFC 3339 time> stdout F <text>``.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path

INTERVAL = 2.0
"""Seconds between two generated lines."""
KEEP = 300
"""Lines after which the file is started afresh (10 minutes at the default interval)."""


def cri_line(text: str, when: datetime.datetime) -> str:
    """One line of a container log as the kubelet's reader expects it (``when`` is converted to UTC)."""
    stamp = when.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"
    return f"{stamp} stdout F {text}\n"


def header(path: Path, interval: float) -> list[str]:
    """The first lines of a fresh file: what these logs are."""
    return [
        "kube-queue dev cluster: this pod runs on a kwok fake node, which runs no container and has no output.",
        f"kwok serves this generated log for every pod (file {path}), one line every {interval:g}s.",
    ]


def tick(number: int, when: datetime.datetime) -> str:
    """Line ``number`` of the generated log."""
    return f"fake log line {number} at {when.astimezone(datetime.UTC):%H:%M:%S} UTC (the same for every pod)"


def _append(path: Path, lines: Sequence[str], when: datetime.datetime) -> None:
    # One write per call in append mode: a reader never sees half a line it cannot finish later.
    with path.open("a", encoding="utf-8") as out:
        out.write("".join(cri_line(text, when) for text in lines))


def start_file(path: Path, interval: float, when: datetime.datetime) -> None:
    """Create ``path`` (and its directory) with the header; keep an existing file as ``<path>.1``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        path.replace(path.with_name(path.name + ".1"))
    _append(path, header(path, interval), when)


def ensure_file(path: Path, interval: float = INTERVAL) -> None:
    """Create ``path`` with the header when it does not exist yet (kwok fails a log request whose file is
    missing, so the file exists before kwok starts)."""
    if not path.exists():
        start_file(path, interval, datetime.datetime.now(datetime.UTC))


_TICK = re.compile(r" stdout F fake log line (\d+) at ")


def _count_lines(path: Path) -> tuple[int, int]:
    """How many lines ``path`` holds, and the number of its last generated line (0 when none)."""
    count, last = 0, 0
    try:
        with path.open(encoding="utf-8", errors="replace") as text:
            for line in text:
                count += 1
                match = _TICK.search(line)
                if match:
                    last = int(match.group(1))
    except FileNotFoundError:
        pass
    return count, last


def run(
    path: Path,
    interval: float = INTERVAL,
    keep: int = KEEP,
    *,
    now: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    sleep: Callable[[float], None] = time.sleep,
    lines: int | None = None,
) -> None:
    """Append a line to ``path`` every ``interval`` seconds (``lines`` of them, forever when ``None``),
    starting the file afresh when it is missing or holds ``keep`` lines."""
    ensure_file(path, interval)
    written, number = _count_lines(path)  # a restarted generator goes on numbering where it stopped
    for _ in itertools.repeat(None) if lines is None else range(lines):
        sleep(interval)
        number += 1
        when = now()
        if written >= keep or not path.exists():
            start_file(path, interval, when)
            written = len(header(path, interval))
        _append(path, [tick(number, when)], when)
        written += 1


def cluster_logs(path: Path) -> str:
    """kwok's ``ClusterLogs`` document (JSON is YAML) serving ``path`` for every container of every pod."""
    doc = {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "ClusterLogs",
        "metadata": {"name": "kq-dev-pod-log"},
        "spec": {"logs": [{"logsFile": str(path), "follow": True}]},
    }
    return json.dumps(doc, indent=2) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m webhook.devcluster.podlog",
        description="Append a line to the dev cluster's shared fake pod log every few seconds (kwok serves it).",
    )
    parser.add_argument("--file", required=True, type=Path, help="the log file (kwok's ClusterLogs logsFile)")
    parser.add_argument("--interval", type=float, default=INTERVAL, help=f"seconds between lines ({INTERVAL:g})")
    parser.add_argument("--keep", type=int, default=KEEP, help=f"lines before the file starts afresh ({KEEP})")
    args = parser.parse_args(argv)
    if args.interval <= 0 or args.keep < 10:
        parser.error("--interval must be > 0 and --keep at least 10")
    print(f"kwok-pod-log: appending to {args.file} every {args.interval:g}s (pid {os.getpid()})", flush=True)
    try:
        run(args.file, args.interval, args.keep)
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
