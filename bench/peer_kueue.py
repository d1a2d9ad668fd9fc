"""Against the peer Kueue on the same machine, the same workloads, in one run (issue 21; a report, not a test).

    .venv/bin/python -m bench.peer_kueue [--port-base 28600] [--held 500] [--open 200] [--mixed 200]

(``--port-base`` defaults to ``$KQ_E2E_PORT_BASE`` when set.) Three fresh dev clusters, one after the other,
each on its own: ours (``kq dev up``: our service, webhook and extender, ``--oversellrate=1``), then Kueue
v0.17.0 twice on a cluster with only the control plane and Kueue (:mod:`bench.peer_kueue_install`): as shipped
(client qps 50, burst 100) and with the client rate limiter off; both with Kueue's webhooks registered. Kueue
is built from its Go module into the binary cache on first use (``build-binaries.sh kueue``; minutes of CPU).

Each cluster runs the workloads of :mod:`bench.peer_kueue_workloads` in this order: a) 500 held Jobs released,
b) 200 Jobs submitted open, c) the seed's departments borrowing and reclaiming with 200 mixed Jobs. Around each,
the API server's ``/metrics`` and the controller's ``/proc`` are read: writes per admitted Job, the controller's
CPU seconds and its peak RSS. Ours holds the three workloads in one quota tree: the seed's tree (from
``examples/seed/``) as a subtree ``enterprise`` beside two leaves for a) and b); Kueue holds them in two
ClusterQueues of their own and the seed's departments mapped to a cohort
(:func:`bench.peer_kueue_objects.cluster_queues`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import e2e_metrics, e2e_shapes, peer_kueue_install, peer_kueue_workloads
from bench import peer_kueue_objects as objects
from bench.peer_kueue_report import SystemRun, cpu_seconds, heading, peak_rss_mib, section, settled, write_counts
from webhook.api.kinds import ELASTIC_QUOTA_TREE
from webhook.api.names import MANAGED_NAMESPACE_LABEL, MAX_JOBS, TREE_NAMESPACE
from webhook.api.objects import labels_of
from webhook.cli import devsystem
from webhook.devcluster import cluster, processes
from webhook.devcluster.config import ClusterConfig, NodeSpec, Ports, default_nodes
from webhook.kube.client import KubeApiError, KubeClient, ResourceRef

COMMAND = ".venv/bin/python -m bench.peer_kueue"
DEFAULT_PORT_BASE = 28600
"""Ours on 28600+, Kueue's clusters 100 and 200 above: below the kernel's ephemeral ports (32768 and up), where
a client's own connection may hold a port the next cluster wants."""
SYSTEMS = {"ours": "ours", "Kueue as shipped": "shipped", "Kueue unlimited": "unlimited"}
"""Each system's name in the table -> its name for ``--systems``."""
HELD, OPEN = "peer-held", "peer-open"
BORROWER, OWNER = ("user-a", "user-b"), ("user-c",)
SEED_TREE = devsystem.SEED / "01-elasticquotatree.yaml"
TREES = ResourceRef.of(ELASTIC_QUOTA_TREE, TREE_NAMESPACE)
NAMESPACES = ResourceRef("", "v1", "namespaces")
HELD_CAP_PATH = f"/spec/root/children/0/max/{MAX_JOBS.replace('~', '~0').replace('/', '~1')}"
"""Where :func:`our_tree` caps the held leaf at zero jobs (a JSON pointer): the lift replaces it."""
BIG = {"cpu": "500", "memory": "500Gi"}
"""The quota of workloads a and b: room for every small Job."""
SETTLE_WINDOW = 2.0
"""Seconds of each reading of the API server's writes while a workload settles."""
SETTLE_LIMIT = 120.0
"""At most this long for a workload's writes to stop."""


def seed_root() -> dict[str, Any]:
    """The seed's quota tree root (Department-a with user-a, user-b; Department-b with user-c)."""
    return dict(yaml.safe_load(SEED_TREE.read_text())["spec"]["root"])


def our_tree(seed: dict[str, Any]) -> dict[str, Any]:
    """The held leaf (capped at zero jobs), the open leaf and the seed's tree as subtree ``enterprise``."""
    enterprise = {**copy.deepcopy(seed), "name": "enterprise"}
    root = {"cpu": "1100", "memory": "1100Gi", "nvidia.com/gpu": seed["max"].get("nvidia.com/gpu", 4)}
    return {
        "apiVersion": ELASTIC_QUOTA_TREE.api_version,
        "kind": "ElasticQuotaTree",
        "metadata": {"name": "elasticquotatree", "namespace": TREE_NAMESPACE},
        "spec": {"root": {"name": "root", "min": root, "max": root, "children": [
            {"name": "held", "min": BIG, "max": {**BIG, MAX_JOBS: 0}, "namespaces": [HELD]},
            {"name": "open", "min": BIG, "max": BIG, "namespaces": [OPEN]},
            enterprise,
        ]}},
    }


def nodes() -> tuple[NodeSpec, ...]:
    """Room for every pod: 4 x 64 CPU (the departments share 100), 400 pods each, and the virtual node."""
    regular = tuple(NodeSpec(f"ecs-{i}", "64", "256Gi", 4, pods=400) for i in range(4))
    return regular + tuple(spec for spec in default_nodes() if spec.virtual)


async def _namespaces(client: KubeClient, names: tuple[str, ...], managed: bool) -> None:
    for name in names:
        await client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    for name in names:
        async def ready(name: str = name) -> bool:
            labels = labels_of(await client.get(NAMESPACES, name))
            if managed and labels.get(MANAGED_NAMESPACE_LABEL) != "true":
                return False
            try:
                await client.get(ResourceRef("", "v1", "serviceaccounts", name), "default")
            except KubeApiError:
                return False
            return True

        await e2e_shapes.wait_for(ready, 120, f"namespace {name} to be ready")


def controller_pid(config: ClusterConfig, kueue: bool) -> int:
    pid = (peer_kueue_install.pid(config) if kueue
           else processes.running_pid(config.run, "kq-serve", str(config.state_dir)))
    if pid is None:
        raise RuntimeError(f"the controller process is not running; see {config.logs}/")
    return pid


def process_cpu(pid: int) -> float:
    return cpu_seconds(Path(f"/proc/{pid}/stat").read_text(), os.sysconf("SC_CLK_TCK"))


def _requests(config: ClusterConfig) -> dict[e2e_metrics.RequestKey, float]:
    status, body = cluster.api_get(config, "/metrics", timeout=10.0)
    if status != 200:
        raise RuntimeError(f"kube-apiserver /metrics answered {status}: {body[:200]!r}")
    return e2e_metrics.parse_requests(body.decode("utf-8", "replace"))


async def _measured(config: ClusterConfig, pid: int, run: Callable[[], Awaitable[dict[str, Any]]],
                    admissions: Callable[[dict[str, Any]], int]) -> dict[str, Any]:
    before, cpu = await asyncio.to_thread(_requests, config), process_cpu(pid)
    figures = await run()
    settle_s, after = await _settled(config)
    writes, events = write_counts(before, after)
    count = max(1, admissions(figures))
    figures.update(admissions=count, writes_per_job=writes / count, events_per_job=events / count,
                   controller_cpu_s=process_cpu(pid) - cpu, settle_s=settle_s)
    return figures


async def _settled(config: ClusterConfig) -> tuple[float, dict[e2e_metrics.RequestKey, float]]:
    """Wait until the writes the workload set off have stopped (the job controller's pods, queued Events, status
    updates), so they count for this workload and not the next; at most :data:`SETTLE_LIMIT` seconds. Returns
    the seconds waited and the last reading."""
    started = time.monotonic()
    reading = await asyncio.to_thread(_requests, config)
    while time.monotonic() - started < SETTLE_LIMIT:
        await asyncio.sleep(SETTLE_WINDOW)
        latest = await asyncio.to_thread(_requests, config)
        writes, _ = write_counts(reading, latest)
        reading = latest
        if settled(writes, SETTLE_WINDOW):
            break
    return time.monotonic() - started, reading


async def install_ours(client: KubeClient, seed: dict[str, Any]) -> Callable[[], Awaitable[None]]:
    await client.create(TREES, our_tree(seed))
    await _namespaces(client, (HELD, OPEN, *BORROWER, *OWNER), managed=True)

    async def lift() -> None:
        patch = [{"op": "replace", "path": HELD_CAP_PATH, "value": 100000}]
        await client.json_patch(TREES, "elasticquotatree", patch)

    return lift


async def _install_kueue(client: KubeClient, seed: dict[str, Any]) -> Callable[[], Awaitable[None]]:
    await _namespaces(client, (HELD, OPEN, *BORROWER, *OWNER), managed=False)
    queues = [objects.held_queue("held", [HELD], BIG, hold=True), objects.held_queue("open", [OPEN], BIG,
                                                                                     hold=False),
              *objects.cluster_queues(seed)]
    refs = {"ResourceFlavor": "resourceflavors", "ClusterQueue": "clusterqueues", "LocalQueue": "localqueues"}
    for item in [objects.flavor(), *queues, *objects.local_queues(queues)]:
        ref = ResourceRef(objects.GROUP, "v1beta2", refs[item["kind"]], item["metadata"].get("namespace"))
        await client.create(ref, item)
    held = ResourceRef(objects.GROUP, "v1beta2", "clusterqueues")

    async def lift() -> None:
        await client.merge_patch(held, "held", {"spec": {"stopPolicy": "None"}})

    return lift


async def workloads(config: ClusterConfig, kueue: bool, counts: tuple[int, int, int]) -> dict[str, Any]:
    seed = seed_root()
    owner_min = float(str(next(c for c in seed["children"] if OWNER[0] in c.get("namespaces", ()))["min"]["cpu"]))
    capacity = float(str(seed["min"]["cpu"]))
    async with await KubeClient.connect(str(config.kubeconfig)) as client:
        lift = await (_install_kueue if kueue else install_ours)(client, seed)
        pid = controller_pid(config, kueue)
        out: dict[str, Any] = {}
        print("peer bench: a) held, then released ...", file=sys.stderr)
        out["held"] = await _measured(config, pid, lambda: peer_kueue_workloads.held(
            client, HELD, counts[0], kueue, lift), lambda f: int(f["jobs"]))
        print("peer bench: b) open ...", file=sys.stderr)
        out["open"] = await _measured(config, pid, lambda: peer_kueue_workloads.open_submit(
            client, OPEN, counts[1], kueue), lambda f: int(f["jobs"]))
        print("peer bench: c) borrowing and reclaim ...", file=sys.stderr)
        out["reclaim"] = await _measured(config, pid, lambda: peer_kueue_workloads.reclaim(
            client, BORROWER, OWNER, owner_min=owner_min, capacity=capacity, count=counts[2], kueue=kueue),
            lambda f: int(f["admitted_ever"]))
        out["reclaim"]["utilisation_pct"] = 100 * out["reclaim"]["utilisation"]
        out["rss_mib"] = peak_rss_mib(Path(f"/proc/{pid}/status").read_text())
        return out


def run_system(name: str, port_base: int, counts: tuple[int, int, int], *, kueue: Path | None,
               unlimited: bool = False) -> SystemRun:
    """One fresh dev cluster, the three workloads, the cluster gone again."""
    result = SystemRun(name)
    state = Path(tempfile.mkdtemp(prefix="kq-bench-peer-"))
    config = ClusterConfig(state_dir=state, ports=Ports(port_base), nodes=nodes(),
                           with_service=kueue is None, service_args=("--oversellrate=1",))
    echo = lambda line: print(line, file=sys.stderr)  # noqa: E731
    try:
        print(f"peer bench: {name}: dev cluster in {state} on ports {port_base}+ ...", file=sys.stderr)
        with contextlib.redirect_stdout(sys.stderr):
            if kueue is None:
                devsystem.up(config)
            else:
                bins = cluster.up(config, echo=echo)
                peer_kueue_install.install(config, bins, kueue, unlimited=unlimited)
        figures = asyncio.run(workloads(config, kueue is not None, counts))
        result.rss_mib = float(figures.pop("rss_mib"))
        result.figures = figures
        result.cpu_s = sum(float(shape["controller_cpu_s"]) for shape in figures.values())
        print(f"peer bench: {name}: {figures}", file=sys.stderr)
    except Exception as error:  # a report: say what went wrong instead of inventing numbers
        result.problem = f"{type(error).__name__}: {error}"
        keep = Path(tempfile.gettempdir()) / f"kq-bench-peer-logs-{int(time.time())}"
        shutil.copytree(config.logs, keep, dirs_exist_ok=True)
        print(f"peer bench: {name} failed: {result.problem}; logs kept in {keep}", file=sys.stderr)
    finally:
        cluster.down(config, purge=True, echo=echo)
        shutil.rmtree(state, ignore_errors=True)
    return result


def notes(counts: tuple[int, int, int]) -> tuple[str, ...]:
    """What the table measured, in words, for ``counts`` Jobs of workloads a, b and c."""
    first = counts[2] * 3 // 5
    return (
        "Three fresh dev clusters, one after the other in the same run, each with one system only: ours "
        "(`kq dev up`: webhook, controller, extender; `--oversellrate=1`), then Kueue v0.17.0 built from its Go "
        "module, out of cluster on loopback with its webhooks registered, on a cluster with nothing of ours "
        "installed. **Kueue as shipped** runs with its shipped client limits (qps 50, burst 100) and its shipped "
        "workers per kind (5 for Jobs and Workloads); **Kueue unlimited** is the same with the client rate "
        "limiter off (qps -1). An admission is a Job's "
        "`spec.suspend` turning false as a watch sees it, for every system; an eviction is an admitted Job "
        "suspended again. Kueue's Jobs carry its queue-name label and are created suspended; ours are created as "
        "users write them (our webhook holds them).",
        "",
        f"a) {counts[0]} Jobs (10m CPU, 16Mi) wait behind a hold, ours a quota capped at `kube-queue/max-jobs: "
        "0`, Kueue's a ClusterQueue with `stopPolicy: Hold`; the hold is lifted and the rate is (N-1)/(first to "
        f"last admission). b) {counts[1]} such Jobs created 16 at a time into a quota that fits them all; the "
        "rate is from the first create to the last admission. c) the seed's tree (`examples/seed/`): "
        f"Department-a (user-a, user-b: min 60, max 100 CPU) submits {first} Jobs of 1, 2 and 4 CPU and borrows, "
        f"then Department-b (user-c: min 40) submits {counts[2] - first} and must get its min back by evictions; "
        "Kueue has the departments as two ClusterQueues in a cohort (nominal = min, borrowingLimit = max - min, "
        "`reclaimWithinCohort: Any`). Writes are the API server's own `apiserver_request_total` (POST, PUT, "
        "PATCH, DELETE...) over the workload, everything included (the bench's Job creates, pods, bindings, "
        "Events), from its start until the writes it set off have stopped (the cluster back at its idle rate of "
        "writes, at most 2 minutes later), divided by the Jobs admitted; CPU and peak RSS are the controller "
        "process's (`kq serve`, which is also our webhook; the `kueue` manager, which is also its webhook) from "
        "`/proc`.",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port-base", type=int,
                        default=int(os.environ.get("KQ_E2E_PORT_BASE", str(DEFAULT_PORT_BASE))))
    parser.add_argument("--held", type=int, default=500)
    parser.add_argument("--open", type=int, default=200)
    parser.add_argument("--mixed", type=int, default=200)
    parser.add_argument("--systems", nargs="+", choices=list(SYSTEMS.values()), default=list(SYSTEMS.values()),
                        help="run only these (a partial run is for trying the bench out, not for BENCHMARKS.md)")
    args = parser.parse_args(argv)
    counts = (args.held, args.open, args.mixed)
    command = " ".join([COMMAND, *([] if counts == (500, 200, 200) else [
        f"--held {args.held} --open {args.open} --mixed {args.mixed}"]),
        *([] if set(args.systems) == set(SYSTEMS.values()) else [f"--systems {' '.join(args.systems)}"])])
    skipped = "not run (--systems)"
    runs: list[SystemRun] = []
    if "ours" not in args.systems:
        runs.append(SystemRun("ours", problem=skipped))
    elif devsystem.service_available():
        runs.append(run_system("ours", args.port_base, counts, kueue=None))
    else:
        runs.append(SystemRun("ours", problem="the service (kq serve) is not in this build"))
    peers = [(name, offset, unlimited) for name, offset, unlimited in (
        ("Kueue as shipped", 100, False), ("Kueue unlimited", 200, True)) if SYSTEMS[name] in args.systems]
    kueue: Path | None = None
    if peers:
        try:
            print("peer bench: building Kueue (skipped when cached) ...", file=sys.stderr)
            kueue = peer_kueue_install.binary()
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as error:
            runs += [SystemRun(name, problem=str(error)) for name, _, _ in peers]
    for name, offset, unlimited in peers:
        if kueue is not None:
            runs.append(run_system(name, args.port_base + offset, counts, kueue=kueue, unlimited=unlimited))
    runs += [SystemRun(name, problem=skipped) for name, key in SYSTEMS.items()
             if key != "ours" and key not in args.systems]
    sys.stdout.write(section(runs, heading(command), notes(counts)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
