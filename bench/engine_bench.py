"""Decision-engine benchmark: full passes over deep queues (a report, not a test: it asserts nothing).

    .venv/bin/python -m bench.engine_bench [--sizes 10000 100000] [--queues 1000]

For each size, a child process (so each RSS figure is its own) builds a snapshot: a tree of 20 departments x
50 leaves (1,000 queues), 5 admitted jobs per leaf keeping the cluster about 96 % full, and SIZE waiting jobs
spread over the leaves (1-8 CPU, 4 GiB per CPU, priorities 0-3). It then times:

* ``admission_pass``: the core's queue pass (order, fit, Round/Block) over every waiting job;
* ``decide``: the live controller's whole pass (ledger, admission pass, reclaim attempts, status inputs), as
  it runs on every change.

Goal (issue 7): a full pass over 100,000 waiting jobs in under 1 s and under 500 MiB resident.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.machine import current_rss_mib, header, peak_rss_mib
from bench.objects import workload
from webhook.controller.decide import decide
from webhook.controller.model import TrackedJob
from webhook.core.ledger import build_ledger
from webhook.core.queueing import Policy, admission_pass
from webhook.core.quota import QuotaTree, parse_tree
from webhook.core.workload import Phase, Workload
from webhook.workloads.job import JobAdapter

COMMAND = ".venv/bin/python -m bench.engine_bench"
DEPARTMENTS = 20
ADMITTED_PER_LEAF = 5


def build_tree(queues: int) -> QuotaTree:
    per_department = queues // DEPARTMENTS
    leaf_min, leaf_max = 10, 100
    department_min = leaf_min * per_department
    total = department_min * DEPARTMENTS

    def limits(min_cpu: int, max_cpu: int) -> dict[str, Any]:
        return {
            "min": {"cpu": min_cpu, "memory": f"{4 * min_cpu}Gi"},
            "max": {"cpu": max_cpu, "memory": f"{4 * max_cpu}Gi"},
        }

    departments = [
        {
            "name": f"dept-{d}",
            **limits(department_min, total),
            "children": [
                {"name": f"q-{d}-{q}", **limits(leaf_min, leaf_max), "namespaces": [f"ns-{d}-{q}"]}
                for q in range(per_department)
            ],
        }
        for d in range(DEPARTMENTS)
    ]
    return parse_tree({"root": {"name": "root", **limits(total, total), "children": departments}})


def build_jobs(quota_tree: QuotaTree, waiting: int, seed: int = 7) -> list[Workload]:
    rng = random.Random(seed)
    leaves = quota_tree.leaves()
    jobs: list[Workload] = []
    created = 0.0
    for leaf in leaves:  # about 9.6 of each leaf's 10 guaranteed CPU in use
        sizes = (2, 2, 2, 2, 1 if rng.random() < 0.6 else 2)
        assert len(sizes) == ADMITTED_PER_LEAF
        for index, cpu in enumerate(sizes):
            created += 1
            jobs.append(workload(f"run-{index}", leaf.namespaces[0], leaf.key, cpu=cpu, memory=f"{4 * cpu}Gi",
                                 created=created, phase=Phase.ADMITTED, admitted_at=created))
    for index in range(waiting):
        leaf = leaves[rng.randrange(len(leaves))]
        cpu = rng.choice((1, 2, 4, 8))
        created += 1
        jobs.append(workload(f"wait-{index}", leaf.namespaces[0], leaf.key, cpu=cpu, memory=f"{4 * cpu}Gi",
                             priority=rng.randrange(4), created=created))
    return jobs


def timed(function: Any, minimum_runs: int, budget: float) -> tuple[list[float], Any]:
    """Run ``function`` at least ``minimum_runs`` times and until ``budget`` seconds are spent."""
    times: list[float] = []
    result: Any = None
    spent = 0.0
    while len(times) < minimum_runs or spent < budget:
        started = time.perf_counter()
        result = function()
        elapsed = time.perf_counter() - started
        times.append(elapsed)
        spent += elapsed
        if len(times) >= 50:
            break
    return times, result


def measure(size: int, queues: int, what: str) -> dict[str, Any]:
    """One size and one function (``pass`` or ``decide``), in this process (a child per size and function)."""
    baseline = current_rss_mib()
    started = time.perf_counter()
    quota_tree = build_tree(queues)
    workloads = build_jobs(quota_tree, size)
    waiting = [w for w in workloads if w.phase is Phase.QUEUED]
    rate = Fraction(1)
    out: dict[str, Any] = {"size": size, "queues": len(quota_tree.leaves()),
                           "admitted_before": len(workloads) - len(waiting), "rss_baseline_mib": baseline}
    if what == "pass":
        used = build_ledger(quota_tree, workloads).used_view()
        out["build_seconds"] = time.perf_counter() - started
        out["rss_snapshot_mib"] = current_rss_mib()
        times, result = timed(lambda: admission_pass(quota_tree, used, waiting, Policy.ROUND, rate), 3, 3.0)
        out.update(seconds=statistics.median(times), runs=len(times), admitted=len(result.admitted),
                   checks=result.checks)
    else:
        adapter = JobAdapter()
        tracked = [TrackedJob(adapter=adapter, obj={}, workload=w, leaf=quota_tree.nodes[w.quota], record=None)
                   for w in workloads]
        out["build_seconds"] = time.perf_counter() - started
        out["rss_snapshot_mib"] = current_rss_mib()
        times, decisions = timed(lambda: decide(quota_tree, tracked, {}, oversell_rate=rate), 1, 3.0)
        out.update(seconds=statistics.median(times), runs=len(times),
                   admitted=len(decisions.admissions) + len(decisions.late_admissions),
                   reclaims=len(decisions.reclaims), checks=decisions.checks)
    out["rss_peak_mib"] = peak_rss_mib()
    return out


def run_child(size: int, queues: int, what: str, timeout: float) -> dict[str, Any] | None:
    """The child's figures, or ``None`` when it did not finish within ``timeout`` seconds."""
    try:
        out = subprocess.run(
            [sys.executable, "-m", "bench.engine_bench", "--child", str(size), "--what", what, "--queues", str(queues)],
            check=True, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1], timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return None
    data: dict[str, Any] = json.loads(out.stdout)
    return data


def _row(size: int, label: str, figures: dict[str, Any] | None, timeout: float) -> str:
    if figures is None:
        return f"| {size:,} | {label} | not finished in {timeout:.0f} s | - | - | - | - | - | - |"
    return (
        f"| {size:,} | {label} | {figures['seconds'] * 1000:,.0f} ms | {1 / figures['seconds']:.2f} "
        f"| {figures['admitted']:,} | {figures['checks']:,} | {figures['rss_baseline_mib']:.0f} MiB "
        f"| {figures['rss_snapshot_mib']:.0f} MiB | {figures['rss_peak_mib']:.0f} MiB |"
    )


def report(rows: list[tuple[int, dict[str, Any] | None, dict[str, Any] | None]], timeout: float,
           queues_asked: int = 1000, command: str = COMMAND) -> str:
    queues = (queues_asked // DEPARTMENTS) * DEPARTMENTS
    admitted = ADMITTED_PER_LEAF * queues
    lines = header("Decision engine: full passes over deep queues", command)
    lines += [
        f"A tree of {DEPARTMENTS} departments x {queues // DEPARTMENTS} leaves ({queues} queues), "
        f"{admitted:,} admitted jobs holding ~96 % of the cluster, and N waiting jobs (1-8 CPU, priorities 0-3) "
        "spread over the leaves; oversellrate 1, Round. `admission_pass` is the core's queue pass (order, fit, "
        "Round/Block, reasons made lazily); `decide` is the live controller's whole reconcile pass on the same "
        "snapshot (ledger, admission pass, reclaim rounds), the function `kq simulate` calls. Each "
        "figure comes from its own child process, so its peak RSS is its own (baseline: the interpreter with the "
        "project imported; `decide` also holds the controller's per-job view). Goal: a full pass over 100,000 "
        "waiting jobs < 1 s and < 500 MiB.",
        "",
        "| waiting jobs | function | time per pass | passes/s | admitted | fit checks | RSS baseline "
        "| RSS with snapshot | peak RSS |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for size, passed, decided in rows:
        lines.append(_row(size, "`admission_pass`", passed, timeout))
        lines.append(_row(size, "`decide`", decided, timeout))
    lines += ["", "Times are medians of repeated passes over the same snapshot (at least 3 for `admission_pass`, "
              "at least 1 for `decide`, within a 3 s budget each)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queues", type=int, default=1000)
    parser.add_argument("--timeout", type=float, default=900, help="seconds per child process (default 900)")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--what", choices=("pass", "decide"), default="pass", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        print(json.dumps(measure(args.child, args.queues, args.what)))
        return 0
    rows = []
    for size in args.sizes:
        print(f"engine bench: {size:,} waiting jobs in {args.queues} queues ...", file=sys.stderr)
        passed = run_child(size, args.queues, "pass", args.timeout)
        decided = run_child(size, args.queues, "decide", args.timeout)
        rows.append((size, passed, decided))
    sizes = " ".join(str(size) for size in args.sizes)
    command = COMMAND if args.sizes == [10_000, 100_000] else f"{COMMAND} --sizes {sizes}"
    sys.stdout.write(report(rows, args.timeout, args.queues, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
