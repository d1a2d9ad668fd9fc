"""What a run shows: per quota admissions, waits, utilisation, borrowing and evictions; per job its fate.

Definitions (every time is virtual, in seconds):

* **wait** of a job: from its submission to its first admission (what Kueue calls time to admission);
  ``p50``/``p95`` are nearest-rank percentiles over the jobs of the quota that were admitted; jobs never
  admitted are counted in ``never_admitted``, with the longest such wait in ``waiting_longest``;
* **used** of a quota node: what its admitted jobs request (the ledger's ``used``, as the tree's
  ``status.used`` shows); **running**: what its started jobs request;
* **min_utilisation** / **max_utilisation**: the time-weighted mean of ``used`` over the run, divided by the
  node's ``min`` / ``max`` (absent when that is zero or unset);
* **borrowed**: ``max(0, used - min)`` per resource (a resource absent from ``min`` is guaranteed zero);
  time-weighted mean and peak;
* inner nodes add up their leaves' job counts; resource figures are the node's own.

Resource amounts are floats of whole units (CPU cores, bytes of memory, GPUs).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence

from webhook.api.names import MAX_JOBS
from webhook.api.objects import labels_of
from webhook.core.fairshare import INFINITE, fair_parents, share, weights
from webhook.core.quantity import NANO, format_quantity
from webhook.core.quota import QuotaNode
from webhook.core.resources import is_binary_resource
from webhook.sim.engine import Entry, SimJob, SimResult, State, seconds
from webhook.sim.model import format_duration
from webhook.sim.report_shape import (
    JobReport,
    Outcome,
    QuotaReport,
    Report,
    ResourceFigures,
    TimelineEntry,
    WaitStats,
)


def percentile(values: Sequence[float], fraction: float) -> float | None:
    """Nearest-rank percentile of ``values`` (``None`` when empty)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def wait_stats(waits: Sequence[float]) -> WaitStats:
    """``{count, mean, p50, p95, max}`` of waits in seconds (``None`` figures when there are none)."""
    return {
        "count": len(waits),
        "mean": (sum(waits) / len(waits)) if waits else None,
        "p50": percentile(waits, 0.50),
        "p95": percentile(waits, 0.95),
        "max": max(waits) if waits else None,
    }


def _units(nanos: int | float) -> float:
    return nanos / NANO


def _leaves_under(node: QuotaNode) -> list[str]:
    if node.is_leaf:
        return [node.key]
    return [key for child in node.children for key in _leaves_under(child)]


def _resources(result: SimResult, node: QuotaNode) -> dict[str, ResourceFigures]:
    meter = result.meter
    span = result.end
    names = sorted({*node.min, *node.max} - {MAX_JOBS})
    out: dict[str, ResourceFigures] = {}
    for name in names:
        minimum = node.min.get_or_zero(name)
        maximum = node.max.get(name)
        used_mean = meter.used_area.get(node.key, {}).get(name, 0) / span if span else None
        running_mean = meter.running_area.get(node.key, {}).get(name, 0) / span if span else None
        borrowed_mean = meter.borrowed_area.get(node.key, {}).get(name, 0) / span if span else None
        out[name] = {
            "min": _units(minimum),
            "max": None if maximum is None else _units(maximum),
            "used_mean": None if used_mean is None else _units(used_mean),
            "used_peak": _units(meter.used_peak.get(node.key, {}).get(name, 0)),
            "running_mean": None if running_mean is None else _units(running_mean),
            "min_utilisation": used_mean / minimum if used_mean is not None and minimum else None,
            "max_utilisation": used_mean / maximum if used_mean is not None and maximum else None,
            "borrowed_mean": None if borrowed_mean is None else _units(borrowed_mean),
            "borrowed_peak": _units(meter.borrowed_peak.get(node.key, {}).get(name, 0)),
        }
    return out


def _quota(result: SimResult, node: QuotaNode, jobs: Iterable[SimJob]) -> QuotaReport:
    members = list(jobs)
    waits = [seconds(job.wait) for job in members if job.wait is not None]
    never = [seconds(result.end - job.submitted) for job in members if job.first_admitted is None]
    policy = result.policies.get(node.key)
    return {
        "quota": node.full_name,
        "leaf": node.is_leaf,
        "policy": policy.value if policy is not None else None,
        "submitted": len(members),
        "admissions": sum(job.admissions for job in members),
        "evictions": sum(job.evictions for job in members),
        "finished": sum(1 for job in members if job.state is State.FINISHED),
        "running": sum(1 for job in members if job.state is State.RUNNING),
        "pending": sum(1 for job in members if job.state is State.PENDING),
        "waiting": sum(1 for job in members if job.state is State.QUEUED),
        "backoff": sum(1 for job in members if job.state is State.BACKOFF),
        "failed_starts": sum(job.failed_starts for job in members),
        "wait": wait_stats(waits),
        "never_admitted": len(never),
        "waiting_longest": max(never) if never else None,
        "resources": _resources(result, node),
    }


def _job(result: SimResult, job: SimJob) -> JobReport:
    waiting = job.state is State.QUEUED
    reason = result.reasons.get(job.key) if waiting else None
    return {
        "job": str(job.key),
        "kind": job.key.kind,
        "namespace": job.key.namespace,
        "name": job.key.name,
        "quota": job.leaf.full_name,
        "priority": job.workload.priority,
        "request": job.workload.request.to_spec(),
        "state": job.state.value,
        "position": result.positions.get(job.key) if waiting else None,
        "reason": (reason.explain() if reason is not None else None) if waiting else (job.pending_reason or None),
        "submitted": seconds(job.submitted),
        "admitted": None if job.first_admitted is None else seconds(job.first_admitted),
        "started": None if job.started is None else seconds(job.started),
        "finished": None if job.finished is None else seconds(job.finished),
        "wait": None if job.wait is None else seconds(job.wait),
        "admissions": job.admissions,
        "evictions": job.evictions,
        "failed_starts": job.failed_starts,
        "labels": dict(labels_of(job.obj)),
    }


def entry_dict(entry: Entry) -> TimelineEntry:
    return {"time": seconds(entry.time), "job": entry.job, "quota": entry.quota, "decision": entry.decision,
            "reason": entry.reason}


def to_dict(result: SimResult, *, timeline: bool = False, jobs: bool = True) -> Report:
    """The run as plain data (what ``kq simulate -o json`` prints)."""
    scenario = result.scenario
    tree = scenario.tree
    by_leaf: dict[str, list[SimJob]] = {}
    for job in result.jobs:
        by_leaf.setdefault(job.leaf.key, []).append(job)
    quotas: dict[str, QuotaReport] = {}
    for node in tree.nodes.values():
        members = [job for leaf in _leaves_under(node) for job in by_leaf.get(leaf, [])]
        quotas[node.full_name] = _quota(result, node, members)
    out: Report = {
        "scenario": scenario.name,
        "settings": {
            "oversellrate": float(scenario.oversell_rate),
            "strictPriority": scenario.strict_priority,
            "nodes": sum(shape.count for shape in scenario.nodes),
            "until": None if scenario.until is None else seconds(scenario.until),
        },
        "end": seconds(result.end),
        "submitted": len(result.jobs),
        "events": result.events,
        "passes": result.passes,
        "checks": result.checks,
        "quotas": quotas,
    }
    if jobs:
        out["jobs"] = [_job(result, job) for job in result.jobs]
    if timeline:
        out["timeline"] = [entry_dict(entry) for entry in result.timeline]
    return out


def to_json(result: SimResult, *, timeline: bool = False) -> str:
    return json.dumps(to_dict(result, timeline=timeline), indent=2, sort_keys=False) + "\n"


# Text -------------------------------------------------------------------------------------------------------


def _secs(value: float | None) -> str:
    if value is None:
        return "-"
    return format_duration(round(value * 1_000_000))


def _amount(name: str, units: float | None) -> str:
    """Exact quantity text for whole amounts (``60``, ``100Gi``), two decimals for means (``70.33``,
    ``70.33Gi``)."""
    if units is None:
        return "-"
    nanos = round(units * NANO)
    if nanos % NANO == 0:
        return format_quantity(nanos, is_binary_resource(name))
    suffix, scale = "", 1.0
    if is_binary_resource(name):
        for candidate, factor in (("Ti", 2.0**40), ("Gi", 2.0**30), ("Mi", 2.0**20), ("Ki", 2.0**10)):
            if units >= factor:
                suffix, scale = candidate, factor
                break
    text = f"{units / scale:.2f}".rstrip("0").rstrip(".")
    return text + suffix


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f}%"


def timeline_lines(entries: Iterable[Entry]) -> list[str]:
    """``   1.5s  Job/user-a/pi-00002  root/Department-a  queue  position 1: ...``, aligned."""
    rows = [(f"{seconds(e.time):.3f}s", e.job, e.quota, e.decision, e.reason) for e in entries]
    if not rows:
        return []
    widths = [max(len(row[column]) for row in rows) for column in range(4)]
    return ["  ".join(cell.rjust(widths[0]) if column == 0 else cell.ljust(widths[column])
                      for column, cell in enumerate(row[:4])) + "  " + row[4] for row in rows]


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows, strict=True)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(header, widths, strict=True)).rstrip()]
    lines += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    return lines


def to_text(result: SimResult, *, timeline: bool = False) -> str:
    """The human report: settings, a table per quota, resource use, the jobs still waiting, the timeline."""
    data = to_dict(result, timeline=False)
    scenario = result.scenario
    lines = [
        f"scenario {scenario.name}: {len(result.jobs)} jobs, oversellrate {data['settings']['oversellrate']:g}, "
        f"StrictPriority {'true' if scenario.strict_priority else 'false'}, "
        f"nodes {data['settings']['nodes'] or 'not modelled'}; virtual time 0s..{_secs(data['end'])}, "
        f"{result.events} events, {result.passes} decision passes",
        "",
    ]
    header = ["QUOTA", "POLICY", "JOBS", "ADMITTED", "EVICTED", "FINISHED", "RUNNING", "PENDING", "WAITING",
              "WAIT p50", "p95", "max"]
    rows = []
    for quota in data["quotas"].values():
        wait = quota["wait"]
        rows.append([quota["quota"], quota["policy"] or "", str(quota["submitted"]), str(quota["admissions"]),
                     str(quota["evictions"]), str(quota["finished"]), str(quota["running"]), str(quota["pending"]),
                     str(quota["waiting"]), _secs(wait["p50"]), _secs(wait["p95"]), _secs(wait["max"])])
    lines += _table(header, rows)
    lines.append("")
    header = ["QUOTA", "RESOURCE", "MIN", "MAX", "USED mean", "peak", "USED/MIN", "USED/MAX", "BORROWED mean", "peak"]
    rows = []
    for quota in data["quotas"].values():
        for name, figures in quota["resources"].items():
            rows.append([quota["quota"], name, _amount(name, figures["min"]), _amount(name, figures["max"]),
                         _amount(name, figures["used_mean"]), _amount(name, figures["used_peak"]),
                         _pct(figures["min_utilisation"]), _pct(figures["max_utilisation"]),
                         _amount(name, figures["borrowed_mean"]), _amount(name, figures["borrowed_peak"])])
    lines += _table(header, rows)
    waiting = [job for job in data.get("jobs", ()) if job["state"] in ("Queued", "Pending", "Backoff")]
    if waiting:
        lines += ["", f"waiting at the end ({len(waiting)}):"]
        for job in waiting[:50]:
            where = {"Queued": f"position {job['position']}", "Backoff": "in backoff (did not start in time)"}.get(
                job["state"], "pending (admitted)")
            lines.append(f"  {job['job']}  {job['quota']}  {where}: {job['reason'] or '-'}")
        if len(waiting) > 50:
            lines.append(f"  ... and {len(waiting) - 50} more (-o json lists every job)")
    lines += use_over_time(result)
    if timeline:
        lines += ["", "timeline:"]
        lines += ["  " + line for line in timeline_lines(result.timeline)]
    return "\n".join(lines) + "\n"


def use_over_time(result: SimResult, rows: int = 10) -> list[str]:
    """What the root's children use at ``rows`` evenly spaced times (the first resource the root caps), with each
    one's fair-sharing share when the root shares by weight (docs/fair-sharing.md)."""
    meter, tree = result.meter, result.scenario.tree
    resources = [name for name in tree.root.max if name != MAX_JOBS]
    if not meter.history or not resources or not tree.root.children:
        return []
    resource = resources[0]
    fair = tree.root.key in fair_parents(tree)
    weight = weights(tree) if fair else {}
    end = max(result.end, meter.history[-1][0])
    header = ["TIME", *(child.name for child in tree.root.children)]
    table_rows = []
    index = 0
    for step in range(rows + 1):
        at = end * step // rows
        while index + 1 < len(meter.history) and meter.history[index + 1][0] <= at:
            index += 1
        used = meter.history[index][1]
        cells = []
        for child in tree.root.children:
            amount = used.get(child.key, {}).get(resource, 0)
            cell = _amount(resource, _units(amount))
            if fair:
                value = share(tree.root, child, weight[child.key], used.get(child.key, {}))
                cell += " (share unbounded)" if value >= INFINITE else f" (share {float(value):.2f})"
            cells.append(cell)
        table_rows.append([_secs(seconds(at)), *cells])
    title = f"{resource} used over time" + (" (fair sharing under the root)" if fair else "")
    return ["", f"{title}:", *_table(header, table_rows)]


def outcome(data: Report) -> dict[str, Outcome]:
    """The comparable outcome of a run, by job name: ``{state, position, evicted}`` (``state`` is
    ``admitted`` for running/pending jobs, ``queued`` or ``finished``). The end-to-end test reads the same
    shape off the cluster."""
    out: dict[str, Outcome] = {}
    for job in data.get("jobs", ()):
        state = {"Running": "admitted", "Pending": "admitted", "Queued": "queued", "Finished": "finished"}
        out[f"{job['namespace']}/{job['name']}"] = {
            "state": state[job["state"]],
            "position": job["position"],
            "evicted": job["evictions"] > 0,
        }
    return out
