"""The Markdown section :mod:`bench.e2e_bench` prints (BENCHMARKS.md), from its figures."""

from __future__ import annotations

from typing import Any

from bench.e2e_metrics import Delta, cpu_table, writes_table
from bench.e2e_rounds import report_lines as round_lines
from bench.machine import header

TITLE = "End to end on the dev cluster: admissions per second beside the physical limit (issues 7, 23)"


def _ratio(ours: float, raw: float) -> str:
    return f"{100 * ours / raw:.0f} %" if raw > 0 else "-"


def _log_span(log: dict[str, list[float]], key: str) -> tuple[float, float, int]:
    times = sorted(log.get(key, []))
    return (times[0], times[-1], len(times)) if times else (float("nan"), float("nan"), 0)


def _controller(shape: dict[str, Any], namespace: str) -> dict[str, float]:
    """The controller's side of one burst: passes, their mean length, admissions a pass, its own admission span
    (first to last ``decision=admit`` logged) and the refused writes."""
    delta: Delta = shape["delta"]
    passes = delta.get("kube_queue_controller_pass_seconds_count")
    seconds = delta.get("kube_queue_controller_pass_seconds_sum")
    admitted = delta.get("kube_queue_admissions_total")
    first, last, logged = _log_span(shape["log"], f"decision=admit {namespace}")
    return {
        "passes": passes,
        "pass_mean_ms": 1000 * seconds / passes if passes else float("nan"),
        "pass_total_s": seconds,
        "admitted": admitted,
        "per_pass": admitted / passes if passes else float("nan"),
        "first_admit_logged_s": first - shape["wall_start"],
        "logged_rate": (logged - 1) / (last - first) if logged > 1 and last > first else float("nan"),
        "refused": delta.get("kube_queue_failed_attempts_total"),
        "queued_logged": float(len(shape["log"].get("decision=queue", []))),
        "stale_logged": float(len(shape["log"].get("event=stale", []))),
    }


def webhook_rows(deltas: list[Delta], jobs: int) -> list[str]:
    names = sorted({name for delta in deltas for name in delta.webhooks()})
    rows = []
    for name in names:
        cells = []
        for delta in deltas:
            calls, seconds = delta.webhooks().get(name, (0.0, 0.0))
            cells.append(f"{calls / max(1, jobs):.2f} ({1000 * seconds / calls:.0f} ms)" if calls else "-")
        rows.append(f"| `{name}` | " + " | ".join(cells) + " |")
    return rows or ["| (none) | " + " | ".join("-" for _ in deltas) + " |"]


def report(figures: dict[str, Any] | None, command: str, in_flight: int, problem: str = "") -> str:
    lines = header(TITLE, command)
    if figures is None:
        return "\n".join([*lines, f"not measured: {problem}", ""])
    raw, held, raw_open, open_ = figures["raw"], figures["held"], figures["raw_open"], figures["open"]
    hooked = figures["raw_hooked"]
    jobs = held["jobs"]
    columns = {"raw release": raw, "held": held, "raw open": raw_open, "raw open, webhooks": hooked, "open": open_}
    lines += [
        "A dev cluster of its own (real kube-apiserver, etcd, kube-controller-manager, kube-scheduler, kwok; the "
        f"service with `--oversellrate=1`), five shapes of {jobs} small Jobs (1 pod, 10m CPU) in one run, in this "
        "order: **raw release** (suspended Jobs outside the quota tree, each released by one `spec.suspend: false` "
        f"merge patch, {in_flight} in flight: the controller's own `write_concurrency`; no webhook, no controller), "
        "**held** (Jobs wait in a quota capped at `kube-queue/max-jobs: 0`, then the cap is lifted), **raw open** "
        "(created suspended outside the tree, 16 creates in flight, each patched as soon as it exists), **raw open "
        "through webhooks** (the same, each create also through a mutating and a validating call to a do-nothing "
        "webhook, `bench/noop-webhook`: the least a job submitted open costs in any system that holds jobs with "
        "admission webhooks) and **open** (created into a quota that fits them all, 16 creates in flight, the "
        "webhook on the path). A "
        "release is the moment a watch sees `spec.suspend: false` (ours: with the admission record). The Job "
        "controller creates and the scheduler binds the pods meanwhile, on the same machine.",
        "",
        "| figure | ours | raw limit | ours / raw |",
        "|---|---:|---:|---:|",
        f"| held: sustained releases (first to last) | {held['sustained_per_second']:.1f} /s | "
        f"{raw['sustained_per_second']:.1f} /s | "
        f"**{_ratio(held['sustained_per_second'], raw['sustained_per_second'])}** |",
        f"| held: from the lift (raw: the first patch) to the last release | {held['end_to_end_per_second']:.1f} /s "
        f"({held['last_after_start']:.2f} s) | {raw['end_to_end_per_second']:.1f} /s ({raw['last_after_start']:.2f} s)"
        f" | {_ratio(held['end_to_end_per_second'], raw['end_to_end_per_second'])} |",
        f"| held: to the first release | {held['first_after_start'] * 1000:.0f} ms | "
        f"{raw['first_after_start'] * 1000:.0f} ms | - |",
        f"| open: sustained releases (first to last) | {open_['sustained_per_second']:.1f} /s | "
        f"{hooked['sustained_per_second']:.1f} /s (raw open through webhooks) | "
        f"**{_ratio(open_['sustained_per_second'], hooked['sustained_per_second'])}** |",
        f"| open, as users feel it: first create to last release | {open_['end_to_end_per_second']:.1f} /s | "
        f"{hooked['end_to_end_per_second']:.1f} /s | "
        f"{_ratio(open_['end_to_end_per_second'], hooked['end_to_end_per_second'])} |",
        f"| open: create request to release, p50 / p99 / max | {open_['latency_p50_ms']:.0f} / "
        f"{open_['latency_p99_ms']:.0f} / {open_['latency_max_ms']:.0f} ms | {hooked['latency_p50_ms']:.0f} / "
        f"{hooked['latency_p99_ms']:.0f} / {hooked['latency_max_ms']:.0f} ms | - |",
        f"| open beside raw open without webhooks: sustained | {open_['sustained_per_second']:.1f} /s | "
        f"{raw_open['sustained_per_second']:.1f} /s | "
        f"{_ratio(open_['sustained_per_second'], raw_open['sustained_per_second'])} |",
        f"| raw open through webhooks beside raw open: sustained | - | - | "
        f"{_ratio(hooked['sustained_per_second'], raw_open['sustained_per_second'])} (what two webhook calls cost) |",
        f"| open: creates (16 in flight; ours through the webhook) | {open_['created_per_second']:.1f} /s | - | - |",
        f"| raw: one release patch, p50 / p99 ({in_flight} in flight) | - | {raw['patch_p50_ms']:.0f} / "
        f"{raw['patch_p99_ms']:.0f} ms | - |",
        f"| held: creating the {jobs} Jobs (16 in flight, webhook on the path) | {held['created_per_second']:.1f} /s"
        " | - | - |",
        "",
        *round_lines(figures.get("rounds") or []),
        "Where the time goes, from the controller's own metrics (`kube_queue_controller_pass_seconds`, "
        "`kube_queue_admissions_total`, `kube_queue_failed_attempts_total`, scraped before and after each burst) "
        "and its log (`decision=admit` lines, stamped when the release patch came back). A pass's time includes "
        "its writes (releases, then the Queue and tree status).",
        "",
        "| controller, per burst | held | open |",
        "|---|---:|---:|",
    ]
    ours = {"held": _controller(held, "bench-admit"), "open": _controller(open_, "bench-open")}
    rows = (
        ("passes", "{:.0f}"),
        ("pass_mean_ms", "{:.0f} ms"),
        ("pass_total_s", "{:.2f} s"),
        ("per_pass", "{:.1f}"),
        ("first_admit_logged_s", "{:.3f} s"),
        ("logged_rate", "{:.1f} /s"),
        ("refused", "{:.0f}"),
        ("stale_logged", "{:.0f}"),
        ("queued_logged", "{:.0f}"),
    )
    names = {
        "passes": "passes in the burst",
        "pass_mean_ms": "mean pass (decide + writes)",
        "pass_total_s": "time in passes",
        "per_pass": "releases per pass",
        "first_admit_logged_s": "from the start (lift / first create) to the first release logged",
        "logged_rate": "releases/s as the controller logged them (first to last)",
        "refused": "writes refused (stale, API error)",
        "stale_logged": "stale refusals logged",
        "queued_logged": "Queued events decided",
    }
    for key, fmt in rows:
        lines.append(f"| {names[key]} | {fmt.format(ours['held'][key])} | {fmt.format(ours['open'][key])} |")
    prefix = "kube_queue_controller_pass_phase_seconds_sum{"
    phases = sorted({key[len(prefix):-1] for shape in (held, open_) for key in shape["delta"].controller
                     if key.startswith(prefix)})
    for phase in phases:
        lines.append(f"| time in passes: {phase} | {held['delta'].get(prefix + phase + '}'):.2f} s | "
                     f"{open_['delta'].get(prefix + phase + '}'):.2f} s |")
    lines += [
        f"| after the last release: Queue and tree status final | {held['status_settled_s']:.2f} s | "
        f"{open_['status_settled_s']:.2f} s |",
        f"| then: every job's Admitted Event sent | {held['events_sent_s']:.2f} s | {open_['events_sent_s']:.2f} s |",
        f"| webhook requests (pods, jobs) | {held['delta'].get('kube_queue_webhook_requests_total'):.0f} | "
        f"{open_['delta'].get('kube_queue_webhook_requests_total'):.0f} |",
        f"| time in the webhook's handler | {held['delta'].get('kube_queue_webhook_request_duration_seconds_sum'):.2f}"
        f" s | {open_['delta'].get('kube_queue_webhook_request_duration_seconds_sum'):.2f} s |",
        "",
        "What the API server did, from its `apiserver_request_total` (every client: our controller and webhook, "
        "the Job controller, the scheduler, kwok), scraped before and after each burst (the burst ends when all "
        "its pods run and, for ours, the statuses are final), per released job. The raw columns are what the "
        "cluster itself does for a job; the rest is ours.",
        "",
        *writes_table({name: (shape["delta"], jobs) for name, shape in columns.items()}),
        "",
        "The same, counted only from the start of each shape to its last release (what competed with the "
        "releases):",
        "",
        *writes_table({name: (shape["releases_delta"], jobs) for name, shape in columns.items()}),
        "",
        "Admission webhooks the API server called in the whole burst "
        "(`apiserver_admission_webhook_admission_duration_seconds`): calls per released job, and the mean wait.",
        "",
        "| webhook | " + " | ".join(columns) + " |",
        "|---|" + "---:|" * len(columns),
        *webhook_rows([shape["delta"] for shape in columns.values()], jobs),
        "",
        "CPU each process of the dev cluster used in the same windows (`/proc/<pid>/stat`), per released job; "
        "the windows lasted " + ", ".join(f"{shape['window_s']:.1f} s" for shape in columns.values())
        + " (the machine's other work competes for the same 2 cores).",
        "",
        *cpu_table({name: (shape["delta"], jobs) for name, shape in columns.items()}),
        "",
    ]
    return "\n".join(lines)
