"""Each job kind under its real operator, beside a batch Job, in one run (issue 35; a report, not a test).

    .venv/bin/python -m bench.kinds_bench [--jobs 5] [--port-base N]

One fresh dev cluster with the operators (``webhook/devcluster/operators.py``) and one quota big enough for
everything. For each kind in turn, ``--jobs`` jobs of four pods of 1 CPU (a RayJob: a head and three workers,
plus KubeRay's submitter pod; a Workflow: one step of four pods) are created one after another as a user would
(``kubectl create``), each waited for until all its pods run, then all deleted. Printed per kind:

* create -> admitted: the webhook's submission stamp (microseconds) to the ``admittedAt`` of the job's admission
  record;
* admitted -> all pods Running: the admission to the moment the bench saw every pod of the job Running (polled
  every 100 ms), which is what the operator, the scheduler and the fake kubelet take;
* API writes per admitted job: every write the API server counted (``apiserver_request_total``, any client)
  from the first create of the kind to the last job running, less what the idle cluster writes in as long
  (node heartbeats, leases), divided by the jobs; with the resources written most.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import devrun
from bench.e2e_metrics import WRITE_VERBS, RequestKey, parse_requests
from bench.machine import header
from webhook.api.names import ADMISSION_ANNOTATION, SUBMITTED_ANNOTATION
from webhook.api.objects import parse_time
from webhook.devcluster import cluster
from webhook.devcluster.config import ClusterConfig, Ports
from webhook.devcluster.operators import OPERATORS
from webhook.readmodel.submit import JobOptions, build_job

COMMAND = ".venv/bin/python -m bench.kinds_bench"
TITLE = "Job kinds under their real operators, beside a batch Job (issue 35)"
NAMESPACE = "bench-kinds"
PODS = 4
IDLE_SECONDS = 20.0


def _submitted(kind: str) -> Callable[[str], dict[str, Any]]:
    def make(name: str) -> dict[str, Any]:
        obj = build_job(JobOptions(kind=kind, namespace=NAMESPACE, name=name, cpu="1", memory="1Gi",
                                   workers=PODS, command=("sleep", "3600")))
        if kind == "mpijob":  # the training operator serves MPIJob as kubeflow.org/v1 (kq submit falls back)
            obj["apiVersion"] = "kubeflow.org/v1"
        return obj
    return make


def _raycluster(name: str) -> dict[str, Any]:
    def template(container: str) -> dict[str, Any]:
        amounts = {"cpu": "1", "memory": "1Gi"}
        return {"spec": {"containers": [{"name": container, "image": "rayproject/ray:2.9.0",
                                         "resources": {"requests": amounts, "limits": amounts}}]}}
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"headGroupSpec": {"rayStartParams": {}, "template": template("ray-head")},
                     "workerGroupSpecs": [{"groupName": "workers", "replicas": PODS - 1, "minReplicas": PODS - 1,
                                           "maxReplicas": PODS - 1, "rayStartParams": {},
                                           "template": template("ray-worker")}]}}


def _workflow(name: str) -> dict[str, Any]:
    work = {"name": "work", "container": {"image": "busybox", "command": ["sleep", "3600"],
                                          "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}}
    main = {"name": "main", "steps": [[{"name": "fan", "template": "work", "withItems": list(range(PODS))}]]}
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"entrypoint": "main", "templates": [main, work]}}


KINDS: dict[str, tuple[str, str, Callable[[str], dict[str, Any]], int]] = {
    # kind: (resource, operator, manifest, pods per job)
    "Job": ("jobs.batch", "kube-controller-manager", _submitted("job"), PODS),
    "PyTorchJob": ("pytorchjobs.kubeflow.org", "training operator v1.8.1", _submitted("pytorchjob"), PODS),
    "TFJob": ("tfjobs.kubeflow.org", "training operator v1.8.1", _submitted("tfjob"), PODS),
    "MPIJob": ("mpijobs.kubeflow.org", "training operator v1.8.1", _submitted("mpijob"), PODS + 1),
    "XGBoostJob": ("xgboostjobs.kubeflow.org", "training operator v1.8.1", _submitted("xgboostjob"), PODS),
    "PaddleJob": ("paddlejobs.kubeflow.org", "training operator v1.8.1", _submitted("paddlejob"), PODS),
    "RayJob": ("rayjobs.ray.io", "KubeRay v1.5.0", _submitted("rayjob"), PODS + 1),
    "RayCluster": ("rayclusters.ray.io", "KubeRay v1.5.0", _raycluster, PODS),
    "Workflow": ("workflows.argoproj.io", "Argo workflow-controller v4.0.5", _workflow, PODS),
}


class Bench:
    def __init__(self, config: ClusterConfig, bins: Path) -> None:
        self.config, self.bins = config, bins

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        return cluster.kubectl(self.config, self.bins, *args, stdin=stdin)

    def get(self, path: str) -> Any:
        status, body = cluster.api_get(self.config, path, timeout=10.0)
        if status != 200:
            raise RuntimeError(f"GET {path} answered {status}")
        return json.loads(body)

    def writes(self) -> dict[RequestKey, float]:
        status, body = cluster.api_get(self.config, "/metrics", timeout=10.0)
        if status != 200:
            raise RuntimeError(f"kube-apiserver /metrics answered {status}")
        return {key: value for key, value in parse_requests(body.decode("utf-8", "replace")).items()
                if key[0] in WRITE_VERBS}

    def running(self, prefix: str) -> int:
        pods = self.get(f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
        return sum(1 for pod in pods if pod["metadata"]["name"].startswith(prefix + "-")
                   and pod.get("status", {}).get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp"))

    def setup(self) -> None:
        tree = {"apiVersion": "scheduling.sigs.k8s.io/v1beta1", "kind": "ElasticQuotaTree",
                "metadata": {"name": "elasticquotatree", "namespace": "kube-system"},
                "spec": {"root": {"name": "root", "min": {"cpu": 120}, "max": {"cpu": 120}, "children": [
                    {"name": "bench", "min": {"cpu": 120}, "max": {"cpu": 120}, "namespaces": [NAMESPACE]}]}}}
        self.kubectl("create", "namespace", NAMESPACE)
        self.kubectl("apply", "-f", "-", stdin=json.dumps(tree))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            labels = self.get(f"/api/v1/namespaces/{NAMESPACE}")["metadata"].get("labels", {})
            sa = cluster.api_get(self.config, f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default")[0]
            if labels.get("kube-queue.x-k8s.io/managed") == "true" and sa == 200:
                return
            time.sleep(0.2)
        raise RuntimeError(f"namespace {NAMESPACE} was not managed within 60 s")

    def idle_rate(self) -> float:
        before = sum(self.writes().values())
        time.sleep(IDLE_SECONDS)
        return (sum(self.writes().values()) - before) / IDLE_SECONDS

    def kind(self, kind: str, jobs: int, idle: float) -> dict[str, Any]:
        resource, _, make, pods = KINDS[kind]
        admitted, running = [], []
        before, started = self.writes(), time.monotonic()
        for index in range(jobs):
            name = f"{kind.lower()}-{index}"
            self.kubectl("create", "-f", "-", stdin=json.dumps(make(name)))
            deadline = time.monotonic() + 180
            while self.running(name) < pods:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{kind} {name}: not all {pods} pods Running within 180 s")
                time.sleep(0.1)
            seen = time.time()
            obj = json.loads(self.kubectl("get", resource, name, "-n", NAMESPACE, "-o", "json"))
            record = json.loads(obj["metadata"]["annotations"][ADMISSION_ANNOTATION])
            at = parse_time(record["admittedAt"]) or 0.0
            annotations = obj["metadata"]["annotations"]
            created = parse_time(annotations.get(SUBMITTED_ANNOTATION) or obj["metadata"]["creationTimestamp"]) or 0.0
            admitted.append(at - created)
            running.append(seen - at)
        elapsed = time.monotonic() - started
        after = self.writes()
        delta = {key: after.get(key, 0.0) - before.get(key, 0.0) for key in after}
        self.kubectl("delete", resource, "--all", "-n", NAMESPACE, "--wait=true", "--timeout=120s")
        deadline = time.monotonic() + 120
        while self.get(f"/api/v1/namespaces/{NAMESPACE}/pods")["items"] and time.monotonic() < deadline:
            time.sleep(0.2)
        top = sorted(((value, key) for key, value in delta.items() if value > 0), reverse=True)[:3]
        return {
            "kind": kind, "jobs": jobs, "pods": pods,
            "admit": statistics.median(admitted), "running": statistics.median(running),
            "writes": max(0.0, sum(delta.values()) - idle * elapsed) / jobs,
            "top": ", ".join(f"{key[0]} {key[1]}{'/' + key[2] if key[2] else ''} {value / jobs:.1f}"
                             for value, key in top),
        }


def report(rows: list[dict[str, Any]], idle: float, command: str, problem: str) -> str:
    lines = header(TITLE, command)
    if problem:
        return "\n".join([*lines, f"not measured: {problem}", ""])
    lines += [
        "Each kind: jobs of four pods of 1 CPU created one after another by `kubectl create` and waited for; "
        "medians over the jobs. Writes: every write the API server counted while the kind's jobs were created "
        f"and started, less the idle cluster's {idle:.1f} writes/s over the same time, per job.", "",
        "| kind | operator | jobs | pods each | create -> admitted (s) | admitted -> all pods Running (s) "
        "| API writes per admitted job | most written (per job) |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        operator = KINDS[row["kind"]][1]
        lines.append(f"| {row['kind']} | {operator} | {row['jobs']} | {row['pods']} | {row['admit']:.2f} | "
                     f"{row['running']:.2f} | {row['writes']:.1f} | {row['top']} |")
    base = next((row for row in rows if row["kind"] == "Job"), None)
    if base is not None and base["running"] > 0 and base["writes"] > 0:
        lines += ["", "Ratios to the batch Job of the same run (admitted -> Running; writes): " + "; ".join(
            f"{row['kind']} {row['running'] / base['running']:.1f}x, {row['writes'] / base['writes']:.1f}x"
            for row in rows if row is not base) + "."]
    return "\n".join([*lines, ""])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=5)
    parser.add_argument("--port-base", type=int, default=int(os.environ.get("KQ_E2E_PORT_BASE", "26400")))
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma list (default: every kind)")
    args = parser.parse_args(argv)
    kinds = [kind for kind in args.kinds.split(",") if kind]
    command = COMMAND if (args.jobs, args.kinds) == (5, ",".join(KINDS)) else (
        f"{COMMAND} --jobs {args.jobs} --kinds {args.kinds}")
    config = ClusterConfig(state_dir=devrun.state_dir("kinds"), ports=Ports(args.port_base),
                           operators=tuple(OPERATORS), service_args=("--oversellrate=1",))
    idle = 0.0

    def work() -> list[dict[str, Any]]:
        nonlocal idle
        bench = Bench(config, cluster.binaries_dir())
        bench.setup()
        idle = bench.idle_rate()
        return [bench.kind(kind, args.jobs, idle) for kind in kinds]

    rows, problem = devrun.run("kinds", config, work)
    print(report(rows or [], idle, command, problem))
    return 0 if not problem else 1


if __name__ == "__main__":
    sys.exit(main())
