"""Start estimates on the dev cluster (issue 36): a trace of Jobs whose pods succeed after set times, the
estimates made while they wait, and when they really started.

    .venv/bin/python -m bench.eta_cluster [--minutes 10] [--port-base 29700] [--seed 1 2 3] [--dump DIR]
    .venv/bin/python -m bench.eta_cluster --from-dump DIR [--seed 1 2 3]   # report a dumped run again

A fresh dev cluster runs the service strictly by quota (``--oversellrate=1``) with estimates refreshed every
2 s, over a tree of 2 departments x 2 teams sharing 48 CPU (mins 12 CPU a team, borrowing up to the whole root).
Each team submits Jobs of three stems (a mean run time each, a 20 % lognormal noise; a quarter of them declare
the stem's mean with ``kube-queue.x-k8s.io/expected-runtime``; one in ten at high priority) as a Poisson
process offering 1.5 times the root's CPU for the first 60 % of the trace and half of it after; each pod
succeeds after its job's run time (``dev.kube-queue.x-k8s.io/succeed-after``). After a warm-up of a fifth of
the trace, every 15 s, every QUEUING job gets:

* ``estimate``: ``kq why``'s (:func:`webhook.readmodel.eta.estimate_snapshot` over a snapshot of every job and pod);
* ``no handoff``: the same without the control plane's time per turn (the tree's ``status.handoff`` left out):
  what that part of the model is worth, paired in the same run;
* ``controller``: the controller's, from its Queue's status;
* ``naive``: its position times the mean run time of its queue's completed jobs (the Queues' history);
* ``naive/running``: that divided by the jobs running in its queue.

When every job has run, each prediction is compared with when the job's first pod started: the error relative to
the job's whole wait (submission to start, at least 10 s) and to the wait still ahead at the prediction, and by
the time that was still ahead (:mod:`bench.eta_cluster_report`).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import json
import math
import random
import statistics
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import devrun
from bench.e2e_metrics import WRITE_VERBS, api_requests
from bench.eta_cluster_report import FLOOR, Outcome, Prediction, dump, load, report
from bench.eta_traces import Trace
from webhook.api.names import EXPECTED_RUNTIME_ANNOTATION, HANDOFF_STATUS, SUCCEED_AFTER_ANNOTATION
from webhook.api.objects import parse_time
from webhook.api.statuses import JobStatus
from webhook.controller.records import read_record
from webhook.devcluster import cluster
from webhook.devcluster.config import ClusterConfig, Ports
from webhook.readmodel.eta import estimate_snapshot, published_estimates
from webhook.readmodel.fetch import load_snapshot
from webhook.readmodel.kubeapi import connect
from webhook.readmodel.view import Snapshot, job_views
from webhook.readmodel.waiting import oversell_rate, strict_priority
from webhook.sim.model import SCENARIO_API_VERSION

COMMAND = ".venv/bin/python -m bench.eta_cluster"
TEAMS = ("eta-a1", "eta-a2", "eta-b1", "eta-b2")
STEMS = (("train", 4, 2, 60.0), ("eval", 2, 1, 25.0), ("sweep", 1, 1, 12.0))
"""(name, CPU a pod, pods, mean run time in seconds)."""
ROOT_CPU = 48
SEEDS = (1, 2, 3)
"""The traces a run measures (``bench/eta_bench.py`` replays the same ones in the simulator)."""
HIGH_CLASS = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "eta-high"},
              "value": 100}


@dataclass
class Submitted:
    name: str
    namespace: str
    at: float
    manifest: dict[str, Any]


def tree() -> dict[str, Any]:
    def limits(minimum: int, maximum: int) -> dict[str, Any]:
        return {"min": {"cpu": minimum, "memory": f"{minimum * 2}Gi"},
                "max": {"cpu": maximum, "memory": f"{maximum * 2}Gi"}}

    departments = [
        {"name": f"eta-dept-{d}", **limits(ROOT_CPU // 2, ROOT_CPU), "children": [
            {"name": team, **limits(ROOT_CPU // 4, ROOT_CPU // 2), "namespaces": [team]}
            for team in TEAMS[2 * d: 2 * d + 2]]}
        for d in range(2)
    ]
    return {"apiVersion": "scheduling.sigs.k8s.io/v1beta1", "kind": "ElasticQuotaTree",
            "metadata": {"name": "elasticquotatree", "namespace": "kube-system"},
            "spec": {"root": {"name": "root", **limits(ROOT_CPU, ROOT_CPU), "children": departments}}}


def trace(seed: int, minutes: float) -> list[Submitted]:
    rng = random.Random(seed)
    mean_cpu_seconds = statistics.fmean(cpu * pods * run for _, cpu, pods, run in STEMS)
    rate = 1.5 * ROOT_CPU / mean_cpu_seconds  # jobs a second offering 1.5 times the root
    out: list[Submitted] = []
    counters: dict[tuple[str, str], int] = {}
    for team in TEAMS:
        clock = 0.0
        while True:
            busy = clock < 0.6 * minutes * 60
            clock += rng.expovariate(rate / len(TEAMS) * (1.0 if busy else 1 / 3))
            if clock >= minutes * 60:
                break
            stem, cpu, pods, mean = rng.choice(STEMS)
            counters[(team, stem)] = number = counters.get((team, stem), 0) + 1
            run = mean * math.exp(rng.gauss(0.0, 0.2))
            name = f"{stem}-{number}"
            annotations = {EXPECTED_RUNTIME_ANNOTATION: f"{mean:g}s"} if rng.random() < 0.25 else {}
            template: dict[str, Any] = {
                "metadata": {"annotations": {SUCCEED_AFTER_ANNOTATION: f"{run:.1f}s"}},
                "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                         **({"priorityClassName": "eta-high"} if rng.random() < 0.1 else {}),
                         "containers": [{"name": "work", "image": "busybox", "resources": {
                             "requests": {"cpu": str(cpu), "memory": f"{cpu}Gi"}}}]},
            }
            manifest = {"apiVersion": "batch/v1", "kind": "Job",
                        "metadata": {"name": name, "namespace": team, "annotations": annotations},
                        "spec": {"parallelism": pods, "completions": pods, "template": template}}
            out.append(Submitted(name, team, clock, manifest))
    out.sort(key=lambda item: item.at)
    return out


def sim_trace(seed: int, minutes: float = 10.0, turn: float = 0.0) -> Trace:
    """The same trace for the simulator (``bench/eta_bench.py``): each Job runs for its set time, predictions
    as here (after the same warm-up, every 15 s), errors relative to at least :data:`FLOOR`. With ``turn``, each
    Job holds its room that many seconds longer than its pods run, as on the dev cluster, where a job's pods
    start a moment after its admission and its end reaches the next pass a moment after its pods end (about
    1.5 s in all; the simulator's control plane takes no time)."""
    jobs = []
    for item in trace(seed, minutes):
        manifest = copy.deepcopy(item.manifest)
        run = manifest["spec"]["template"]["metadata"]["annotations"].pop(SUCCEED_AFTER_ANNOTATION)
        if turn:
            run = f"{float(run.removesuffix('s')) + turn:.1f}s"
        jobs.append({"manifest": manifest, "at": f"{item.at:.3f}s", "runFor": run})
    name = f"dev-cluster-{seed}"
    held = f", each holding its room {turn:g} s past its run" if turn else ""
    scenario = {"apiVersion": SCENARIO_API_VERSION, "kind": "Scenario", "metadata": {"name": name},
                "spec": {"description": "the dev cluster's trace", "oversellrate": 1, "jobs": jobs}}
    return Trace(name, f"the dev cluster's trace (`--seed {seed}`): 2 departments x 2 teams, Round, 48 CPU, jobs of "
                 f"12 to 60 s{held}", [scenario, tree(), HIGH_CLASS], warmup=minutes * 60 / 5, every=15.0,
                 jobs=len(jobs), floor=FLOOR)


@functools.cache
def binaries() -> Path:
    return cluster.binaries_dir()


def kubectl(config: ClusterConfig, *args: str, stdin: str | None = None) -> str:
    """kubectl as the admin (the binaries are built and cached already: the cluster runs on them)."""
    return cluster.kubectl(config, binaries(), *args, stdin=stdin)


def naive(views: Sequence[Any], snapshot: Any, now: float) -> tuple[dict[tuple[str, str], float], ...]:
    """Both naive estimates of every QUEUING job, where its queue has completed jobs."""
    leaf_mean: dict[str, float] = {}
    tree_ = snapshot.tree
    for namespace in TEAMS:
        queue = snapshot.queues.get(f"root-{namespace}-{namespace}")
        items = (queue or {}).get("status", {}).get("runtimeHistory", [])
        samples = [float(value) for item in items for value in item.get("seconds", [])]
        if samples and tree_ is not None:
            leaf_mean[namespace] = statistics.fmean(samples)
    running: dict[str, int] = {}
    for view in views:
        if view.status == JobStatus.RUNNING:
            running[view.namespace] = running.get(view.namespace, 0) + 1
    literal: dict[tuple[str, str], float] = {}
    per_running: dict[tuple[str, str], float] = {}
    for view in views:
        mean = leaf_mean.get(view.namespace)
        if view.status != JobStatus.QUEUING or view.position is None or mean is None:
            continue
        literal[(view.namespace, view.name)] = now + view.position * mean
        per_running[(view.namespace, view.name)] = now + view.position * mean / max(1, running.get(view.namespace, 0))
    return literal, per_running


def measure(config: ClusterConfig, jobs: list[Submitted], minutes: float) -> Outcome:
    outcome = Outcome()
    for team in TEAMS:
        kubectl(config, "create", "namespace", team)
    kubectl(config, "apply", "-f", "-", stdin=json.dumps(tree()))
    kubectl(config, "apply", "-f", "-", stdin=json.dumps(HIGH_CLASS))
    time.sleep(5)  # the namespaces join the tree; the webhook holds their jobs from then on
    api = connect(str(config.kubeconfig))
    writes_before = queue_writes(config)
    start = time.time()

    def submit() -> None:
        for item in jobs:
            delay = start + item.at - time.time()
            if delay > 0:
                time.sleep(delay)
            kubectl(config, "create", "-f", "-", stdin=json.dumps(item.manifest))
            outcome.submitted[(item.namespace, item.name)] = time.time()

    submitter = threading.Thread(target=submit, daemon=True)
    submitter.start()
    warmup = start + minutes * 60 / 5
    while submitter.is_alive() or time.time() < start + minutes * 60:
        time.sleep(15)
        now = time.time()
        if now < warmup:
            continue
        snapshot = load_snapshot(api, None, now=now, complete=True)
        views = job_views(snapshot)
        rate, _ = oversell_rate(None, snapshot.tree_obj, snapshot.queues)
        began = time.process_time()
        found = estimate_snapshot(snapshot, views, rate, strict_priority(snapshot.queues))
        outcome.cpu.append(time.process_time() - began)
        bare = estimate_snapshot(without_handoff(snapshot), views, rate, strict_priority(snapshot.queues))
        published = published_estimates(snapshot.queues)
        literal, per_running = naive(views, snapshot, now)
        waiting = [view for view in views if view.status == JobStatus.QUEUING]
        outcome.rounds += 1
        outcome.peak = max(outcome.peak, len(waiting))
        for view in waiting:
            key = (view.namespace, view.name)
            guess = found.by_key.get(view.key)
            controller = published.get((view.kind, view.namespace, view.name), (None, None))[0]
            outcome.predictions.append(Prediction(key, now, {
                "estimate": guess.start if guess is not None else None,
                "no handoff": bare_guess.start if (bare_guess := bare.by_key.get(view.key)) is not None else None,
                "controller": controller,
                "naive": literal.get(key),
                "naive/running": per_running.get(key),
            }))
    deadline = time.time() + 15 * 60
    while time.time() < deadline:
        pods = json.loads(kubectl(config, "get", "pods", "-A", "-o", "json"))["items"]
        for pod in pods:
            namespace = pod["metadata"]["namespace"]
            job = (pod["metadata"].get("labels") or {}).get("job-name")
            moment = parse_time((pod.get("status") or {}).get("startTime"))
            if namespace in TEAMS and job and moment is not None:
                key = (namespace, job)
                outcome.started[key] = min(moment, outcome.started.get(key, moment))
        if all((item.namespace, item.name) in outcome.started for item in jobs):
            break
        time.sleep(10)
    outcome.queue_writes = queue_writes(config) - writes_before
    for job in json.loads(kubectl(config, "get", "jobs", "-A", "-o", "json"))["items"]:
        record = read_record(job)
        outcome.timeline[(job["metadata"]["namespace"], job["metadata"]["name"])] = {
            "admitted": record.admitted_at if record is not None else None,
            "completed": parse_time((job.get("status") or {}).get("completionTime"))}
    return outcome


def queue_writes(config: ClusterConfig) -> float:
    """The writes of Queues (``status`` or whole) the API server has served so far (its ``/metrics``)."""
    return sum(count for (verb, resource, _), count in api_requests(config).items()
               if resource == "queues" and verb in WRITE_VERBS)


def without_handoff(snapshot: Snapshot) -> Snapshot:
    """The snapshot as if the controller had measured no time of the control plane's (the tree's
    ``status.handoff`` left out)."""
    if snapshot.tree_obj is None:
        return snapshot
    stored = snapshot.tree_obj.get("status")
    status = {key: value for key, value in (stored if isinstance(stored, Mapping) else {}).items()
              if key != HANDOFF_STATUS}
    return dataclasses.replace(snapshot, tree_obj={**snapshot.tree_obj, "status": status})


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.eta_cluster", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0, help="length of the trace's submissions")
    parser.add_argument("--port-base", type=int, default=29700)
    parser.add_argument("--seed", type=int, nargs="+", default=list(SEEDS),
                        help="the traces, one fresh dev cluster each (default: %(default)s)")
    parser.add_argument("--dump", type=Path, help="also write every prediction and start to SEED.json here")
    parser.add_argument("--from-dump", type=Path, metavar="DIR",
                        help="run nothing: report the accuracy of the runs --dump wrote to DIR (its SEED.json files)")
    args = parser.parse_args(argv)
    if args.from_dump is not None:
        read = [(seed, args.from_dump / f"{seed}.json") for seed in args.seed]
        runs_read = [(seed, len(outcome.submitted), outcome, "") for seed, path in read if path.exists()
                     for outcome in (load(path),)]
        if not runs_read:
            raise SystemExit(f"bench.eta_cluster: no SEED.json of seeds {args.seed} in {args.from_dump}; "
                             "write them with --dump DIR")
        sys.stdout.write(report(runs_read, f"{COMMAND} --from-dump {args.from_dump}"))
        return 0
    command = COMMAND + ("" if (args.minutes, args.port_base, tuple(args.seed)) == (10.0, 29700, SEEDS) else
                         f" --minutes {args.minutes:g} --port-base {args.port_base} "
                         f"--seed {' '.join(map(str, args.seed))}")
    runs: list[tuple[int, int, Outcome | None, str]] = []
    for seed in args.seed:
        jobs = trace(seed, args.minutes)
        config = ClusterConfig(state_dir=devrun.state_dir("eta"), ports=Ports(args.port_base),
                               service_args=("--oversellrate=1", "--status-interval=1", "--eta-interval=2"))
        outcome, problem = devrun.run("eta", config, functools.partial(measure, config, jobs, args.minutes))
        if args.dump is not None and outcome is not None:
            args.dump.mkdir(parents=True, exist_ok=True)
            dump(args.dump / f"{seed}.json", outcome)
        runs.append((seed, len(jobs), outcome, problem))
    sys.stdout.write(report(runs, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
