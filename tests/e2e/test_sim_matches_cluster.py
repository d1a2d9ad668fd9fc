"""The simulator predicts the cluster: each seed scenario of examples/scenarios/ is run through ``kq simulate`` and
replayed on the dev cluster, and both outcomes must equal the seed's (the values test_seed_scenarios.py checks).

The replay uses the scenario's own documents: its tree, PriorityClasses and jobs (with the names the simulator
gave them), submitted in the scenario's order with at least the scenario's spacing (each job is created once
the previous one has settled: admitted or listed in its queue), under the scenario's settings (the service is
restarted with ``--oversellrate`` and ``StrictPriority``). The outcome compared, per job: admitted / queued /
finished, its position while queued, and whether it was evicted (the eviction annotation; the simulator's
eviction count). Admitted jobs must also run all their pods (``--oversellrate=1``: admission == running).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import DevCluster
from tests.e2e.harness import installed_tree, wait_managed
from webhook.api.names import ADMISSION_ANNOTATION, EVICTION_ANNOTATION, SUCCEED_AFTER_ANNOTATION
from webhook.api.objects import spec_of
from webhook.cli.simulate import run_scenario
from webhook.core.quota import queue_name
from webhook.core.rate import format_rate
from webhook.sim.engine import State
from webhook.sim.model import MICROS, Scenario, Submission, format_duration
from webhook.sim.report import outcome, to_dict
from webhook.sim.scenario import load_scenario

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = REPO / "examples" / "scenarios"
SEED = REPO / "examples" / "seed"
USERS = ("user-a", "user-b", "user-c")

EXPECTED: dict[str, dict[str, dict[str, Any]]] = {
    # Scenario 1: the first job runs its 6 pods, the second waits at position 1.
    "seed-1-round.yaml": {
        "user-a/pi-00001": {"state": "admitted", "position": None, "evicted": False},
        "user-a/pi-00002": {"state": "queued", "position": 1, "evicted": False},
    },
    # Scenario 2 (StrictPriority): the priority-2 job goes to position 1, the earlier job to position 2.
    "seed-2-strict-priority.yaml": {
        "user-a/pi-00001": {"state": "admitted", "position": None, "evicted": False},
        "user-a/pi-00002": {"state": "queued", "position": 2, "evicted": False},
        "user-a/pi-00003": {"state": "queued", "position": 1, "evicted": False},
    },
    # Scenario 3: user-b's job (Department-a's borrower) is evicted back to position 1; user-c's job runs.
    "seed-3-reclaim.yaml": {
        "user-a/pi-00001": {"state": "admitted", "position": None, "evicted": False},
        "user-b/pi-00001": {"state": "queued", "position": 1, "evicted": True},
        "user-c/pi-00001": {"state": "admitted", "position": None, "evicted": False},
    },
}
"""The seed's outcomes, by namespace/job name (the simulator names ``generateName`` jobs ``pi-00001``...)."""


@dataclasses.dataclass
class Cluster:
    dev: DevCluster

    def restart(self, scenario: Scenario) -> None:
        args = (f"--oversellrate={format_rate(scenario.oversell_rate)}", "--status-interval=1")
        env = {"StrictPriority": "true"} if scenario.strict_priority else None
        self.dev.restart_service(*args, env=env)
        want = {
            name: "Block" if scenario.strict_priority else str(spec_of(queue)["queuePolicy"])
            for name, queue in scenario.queues.items()
        }

        def policies_set() -> bool:
            items = self.dev.get_json("queue", "-n", "kube-queue")["items"]
            found = {q["metadata"]["name"]: q["spec"].get("queuePolicy") for q in items}
            return {name: found.get(name) for name in want} == want

        self.dev.wait_until(policies_set, 60, f"the scenario's queue policies {want}")

    def active(self) -> dict[str, int]:
        """``namespace/name -> position`` of every job the Queues list as waiting."""
        out: dict[str, int] = {}
        for queue in self.dev.get_json("queue", "-n", "kube-queue")["items"]:
            details = queue.get("status", {}).get("queueItemDetails", {})
            for item in details.get("active", []):
                out[f"{item['namespace']}/{item['name']}"] = int(item["position"])
        return out

    def jobs(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for namespace in USERS:
            for job in self.dev.get_json("jobs", "-n", namespace)["items"]:
                out[f"{namespace}/{job['metadata']['name']}"] = job
        return out

    def outcome(self) -> dict[str, dict[str, Any]]:
        active = self.active()
        out: dict[str, dict[str, Any]] = {}
        for key, job in self.jobs().items():
            annotations = job["metadata"].get("annotations", {})
            conditions = {c["type"] for c in job.get("status", {}).get("conditions", []) if c["status"] == "True"}
            if conditions & {"Complete", "Failed"}:
                state = "finished"
            elif not job["spec"].get("suspend") and ADMISSION_ANNOTATION in annotations:
                state = "admitted"
            else:
                state = "queued"
            out[key] = {
                "state": state,
                "position": active.get(key) if state == "queued" else None,
                "evicted": EVICTION_ANNOTATION in annotations,
            }
        return out

    def running_pods(self, namespace: str, job: str) -> int:
        pods = self.dev.get_json("pods", "-n", namespace, "-l", f"job-name={job}")["items"]
        return sum(1 for pod in pods if pod.get("status", {}).get("phase") == "Running")

    def submit(self, submission: Submission) -> None:
        obj = json.loads(json.dumps(submission.obj))
        if submission.run_for is not None and obj.get("kind") == "Job":
            template = obj["spec"]["template"].setdefault("metadata", {})
            template.setdefault("annotations", {})[SUCCEED_AFTER_ANNOTATION] = format_duration(submission.run_for)
        self.dev.kubectl("create", "-f", "-", stdin=json.dumps(obj))
        key = f"{submission.namespace}/{submission.name}"

        def settled() -> bool:
            return self.outcome().get(key, {}).get("state") == "admitted" or key in self.active()

        self.dev.wait_until(settled, 60, f"{key} admitted or listed in its queue")

    def clear(self) -> None:
        for namespace in USERS:
            self.dev.kubectl("delete", "jobs", "--all", "-n", namespace, "--cascade=foreground", "--wait=true",
                             "--timeout=120s")
        self.dev.wait_until(lambda: not self.active(), 60, "every queue empty")


def _gone_or_active(dev: DevCluster, namespace: str) -> bool:
    found = dev.kubectl_result("get", "namespace", namespace, "-o", "json")
    if found.returncode != 0:
        return True
    return bool(json.loads(found.stdout).get("status", {}).get("phase") == "Active")


def _tree_spec() -> dict[str, Any]:
    import yaml  # noqa: PLC0415

    spec: dict[str, Any] = yaml.safe_load((SEED / "01-elasticquotatree.yaml").read_text())["spec"]
    return spec


@pytest.fixture(scope="module")
def cluster(dev_cluster: DevCluster) -> Iterator[Cluster]:
    dev = dev_cluster
    # An earlier module may have deleted the seed's namespaces without waiting: let them go first.
    dev.wait_until(lambda: all(_gone_or_active(dev, ns) for ns in USERS), 120, "the seed's namespaces to settle")
    dev.kubectl("apply", "-f", str(SEED / "00-namespaces.yaml"))
    dev.kubectl("apply", "-f", str(SEED / "02-priorityclasses.yaml"))
    try:
        with installed_tree(dev, _tree_spec()):
            wait_managed(dev, *USERS)
            yield Cluster(dev)
            for namespace in USERS:
                dev.kubectl("delete", "jobs", "--all", "-n", namespace, "--wait=false")
    finally:
        dev.kubectl("delete", "-f", str(SEED / "00-namespaces.yaml"), "--wait=false", "--ignore-not-found")
        dev.kubectl("delete", "-f", str(SEED / "02-priorityclasses.yaml"), "--ignore-not-found")
        dev.restart_service()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_simulator_predicts_the_dev_clusters_outcome(cluster: Cluster, name: str) -> None:
    scenario = load_scenario(SCENARIOS / name)
    result = run_scenario(scenario)
    predicted = outcome(to_dict(result))
    assert predicted == EXPECTED[name], "the simulator gives the seed's outcome"

    cluster.restart(scenario)
    try:
        previous = 0
        for submission in scenario.submissions:
            time.sleep((submission.at - previous) / MICROS)
            previous = submission.at
            cluster.submit(submission)
        deadline = time.monotonic() + 90
        observed = cluster.outcome()
        while observed != predicted and time.monotonic() < deadline:  # the Queues' status lags by up to 1 s
            time.sleep(0.5)
            observed = cluster.outcome()
        assert observed == predicted, "the dev cluster's outcome is the simulator's"
        for job in result.jobs:
            if job.state is State.RUNNING:
                pods = sum(pod_set.count for pod_set in job.workload.pod_sets)
                namespace, job_name = job.key.namespace, job.key.name

                def all_running(namespace: str = namespace, job_name: str = job_name, pods: int = pods) -> bool:
                    return cluster.running_pods(namespace, job_name) == pods

                cluster.dev.wait_until(all_running, 120, f"{pods} Running pods of {job.key}")
        queues = {queue_name(job.leaf.name, job.key.namespace) for job in result.jobs}
        assert queues <= set(scenario.queues)
    finally:
        cluster.clear()
