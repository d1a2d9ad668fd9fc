"""Tens of thousands of queued Jobs on one dev cluster: what the service costs as the queue grows (issue 38).

    .venv/bin/python -m bench.queue_scale [--jobs 50000] [--kueue-jobs 20000] [--port-base 28900]
                                          [--systems ours kueue]

Two fresh dev clusters, one after the other: ours, then Kueue v0.17.0 built from its Go module
(:mod:`bench.queue_scale_kueue` says how it runs and what stands for each of our steps there; it gets
``--kueue-jobs``, 20,000 by default: at 50,000 its Workloads fall behind the creates for longer than the bench
waits). Ours:

A fresh dev cluster (``kq dev up``: our service, its webhooks, the console; ``--oversellrate=1``). The tree is
10 departments of 10 teams (min 10 / max 20 CPU a department, min 1 / max 2 a team), one namespace a team, 100
CPU in all. JOBS one-pod Jobs of 1 CPU are created through our webhooks, round robin over the 100 namespaces, 64
requests in flight, each bounded by the client's timeout and the whole fill by FILL_DEADLINE_S: every team runs
one and queues the rest. Then, with the queue full:

* memory: ``kq serve``'s resident memory, less what it held before the fill, per queued Job; again after a
  restart (a fresh heap, no history of the fill);
* one pass: a Job created in one namespace, the controller's pass it sets off and ``kq serve``'s CPU in the
  seconds around it (nothing else running), five times;
* the webhooks: 1,000 more creates, 16 in flight, with the API server's wait per call and our handler's time;
* the read side: ``kq list -A``, ``kq list -n NS``, ``kq why`` and the console's jobs page, three times each;
* a cold start: ``kq serve`` stopped, one Job of each team of a department deleted while it is down, started
  again: the time to its readiness, to the first admission, and until every Queue's status is right;
* a leader change: a second replica started and ready, the leader killed (SIGKILL, its Lease left to expire),
  one Job of each team of another department deleted: the time from the new leader taking the Lease to the
  first admission, and until every Queue's status is right.

Last, one paginated list of every Job checks that none was lost and each team runs exactly one. Nothing here
asserts on time: the figures are printed side by side (``bench.queue_scale_report``). The steps are
:class:`bench.queue_scale_run.Run`'s.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import burst_stats, devrun, e2e_shapes, queue_scale_kueue
from bench.burst_bench import rss_mib
from bench.queue_scale_report import Figures, report
from bench.queue_scale_run import SETTLE_S, Run, all_namespaces
from webhook.cli import devsystem
from webhook.devcluster.config import ClusterConfig, Ports
from webhook.kube.client import KubeClient

COMMAND = ".venv/bin/python -m bench.queue_scale"
JOBS = 50_000
PORT_BASE = 28900
KUEUE_JOBS = 20_000
"""Kueue's count by default: at 50,000 its Workloads fell behind the creates (4,244 of 50,000 written when the
last Job was created, then some 50 a second), past the bench's time to settle."""
KUEUE_OFFSET = 100
SYSTEMS = ("ours", "kueue")


async def measure(config: ClusterConfig, jobs: int, figures: Figures, system: type[Run] = Run) -> None:
    """Every step of the bench on the cluster of ``config``, for ``system`` (ours, or a peer's subclass)."""
    async with await KubeClient.connect(str(config.kubeconfig)) as client:
        run = system(config, client, figures)
        await run.prepare()
        await e2e_shapes.settled(60.0)
        figures.baseline_rss_mib = rss_mib(run.controller_pid())
        print(f"queue-scale bench: filling {jobs} Jobs ...", file=sys.stderr)
        await run.fill(jobs)
        print("queue-scale bench: waiting for every Queue's status ...", file=sys.stderr)
        settle_started = time.monotonic()
        await run.until_statuses_right(SETTLE_S)
        figures.settle_s = time.monotonic() - settle_started
        figures.statuses_right = await run.statuses_right()
        await e2e_shapes.settled(60.0)
        figures.queued = sum(run.waiting_expected(ns) for ns in all_namespaces())
        figures.full_rss_mib = rss_mib(run.controller_pid())
        print("queue-scale bench: one pass, more creates, the read side ...", file=sys.stderr)
        _, before = await asyncio.to_thread(run.scrape)
        await run.one_pass()
        await run.more_creates()
        await run.until_statuses_right(SETTLE_S)
        figures.before_reads_rss_mib = rss_mib(run.controller_pid())
        await run.reads()
        figures.reads_rss_mib = rss_mib(run.controller_pid())
        _, after = await asyncio.to_thread(run.scrape)
        refreshes = burst_stats.delta(before, after)
        figures.refreshes = int(burst_stats.total(refreshes, "kube_queue_eta_refresh_cpu_seconds_count"))
        figures.refreshes_cpu_s = burst_stats.total(refreshes, "kube_queue_eta_refresh_cpu_seconds_sum")
        print("queue-scale bench: cold start, then a leader change ...", file=sys.stderr)
        await run.cold_start()
        figures.restart_queued = sum(run.waiting_expected(ns) for ns in all_namespaces())
        await run.leader_change()
        await run.verify()


def run_system(name: str, jobs: int, port_base: int) -> tuple[Figures, str]:
    """One system's fresh cluster, every step, the cluster gone again: its figures and what went wrong."""
    figures = Figures(jobs=jobs)
    if name == "ours":
        if not devsystem.service_available():
            return figures, "the service (kq serve) is not in this build"
        config = ClusterConfig(state_dir=devrun.state_dir("queue-scale"), ports=Ports(port_base),
                               service_args=("--oversellrate=1",))
        _, problem = devrun.run("queue-scale", config, lambda: asyncio.run(measure(config, jobs, figures)))
        return figures, problem
    built = queue_scale_kueue.build_problem()
    if built:
        return figures, built
    config = ClusterConfig(state_dir=devrun.state_dir("queue-scale-kueue"), ports=Ports(port_base),
                           with_service=False)
    _, problem = devrun.run("queue-scale (Kueue)", config, lambda: asyncio.run(
        measure(config, jobs, figures, queue_scale_kueue.KueueRun)), queue_scale_kueue.bring_up)
    return figures, problem


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=JOBS)
    parser.add_argument("--kueue-jobs", type=int, default=KUEUE_JOBS,
                        help="Jobs for Kueue's run (at least 10,000 for the report to stand)")
    parser.add_argument("--port-base", type=int, default=PORT_BASE,
                        help=f"ours on this base, Kueue's cluster {KUEUE_OFFSET} above")
    parser.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS),
                        help="run only these (a partial run is for trying the bench out)")
    args = parser.parse_args(argv)
    options = [*([] if args.jobs == JOBS else [f"--jobs {args.jobs}"]),
               *([] if args.kueue_jobs == KUEUE_JOBS else [f"--kueue-jobs {args.kueue_jobs}"]),
               *([] if args.port_base == PORT_BASE else [f"--port-base {args.port_base}"]),
               *([] if set(args.systems) == set(SYSTEMS) else [f"--systems {' '.join(args.systems)}"])]
    command = " ".join([COMMAND, *options])
    ours, problem = (run_system("ours", args.jobs, args.port_base) if "ours" in args.systems
                     else (Figures(jobs=args.jobs), "not run (--systems)"))
    kueue, kueue_problem = (run_system("kueue", args.kueue_jobs, args.port_base + KUEUE_OFFSET)
                            if "kueue" in args.systems else (Figures(jobs=args.kueue_jobs), "not run (--systems)"))
    sys.stdout.write(report(ours, command, problem, kueue, kueue_problem))
    return 0


if __name__ == "__main__":
    sys.exit(main())
