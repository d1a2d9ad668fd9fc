"""What creating one pod of a workload controller costs the control plane, per admission setup (a report).

    .venv/bin/python -m bench.pod_admission [--pods 300] [--runs 2] [--port-base 28700]

Every pod an admitted job runs is created by a workload controller (the Job controller, a ReplicaSet's, an
operator), so its admission is paid once per pod of every admission burst. On a fresh dev cluster with the
seed's tree, ``--pods`` Pods are created in ``user-a`` by ``kubectl create`` impersonating the Job controller
(``system:serviceaccount:kube-system:job-controller``, a trusted creator), naming a scheduler that does not
exist, so that nothing else acts on them. Per pod: the CPU time of kube-apiserver and of ``kq serve`` (from
``/proc``), the wall time, and whether the pod came out marked for the extender. The setups, in this order:

1. as installed: the admission policies mark and tag the pod in the API server, and no webhook is called;
2. the namespace holds a ResourcePolicy: its pods go to the pod webhook too (``pods.workloads.mutate``), for
   the policy's toleration and scheduler profile;
3. the namespace without the policy, and the admission policies' bindings deleted: neither policies nor
   webhook, the floor of a pod's creation (its pods are not marked: not a setup to run).

The figures of a setup are the best of ``--runs`` (the machine is shared): compare them as ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import devrun
from bench.machine import header
from webhook.admission.policies import PODS_GUARD, PODS_MARK, TEMPLATES_GUARD
from webhook.api.names import EXTENDER_RESOURCE
from webhook.devcluster import cluster
from webhook.devcluster.config import ClusterConfig, Ports

COMMAND = ".venv/bin/python -m bench.pod_admission"
TITLE = "Creating a workload controller's pod: the control plane's CPU per pod, per admission setup (issue 40)"
NAMESPACE = "user-a"
CREATOR = "system:serviceaccount:kube-system:job-controller"
SEED = Path(__file__).resolve().parents[1] / "examples" / "seed"
SETTLE_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class Row:
    setup: str
    apiserver_ms: float
    serve_ms: float
    wall_ms: float
    marked: bool


class Bench:
    def __init__(self, config: ClusterConfig, pods: int) -> None:
        self.config, self.pods = config, pods
        self.bins = cluster.binaries_dir()

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        return cluster.kubectl(self.config, self.bins, *args, stdin=stdin)

    def cpu(self, process: str) -> float:
        pid = (self.config.run / f"{process}.pid").read_text().strip()
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def setup(self) -> None:
        for name in ("00-namespaces.yaml", "01-elasticquotatree.yaml", "02-priorityclasses.yaml"):
            self.kubectl("apply", "-f", str(SEED / name))
        self.wait(lambda: json.loads(self.kubectl("get", "namespace", NAMESPACE, "-o", "json"))["metadata"]
                  .get("labels", {}).get("kube-queue.x-k8s.io/quota") is not None, "the namespace's quota label")
        time.sleep(SETTLE_SECONDS)

    def wait(self, check: Any, what: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {timeout:.0f} s for {what}")
            time.sleep(0.5)

    def batch(self, tag: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": f"bench-{tag}-{index:04d}", "namespace": NAMESPACE, "labels": {"app": "bench-pods"}},
             "spec": {"schedulerName": "bench-nobody", "restartPolicy": "Never", "containers": [
                 {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}
            for index in range(self.pods)]}

    def measure(self, setup: str, tag: str) -> Row:
        self.kubectl("delete", "pods", "-n", NAMESPACE, "-l", "app=bench-pods", "--wait=true", "--timeout=120s")
        time.sleep(SETTLE_SECONDS)
        apiserver, serve, started = self.cpu("kube-apiserver"), self.cpu("kq-serve"), time.monotonic()
        self.kubectl("create", "-f", "-", f"--as={CREATOR}", "-o", "name", stdin=json.dumps(self.batch(tag)))
        wall = time.monotonic() - started
        apiserver, serve = self.cpu("kube-apiserver") - apiserver, self.cpu("kq-serve") - serve
        first = json.loads(self.kubectl("get", "pod", f"bench-{tag}-0000", "-n", NAMESPACE, "-o", "json"))
        resources = first["spec"]["containers"][0].get("resources", {})
        per = 1000.0 / self.pods
        return Row(setup, apiserver * per, serve * per, wall * per,
                   EXTENDER_RESOURCE in resources.get("requests", {}))

    def best(self, setup: str, key: str, runs: int) -> Row:
        rows = [self.measure(setup, f"{key}-{run}") for run in range(runs)]
        return min(rows, key=lambda row: row.apiserver_ms + row.serve_ms)

    def policy(self) -> None:
        body = {"apiVersion": "scheduling.alibabacloud.com/v1alpha1", "kind": "ResourcePolicy",
                "metadata": {"name": "bench-pods", "namespace": NAMESPACE},
                "spec": {"selector": {"app": "bench-other"}, "strategy": "prefer", "units": [{"resource": "ecs"}]}}
        self.kubectl("apply", "-f", "-", stdin=json.dumps(body))
        time.sleep(SETTLE_SECONDS)

    def no_policy(self) -> None:
        self.kubectl("delete", "resourcepolicy", "bench-pods", "-n", NAMESPACE)
        self.wait(lambda: "kube-queue.x-k8s.io/placement" not in json.loads(self.kubectl(
            "get", "namespace", NAMESPACE, "-o", "json"))["metadata"].get("labels", {}), "the placement label gone")
        self.kubectl("delete", "mutatingadmissionpolicybinding", PODS_MARK)
        self.kubectl("delete", "validatingadmissionpolicybinding", PODS_GUARD, TEMPLATES_GUARD)
        time.sleep(SETTLE_SECONDS)


def report(rows: list[Row], command: str, problem: str, pods: int, runs: int) -> str:
    lines = header(TITLE, command)
    if problem:
        return "\n".join([*lines, f"not measured: {problem}", ""])
    lines += [
        f"{pods} Pods created in `{NAMESPACE}` by `kubectl create` as the Job controller, per setup the best of "
        f"{runs} runs; CPU of the process from `/proc` over the creates, per pod.", "",
        "| setup | kube-apiserver CPU, ms/pod | `kq serve` CPU, ms/pod | wall, ms/pod | marked for the extender |",
        "|---|---:|---:|---:|---|",
    ]
    lines += [f"| {row.setup} | {row.apiserver_ms:.2f} | {row.serve_ms:.2f} | {row.wall_ms:.2f} | "
              f"{'yes' if row.marked else 'no'} |" for row in rows]
    if len(rows) == 3 and rows[0].apiserver_ms > 0:
        first = rows[0]
        lines += ["", "Ratios to the setup as installed (kube-apiserver, both processes): " + "; ".join(
            f"{row.setup} {row.apiserver_ms / first.apiserver_ms:.2f}x, "
            f"{(row.apiserver_ms + row.serve_ms) / (first.apiserver_ms + first.serve_ms):.2f}x"
            for row in rows[1:]) + "."]
    return "\n".join([*lines, ""])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=300)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--port-base", type=int, default=int(os.environ.get("KQ_E2E_PORT_BASE", "28700")))
    args = parser.parse_args(argv)
    command = COMMAND if (args.pods, args.runs) == (300, 2) else f"{COMMAND} --pods {args.pods} --runs {args.runs}"
    config = ClusterConfig(state_dir=devrun.state_dir("pods"), ports=Ports(args.port_base), operators=())

    def work() -> list[Row]:
        bench = Bench(config, args.pods)
        bench.setup()
        rows = [bench.best("as installed", "installed", args.runs)]
        bench.policy()
        rows.append(bench.best("a ResourcePolicy in the namespace: the webhook too", "policy", args.runs))
        bench.no_policy()
        rows.append(bench.best("no admission policy, no webhook (the floor)", "floor", args.runs))
        return rows

    try:
        rows, problem = devrun.run("pods", config, work)
    except subprocess.SubprocessError as error:
        rows, problem = None, str(error)
    print(report(rows or [], command, problem, args.pods, args.runs))
    return 0 if not problem else 1


if __name__ == "__main__":
    sys.exit(main())
