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
    """Per single create: (passes, their seconds, ``kq serve`` CPU seconds less the estimates' refreshes)."""
    estimates_cpu_s: list[float] = field(default_factory=list)
    """The start estimates' refreshes' CPU seconds in the same windows."""
    refreshes: int = 0
    refreshes_cpu_s: float = NAN
    """The start estimates' refreshes from the first pass to the end of the read side, and their CPU seconds."""
    more_latency: burst_stats.Latency | None = None
    more_api: burst_stats.Samples = field(default_factory=dict)
    more_service: burst_stats.Samples = field(default_factory=dict)
    reads: dict[str, list[float]] = field(default_factory=dict)
    read_errors: dict[str, str] = field(default_factory=dict)
    cold_ready_s: float = NAN
    cold_first_admission_s: float = NAN
    cold_statuses_s: float = NAN
    restart_rss_mib: float = NAN
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


def _webhook_rows(figures: Figures) -> list[tuple[str, str, str]]:
    rows: list[tuple[str, str, str]] = []
    names = sorted(name for name, calls in burst_stats.by_label(figures.more_api, f"{WAIT}_count", "name").items()
                   if calls)
    for name in names:
        match = {"name": name}
        p50 = 1000 * burst_stats.histogram_quantile(figures.more_api, WAIT, 0.5, match)
        p99 = 1000 * burst_stats.histogram_quantile(figures.more_api, WAIT, 0.99, match)
        rows.append((f"`{name}`: the API server's wait p50 / p99, ms", f"{_num(p50, 1)} / {_num(p99, 1)}", ""))
    p50 = 1000 * burst_stats.histogram_quantile(figures.more_service, HANDLER, 0.5)
    p99 = 1000 * burst_stats.histogram_quantile(figures.more_service, HANDLER, 0.99)
    rows.append(("our handler p50 / p99, ms (every call)", f"{_num(p50, 1)} / {_num(p99, 1)}", "p99 < 10"))
    return rows


def rows(figures: Figures) -> list[tuple[str, str, str]]:
    """(figure, ours, goal) rows."""
    out: list[tuple[str, str, str]] = []
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
    out.append(("`kq serve` resident MiB: before the fill / with the queue full / peak during the fill",
                f"{_num(figures.baseline_rss_mib, 0)} / {_num(figures.full_rss_mib, 0)} / "
                f"{_num(figures.fill_rss_peak_mib, 0)}", "< 500 with the queue full"))
    out.append(("`kq serve` KiB per queued Job (full less before, over the queued Jobs)", _num(per_job, 1), "< 6"))
    after = _per_job_kib(figures.restart_rss_mib, figures.baseline_rss_mib, figures.restart_queued)
    out.append(("the same after a restart: resident MiB / KiB per queued Job",
                f"{_num(figures.restart_rss_mib, 0)} / {_num(after, 1)}", ""))
    if figures.passes:
        seconds = [s / p for p, s, _ in figures.passes if p]
        cpu = [c / p for p, _, c in figures.passes if p]
        out.append(("one pass over the full queue: wall ms, median of 5 (passes set off per create)",
                    f"{_num(1000 * statistics.median(seconds), 0) if seconds else '-'} "
                    f"({'/'.join(f'{p:.0f}' for p, _, _ in figures.passes)})", ""))
        out.append(("`kq serve` CPU ms per pass (the create, the pass, its writes), median",
                    _num(1000 * statistics.median(cpu), 0) if cpu else "-", ""))
        out.append(("the start estimates' refreshes in the same 4 s: CPU ms, median",
                    _num(1000 * statistics.median(figures.estimates_cpu_s), 0), "off the pass"))
    each = figures.refreshes_cpu_s / figures.refreshes if figures.refreshes else NAN
    out.append(("the start estimates' refreshes with the queue full: count / CPU s each (mean)",
                f"{figures.refreshes} / {_num(each)}", ""))
    if figures.more_latency is not None:
        out.append(("1,000 more creates with the queue full (16 in flight): create p50 / p99, ms",
                    f"{_num(figures.more_latency.p50_ms, 0)} / {_num(figures.more_latency.p99_ms, 0)}", ""))
    out.extend(_webhook_rows(figures))
    for name, values in figures.reads.items():
        error = " (failed)" if name in figures.read_errors else ""
        out.append((f"{name}: s, median of {len(values)}{error}", _num(statistics.median(values), 2), "< 2"))
    out.append(("cold start: `kq serve` ready, s after its start", _num(figures.cold_ready_s), ""))
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


def report(figures: Figures, command: str, problem: str) -> str:
    lines = header(TITLE, command)
    lines += ["| figure | ours | goal (issue 38) |", "|---|---:|---|"]
    lines += [f"| {name} | {ours} | {goal} |" for name, ours, goal in rows(figures)]
    lines += ["", (
        f"One fresh dev cluster (`kq dev up`, `--oversellrate=1`). {figures.jobs:,} one-pod Jobs of 1 CPU are "
        "created through our webhooks, round robin over 100 namespaces (a tree of 10 departments x 10 teams, min 1 / "
        "max 2 CPU a team, 100 CPU in all), 64 requests in flight: each team runs one and queues the rest. "
        "Memory is `kq serve`'s resident set; a pass's figures are the controller's "
        "`kube_queue_controller_pass_seconds` and `kq serve`'s CPU from `/proc` in the 4 s after one create on a "
        "quiet machine. The read side is timed as a user runs it (a fresh `kq` process; the console's page over "
        "HTTP). Cold start: `kq serve` stopped, the running Job of each team of one department deleted, started "
        "again. Leader change: a second replica started and following, the leader killed with SIGKILL (its Lease "
        "left to expire), the running Job of each team of another department deleted. Kueue is not in this run.")]
    if figures.fill_progress:
        lines += ["", "`kq serve` resident MiB as the fill went: " + ", ".join(
            f"{created:,} Jobs {mib:.0f}" for created, mib in figures.fill_progress) + "."]
    if figures.failures:
        lines += ["", "Failed creates by kind: " + ", ".join(
            f"{kind} {count} (e.g. {figures.examples.get(kind, '')})" for kind, count in figures.failures.items())]
    for name, error in figures.read_errors.items():
        lines += ["", f"{name} failed: `{error.strip()}`"]
    if problem:
        lines += ["", f"**The run did not finish**: {problem}"]
    return "\n".join(lines) + "\n"
