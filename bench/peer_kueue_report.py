"""The peer benchmark's figures from raw readings, and its Markdown section (pure: no I/O, no clock).

* :func:`write_counts` - mutating requests to the API server between two ``/metrics`` readings (the API
  server's own ``apiserver_request_total``, parsed by :func:`bench.e2e_metrics.parse_requests`), all of them
  and those on Events;
* :func:`settled` - whether the writes a workload set off have stopped (so the next workload's count holds
  none of them);
* :func:`cpu_seconds` / :func:`peak_rss_mib` - a process's CPU (user + system) from ``/proc/<pid>/stat`` and
  its peak resident set from ``/proc/<pid>/status``;
* :func:`section` - the table: one column per system, ratio columns ours / Kueue.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.e2e_metrics import WRITE_VERBS, RequestKey
from bench.machine import header

TITLE = "Against Kueue on the same machine, in one run (issue 21)"
EVENTS = "events"


def write_counts(before: Mapping[RequestKey, float], after: Mapping[RequestKey, float]) -> tuple[float, float]:
    """``(all mutating requests, of which on Events)`` between two readings of ``apiserver_request_total``
    (``(verb, resource, subresource) -> count``); reads and admission-webhook timings are not writes."""
    total = events = 0.0
    for key in set(before) | set(after):
        verb, resource, _ = key
        if verb not in WRITE_VERBS:
            continue
        grown = after.get(key, 0.0) - before.get(key, 0.0)
        if grown <= 0:  # a counter never shrinks; a vanished series is no write
            continue
        total += grown
        if resource == EVENTS:
            events += grown
    return total, events


SETTLED_WRITES_PER_SECOND = 4.0
"""An idle dev cluster writes about 1.5 times a second (leases, its own Events): below this, a workload's writes
(pods the job controller still creates, Events still queued, status updates) are over."""


def settled(writes: float, seconds: float, limit: float = SETTLED_WRITES_PER_SECOND) -> bool:
    """Whether ``writes`` over the last ``seconds`` are at the idle cluster's rate."""
    return seconds > 0 and writes / seconds <= limit


def cpu_seconds(stat: str, ticks: int) -> float:
    """User + system CPU seconds from the text of ``/proc/<pid>/stat`` (the fields after the command, which
    may hold spaces and parentheses)."""
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / ticks


def peak_rss_mib(status: str) -> float:
    """``VmHWM`` (peak resident set) from the text of ``/proc/<pid>/status``, in MiB."""
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise ValueError("no VmHWM line in the process status")


@dataclass
class SystemRun:
    """What one system did in the run."""

    name: str
    figures: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Workload -> its figures (rates, latencies, writes, controller CPU...)."""
    cpu_s: float = math.nan
    """The controller process's CPU seconds over the three workloads."""
    rss_mib: float = math.nan
    problem: str = ""


Row = tuple[str, str, str, str]
"""``(label, workload, figure, better)``: ``better`` is ``higher`` or ``lower``."""
ROWS: tuple[Row, ...] = (
    ("a) held Jobs released: sustained admissions/s", "held", "sustained_per_second", "higher"),
    ("a) release to last admission, s", "held", "last_after_start", "lower"),
    ("a) API writes per admitted Job (of which Events)", "held", "writes_per_job", "lower"),
    ("b) Jobs submitted open: admissions/s from first create", "open", "end_to_end_per_second", "higher"),
    ("b) create to admit p50, ms", "open", "latency_p50_ms", "lower"),
    ("b) create to admit p99, ms", "open", "latency_p99_ms", "lower"),
    ("b) API writes per admitted Job (of which Events)", "open", "writes_per_job", "lower"),
    ("c) Department-a borrowed before the reclaim, CPU", "reclaim", "borrower_cpu_before", "higher"),
    ("c) Department-b has its min (40 CPU) back after, s", "reclaim", "min_back_s", "lower"),
    ("c) Jobs evicted", "reclaim", "evictions", "lower"),
    ("c) utilisation of the 100 CPU when settled, %", "reclaim", "utilisation_pct", "higher"),
    ("c) API writes per admitted Job (of which Events)", "reclaim", "writes_per_job", "lower"),
    ("controller CPU over a)-c), s", "", "cpu_s", "lower"),
    ("controller CPU per admission, ms", "", "cpu_ms_per_admission", "lower"),
    ("controller peak RSS, MiB", "", "rss_mib", "lower"),
)


def value(run: SystemRun, workload: str, figure: str) -> float | None:
    if not workload:
        admissions = sum(float(run.figures.get(name, {}).get("admissions", 0)) for name in run.figures)
        raw = {"cpu_s": run.cpu_s, "rss_mib": run.rss_mib,
               "cpu_ms_per_admission": 1000 * run.cpu_s / admissions if admissions else math.nan}[figure]
        return None if math.isnan(raw) else raw
    found = run.figures.get(workload, {}).get(figure)
    return None if found is None or (isinstance(found, float) and math.isnan(found)) else float(found)


def _cell(run: SystemRun, workload: str, figure: str) -> str:
    number = value(run, workload, figure)
    if number is None:
        return "not measured"
    if figure == "writes_per_job":
        events = float(run.figures[workload].get("events_per_job", 0.0))
        return f"{number:.2f} ({events:.2f})"
    return f"{number:.0f}" if abs(number) >= 100 or figure == "evictions" else f"{number:.2f}"


def _ratio(ours: float | None, theirs: float | None) -> str:
    if ours is None or theirs is None:
        return "-"
    if theirs == 0:
        return "-" if ours == 0 else "∞"
    return f"{ours / theirs:.2f}"


def table(runs: Sequence[SystemRun]) -> list[str]:
    """Rows of figures; the first run is ours, a ratio column (ours / that run) for each other one."""
    ours, peers = runs[0], runs[1:]
    head = ["figure", "better", *(run.name for run in runs), *(f"ours / {run.name.split(':')[0]}" for run in peers)]
    lines = ["| " + " | ".join(head) + " |", "|---|---|" + "---:|" * (len(head) - 2)]
    for label, workload, figure, better in ROWS:
        cells = [label, better, *(_cell(run, workload, figure) for run in runs)]
        cells += [_ratio(value(ours, workload, figure), value(peer, workload, figure)) for peer in peers]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def heading(command: str) -> list[str]:
    """The section's first lines, taken when the report is written: the load average when the bench started and
    at its end."""
    return header(TITLE, command)


def section(runs: Sequence[SystemRun], head: Sequence[str], notes: Sequence[str]) -> str:
    lines = [*head, *table(runs), ""]
    problems = [f"- {run.name}: {run.problem}" for run in runs if run.problem]
    if problems:
        lines += ["What could not be measured (the cells say `not measured`):", "", *problems, ""]
    lines += [*notes, ""]
    return "\n".join(lines)
