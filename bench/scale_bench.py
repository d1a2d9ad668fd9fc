"""Scale in simulation (issue 21 part 4): one decision pass over a million waiting jobs in 10,000 queues on a
50,000-node cluster (a report, not a test: it asserts nothing).

    .venv/bin/python -m bench.scale_bench [--sizes 100000 1000000] [--before b17abcc]

The snapshot (:mod:`bench.scale_snapshot`): 20 departments -> 25 teams -> 20 queues (10,000 queues), the root
holding 50,000 nodes of 64 CPU / 256 GiB, each queue running jobs worth 50-150 % of its ``min`` (so some
borrow and some are owed: reclaim has work), one queue in five ``Block`` (strict priority) and one in ten
capping its jobs, and N waiting jobs spread unevenly over the queues. Each size runs in child processes, so
every RSS figure is its own:

* **after**: this tree's pass (:func:`webhook.core.decide.decide`, what ``kq simulate`` and the controller
  run): the first pass, then a second one after carrying out the first's decisions with 200 jobs finished
  and 200 submitted (what the controller's watch triggers next); then the first pass again under cProfile
  for the functions the time goes to;
* **before**: the same snapshot (same seed) through the pass as it was at commit ``--before`` (its
  ``webhook`` package taken from git into a temporary directory), when it finishes within ``--timeout``.

Each pass runs as the controller runs it, with the cyclic collector paused (``webhook.kube.collector``; code
from before that helper runs without it, as its controller did). ``--child N [--code DIR] --digest`` prints
one size's figures with a hash of every output field of both passes, to check that two codes decide alike.

Goal: the pass over 1,000,000 waiting jobs in < 5 s and < 2 GiB peak RSS.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import hashlib
import io
import json
import pstats
import random
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
COMMAND = ".venv/bin/python -m bench.scale_bench"
BEFORE = "abb42b3"
"""The commit whose pass this change replaced (the "before" figures)."""
QUEUES = 10_000
NODES = 50_000
SEED = 21


def _timed(call: Callable[[], Any]) -> tuple[Any, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = call()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def _top(profile: cProfile.Profile, count: int) -> list[dict[str, Any]]:
    """The functions with the most own time, with their cumulative time (seconds under the profiler)."""
    stats = pstats.Stats(profile, stream=io.StringIO())
    rows = []
    for (path, line, name), (_, calls, own, cumulative, _) in stats.stats.items():  # type: ignore[attr-defined]
        where = f"{Path(path).name}:{line}" if line else "builtin"
        rows.append({"function": f"{name} ({where})", "calls": calls, "own": own, "cumulative": cumulative})
    rows.sort(key=lambda row: -row["own"])
    return rows[:count]


def _pause() -> Callable[[], contextlib.AbstractContextManager[None]]:
    """The controller's pause of the cyclic collector over a pass (``webhook.kube.collector``), or nothing
    for code from before it had one (the pass runs as that code's controller ran it)."""
    try:
        from webhook.kube.collector import collector_paused  # noqa: PLC0415 - after the path is set
    except ImportError:
        return contextlib.nullcontext
    return collector_paused


def _fields(decisions: Any) -> Iterator[object]:
    """Every output field of a pass, in order (reasons of every waiting job and the whole ledger included)."""
    def key(job: Any) -> object:
        return job.workload.key

    yield [key(job) for job in decisions.admissions]
    for step in decisions.reclaims:
        yield key(step.preemptor), [(key(victim), victim.workload.phase) for victim in step.victims], step.reason
    yield [key(job) for job in decisions.late_admissions]
    for job in decisions.waiting:
        yield key(job), decisions.positions[key(job)], decisions.reasons[key(job)]
    yield len(decisions.positions), [key(job) for job in decisions.stale_records], decisions.checks
    yield sorted(decisions.policies.items()), [key(job) for job in (*decisions.backoff, *decisions.held)]
    yield sorted(decisions.ledger.snapshot().items()), decisions.ledger.unknown


def digest(decisions: Any) -> str:
    """A hash of every output field of a pass: two codes decided alike when their digests are equal."""
    hashed = hashlib.sha256()
    for field in _fields(decisions):
        hashed.update(repr(field).encode())
        hashed.update(b"\0")
    return hashed.hexdigest()[:16]


def measure(size: int, code: str | None, profile: bool, digests: bool = False) -> dict[str, Any]:
    """One size in this process, with the ``webhook`` package of ``code`` (a directory) or this tree's;
    ``digests`` adds :func:`digest` of both passes (reading every reason: peak RSS is then not the pass's)."""
    if code is not None:
        sys.path.insert(0, code)
    sys.path.insert(1 if code else 0, str(REPO))
    from bench.machine import peak_rss_mib  # noqa: PLC0415 - after the path is set
    from bench.scale_snapshot import Shape, build_jobs, build_tree, carry_out, policies  # noqa: PLC0415
    from webhook.core.decide import decide  # noqa: PLC0415

    rng = random.Random(SEED)
    shape = Shape(waiting=size, queues=QUEUES, nodes=NODES)
    started = time.perf_counter()
    tree = build_tree(shape, rng)
    leaf_policies = policies(tree, rng)
    jobs = build_jobs(tree, shape, rng)
    out: dict[str, Any] = {"size": size, "jobs": len(jobs), "queues": len(tree.leaves()),
                           "build_seconds": time.perf_counter() - started, "rss_snapshot_mib": peak_rss_mib()}
    rate = Fraction(1)
    paused = _pause()

    def run(snapshot: list[Any]) -> Any:
        with paused():  # as the controller runs its pass
            return decide(tree, snapshot, leaf_policies, oversell_rate=rate)

    gc.collect()
    first, wall, cpu = _timed(lambda: run(jobs))
    out["first"] = {"wall": wall, "cpu": cpu, "admitted": len(first.admissions) + len(first.late_admissions),
                    "reclaims": len(first.reclaims), "evicted": sum(len(step.victims) for step in first.reclaims),
                    "waiting": len(first.waiting), "checks": first.checks}
    out["rss_first_mib"] = peak_rss_mib()
    if digests:
        out["first"]["digest"] = digest(first)
    following = carry_out(jobs, first, rng)
    del first
    gc.collect()
    second, wall, cpu = _timed(lambda: run(following))
    out["second"] = {"wall": wall, "cpu": cpu, "admitted": len(second.admissions) + len(second.late_admissions),
                     "reclaims": len(second.reclaims), "evicted": sum(len(step.victims) for step in second.reclaims),
                     "waiting": len(second.waiting), "checks": second.checks}
    if digests:
        out["second"]["digest"] = digest(second)
    del second
    out["rss_peak_mib"] = peak_rss_mib()
    if profile:
        gc.collect()
        profiler = cProfile.Profile()
        profiler.enable()
        run(jobs)
        profiler.disable()
        out["top"] = _top(profiler, 12)
    return out


def _old_code(revision: str, into: Path) -> Path:
    """The ``webhook`` package at ``revision``, extracted under ``into``."""
    archive = subprocess.run(["git", "archive", revision, "webhook"], cwd=REPO, check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def run_child(size: int, code: Path | None, profile: bool, timeout: float) -> dict[str, Any] | None:
    argv = [sys.executable, "-m", "bench.scale_bench", "--child", str(size)]
    if code is not None:
        argv += ["--code", str(code)]
    if profile:
        argv.append("--profile")
    try:
        done = subprocess.run(argv, check=True, capture_output=True, text=True, cwd=REPO, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def _pass_row(size: int, label: str, figures: dict[str, Any] | None, timeout: float) -> list[str]:
    if figures is None:
        return [f"| {size:,} | {label} | not finished within {timeout:.0f} s | | | | | | |"]
    rows = []
    for which in ("first", "second"):
        run = figures[which]
        rows.append(
            f"| {size:,} | {label}, {which} pass | {run['wall']:.2f} s | {run['cpu']:.2f} s | {run['admitted']:,} "
            f"| {run['reclaims']:,} ({run['evicted']:,}) | {run['checks']:,} "
            f"| {figures['rss_snapshot_mib']:,.0f} MiB | {figures['rss_peak_mib']:,.0f} MiB |"
        )
    return rows


def _verdict(size: int, figures: dict[str, Any] | None) -> str:
    if figures is None:
        return "not measured"
    cpu, wall, rss = figures["first"]["cpu"], figures["first"]["wall"], figures["rss_peak_mib"]
    met = cpu < 5 and rss < 2048
    return (f"{'met' if met else 'NOT met'} at {size:,} ({cpu:.1f} s CPU, {wall:.1f} s wall under the load "
            f"above, {rss:,.0f} MiB peak)")


def report(results: list[tuple[int, dict[str, Any] | None, dict[str, Any] | None]], before: str, timeout: float,
           command: str) -> str:
    from bench.machine import header  # noqa: PLC0415

    lines = header("Scale in simulation: one pass over 1,000,000 waiting jobs (issue 21)", command)
    sample = next((after for _, after, _ in results if after is not None), None)
    running = "" if sample is None else f" ({sample['jobs'] - sample['size']:,} running jobs)"
    lines += [
        f"{QUEUES:,} queues (20 departments x 25 teams x 20 queues) on {NODES:,} nodes of 64 CPU / 256 GiB; every "
        f"queue runs jobs worth 50-150 % of its min{running}, so some borrow and some are owed; one queue in five "
        "is `Block` (strict priority), one in ten caps its jobs; jobs are 1-8 pods of 1-8 CPU. N waiting jobs "
        "spread unevenly over the queues. A pass is `webhook.core.decide.decide` (what the controller and "
        "`kq simulate` run): ledger, admission pass, reclaim rounds, positions and the waiting list, with the "
        "cyclic garbage collector paused as the controller runs it (code without that pause runs as its "
        "controller did). The second "
        "pass follows the first's decisions carried out, 200 jobs finished and 200 submitted. \"before\" is the "
        f"same snapshot through the pass at commit `{before}`, in the same run. Each size and code runs in its "
        "own process, so peak RSS is its own (the snapshot's RSS included).",
        "",
        "| waiting jobs | pass | wall | CPU | admitted | reclaims (evicted) | fit checks | RSS with snapshot "
        "| peak RSS |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for size, after, old in results:
        lines += _pass_row(size, "after", after, timeout)
        lines += _pass_row(size, f"before (`{before}`)", old, timeout)
    lines += ["", "Snapshot build (generating the jobs, apart from the pass): " + ", ".join(
        f"{size:,}: {after['build_seconds']:.1f} s" for size, after, _ in results if after is not None) + "."]
    lines += ["", "Goal (< 5 s CPU for the first pass, < 2 GiB peak RSS): after: "
              + "; ".join(_verdict(size, after) for size, after, _ in results)
              + ". Before: " + "; ".join(_verdict(size, old) for size, _, old in results) + "."]
    for size, after, _ in results:
        if after is None or "top" not in after:
            continue
        lines += ["", f"Where the time goes at {size:,} (the first pass again under cProfile, which slows it down; "
                  "seconds under the profiler, the functions with the most own time):", "",
                  "| function | calls | own | cumulative |", "|---|---:|---:|---:|"]
        lines += [f"| `{row['function']}` | {row['calls']:,} | {row['own']:.2f} s | {row['cumulative']:.2f} s |"
                  for row in after["top"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--before", default=BEFORE, help=f"the commit to compare with (default {BEFORE}); '' skips it")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per child process (default 900)")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--code", help=argparse.SUPPRESS)
    parser.add_argument("--profile", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--digest", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        print(json.dumps(measure(args.child, args.code, args.profile, args.digest)))
        return 0
    sys.path.insert(0, str(REPO))
    results = []
    with tempfile.TemporaryDirectory(prefix="kq-scale-") as scratch:
        old = _old_code(args.before, Path(scratch)) if args.before else None
        for size in args.sizes:
            print(f"scale bench: {size:,} waiting jobs ...", file=sys.stderr, flush=True)
            after = run_child(size, None, True, args.timeout)
            before = run_child(size, old, False, args.timeout) if old is not None else None
            results.append((size, after, before))
    command = COMMAND if args.sizes == [100_000, 1_000_000] else f"{COMMAND} --sizes {' '.join(map(str, args.sizes))}"
    sys.stdout.write(report(results, args.before, args.timeout, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
