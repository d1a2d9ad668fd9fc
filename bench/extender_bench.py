"""Benchmark of the scheduler extender (a report, not a test: it asserts nothing).

    .venv/bin/python bench/extender_bench.py [--iterations 300] [--pods 1000] [--rounds 3] [--port-base 24400]
                                          [--latency-only | --throughput-only]

1. **Latency.** The extender service (``make_app``) in a child process, on loopback HTTP, with a state of
   500 or 5,000 nodes (pool a, pool b, one virtual node), a ResourcePolicy ``[ecs pool=a, ecs pool=b, eci
   max 50]`` with 200 of its pods bound, and a quota tree. A client sends what a ``nodeCacheCapable``
   scheduler sends - every node name to the filter, then the nodes it passed to prioritize - one pod at a
   time, for a pod under the policy (it passes pool a: half the nodes) and a pod under none (all but the
   virtual node). Latency is the client's round trip: from sending the request to the last byte of
   the answer.
2. **Scheduler throughput.** A dev cluster of its own (``--port-base``, a temporary state directory) with
   500 kwok nodes; the real kube-scheduler places ``--pods`` pods (100m CPU, under a ResourcePolicy)
   without and with the extender, ``--rounds`` times each, alternating (its configuration rewritten and the
   scheduler restarted between runs). The pods are created while the scheduler is stopped; pods/s is
   measured between the first and the last binding seen by a watch; the table gives the medians.

Goals (issue 6): p99 of filter+prioritize under 10 ms at 5,000 nodes; the extender costs the scheduler less
than 30 % of its throughput. Numbers depend on the machine and its load (2 shared cores here).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import multiprocessing
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiohttp import web

from tests.service.test_extender_objects import bound, eci, ecs, node, pod, policy, quota_tree, virtual_node
from webhook.cli import devsystem
from webhook.devcluster import cluster, processes
from webhook.devcluster.config import ClusterConfig, Ports, default_nodes
from webhook.extender.app import make_app
from webhook.extender.state import ExtenderState
from webhook.kube.client import KubeApiError, KubeClient, ResourceRef

PODS = ResourceRef("", "v1", "pods")
NAMESPACES = ResourceRef("", "v1", "namespaces")
POLICIES = ResourceRef("scheduling.alibabacloud.com", "v1alpha1", "resourcepolicies")
BENCH_POLICY = policy("bench", units=[ecs(pool="a"), ecs(pool="b"), eci(max=50)], namespace="bench")
CLUSTER_POLICY = policy("bench", units=[ecs(), eci(max=50)], namespace="bench")
"""The dev cluster's nodes carry no pool label: one ECS unit of every regular node, then the virtual node."""


# 1. Latency --------------------------------------------------------------------------------------------------


def node_names(count: int) -> list[str]:
    return [f"node-{index:05d}" for index in range(count - 1)] + ["virtual-kubelet"]


def build_state(nodes: int) -> ExtenderState:
    state = ExtenderState(assume_ttl=3600)
    names = node_names(nodes)
    state.replace_nodes(
        [node(name, pool="a" if index % 2 == 0 else "b") for index, name in enumerate(names[:-1])] + [virtual_node()]
    )
    state.set_policies([BENCH_POLICY])
    state.set_trees(
        [
            quota_tree(
                {
                    "name": "root",
                    "min": {"cpu": "100000"},
                    "max": {"cpu": "100000"},
                    "namespaces": ["bench", "free"],
                }
            )
        ]
    )
    state.replace_pods(
        bound(pod(f"running-{index}", "1", namespace="bench"), names[index % (nodes - 1)]) for index in range(200)
    )
    state.ready = True
    return state


def _serve(nodes: int, port: int, ready: Any) -> None:
    state = build_state(nodes)
    gc.collect()
    gc.freeze()  # as `kq extender` does once its watches have listed

    async def main() -> None:
        runner = web.AppRunner(make_app(state), access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        ready.set()
        await asyncio.Event().wait()

    asyncio.run(main())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def extender_process(nodes: int) -> Iterator[int]:
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    port = free_port()
    process = context.Process(target=_serve, args=(nodes, port, ready), daemon=True)
    process.start()
    try:
        if not ready.wait(120):
            raise RuntimeError("the extender process did not start")
        yield port
    finally:
        process.terminate()
        process.join(10)


@dataclass
class Latency:
    nodes: int
    pod: str
    filter_ms: list[float]
    prioritize_ms: list[float]

    @property
    def both_ms(self) -> list[float]:
        return [a + b for a, b in zip(self.filter_ms, self.prioritize_ms, strict=True)]


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


async def measure(port: int, nodes: int, iterations: int) -> list[Latency]:
    names = node_names(nodes)
    base = f"http://127.0.0.1:{port}/extender"
    results = []
    async with aiohttp.ClientSession() as session:
        for label, namespace in (("policy", "bench"), ("no policy", "free")):
            filter_ms: list[float] = []
            prioritize_ms: list[float] = []
            for index in range(iterations + 20):
                obj = pod(f"p-{index}", "100m", namespace=namespace)
                body = orjson.dumps({"Pod": obj, "Nodes": None, "NodeNames": names})
                started = time.perf_counter()
                async with session.post(f"{base}/filter", data=body) as resp:
                    raw = await resp.read()
                filter_time = (time.perf_counter() - started) * 1000  # until the last byte arrived
                reply = orjson.loads(raw)
                if reply["Error"]:
                    raise RuntimeError(reply["Error"])
                # As the scheduler does: prioritize the nodes the filter let through.
                body = orjson.dumps({"Pod": obj, "Nodes": None, "NodeNames": reply["NodeNames"]})
                started = time.perf_counter()
                async with session.post(f"{base}/prioritize", data=body) as resp:
                    await resp.read()
                prioritize_time = (time.perf_counter() - started) * 1000
                if index >= 20:  # warm-up
                    filter_ms.append(filter_time)
                    prioritize_ms.append(prioritize_time)
            results.append(Latency(nodes, label, filter_ms, prioritize_ms))
    return results


def latency_report(iterations: int) -> list[Latency]:
    out: list[Latency] = []
    for nodes in (500, 5000):
        with extender_process(nodes) as port:
            out.extend(asyncio.run(measure(port, nodes, iterations)))
    return out


# 2. Scheduler throughput ---------------------------------------------------------------------------------


def _pod_manifest(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "bench"}},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}],
        },
    }


async def _create_all(client: KubeClient, namespace: str, count: int) -> None:
    await client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    for _ in range(300):  # the default ServiceAccount (kube-controller-manager) must exist before pods
        try:
            await client.get(ResourceRef("", "v1", "serviceaccounts"), "default", namespace)
            break
        except KubeApiError:
            await asyncio.sleep(0.2)
    await client.create(POLICIES, {**CLUSTER_POLICY, "metadata": {"name": "bench", "namespace": namespace}}, namespace)
    gate = asyncio.Semaphore(16)

    async def one(index: int) -> None:
        async with gate:
            await client.create(PODS, _pod_manifest(f"p-{index:05d}", namespace), namespace)

    await asyncio.gather(*(one(index) for index in range(count)))


async def _time_bindings(client: KubeClient, namespace: str, count: int, start_scheduler: Any) -> float:
    """Start the scheduler, watch the namespace's pods; pods/s between the first and the last binding."""
    ref = ResourceRef("", "v1", "pods", namespace)
    page = await client.list_page(ref, limit=5000)
    version = str(page["metadata"]["resourceVersion"])
    seen: dict[str, float] = {}
    start_scheduler()
    deadline = time.monotonic() + 300
    while len(seen) < count and time.monotonic() < deadline:
        async with client.watch(ref, resource_version=version, timeout_seconds=120) as events:
            async for event in events:
                obj = event.get("object") or {}
                version = str(obj.get("metadata", {}).get("resourceVersion") or version)
                name = obj.get("metadata", {}).get("name")
                if obj.get("spec", {}).get("nodeName") and name not in seen:
                    seen[name] = time.monotonic()
                    if len(seen) >= count:
                        break
    if len(seen) < count:
        raise RuntimeError(f"only {len(seen)} of {count} pods were bound in 300 s")
    times = sorted(seen.values())
    return (len(times) - 1) / (times[-1] - times[0])


def _restart_scheduler(config: ClusterConfig, bins: Path, extender: dict[str, object] | None) -> Any:
    (config.state_dir / "scheduler-config.yaml").write_text(cluster.scheduler_config(config, extender))
    processes.stop(config.run, "kube-scheduler", str(config.state_dir))
    (component,) = [c for c in cluster.components(config, bins) if c.name == "kube-scheduler"]

    def start() -> None:
        processes.start(component, config.run, config.logs)

    return start


def throughput_report(pods: int, port_base: int, rounds: int) -> dict[str, list[float]]:
    """Pods/s of each configuration, ``rounds`` times, alternating (without, with, without, ...) so that
    the machine's changing load falls on both alike."""
    state = Path(tempfile.mkdtemp(prefix="kq-extender-bench-"))
    config = ClusterConfig(state_dir=state, ports=Ports(port_base), nodes=default_nodes(regular=500, virtual=1))
    extender = devsystem.scheduler_extender(config)
    print(f"bringing up a dev cluster with 500 kwok nodes in {state} (ports {port_base}+) ...", file=sys.stderr)
    rates: dict[str, list[float]] = {"without extender": [], "with extender": []}
    try:
        bins = cluster.up(
            config,
            service=devsystem.extender_components,
            extender=extender,
            after_api=devsystem.install_api_objects,
            echo=lambda line: print(line, file=sys.stderr),
        )

        async def run(label: str, namespace: str, with_extender: dict[str, object] | None) -> None:
            start = _restart_scheduler(config, bins, with_extender)
            client = await KubeClient.connect(str(config.kubeconfig))
            try:
                await _create_all(client, namespace, pods)
                rate = await _time_bindings(client, namespace, pods, start)
            finally:
                await client.close()
            rates[label].append(rate)
            print(f"{label}: {rate:.1f} pods/s", file=sys.stderr)

        for round_index in range(rounds):
            asyncio.run(run("without extender", f"bench-plain-{round_index}", None))
            asyncio.run(run("with extender", f"bench-extender-{round_index}", extender))
    except BaseException:
        print(f"failed: the cluster's logs stay in {config.logs}", file=sys.stderr)
        cluster.down(config, echo=lambda line: print(line, file=sys.stderr))
        raise
    cluster.down(config, purge=True, echo=lambda line: print(line, file=sys.stderr))
    return rates


# Report --------------------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=300, help="requests per latency case (default 300)")
    parser.add_argument("--pods", type=int, default=1000, help="pods per throughput run (default 1000)")
    parser.add_argument("--rounds", type=int, default=3, help="throughput runs per configuration (default 3)")
    parser.add_argument(
        "--port-base", type=int, default=24400, help="ports of the bench's dev cluster (default 24400..24409)"
    )
    parser.add_argument("--latency-only", action="store_true", help="skip the dev cluster part")
    parser.add_argument("--throughput-only", action="store_true", help="skip the latency part")
    args = parser.parse_args(argv)

    latencies = [] if args.throughput_only else latency_report(args.iterations)
    if latencies:
        print(f"\nExtender latency: filter then prioritize over loopback HTTP, all node names, {args.iterations} pods")
        print(
            f"{'nodes':>6} {'pod':<10} {'filter p50':>10} {'p99':>7} {'prioritize p50':>14} {'p99':>7} "
            f"{'both p50':>9} {'both p99':>9}"
        )
    for row in latencies:
        print(
            f"{row.nodes:>6} {row.pod:<10} {statistics.median(row.filter_ms):>8.2f}ms "
            f"{percentile(row.filter_ms, 0.99):>5.2f}ms {statistics.median(row.prioritize_ms):>12.2f}ms "
            f"{percentile(row.prioritize_ms, 0.99):>5.2f}ms {statistics.median(row.both_ms):>7.2f}ms "
            f"{percentile(row.both_ms, 0.99):>7.2f}ms"
        )
    if args.latency_only:
        return 0
    rates = throughput_report(args.pods, args.port_base, args.rounds)
    print(f"\nkube-scheduler throughput: 500 kwok nodes, {args.pods} pods of 100m CPU per run, {args.rounds} runs each")
    print(f"{'configuration':<18} {'median pods/s':>13}  runs")
    for label, values in rates.items():
        print(f"{label:<18} {statistics.median(values):>13.1f}  {', '.join(f'{v:.0f}' for v in values)}")
    plain, with_ext = statistics.median(rates["without extender"]), statistics.median(rates["with extender"])
    pairs = zip(rates["without extender"], rates["with extender"], strict=True)
    per_round = ", ".join(f"{100 * (1 - b / a):.0f}%" for a, b in pairs)
    print(f"{'cost of extender':<18} {100 * (1 - with_ext / plain):>12.1f}%  of the medians; per round: {per_round}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
