"""Start estimates (issue 36): their accuracy against what happened, beside naive estimators, and their cost.

    .venv/bin/python -m bench.eta_bench [--only departments ...] [--no-exact] [--no-cost]

Accuracy, in the simulator: each trace of ``bench/eta_traces.py`` (several departments, priorities, borrowing and
reclaim, run times drawn with noise around each stem's mean) and the dev cluster's three (``bench/eta_cluster.py``:
jobs of 12 to 60 s, errors relative to waits of at least 10 s) is replayed by the simulator, which runs the live
controller's decisions; every ``every`` minutes of virtual time after a warm-up, every waiting job gets an
estimate from :func:`webhook.core.eta.estimate` over the simulator's state at that moment (run times from the
history of the jobs finished so far, or declared), and, in the same run, two naive estimates:

* ``naive``: its position times the mean run time of the completed jobs of its queue (the issue's);
* ``naive/running``: the same divided by the number of jobs running in its queue (a throughput guess).

When the trace is over, each prediction is compared with when the job's pods first ran: the error is
``|predicted - actual| / max(actual - predicted at, 60 s)`` (relative to the wait still ahead). Reported: the
p50 and p90 of that error over every prediction that has a figure, how many had one, and how often the actual
start came before the estimate's latest (p90) figure. ``exact`` is the same estimator with the replay's
buckets and windows off (every event its own pass, every waiting job seen), on the smaller traces: what the
approximations cost.

Cost: a snapshot of 10,000 waiting jobs (:func:`cost_snapshot`), the CPU seconds of :func:`estimate` over it
(median of 3) beside one controller pass (:func:`webhook.core.decide.decide`) over the same snapshot.
"""

from __future__ import annotations

import argparse
import gc
import math
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.eta_cluster import SEEDS, sim_trace
from bench.eta_cluster_report import cell, relative_errors
from bench.eta_traces import STEMS, Trace, traces
from bench.machine import header
from webhook.core.decide import decide, leaf_policies
from webhook.core.decisions import PlainJob
from webhook.core.eta import estimate
from webhook.core.eta_replay import ReplayInput, ReplayLimits
from webhook.core.resources import Resources
from webhook.core.runtimes import Runtime, RuntimeHistory, Source
from webhook.core.workload import Phase, PodSet, Workload, WorkloadKey
from webhook.kube.collector import collector_paused
from webhook.sim.engine import State
from webhook.sim.eta import EtaSimulator, replay_input
from webhook.sim.model import MICROS
from webhook.sim.scenario import scenario_from_objects

COMMAND = ".venv/bin/python -m bench.eta_bench"
EXACT = ReplayLimits(max_passes=1_000_000, window=1_000_000, smallest=0, eps_time=0.0, min_width=0.0, short_share=0.0,
                     repass=True)


@dataclass(slots=True)
class Prediction:
    index: int
    at: float
    waiting: int
    """Jobs waiting at that moment (in all)."""
    start: float | None
    latest: float | None
    naive: float | None
    naive_running: float | None
    exact: float | None = None
    oracle: float | None = None
    """The estimate given every job's true run time (what knowing the run times would give)."""


@dataclass(slots=True)
class Run:
    trace: Trace
    predictions: list[Prediction] = field(default_factory=list)
    first_start: dict[int, float] = field(default_factory=dict)
    submitted: dict[int, float] = field(default_factory=dict)
    cpu: list[tuple[int, float]] = field(default_factory=list)
    """(waiting jobs, CPU seconds of one estimate) per round."""
    peak: int = 0


def _naive(simulator: EtaSimulator, at: float) -> tuple[dict[int, float], dict[int, float]]:
    """The two naive estimates of every waiting job (by job index), where its queue has a history."""
    history = simulator.history
    literal: dict[int, float] = {}
    running_based: dict[int, float] = {}
    means: dict[str, float | None] = {}
    running: dict[str, int] = {}
    for job in simulator.active.values():
        if job.state is State.RUNNING:
            running[job.leaf.key] = running.get(job.leaf.key, 0) + 1
    for job in simulator.active.values():
        if job.state is not State.QUEUED:
            continue
        leaf = job.leaf
        if leaf.key not in means:
            samples = [s for key, values in history.groups.items() if key[0] in leaf.namespaces for s in values]
            means[leaf.key] = statistics.fmean(samples) if samples else None
        mean = means[leaf.key]
        position = simulator.positions.get(job.key)
        if mean is None or position is None:
            continue
        literal[job.index] = at + position * mean
        running_based[job.index] = at + position * mean / max(1, running.get(leaf.key, 0))
    return literal, running_based


def _oracle_runtimes(simulator: EtaSimulator) -> dict[int, Runtime]:
    return {job.index: Runtime(job.run_for / MICROS, job.run_for / MICROS, Source.DECLARED)
            for job in simulator.active.values() if job.run_for is not None}


def run_trace(trace: Trace, *, exact: bool, oracle: bool = True) -> Run:
    result = Run(trace)
    scenario = scenario_from_objects(trace.objects, trace.name)
    due = [trace.warmup]

    def observe(simulator: EtaSimulator, at_micros: int) -> None:
        at = at_micros / MICROS
        if at < due[0]:
            return
        while due[0] <= at:
            due[0] += trace.every
        given = replay_input(simulator, at_micros)
        started = time.process_time()
        found = estimate(given)
        waiting = [job for job in simulator.active.values() if job.state is State.QUEUED]
        result.cpu.append((len(waiting), time.process_time() - started))
        result.peak = max(result.peak, len(waiting))
        exact_found = estimate(given, EXACT) if exact else None
        oracle_found = estimate(replay_input(simulator, at_micros, _oracle_runtimes(simulator))) if oracle else None
        literal, running_based = _naive(simulator, at)
        for job in waiting:
            guess = found.by_key.get(job.key)
            exact_guess = exact_found.by_key.get(job.key) if exact_found is not None else None
            oracle_guess = oracle_found.by_key.get(job.key) if oracle_found is not None else None
            result.predictions.append(Prediction(
                job.index, at, len(waiting),
                guess.start if guess is not None else None,
                guess.latest if guess is not None else None,
                literal.get(job.index), running_based.get(job.index),
                exact_guess.start if exact_guess is not None else None,
                oracle_guess.start if oracle_guess is not None else None,
            ))

    simulator = EtaSimulator(scenario, observe=observe)
    simulator.run()
    result.first_start = {index: at / MICROS for index, at in simulator.first_start.items()}
    result.submitted = {index: item.at / MICROS for index, item in enumerate(scenario.submissions)}
    return result


def _errors(run: Run, pick: str, *, ahead: bool = False) -> tuple[list[float], int]:
    """The relative errors of one estimator's predictions whose job started (relative to the job's whole wait,
    or with ``ahead`` to the wait still ahead at the prediction), and how many predictions of such jobs had no
    figure."""
    return relative_errors(((run.first_start.get(p.index), getattr(p, pick),
                             p.at if ahead else run.submitted[p.index]) for p in run.predictions), run.trace.floor)


def accuracy(runs: Sequence[Run], *, ahead: bool = False) -> list[str]:
    picks = ("start", "naive", "naive_running", "exact", "oracle")
    lines = [
        "| trace | jobs | predictions | peak waiting | estimate | naive | naive/running | exact replay "
        "| knowing the run times | started by the latest figure |",
        "|---|---:|---:|---:|---|---|---|---|---|---:|",
    ]
    for run in runs:
        started = [p for p in run.predictions if p.index in run.first_start]
        within = [p for p in started
                  if p.latest is not None and run.first_start[p.index] <= p.latest + run.trace.floor]
        with_latest = [p for p in started if p.latest is not None]
        cells = [cell(_errors(run, pick, ahead=ahead)) if any(getattr(p, pick) is not None for p in started)
                 else "not run" for pick in picks]
        share = f"{100 * len(within) / len(with_latest):.0f} %" if with_latest else "-"
        lines.append(f"| {run.trace.name} | {run.trace.jobs} | {len(started)} | {run.peak} | {' | '.join(cells)} "
                     f"| {share} |")
    return lines


def cost_snapshot(waiting: int = 10_000, seed: int = 5) -> tuple[ReplayInput, int]:
    """A snapshot with ``waiting`` jobs waiting: the ``scale`` trace's tree (10 departments x 5 teams, 1,600 CPU)
    and stems; every team running jobs for 50 to 100 % of its min, five teams borrowing the rest of the root, the
    other jobs waiting; run times from a history of 20 completed jobs per stem and namespace (drawn with the
    traces' noise)."""
    rng = random.Random(seed)
    trace = traces()[-1]
    scenario = scenario_from_objects(trace.objects, trace.name)
    tree = scenario.tree
    history = RuntimeHistory()
    jobs: list[PlainJob] = []
    runtimes: dict[WorkloadKey, Runtime] = {}
    since: dict[WorkloadKey, float] = {}
    now = 100_000.0
    leaves = tree.leaves()
    for leaf in leaves:
        for stem in STEMS:
            for _ in range(20):
                run = stem.mean_minutes * 60 * math.exp(rng.gauss(0, 0.2))
                history.add((leaf.namespaces[0], "Job", stem.name), run, now - 3600)
    # Each team runs 50 to 100 % of its min, and a few borrow what is left of the root.
    free = {leaf.key: leaf.min.get_or_zero("cpu") * rng.uniform(0.5, 1.0) for leaf in leaves}
    left = tree.root.max.get_or_zero("cpu") - sum(free.values())
    for leaf in rng.sample(list(leaves), 5):
        free[leaf.key] += left / 5
    counter = 0
    pending = waiting
    while pending > 0 or any(room > 0 for room in free.values()):
        leaf = rng.choice(leaves)
        stem = rng.choice(STEMS)
        cpu = stem.cpu * stem.pods * 10**9
        counter += 1
        admitted = pending <= 0 or free[leaf.key] >= cpu
        if pending <= 0 and free[leaf.key] < cpu:
            free[leaf.key] = 0
            continue
        workload = Workload(
            key=WorkloadKey("Job", leaf.namespaces[0], f"{stem.name}-{counter:05d}"),
            quota=leaf.name,
            pod_sets=(PodSet("main", stem.pods, Resources({"cpu": stem.cpu * 10**9,
                                                           "memory": 2 * stem.cpu * 2**30})),),
            priority=100 if rng.random() < stem.high_share else 0,
            created=now - rng.uniform(0, 7200),
            phase=Phase.ADMITTED if admitted else Phase.QUEUED,
            admitted_at=now - rng.uniform(0, stem.mean_minutes * 60) if admitted else None,
        )
        if admitted:
            free[leaf.key] -= cpu
            since[workload.key] = workload.admitted_at or now
        else:
            pending -= 1
        jobs.append(PlainJob(workload))
        found = history.runtime(leaf.namespaces[0], "Job", stem.name, leaf.namespaces)
        runtimes[workload.key] = found if found is not None else Runtime(None, None, Source.UNKNOWN)
    given = ReplayInput(tree, jobs, leaf_policies(tree, scenario.queues, False), scenario.oversell_rate, now,
                        runtimes, since)
    return given, waiting


def cost(sizes: Sequence[int] = (5_000, 10_000)) -> list[str]:
    """CPU seconds of :func:`estimate` over :func:`cost_snapshot`: as the controller runs it (the snapshot's jobs
    out of the collector's view, as its heap freezer keeps its cached jobs, and the collector paused over the
    replays, as over a pass) and, beside it, with the collector as it comes."""
    lines = [
        "| waiting jobs | admitted jobs | estimate CPU as the controller runs it (median of 5) "
        "| collector as it comes (median of 3) | replay passes | one controller pass | ratio "
        "| estimates with a figure |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for size in sizes:
        given, waiting = cost_snapshot(size)
        plain = []
        for _ in range(3):
            started = time.process_time()
            estimate(given)
            plain.append(time.process_time() - started)
        gc.collect()
        gc.freeze()
        timings = []
        passes = 0
        for _ in range(5):
            started = time.process_time()
            with collector_paused():
                result = estimate(given)
            timings.append(time.process_time() - started)
            passes = result.passes
        gc.unfreeze()
        started = time.process_time()
        with collector_paused():
            decide(given.tree, given.jobs, given.policies, oversell_rate=given.rate, now=given.now)
        one_pass = time.process_time() - started
        median = statistics.median(timings)
        admitted = sum(1 for job in given.jobs if job.workload.phase.value == "Admitted")
        with_figure = sum(1 for item in result.by_key.values() if item.start is not None)
        lines.append(f"| {waiting} | {admitted} | {median:.2f} s ({', '.join(f'{t:.2f}' for t in timings)}) "
                     f"| {statistics.median(plain):.2f} s | {passes} | {one_pass * 1000:.0f} ms "
                     f"| {median / one_pass:.0f} x | {with_figure} |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.eta_bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", metavar="TRACE", help="only these traces")
    parser.add_argument("--no-exact", action="store_true", help="skip the exact replay beside the estimate")
    parser.add_argument("--no-cost", action="store_true", help="skip the 10,000-job cost measurement")
    parser.add_argument("--scale", type=float, default=1.0, help="size of the scale trace (1 = as published)")
    parser.add_argument("--turn", type=float, default=0.0, metavar="SECONDS",
                        help="the dev cluster's traces with each job holding its room this much longer than its pods "
                             "run, as the dev cluster's control plane makes it (about 1.5); 0 = as the simulator")
    args = parser.parse_args(argv)
    given = [*(["--only", *args.only] if args.only else []), *(["--turn", f"{args.turn:g}"] if args.turn else []),
             *(["--no-exact"] if args.no_exact else []), *(["--no-cost"] if args.no_cost else [])]
    lines = header("Start estimates: accuracy and cost (issue 36)", " ".join([COMMAND, *given]))
    runs = []
    for trace in [*traces(args.scale), *(sim_trace(seed, turn=args.turn) for seed in SEEDS)]:
        if args.only and trace.name not in args.only:
            continue
        print(f"== {trace.name} ({trace.jobs} jobs)", file=sys.stderr, flush=True)
        runs.append(run_trace(trace, exact=not args.no_exact and trace.name != "scale"))
    lines += ["Accuracy in the simulator: p50 / p90 of |predicted - actual start| / the job's actual wait (submission "
              "to start, at least 60 s; 10 s on the dev cluster's traces), over every prediction made while it "
              "waited that has a figure (their share in brackets):", "", *accuracy(runs), "",
              "The same relative to the wait still ahead at each prediction (stricter: a prediction made a minute "
              "before the start is judged against that minute):", "", *accuracy(runs, ahead=True), ""]
    for run in runs:
        if run.cpu:
            busiest = max(run.cpu)
            lines.append(f"- {run.trace.name}: {run.trace.description}; {len(run.cpu)} rounds of predictions, the "
                         f"largest over {busiest[0]} waiting jobs took {busiest[1]:.2f} s of CPU.")
    lines.append("")
    if not args.no_cost:
        print("== cost", file=sys.stderr, flush=True)
        lines += ["Cost over snapshots of 5,000 and 10,000 waiting jobs in 50 queues (`cost_snapshot`; CPU seconds "
                  "of this process):", "", *cost(), ""]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
