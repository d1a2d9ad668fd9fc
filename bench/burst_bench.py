"""The admission webhook under a 10,000-job burst (issue 21, part 3), beside the same burst without it (a report).

    .venv/bin/python -m bench.burst_bench [--jobs 10000] [--in-flight 64 256] [--port-base 27800]

One fresh dev cluster (``webhook.cli.devsystem.up``: our service and its webhooks). For each number of creates
in flight, two bursts of JOBS small Jobs (1 pod, 10m CPU, 16Mi), created as fast as one client can with that
many requests in flight (every request bounded by the client's 30 s timeout, every burst by DEADLINE_S):

* no webhook - a namespace outside the quota tree, Jobs created suspended (the object ours end as): no
  admission webhook of ours is called, so this is what the API server alone allows;
* ours - a namespace of the tree: every create goes through the mutating and the validating job webhooks and
  lands in a leaf capped at ``kube-queue/max-jobs: CAP`` (CAP admitted, the rest queued).

The no-webhook burst runs first (on the emptier store), so the ratio does not flatter ours. Around each burst
the API server's ``/metrics`` (``apiserver_admission_webhook_*``, ``apiserver_request_total``) and the
service's (``kube_queue_webhook_*``) are scraped, the service's RSS sampled and every process's CPU read.
Afterwards every Job the client saw created must exist; ours must each be admitted (released with the
controller's annotation) or queued (suspended and counted in its Queue's status), and the counts must add up.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kubernetes_asyncio import client as k8s_client

from bench import burst_stats, devrun, e2e_metrics, e2e_shapes
from bench.burst_report import report
from bench.e2e_bench import NAMESPACES, QUEUES, TREES, nodes
from webhook.api.kinds import ELASTIC_QUOTA_TREE
from webhook.api.names import ADMISSION_ANNOTATION, MANAGED_NAMESPACE_LABEL, MAX_JOBS, TREE_NAMESPACE
from webhook.api.objects import labels_of, mapping, mappings, status_of, text
from webhook.cli import devsystem
from webhook.core.quota import queue_name
from webhook.devcluster import cluster, processes
from webhook.devcluster.config import ClusterConfig, Ports
from webhook.kube.client import KubeApiError, KubeClient, ResourceRef, load_configuration

COMMAND = ".venv/bin/python -m bench.burst_bench"
JOBS = 10_000
IN_FLIGHT = (64, 256)
PORT_BASE = 27800
CAP = 50
"""Jobs admitted per leaf (``kube-queue/max-jobs``): the rest of each burst is queued, so no 10,000 pods."""
DEADLINE_S = 900.0
"""No create is sent after this many seconds of a burst (the rest count as not sent)."""
SETTLE_S = 300.0
"""How long the controller gets, after the bursts, to list every job in its Queue's status."""
API_PREFIXES = ("apiserver_admission_webhook_", "apiserver_request_total")
SERVICE_PREFIXES = ("kube_queue_webhook_", "kube_queue_controller_pass_")
"""The webhook's own figures, and the controller's passes (they share the service's process)."""


def ours_namespace(in_flight: int) -> str:
    return f"burst-{in_flight}"


def raw_namespace(in_flight: int) -> str:
    return f"burst-raw-{in_flight}"


def leaf(in_flight: int) -> str:
    return f"burst{in_flight}"


def tree(in_flights: tuple[int, ...]) -> dict[str, Any]:
    total = {"cpu": "1000", "memory": "1000Gi"}
    return {
        "apiVersion": ELASTIC_QUOTA_TREE.api_version,
        "kind": "ElasticQuotaTree",
        "metadata": {"name": "elasticquotatree", "namespace": TREE_NAMESPACE},
        "spec": {"root": {"name": "root", "min": total, "max": total, "children": [
            {"name": leaf(n), "min": {"cpu": "0", "memory": "0"}, "max": {**total, MAX_JOBS: CAP},
             "namespaces": [ours_namespace(n)]} for n in in_flights]}},
    }


@dataclass
class Burst:
    """One burst's figures."""

    name: str
    namespace: str
    in_flight: int
    webhook: bool
    jobs: int
    sent: int = 0
    created: list[str] = field(default_factory=list)
    failures: Counter[str] = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)
    """One full message per failure kind."""
    seconds: list[float] = field(default_factory=list)
    """Every request's time, created or failed."""
    wall_s: float = 0.0
    rss_peak_mib: float = 0.0
    cpu_s: dict[str, float] = field(default_factory=dict)
    api: dict[burst_stats.SampleKey, float] = field(default_factory=dict)
    service: dict[burst_stats.SampleKey, float] = field(default_factory=dict)
    check: dict[str, int] = field(default_factory=dict)


def rss_mib(pid: int, field_name: str = "VmRSS") -> float:
    """A process's resident memory (``VmRSS``, or ``field_name``) in MiB; 0 when it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field_name}:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return 0.0


def service_pid(config: ClusterConfig) -> int:
    return int(processes.pid_file(config.run, "kq-serve").read_text().split()[0])


def scrape(config: ClusterConfig, api_prefixes: tuple[str, ...] = API_PREFIXES,
           service_prefixes: tuple[str, ...] = SERVICE_PREFIXES) -> tuple[burst_stats.Samples, burst_stats.Samples]:
    """The API server's and the service's samples whose names start with the prefixes given."""
    service = burst_stats.parse_samples(e2e_metrics._get(f"http://127.0.0.1:{config.ports.metrics}/metrics"),
                                        service_prefixes)
    return api_samples(config, api_prefixes), service


def api_samples(config: ClusterConfig, prefixes: tuple[str, ...] = API_PREFIXES) -> burst_stats.Samples:
    """The API server's samples whose names start with ``prefixes``."""
    status, body = cluster.api_get(config, "/metrics", timeout=10.0)
    if status != 200:
        raise RuntimeError(f"kube-apiserver /metrics answered {status}: {body[:200]!r}")
    return burst_stats.parse_samples(body.decode("utf-8", "replace"), prefixes)


async def _create(config: ClusterConfig, burst: Burst, bodies: list[dict[str, Any]]) -> None:
    """Create ``bodies`` with ``burst.in_flight`` requests at once from one client (its connection pool that
    large), recording each request's time and each failure's kind."""
    configuration = await load_configuration(str(config.kubeconfig))
    configuration.connection_pool_maxsize = burst.in_flight
    ref = e2e_shapes.jobs_ref(burst.namespace)
    pending = iter(bodies)
    started = time.monotonic()
    async with KubeClient(k8s_client.ApiClient(configuration=configuration)) as client:
        async def worker() -> None:
            for body in pending:  # one iterator shared by the workers: each body is sent once
                if time.monotonic() - started > DEADLINE_S:
                    continue
                burst.sent += 1
                sent = time.perf_counter()
                try:
                    await client.create(ref, body)
                except KubeApiError as error:
                    kind = burst_stats.classify(error.status, error.reason, error.message)
                    burst.failures[kind] += 1
                    burst.examples.setdefault(kind, error.one_line()[:300])
                else:
                    burst.created.append(str(body["metadata"]["name"]))
                finally:
                    burst.seconds.append(time.perf_counter() - sent)

        await asyncio.gather(*(worker() for _ in range(burst.in_flight)))
    burst.wall_s = time.monotonic() - started


async def run_burst(config: ClusterConfig, burst: Burst) -> None:
    print(f"burst bench: {burst.name} ({burst.jobs} Jobs, {burst.in_flight} in flight) ...", file=sys.stderr)
    bodies = [e2e_shapes.job(index, burst.namespace, suspend=None if burst.webhook else True)
              for index in range(burst.jobs)]
    pid = service_pid(config)
    api_before, service_before = await asyncio.to_thread(scrape, config)
    cpu_before = e2e_metrics.cpu_seconds(config)
    done = asyncio.Event()

    async def sample() -> None:
        while not done.is_set():
            burst.rss_peak_mib = max(burst.rss_peak_mib, rss_mib(pid))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), 0.25)

    sampler = asyncio.ensure_future(sample())
    try:
        await _create(config, burst, bodies)
    finally:
        done.set()
        await sampler
    api_after, service_after = await asyncio.to_thread(scrape, config)
    cpu_after = e2e_metrics.cpu_seconds(config)
    burst.api = burst_stats.delta(api_before, api_after)
    burst.service = burst_stats.delta(service_before, service_after)
    burst.cpu_s = {name: cpu_after[name] - cpu_before.get(name, 0.0) for name in cpu_after}
    print(f"burst bench: {burst.name}: {len(burst.created)} created, {dict(burst.failures)} failed, "
          f"{burst.wall_s:.1f} s", file=sys.stderr)


async def _all_jobs(client: KubeClient, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    token: str | None = None
    for _ in range(1000):  # bounded: 1000 pages of 2000
        page = await client.list_page(e2e_shapes.jobs_ref(namespace), limit=2000, continue_token=token)
        items.extend(dict(item) for item in mappings(page.get("items")))
        token = text(mapping(page.get("metadata")).get("continue")) or None
        if not token:
            break
    return items


def _tally(items: list[dict[str, Any]], created: list[str]) -> dict[str, int]:
    names = {str(item["metadata"]["name"]) for item in items}
    admitted = queued = other = 0
    for item in items:
        suspended = (item.get("spec") or {}).get("suspend")
        annotated = ADMISSION_ANNOTATION in ((item.get("metadata") or {}).get("annotations") or {})
        if suspended is False and annotated:
            admitted += 1
        elif suspended is True:
            queued += 1
        else:
            other += 1
    return {"exist": len(items), "lost": sum(1 for name in created if name not in names), "admitted": admitted,
            "queued": queued, "neither": other}


async def verify(config: ClusterConfig, bursts: list[Burst]) -> None:
    """Every created Job exists; ours are admitted or queued, and their Queue's status lists every queued one
    (waits up to :data:`SETTLE_S` for the controller to catch up)."""
    async with await KubeClient.connect(str(config.kubeconfig)) as client:
        for burst in bursts:
            if not burst.webhook:
                burst.check = _tally(await _all_jobs(client, burst.namespace), burst.created)
                continue
            deadline = time.monotonic() + SETTLE_S
            while True:
                tally = _tally(await _all_jobs(client, burst.namespace), burst.created)
                queue = await client.get(QUEUES, queue_name(leaf(burst.in_flight), burst.namespace))
                details = mapping(status_of(queue).get("queueItemDetails"))
                omitted = details.get("activeOmitted")
                tally["queue_status_waiting"] = (len(mappings(details.get("active")))
                                                 + (omitted if isinstance(omitted, int) else 0))
                settled = (tally["queue_status_waiting"] == tally["queued"] and tally["neither"] == 0
                           and tally["admitted"] == min(CAP, tally["exist"]))
                if settled or time.monotonic() > deadline:
                    tally["settled"] = int(settled)
                    burst.check = tally
                    break
                await asyncio.sleep(2.0)


async def _prepare(config: ClusterConfig, in_flights: tuple[int, ...]) -> None:
    async with await KubeClient.connect(str(config.kubeconfig)) as client:
        await client.create(TREES, tree(in_flights))
        for n in in_flights:
            for namespace in (ours_namespace(n), raw_namespace(n)):
                await client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                                 "metadata": {"name": namespace}})
        for n in in_flights:
            async def managed(namespace: str = ours_namespace(n)) -> bool:
                labels = labels_of(await client.get(NAMESPACES, namespace))
                return bool(labels.get(MANAGED_NAMESPACE_LABEL) == "true")

            await e2e_shapes.wait_for(managed, 120, f"namespace {ours_namespace(n)} to be managed")

            async def service_account(namespace: str = ours_namespace(n)) -> bool:
                try:
                    await client.get(ResourceRef("", "v1", "serviceaccounts", namespace), "default")
                except KubeApiError:
                    return False
                return True

            await e2e_shapes.wait_for(service_account, 60, f"the default ServiceAccount of {ours_namespace(n)}")


async def measure(config: ClusterConfig, jobs: int, in_flights: tuple[int, ...], bursts: list[Burst]) -> None:
    """Run the bursts into ``bursts`` (kept when a later step fails), then check every Job."""
    await _prepare(config, in_flights)
    for n in in_flights:
        for webhook in (False, True):
            namespace = ours_namespace(n) if webhook else raw_namespace(n)
            burst = Burst("ours" if webhook else "no webhook", namespace, n, webhook, jobs)
            await run_burst(config, burst)
            bursts.append(burst)
    await verify(config, bursts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=JOBS)
    parser.add_argument("--in-flight", type=int, nargs="+", default=list(IN_FLIGHT))
    parser.add_argument("--port-base", type=int, default=PORT_BASE)
    args = parser.parse_args(argv)
    in_flights = tuple(args.in_flight)
    command = COMMAND if (args.jobs, in_flights, args.port_base) == (JOBS, IN_FLIGHT, PORT_BASE) else " ".join(
        [COMMAND, f"--jobs {args.jobs}", "--in-flight", *map(str, in_flights), f"--port-base {args.port_base}"])
    if not devsystem.service_available():
        sys.stdout.write(report([], command, CAP, 0.0, "the service (kq serve) is not in this build"))
        return 0
    config = ClusterConfig(state_dir=devrun.state_dir("burst"), ports=Ports(args.port_base),
                           nodes=nodes(CAP * len(in_flights)))
    bursts: list[Burst] = []

    def work() -> float:
        asyncio.run(measure(config, args.jobs, in_flights, bursts))
        return rss_mib(service_pid(config), "VmHWM")

    lifetime_peak, problem = devrun.run("burst", config, work)
    sys.stdout.write(report(bursts, command, CAP, lifetime_peak or 0.0, problem))
    return 0


if __name__ == "__main__":
    sys.exit(main())
