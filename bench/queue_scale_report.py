"""The BENCHMARKS.md section of :mod:`bench.queue_scale`: one table of figures beside the issue's goals."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import dataclass, field

from bench import burst_stats
from bench.machine import header

TITLE = "Tens of thousands of queued Jobs on one dev cluster (issue 38)"
WAIT = "apiserver_admission_webhook_admission_duration_seconds"
HANDLER = "kube_queue_webhook_request_duration_seconds"
NAN = float("nan")


@dataclass
class Figures:
    """What one run measured (``nan`` where a step did not get that far)."""

    jobs: int
    created: int = 0
    not_sent: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)
    fill_s: float = NAN
    fill_latency: burst_stats.Latency | None = None
    fill_rss_peak_mib: float = 0.0
    fill_progress: list[tuple[int, float]] = field(default_factory=list)
    """(Jobs created, ``kq serve`` resident MiB) every 5,000 creates."""
    settle_s: float = NAN
    statuses_right: int = 0
    queued: int = 0
    baseline_rss_mib: float = NAN
    full_rss_mib: float = NAN
    passes: list[tuple[float, float, float]] = field(default_factory=list)
    """Per single create: (passes, their seconds, ``kq serve`` CPU seconds less the estimates' refreshes and the
    summaries' warm-ups)."""
    estimates_cpu_s: list[float] = field(default_factory=list)
    """The start estimates' refreshes' CPU seconds in the same windows."""
    warm_cpu_s: list[float] = field(default_factory=list)
    """Per single create: the CPU seconds of the job summaries' warm-ups in its window."""
    refreshes: int = 0
    refreshes_cpu_s: float = NAN
    """The start estimates' refreshes from the first pass to the end of the read side, and their CPU seconds."""
    more_latency: burst_stats.Latency | None = None
    more_api: burst_stats.Samples = field(default_factory=dict)
    more_service: burst_stats.Samples = field(default_factory=dict)
    reads: dict[str, list[float]] = field(default_factory=dict)
    read_errors: dict[str, str] = field(default_factory=dict)
    read_notes: dict[str, list[str]] = field(default_factory=dict)
    """What a read that succeeded said on stderr, run by run (``kq list -A`` says when it read the API)."""
    read_cpu: dict[str, list[float]] = field(default_factory=dict)
    """Each timed command's own CPU seconds (user and system), by read."""
    read_log: list[str] = field(default_factory=list)
    """``kq serve``'s log lines of its read API and of its full heap collections, with their times."""
    cold_ready_s: float = NAN
    cold_first_admission_s: float = NAN
    cold_statuses_s: float = NAN
    restart_rss_mib: float = NAN
    before_reads_rss_mib: float = NAN
    """Right before the reads (after the pass and the 1,000 more creates)."""
    reads_rss_mib: float = NAN
    """After the reads (``kq serve`` keeps the job summaries it served)."""
    restart_queued: int = 0
    takeover_lease_s: float = NAN
    takeover_first_admission_s: float = NAN
    takeover_statuses_s: float = NAN
    lost: int = -1
    teams_running_one: int = -1


def _num(value: float, digits: int = 2) -> str:
    return "-" if math.isnan(value) else f"{value:.{digits}f}"


def _per_job_kib(rss_mib: float, baseline_mib: float, jobs: int) -> float:
    return (rss_mib - baseline_mib) * 1024 / jobs if jobs and not math.isnan(rss_mib - baseline_mib) else NAN


READS = {
    "list-all": ("`kq list -A`", "`kubectl get workloads -A`"),
    "list-all-raw": ("the same answer undecoded (`kubectl get --raw .../jobsummaries`)", "-"),
    "list-ns": ("`kq list -n NS`", "`kubectl get workloads -n NS`"),
    "why": ("`kq why -n NS JOB`", "`kubectl describe workload -n NS W`"),
    "console": ("the console's jobs page (one namespace)", "-"),
}
"""Each read the bench times: what a user runs for it with us, and with Kueue."""
UNGOALED = frozenset({"list-all-raw"})
"""Reads timed to tell where the time goes, with no goal of their own."""
Row = tuple[str, str, str]
"""(figure, value, goal)."""


def _webhook_rows(figures: Figures) -> list[Row]:
    rows: list[Row] = []
    names = sorted(name for name, calls in burst_stats.by_label(figures.more_api, f"{WAIT}_count", "name").items()
                   if calls)
    for name in names:
        match = {"name": name}
        p50 = 1000 * burst_stats.histogram_quantile(figures.more_api, WAIT, 0.5, match)
        p99 = 1000 * burst_stats.histogram_quantile(figures.more_api, WAIT, 0.99, match)
        rows.append((f"`{name}`: the API server's wait p50 / p99, ms", f"{_num(p50, 1)} / {_num(p99, 1)}", ""))
    if figures.more_service:
        p50 = 1000 * burst_stats.histogram_quantile(figures.more_service, HANDLER, 0.5)
        p99 = 1000 * burst_stats.histogram_quantile(figures.more_service, HANDLER, 0.99)
        rows.append(("our handler p50 / p99, ms (every call)", f"{_num(p50, 1)} / {_num(p99, 1)}", "p99 < 10"))
    return rows


def rows(figures: Figures) -> list[Row]:
    """One system's (figure, value, goal) rows; a figure its run did not measure has no row."""
    out: list[Row] = []
    fill_rate = figures.created / figures.fill_s if figures.fill_s and not math.isnan(figures.fill_s) else NAN
    latency = figures.fill_latency
    out.append(("Jobs created / failed / not sent", f"{figures.created} / {sum(figures.failures.values())} / "
                f"{figures.not_sent}", ""))
    out.append(("fill: creates per second (64 in flight)", _num(fill_rate, 1), ""))
    if latency is not None:
        out.append(("fill: create p50 / p99, ms", f"{_num(latency.p50_ms, 0)} / {_num(latency.p99_ms, 0)}", ""))
    out.append(("Queues' statuses right after the fill, of 100 (seconds after the last create)",
                f"{figures.statuses_right} ({_num(figures.settle_s, 1)} s)", ""))
    out.append(("Jobs queued", str(figures.queued), "50,000"))
    per_job = _per_job_kib(figures.full_rss_mib, figures.baseline_rss_mib, figures.queued)
    out.append(("controller resident MiB: before the fill / with the queue full / peak during the fill",
                f"{_num(figures.baseline_rss_mib, 0)} / {_num(figures.full_rss_mib, 0)} / "
                f"{_num(figures.fill_rss_peak_mib, 0)}", "< 500 with the queue full"))
    out.append(("controller KiB per queued Job (full less before, over the queued Jobs)", _num(per_job, 1),
                "< 6, and below Kueue's"))
    if not math.isnan(figures.reads_rss_mib):
        out.append(("resident MiB right before the reads / after them (the job summaries kept)",
                    f"{_num(figures.before_reads_rss_mib, 0)} / {_num(figures.reads_rss_mib, 0)}", ""))
    after = _per_job_kib(figures.restart_rss_mib, figures.baseline_rss_mib, figures.restart_queued)
    out.append(("the same after a restart: resident MiB / KiB per queued Job",
                f"{_num(figures.restart_rss_mib, 0)} / {_num(after, 1)}", ""))
    counted = [(p, s, c) for p, s, c in figures.passes if p]
    if counted:
        seconds = [s / p for p, s, _ in counted]
        cpu = [c / p for p, _, c in counted]
        out.append(("one pass over the full queue: wall ms, median of 5 (passes set off per create)",
                    f"{_num(1000 * statistics.median(seconds), 0)} "
                    f"({'/'.join(f'{p:.0f}' for p, _, _ in figures.passes)})", ""))
        out.append(("`kq serve` CPU ms per pass (the create, the pass, its writes), median",
                    _num(1000 * statistics.median(cpu), 0), ""))
        out.append(("the start estimates' refreshes in the same 4 s: CPU ms, median",
                    _num(1000 * statistics.median(figures.estimates_cpu_s), 0), "off the pass"))
        if figures.warm_cpu_s:
            out.append(("the job summaries' warm-ups in the same 4 s: CPU ms, each",
                        "/".join(f"{1000 * cpu:.0f}" for cpu in figures.warm_cpu_s), "off the pass"))
    if figures.passes:
        out.append(("controller CPU ms in the 4 s after one create, median of 5 (ours less the estimates and "
                    "warm-ups)",
                    _num(1000 * statistics.median(c for _, _, c in figures.passes), 0), ""))
    if figures.refreshes or counted:
        each = figures.refreshes_cpu_s / figures.refreshes if figures.refreshes else NAN
        out.append(("the start estimates' refreshes with the queue full: count / CPU s each (mean)",
                    f"{figures.refreshes} / {_num(each)}", ""))
    if figures.more_latency is not None:
        out.append(("1,000 more creates with the queue full (16 in flight): create p50 / p99, ms",
                    f"{_num(figures.more_latency.p50_ms, 0)} / {_num(figures.more_latency.p99_ms, 0)}", ""))
    out.extend(_webhook_rows(figures))
    for role, values in figures.reads.items():
        error = " (failed)" if role in figures.read_errors else ""
        ours, kueue = READS.get(role, (role, "-"))
        out.append((f"{ours} / {kueue}: s, median of 3", _num(statistics.median(values), 2) + error,
                    "" if role in UNGOALED else "< 2"))
        out.append((f"{ours} / {kueue}: s, each run", " / ".join(_num(value, 2) for value in values), ""))
        if role in figures.read_cpu:
            out.append((f"{ours} / {kueue}: its own CPU, s, each run",
                        " / ".join(_num(value, 2) for value in figures.read_cpu[role]), ""))
    out.append(("cold start: controller ready, s after its start", _num(figures.cold_ready_s), ""))
    out.append(("cold start: first admission, s after its start", _num(figures.cold_first_admission_s), ""))
    out.append(("cold start: every Queue's status right, s after its start", _num(figures.cold_statuses_s), ""))
    out.append(("leader killed: the Lease taken by the other replica, s after the kill",
                _num(figures.takeover_lease_s), "(the Lease's 15 s)"))
    out.append(("leader change: first admission, s after the Lease was taken",
                _num(figures.takeover_first_admission_s), "< 5"))
    out.append(("leader change: every Queue's status right, s after the Lease was taken",
                _num(figures.takeover_statuses_s), ""))
    out.append(("check: Jobs lost / teams running exactly one Job, of 100", f"{figures.lost} / "
                f"{figures.teams_running_one}", "0 / 100"))
    return out


def _ratio(ours: str, kueue: str) -> str:
    try:
        a, b = float(ours), float(kueue)
    except ValueError:
        return ""
    return f"{a / b:.2f}" if a > 0 and b > 0 else ""  # nan compares false


def table(ours: Figures, kueue: Figures | None) -> list[tuple[str, str, str, str, str]]:
    """(figure, ours, Kueue, ours / Kueue, goal): every row of either system, in ours' order, a row only one
    of them has right after the row before it."""
    mine = rows(ours)
    theirs = rows(kueue) if kueue is not None else []
    order = [name for name, _, _ in mine]
    for index, (name, _, _) in enumerate(theirs):
        if name not in order:
            before = theirs[index - 1][0] if index else ""
            order.insert(order.index(before) + 1 if before in order else len(order), name)
    values = {name: value for name, value, _ in mine}
    others = {name: value for name, value, _ in theirs}
    goals = {name: goal for name, _, goal in [*theirs, *mine]}
    out = []
    for name in order:
        a, b = values.get(name, "-"), others.get(name, "-") if kueue is not None else ""
        out.append((name, a, b, _ratio(a, b), goals[name]))
    return out


def report(figures: Figures, command: str, problem: str, kueue: Figures | None = None,
           kueue_problem: str = "") -> str:
    lines = header(TITLE, command)
    lines += ["| figure | ours | Kueue v0.17.0 | ours / Kueue | goal (issue 38) |", "|---|---:|---:|---:|---|"]
    lines += [f"| {name} | {a} | {b} | {ratio} | {goal} |" for name, a, b, ratio, goal in table(figures, kueue)]
    kueue_jobs = f"{kueue.jobs:,}" if kueue is not None else "the same"
    lines += ["", (
        f"Two fresh dev clusters, one after the other. Ours (`kq dev up`, `--oversellrate=1`): {figures.jobs:,} "
        "one-pod Jobs of 1 CPU are created through our webhooks, round robin over 100 namespaces (a tree of 10 "
        "departments x 10 teams, min 1 / max 2 CPU a team, 100 CPU in all), 64 requests in flight: each team runs "
        "one and queues the rest. Kueue v0.17.0 (built from its Go module, out of cluster on loopback, its "
        f"webhooks registered, its client rate limiter off, leader election on) gets {kueue_jobs} such Jobs, "
        "created suspended with its queue-name label, into the same tree as Kueue has it: a Cohort per "
        "department under a root Cohort (borrowing limit = the department's max less its teams' min), a "
        "ClusterQueue per team (nominal = min, borrowing limit = max - min), a LocalQueue per namespace. "
        "The controller is `kq serve` (also our webhook) and the `kueue` manager (also its webhook): memory is "
        "its resident set, CPU from `/proc`; ours' pass figures are `kube_queue_controller_pass_seconds` in the "
        "4 s after one create on a quiet machine (Kueue has no pass over the queue: its CPU in the same 4 s). A "
        "Queue's status is right when it lists every Job waiting in its namespace (Kueue: the team's ClusterQueue's "
        "`pendingWorkloads`). The reads are timed as a user runs them, a fresh process each (Kueue's "
        "visibility API is not in the bench: its server reads its certificate from /visibility, a path fixed in "
        "its code; Kueue has no console). An admission is a "
        "Job's `spec.suspend` seen false by a watch. Cold start: the "
        "controller stopped, the running Job of each team of one department deleted, started again. Leader "
        "change: a second replica started and following (Kueue's webhooks pointed at it, as its Service would "
        "route), the leader killed with SIGKILL (its Lease left to expire), the running Job of each team of "
        "another department deleted.")]
    for name, run in (("ours", figures), ("Kueue", kueue)):
        if run is not None and run.fill_progress:
            lines += ["", f"{name}: the controller's resident MiB as the fill went: " + ", ".join(
                f"{created:,} Jobs {mib:.0f}" for created, mib in run.fill_progress) + "."]
        if run is not None and run.failures:
            lines += ["", f"{name}: failed creates by kind: " + ", ".join(
                f"{kind} {count} (e.g. {run.examples.get(kind, '')})" for kind, count in run.failures.items())]
        for role, notes in (run.read_notes.items() if run is not None else ()):
            lines += ["", f"{name}: {READS.get(role, (role,))[0 if name == 'ours' else -1]} said on stderr: "
                      + "; ".join(f"`{note}`" for note in notes)]
        if run is not None and run.read_log:
            lines += ["", f"{name}: `kq serve`'s read API and its full heap collections (UTC times):", "",
                      *(f"    {line}" for line in run.read_log)]
        for role, error in (run.read_errors.items() if run is not None else ()):
            lines += ["", f"{name}: {READS.get(role, (role,))[0 if name == 'ours' else -1]} failed: "
                      f"`{error.strip()}`"]
    if problem:
        lines += ["", f"**Our run did not finish**: {problem}"]
    if kueue_problem:
        lines += ["", f"**Kueue's run did not finish**: {kueue_problem}"]
    return "\n".join(lines) + "\n"
