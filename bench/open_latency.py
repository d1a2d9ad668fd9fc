"""The wait a user feels when a quota has room: the peer bench's open workload, repeated on one dev cluster.

    .venv/bin/python -m bench.open_latency [--rounds 5] [--jobs 200] [--port-base 28600]

One fresh dev cluster as ``bench.peer_kueue`` makes it for us (our service, webhook and extender,
``--oversellrate=1``; the same tree), then ROUNDS times: JOBS small Jobs created 16 at a time into a quota that
fits them all (the peer bench's workload b), each Job's create request to its admission as a watch sees it; between
rounds the Jobs are deleted and the machine left to quiet down. One round swings by a third on this shared
machine; the median of several swings less, so this is the command for before-and-after figures of that
wait (a report, not a test).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import e2e_shapes, peer_kueue, peer_kueue_workloads
from bench.machine import header
from webhook.api.objects import mappings
from webhook.cli import devsystem
from webhook.devcluster import cluster
from webhook.devcluster.config import ClusterConfig, Ports
from webhook.kube.client import KubeClient

COMMAND = ".venv/bin/python -m bench.open_latency"
TITLE = "Open submissions: create to admission, repeated (issue 23)"
FIGURES = ("latency_p50_ms", "latency_p99_ms", "sustained_per_second", "last_after_start", "controller_cpu_s")


async def _cleared(client: KubeClient, namespace: str) -> None:
    """Delete the round's Jobs (their pods go in the background) and wait until none is listed."""
    ref = e2e_shapes.jobs_ref(namespace)
    await client.request("DELETE", ref.path(None, namespace), [("propagationPolicy", "Background")])

    async def gone() -> bool:
        return not mappings((await client.list_page(ref, limit=1)).get("items"))

    await e2e_shapes.wait_for(gone, 300, f"the Jobs of {namespace} to go")


async def rounds(config: ClusterConfig, count: int, jobs: int) -> list[dict[str, Any]]:
    """``count`` rounds of the open workload on the cluster of ``config``."""
    out: list[dict[str, Any]] = []
    async with await KubeClient.connect(str(config.kubeconfig)) as client:
        await peer_kueue.install_ours(client, peer_kueue.seed_root())
        pid = peer_kueue.controller_pid(config, kueue=False)
        for index in range(count):
            if index:
                await _cleared(client, peer_kueue.OPEN)
            await e2e_shapes.settled(timeout=60)
            cpu = peer_kueue.process_cpu(pid)
            figures = await peer_kueue_workloads.open_submit(client, peer_kueue.OPEN, jobs, kueue=False)
            figures["controller_cpu_s"] = peer_kueue.process_cpu(pid) - cpu
            print(f"open latency: round {index + 1}: " + ", ".join(f"{key} {figures[key]:.2f}" for key in FIGURES),
                  file=sys.stderr)
            out.append(figures)
    return out


def report(head: list[str], results: list[dict[str, Any]], jobs: int) -> str:
    """The section (``head``: its first lines): one row per round, then the medians."""
    lines = [*head,
             "| round | create to admit p50, ms | p99, ms | admissions/s | last admission after the first create, s "
             "| controller CPU, s |",
             "|---:|---:|---:|---:|---:|---:|"]
    for index, figures in enumerate(results, 1):
        lines.append(f"| {index} | " + " | ".join(_cell(key, figures[key]) for key in FIGURES) + " |")
    if results:
        lines.append("| median | " + " | ".join(_cell(key, statistics.median(r[key] for r in results))
                                                 for key in FIGURES) + " |")
    lines += ["", f"Each round: {jobs} Jobs (10m CPU, 16Mi) created 16 at a time into the peer bench's open leaf "
              "(`bench.peer_kueue`, workload b); an admission is the Job's `spec.suspend` turning false as a watch "
              "sees it. The controller's CPU (`kq serve`'s, from `/proc`) is counted from the first create to the last "
              "admission. Between rounds the Jobs are deleted and the machine left to use less than 0.3 cores.", ""]
    return "\n".join(lines)


def _cell(key: str, value: float) -> str:
    return f"{value:.0f}" if key.endswith("_ms") else f"{value:.1f}" if key.startswith("sustained") else f"{value:.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--port-base", type=int,
                        default=int(os.environ.get("KQ_E2E_PORT_BASE", str(peer_kueue.DEFAULT_PORT_BASE))))
    args = parser.parse_args(argv)
    command = " ".join([COMMAND, *([] if args.rounds == 5 else [f"--rounds {args.rounds}"]),
                        *([] if args.jobs == 200 else [f"--jobs {args.jobs}"])])
    state = Path(tempfile.mkdtemp(prefix="kq-bench-open-"))
    config = ClusterConfig(state_dir=state, ports=Ports(args.port_base), nodes=peer_kueue.nodes(),
                           with_service=True, service_args=("--oversellrate=1",))
    try:
        with contextlib.redirect_stdout(sys.stderr):
            devsystem.up(config)
        results = asyncio.run(rounds(config, args.rounds, args.jobs))
    finally:
        cluster.down(config, purge=True, echo=lambda line: print(line, file=sys.stderr))
        shutil.rmtree(state, ignore_errors=True)
    sys.stdout.write(report(header(TITLE, command), results, args.jobs))  # the load at the start and now
    return 0


if __name__ == "__main__":
    sys.exit(main())
