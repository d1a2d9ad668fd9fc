"""Where the writes go during an end-to-end measurement (a report, not a test).

Two Prometheus endpoints are scraped before and after each measured burst: the API server's ``/metrics``
(``apiserver_request_total`` by verb, resource and subresource: every request any client made) and the
controller's (``kq serve --metrics-port``: ``kube_queue_controller_pass_seconds``, admissions, refused writes).
The differences, divided by the jobs released, say what one admission costs the API server and how the
controller spent its passes.
"""

from __future__ import annotations

import asyncio
import os
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from bench import noop_webhook
from webhook.devcluster import cluster, processes
from webhook.devcluster.config import ClusterConfig

WEBHOOK = "WEBHOOK"
"""The pseudo-verb of the admission webhook figures in :attr:`Scrape.requests`."""
WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE", "APPLY", "DELETECOLLECTION")
"""``apiserver_request_total`` verbs that change something (the others read: GET, LIST, WATCH)."""

RequestKey = tuple[str, str, str]
"""``(verb, resource, subresource)``."""


@dataclass(frozen=True, slots=True)
class Scrape:
    """One reading of both endpoints."""

    requests: Mapping[RequestKey, float]
    """``apiserver_request_total`` summed over codes, groups, versions, scopes and components; also
    ``("WEBHOOK", name, "seconds" | "calls")`` from ``apiserver_admission_webhook_admission_duration_seconds``
    (the time the API server waited on each admission webhook)."""
    controller: Mapping[str, float]
    """The controller's counters and histogram sums/counts, by metric name (labels summed)."""
    cpu: Mapping[str, float] = field(default_factory=dict)
    """CPU seconds (user + system) each process of the dev cluster used so far, by component."""


@dataclass(frozen=True, slots=True)
class Delta:
    """What happened between two scrapes."""

    requests: Mapping[RequestKey, float]
    controller: Mapping[str, float] = field(default_factory=dict)
    cpu: Mapping[str, float] = field(default_factory=dict)

    def writes(self) -> dict[RequestKey, float]:
        return {key: value for key, value in self.requests.items() if key[0] in WRITE_VERBS and value > 0}

    def reads(self) -> float:
        return sum(value for key, value in self.requests.items() if key[0] not in (*WRITE_VERBS, WEBHOOK))

    def webhooks(self) -> dict[str, tuple[float, float]]:
        """Per admission webhook the API server called: ``(calls, seconds waited)``."""
        names = {key[1] for key in self.requests if key[0] == WEBHOOK}
        return {name: (self.requests.get((WEBHOOK, name, "calls"), 0.0),
                       self.requests.get((WEBHOOK, name, "seconds"), 0.0)) for name in sorted(names)
                if self.requests.get((WEBHOOK, name, "calls"), 0.0) > 0}

    def get(self, name: str) -> float:
        return self.controller.get(name, 0.0)


def parse_requests(text: str) -> dict[RequestKey, float]:
    out: dict[RequestKey, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name == "apiserver_admission_webhook_admission_duration_seconds":
            for sample in family.samples:
                what = {"_sum": "seconds", "_count": "calls"}.get(sample.name[len(family.name):])
                if what is not None:
                    key = ("WEBHOOK", sample.labels.get("name", ""), what)
                    out[key] = out.get(key, 0.0) + sample.value
            continue
        if family.name != "apiserver_request":
            continue
        for sample in family.samples:
            if sample.name != "apiserver_request_total":
                continue
            labels = sample.labels
            key = (labels.get("verb", ""), labels.get("resource", ""), labels.get("subresource", ""))
            out[key] = out.get(key, 0.0) + sample.value
    return out


CONTROLLER_SAMPLES = (
    "kube_queue_admissions_total",
    "kube_queue_controller_pass_seconds_count",
    "kube_queue_controller_pass_seconds_sum",
    "kube_queue_failed_attempts_total",
)


PHASES = ("kube_queue_controller_pass_phase_seconds_sum",)
"""Kept per ``phase`` label too (``name{phase}``), when the controller exports it."""


def parse_controller(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("kube_queue_") and (
                sample.name in CONTROLLER_SAMPLES or sample.name.endswith(("_total", "_sum", "_count"))
            ):
                out[sample.name] = out.get(sample.name, 0.0) + sample.value
                if sample.name in PHASES:
                    key = f"{sample.name}{{{sample.labels.get('phase', '')}}}"
                    out[key] = out.get(key, 0.0) + sample.value
    return out


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return bytes(response.read()).decode("utf-8", "replace")


def _pids(config: ClusterConfig) -> dict[str, int]:
    """The pid of every running component of the dev cluster."""
    out: dict[str, int] = {}
    for name in (*cluster.ORDER, "kq-extender", noop_webhook.COMPONENT):
        try:
            out[name] = int(processes.pid_file(config.run, name).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return out


def cpu_seconds(config: ClusterConfig) -> dict[str, float]:
    """User + system CPU seconds of every running component of the dev cluster (``/proc/<pid>/stat``)."""
    ticks = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for name, pid in _pids(config).items():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        out[name] = (int(fields[11]) + int(fields[12])) / ticks
    return out


def resident_mib(config: ClusterConfig) -> dict[str, float]:
    """Resident memory, MiB, of every running component of the dev cluster (``VmRSS`` of ``/proc/<pid>/status``)."""
    out: dict[str, float] = {}
    for name, pid in _pids(config).items():
        try:
            lines = Path(f"/proc/{pid}/status").read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            if line.startswith("VmRSS:"):
                out[name] = int(line.split()[1]) / 1024
    return out


def api_requests(config: ClusterConfig) -> dict[RequestKey, float]:
    """The API server's request counts so far (:func:`parse_requests` of its ``/metrics``)."""
    status, body = cluster.api_get(config, "/metrics", timeout=10.0)
    if status != 200:
        raise RuntimeError(f"kube-apiserver /metrics answered {status}: {body[:200]!r}")
    return parse_requests(body.decode("utf-8", "replace"))


def _scrape(config: ClusterConfig) -> Scrape:
    requests = api_requests(config)
    controller = parse_controller(_get(f"http://127.0.0.1:{config.ports.metrics}/metrics"))
    return Scrape(requests, controller, cpu_seconds(config))


async def scrape(config: ClusterConfig) -> Scrape:
    """Both endpoints, read off the event loop (the bench's watches keep running meanwhile)."""
    return await asyncio.to_thread(_scrape, config)


def delta(before: Scrape, after: Scrape) -> Delta:
    keys = set(before.requests) | set(after.requests)
    requests = {key: after.requests.get(key, 0.0) - before.requests.get(key, 0.0) for key in keys}
    names = set(before.controller) | set(after.controller)
    controller = {name: after.controller.get(name, 0.0) - before.controller.get(name, 0.0) for name in names}
    cpu = {name: after.cpu[name] - before.cpu.get(name, 0.0) for name in after.cpu}
    return Delta(requests, controller, cpu)


def label(key: RequestKey) -> str:
    verb, resource, subresource = key
    return f"{verb} {resource}/{subresource}" if subresource else f"{verb} {resource}"


def writes_table(columns: Mapping[str, tuple[Delta, int]], minimum: float = 0.02) -> list[str]:
    """A Markdown table: one row per ``verb resource[/subresource]`` write, one column per measurement
    (``name -> (delta, jobs released)``), cells in writes per released job; rows under ``minimum`` everywhere
    are left out (their sum is in the total row)."""
    names = list(columns)
    per_job = {name: {key: value / max(1, jobs) for key, value in delta.writes().items()}
               for name, (delta, jobs) in columns.items()}
    keys: set[RequestKey] = set()
    for cells in per_job.values():
        keys |= {key for key, value in cells.items() if value >= minimum}
    ordered = sorted(keys, key=lambda key: (-max(cells.get(key, 0.0) for cells in per_job.values()), key))
    lines = [f"| writes per released job | {' | '.join(names)} |", "|---|" + "---:|" * len(names)]
    for key in ordered:
        lines.append(f"| `{label(key)}` | " + " | ".join(f"{per_job[name].get(key, 0.0):.2f}" for name in names)
                     + " |")
    lines.append("| all writes | " + " | ".join(f"{sum(per_job[name].values()):.2f}" for name in names) + " |")
    lines.append("| reads (GET, LIST, WATCH) | " + " | ".join(
        f"{columns[name][0].reads() / max(1, columns[name][1]):.2f}" for name in names) + " |")
    return lines


def cpu_table(columns: Mapping[str, tuple[Delta, int]]) -> list[str]:
    """A Markdown table: CPU milliseconds per released job of each dev cluster process, one column per
    measurement."""
    names = list(columns)
    components = sorted({name for delta, _ in columns.values() for name in delta.cpu},
                        key=lambda name: -max(delta.cpu.get(name, 0.0) for delta, _ in columns.values()))
    lines = [f"| CPU ms per released job | {' | '.join(names)} |", "|---|" + "---:|" * len(names)]
    for component in components:
        lines.append(f"| {component} | " + " | ".join(
            f"{1000 * delta.cpu.get(component, 0.0) / max(1, jobs):.1f}" for delta, jobs in columns.values()) + " |")
    lines.append("| all | " + " | ".join(
        f"{1000 * sum(delta.cpu.values()) / max(1, jobs):.1f}" for delta, jobs in columns.values()) + " |")
    return lines
