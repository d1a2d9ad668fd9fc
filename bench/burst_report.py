"""The BENCHMARKS.md section of :mod:`bench.burst_bench`: one table per burst pair, failures by kind, the check."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from bench import burst_stats
from bench.machine import header

if TYPE_CHECKING:
    from bench.burst_bench import Burst

TITLE = "Admission webhook under a 10,000-job burst (issue 21)"
WAIT = "apiserver_admission_webhook_admission_duration_seconds"
REJECTIONS = "apiserver_admission_webhook_rejection_count"
CALLS = "apiserver_admission_webhook_request_total"
HANDLER = "kube_queue_webhook_request_duration_seconds"
DECISIONS = "kube_queue_webhook_requests_total"
PASS = "kube_queue_controller_pass_seconds"
PHASE = "kube_queue_controller_pass_phase_seconds"


def _ms(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.1f}" if value < 100 else f"{value:.0f}"


def _ratio(ours: float, raw: float) -> str:
    return "-" if not raw or math.isnan(raw) or math.isnan(ours) else f"{ours / raw:.2f}"


def _rate(burst: Burst) -> float:
    return len(burst.created) / burst.wall_s if burst.wall_s > 0 else math.nan


def _webhook_names(bursts: Sequence[Burst]) -> list[str]:
    names: set[str] = set()
    for burst in bursts:
        names |= {name for name, calls in burst_stats.by_label(burst.api, f"{WAIT}_count", "name").items() if calls}
    return sorted(names)


def _counts(values: dict[str, float]) -> str:
    return ", ".join(f"{key or '-'}: {value:.0f}" for key, value in sorted(values.items())) or "0"


def _rows(bursts: Sequence[Burst]) -> list[str]:
    cols = " | ".join(f"{burst.name}, {burst.in_flight} in flight" for burst in bursts)
    lines = [f"| | {cols} |", "|---|" + "---:|" * len(bursts)]

    def row(title: str, cells: Sequence[str]) -> None:
        lines.append(f"| {title} | " + " | ".join(cells) + " |")

    latencies = [burst_stats.latency(burst.seconds) for burst in bursts]
    row("Jobs sent / created", [f"{burst.sent} / {len(burst.created)}" for burst in bursts])
    row("failed (all kinds)", [str(sum(burst.failures.values())) for burst in bursts])
    row("failed by our webhook (timeout, unreachable, denied)",
        [str(sum(n for kind, n in burst.failures.items() if burst_stats.ours(kind))) for burst in bursts])
    row("burst wall time, s", [f"{burst.wall_s:.1f}" for burst in bursts])
    row("creates per second", [f"{_rate(burst):.0f}" for burst in bursts])
    row("create latency p50 / p99 / max, ms (every request)",
        [f"{_ms(lat.p50_ms)} / {_ms(lat.p99_ms)} / {_ms(lat.max_ms)}" for lat in latencies])
    row("`POST jobs` answers by code (API server)",
        [_counts(burst_stats.by_label(burst.api, "apiserver_request_total", "code",
                                      {"verb": "POST", "resource": "jobs"})) for burst in bursts])
    for name in _webhook_names(bursts):
        match = {"name": name}
        row(f"`{name}`: calls (API server)",
            [f"{burst_stats.total(burst.api, f'{WAIT}_count', match):.0f}" for burst in bursts])
        row(f"`{name}`: API server's wait p50 / p99, ms (histogram)",
            [f"{_ms(1000 * burst_stats.histogram_quantile(burst.api, WAIT, 0.5, match))} / "
             f"{_ms(1000 * burst_stats.histogram_quantile(burst.api, WAIT, 0.99, match))}" for burst in bursts])
        row(f"`{name}`: answers by code / rejections by error type",
            [f"{_counts(burst_stats.by_label(burst.api, CALLS, 'code', match))} / "
             f"{_counts(burst_stats.by_label(burst.api, REJECTIONS, 'error_type', match))}" for burst in bursts])
    for endpoint in ("mutate", "validate"):
        match = {"endpoint": endpoint}
        row(f"our `/{endpoint}` handler p50 / p99, ms (kube_queue histogram)",
            [f"{_ms(1000 * burst_stats.histogram_quantile(burst.service, HANDLER, 0.5, match))} / "
             f"{_ms(1000 * burst_stats.histogram_quantile(burst.service, HANDLER, 0.99, match))}" for burst in bursts])
        row(f"our `/{endpoint}` decisions", [_counts(burst_stats.by_label(burst.service, DECISIONS, "decision", match))
                                             for burst in bursts])
    row("controller passes / p50 / p99 ms (same process as the webhook)",
        [f"{burst_stats.total(burst.service, f'{PASS}_count'):.0f} / "
         f"{_ms(1000 * burst_stats.histogram_quantile(burst.service, PASS, 0.5))} / "
         f"{_ms(1000 * burst_stats.histogram_quantile(burst.service, PASS, 0.99))}" for burst in bursts])
    row("controller seconds in its prepare / decide phases",
        [" / ".join(f"{burst_stats.total(burst.service, f'{PHASE}_sum', {'phase': phase}):.1f}"
                    for phase in ("prepare", "decide")) for burst in bursts])
    for component in ("kq-serve", "kube-apiserver", "etcd"):
        row(f"CPU s, {component}", [f"{burst.cpu_s.get(component, 0.0):.1f}" for burst in bursts])
    row("service (kq serve) peak RSS during the burst, MiB", [f"{burst.rss_peak_mib:.0f}" for burst in bursts])
    return lines


def _check(bursts: Sequence[Burst]) -> list[str]:
    lines = ["| after the bursts | " + " | ".join(f"{b.name}, {b.in_flight}" for b in bursts) + " |",
             "|---|" + "---:|" * len(bursts)]
    keys = ("exist", "lost", "admitted", "queued", "neither", "queue_status_waiting", "settled")
    titles = {"exist": "Jobs that exist", "lost": "created but missing (lost)", "admitted": "admitted (released)",
              "queued": "queued (suspended)", "neither": "neither admitted nor queued",
              "queue_status_waiting": "waiting in the Queue's status", "settled": "counts add up (1 = yes)"}
    for key in keys:
        lines.append(f"| {titles[key]} | " + " | ".join(str(b.check.get(key, "-")) for b in bursts) + " |")
    return lines


def _failures(bursts: Sequence[Burst]) -> list[str]:
    kinds = sorted({kind for burst in bursts for kind in burst.failures})
    if not kinds:
        return ["No create failed in any burst."]
    lines = ["| failure kind | " + " | ".join(f"{b.name}, {b.in_flight}" for b in bursts) + " | example |",
             "|---|" + "---:|" * len(bursts) + "---|"]
    for kind in kinds:
        example = next(b.examples[kind] for b in bursts if kind in b.examples).replace("|", "/")
        lines.append(f"| {kind} | " + " | ".join(str(b.failures.get(kind, 0)) for b in bursts) + f" | {example} |")
    return lines


def _ratios(bursts: Sequence[Burst]) -> list[str]:
    lines = []
    for ours in (b for b in bursts if b.webhook):
        raw = next((b for b in bursts if not b.webhook and b.in_flight == ours.in_flight), None)
        if raw is None:
            continue
        mine, theirs = burst_stats.latency(ours.seconds), burst_stats.latency(raw.seconds)
        lines.append(f"- {ours.in_flight} in flight, ours / no webhook: creates per second "
                     f"{_ratio(_rate(ours), _rate(raw))}, create p50 {_ratio(mine.p50_ms, theirs.p50_ms)}x, "
                     f"p99 {_ratio(mine.p99_ms, theirs.p99_ms)}x.")
    return lines


def _peer(bursts: Sequence[Burst]) -> list[str]:
    """Our failure share beside the one figure the peer documents (not measured here)."""
    shares = [f"{100 * sum(b.failures.values()) / max(1, b.sent):.2f} % with {b.in_flight} in flight"
              for b in bursts if b.webhook]
    return [f"- Failed creates through our webhooks: {'; '.join(shares)} (the no-webhook bursts: "
            f"{sum(sum(b.failures.values()) for b in bursts if not b.webhook)} failures). The peer (Volcano) "
            "documents 98.7 % failures under a 10,000-job burst; that figure is its own, from its own set-up, "
            "not measured here."] if shares else []


def report(bursts: Sequence[Burst], command: str, cap: int, lifetime_peak_mib: float, problem: str) -> str:
    lines = header(TITLE, command)
    if problem or not bursts:
        lines += [f"not measured: {problem or 'no burst ran'}", ""]
        if not bursts:
            return "\n".join(lines)
    jobs = max((b.jobs for b in bursts), default=0)
    lines += [
        f"{jobs} small Jobs (1 pod, 10m CPU, 16Mi) per burst, created by one client with a fixed number of "
        "requests in flight, into a namespace outside the quota tree (created suspended: no webhook of ours on "
        f"the path) and then into one of the tree (both job webhooks on the path; a leaf capped at {cap} admitted "
        "jobs, the rest queued). One dev cluster, one run; the no-webhook burst of each pair ran first. Latency is "
        "per create request, failed ones included. The API server's figures are its own metrics (deltas over the "
        "burst); the handler's are the service's `kube_queue_webhook_request_duration_seconds`.",
        "",
        *_rows(bursts),
        "",
        *_ratios(bursts),
        *_peer(bursts),
        "",
        "Failures by kind:",
        "",
        *_failures(bursts),
        "",
        "Every Job, checked after the bursts:",
        "",
        *_check(bursts),
        "",
        f"The service's peak RSS over its whole life (start, caches, all bursts): {lifetime_peak_mib:.0f} MiB.",
        "",
    ]
    return "\n".join(lines)
