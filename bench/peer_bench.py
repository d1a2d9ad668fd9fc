"""The peer's shape replayed in the simulator (a report, not a test: it asserts nothing).

    .venv/bin/python -m bench.peer_bench [--scale 1.0]

Replays ``examples/scenarios/peer-shape.yaml`` (Kueue's scheduler performance baseline: 15,000 jobs in 30
queues of 5 departments, see :mod:`webhook.sim.peer`) through ``kq simulate``'s engine with the live
controller's decision code, and reports the wall time of the replay and the time to admission per size class
beside the peer's published baseline (the averages in the comments of Kueue's
``test/performance/scheduler/configs/baseline/rangespec.yaml``).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.machine import header, peak_rss_mib
from webhook.api.names import PERF_CLASS_LABEL
from webhook.cli.simulate import run_scenario
from webhook.sim.engine import SimResult, seconds
from webhook.sim.peer import (
    CLASSES,
    PEER_CQ_MIN_USAGE_PERCENT,
    PEER_RANGESPEC,
    PEER_SOURCE,
    PEER_TIME_TO_ADMISSION_MS_MEAN,
    PEER_WALL_MS_MEAN,
    peer_shape,
)
from webhook.sim.report import percentile
from webhook.sim.scenario import load_scenario, scenario_from_objects

REPO = Path(__file__).resolve().parents[1]
SCENARIO = REPO / "examples" / "scenarios" / "peer-shape.yaml"
COMMAND = ".venv/bin/python -m bench.peer_bench"


def report(result: SimResult, wall: float, cpu: float, command: str, scale: float = 1.0) -> str:
    by_class: dict[str, list[float]] = defaultdict(list)
    for job in result.jobs:
        if job.wait is not None:
            by_class[str(job.obj["metadata"]["labels"][PERF_CLASS_LABEL])].append(seconds(job.wait))
    leaves = result.scenario.tree.leaves()
    span = result.end
    usage = []
    for leaf in leaves:
        area = result.meter.used_area.get(leaf.key, {}).get("cpu", 0)
        usage.append(area / span / leaf.min["cpu"] if span else 0.0)
    evictions = sum(job.evictions for job in result.jobs)
    admissions = sum(job.admissions for job in result.jobs)
    peer_tta = PEER_TIME_TO_ADMISSION_MS_MEAN
    lines = header("The peer's shape: Kueue's scheduler performance baseline, replayed in the simulator", command)
    lines += [
        f"`examples/scenarios/peer-shape.yaml` (made by `python -m webhook.sim.peer` from {PEER_SOURCE}): "
        f"{len(result.jobs):,} jobs in {len(leaves)} queues of {len(result.scenario.tree.root.children)} departments; "
        "per queue 350 small (1 CPU, 200 ms), 100 medium (5 CPU, 500 ms) and 50 large (20 CPU, 1 s) jobs, one every "
        "100 / 500 / 1200 ms"
        + ("" if scale == 1.0 else f" (counts scaled by {scale:g}: NOT comparable with the peer)")
        + ", run times as the peer's runner holds them (real milliseconds there, virtual here). "
        "Every pass is the live controller's `decide`; decisions take no virtual time, so the virtual figures show "
        "the policy (quota, priority, reclaim), not the speed; the wall time shows the speed of the decision code.",
        "",
        "| figure | kube-queue-py (simulator) | Kueue baseline (published) |",
        "|---|---:|---:|",
        f"| wall time of the run | {wall:.1f} s (CPU {cpu:.1f} s) | {PEER_WALL_MS_MEAN / 1000:.1f} s "
        "(a real run: mean of 5) |",
        f"| virtual time until the last job finished | {seconds(span):.1f} s | - |",
    ]
    for workload in CLASSES:
        waits = by_class.get(workload.name, [])
        mean = sum(waits) / len(waits) if waits else float("nan")
        lines.append(
            f"| time to admission, {workload.name} ({workload.cpu} CPU): mean / p50 / p95 / max "
            f"| {mean:.1f} / {percentile(waits, 0.5) or 0:.1f} / {percentile(waits, 0.95) or 0:.1f} / "
            f"{max(waits, default=0):.1f} s | {peer_tta[workload.name] / 1000:.1f} s (mean) |"
        )
    lines += [
        f"| queues' mean use of their min (cpu) | {100 * sum(usage) / len(usage):.1f} % "
        f"| {PEER_CQ_MIN_USAGE_PERCENT} % (ClusterQueue class min usage) |",
        f"| admissions / evictions (reclaim and in-queue preemption) | {admissions:,} / {evictions:,} | - |",
        f"| decision passes / fit checks | {result.passes:,} / {result.checks:,} | - |",
        f"| peak RSS of the replay | {peak_rss_mib():.0f} MiB | - |",
        "",
        f"The peer's figures are the averages of 5 trial runs written in the comments of {PEER_RANGESPEC} "
        "(`maxWallMs` average 351116.4 ms; `wlClassesMaxAvgTimeToAdmissionMs` averages large 6666, medium 76768, "
        "small 215468 ms; `clusterQueueClassesMinUsage` average 58.7 %). The peer's times include its real "
        "scheduling latency; the simulator's virtual times do not, so they are what the policy allows at best.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every job count (default 1)")
    args = parser.parse_args(argv)
    if args.scale == 1.0:
        scenario = load_scenario(SCENARIO)
        command = COMMAND
    else:
        scenario = scenario_from_objects(peer_shape(scale=args.scale), name="peer-shape")
        command = f"{COMMAND} --scale {args.scale}"
    print(f"peer bench: replaying {len(scenario.submissions):,} jobs ...", file=sys.stderr)
    started, cpu_started = time.perf_counter(), time.process_time()
    result = run_scenario(scenario, record_timeline=False)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    sys.stdout.write(report(result, wall, cpu, command, args.scale))
    return 0


if __name__ == "__main__":
    sys.exit(main())
