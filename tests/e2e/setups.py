"""Set-ups several end-to-end modules share (a support module, not a test module): the seed's namespaces,
tree and PriorityClasses (:func:`seed`), a seed-shaped tree over fresh namespaces (:func:`managed`), and the
manifests the modules submit (the seed's Job, a PyTorchJob)."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.builders import SEED_TREE_SPEC
from tests.e2e.conftest import DevCluster
from tests.e2e.harness import create_namespaces, installed_tree, policies_watched, unique, wait_managed
from webhook.api.names import PLACEMENT_NAMESPACE_LABEL
from webhook.devcluster.config import NodeSpec

SEED = Path(__file__).resolve().parents[2] / "examples" / "seed"
JOBS = SEED / "jobs"
USERS = ("user-a", "user-b", "user-c")
QUEUES = {"root-department-a-user-a", "root-department-a-user-b", "root-department-b-user-c"}


@dataclasses.dataclass
class Seed:
    dev: DevCluster
    jobs: dict[str, str] = dataclasses.field(default_factory=dict)
    """Scenario role -> generated job name."""

    def create(self, role: str, filename: str) -> str:
        out = self.dev.kubectl("create", "-f", str(JOBS / filename))
        match = re.search(r"job\.batch/(\S+) created", out)
        assert match, out
        self.jobs[role] = match.group(1)
        return match.group(1)

    def job(self, namespace: str, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self.dev.get_json("job", name, "-n", namespace)
        return result

    def queue(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self.dev.get_json("queue", name, "-n", "kube-queue")
        return result

    def active(self, queue: str) -> list[dict[str, Any]]:
        details = self.queue(queue).get("status", {}).get("queueItemDetails", {})
        return list(details.get("active", []))

    def running_pods(self, namespace: str, job: str) -> int:
        pods = self.dev.get_json("pods", "-n", namespace, "-l", f"job-name={job}")["items"]
        return sum(1 for pod in pods if pod.get("status", {}).get("phase") == "Running")

    def suspended(self, namespace: str, job: str) -> bool:
        return bool(self.job(namespace, job)["spec"].get("suspend"))

    def restart(self, args: tuple[str, ...], env: dict[str, str] | None = None) -> None:
        self.dev.restart_service(*args, env=env)

    def restart_strict(self) -> None:
        """The service restarted under StrictPriority (``--oversellrate=1``), once every seed Queue is Block."""
        self.restart(("--oversellrate=1", "--status-interval=1"), env={"StrictPriority": "true"})

        def all_block() -> bool:
            items = self.dev.get_json("queue", "-n", "kube-queue")["items"]
            ours = [q for q in items if q["metadata"]["name"] in QUEUES]
            return len(ours) == len(QUEUES) and all(q["spec"].get("queuePolicy") == "Block" for q in ours)

        self.dev.wait_until(all_block, 60, "every queue to turn Block")


def _tree_spec() -> dict[str, Any]:
    import yaml  # noqa: PLC0415

    doc = yaml.safe_load((SEED / "01-elasticquotatree.yaml").read_text())
    spec: dict[str, Any] = doc["spec"]
    return spec


@pytest.fixture(scope="module")
def seed(dev_cluster: DevCluster) -> Iterator[Seed]:
    dev = dev_cluster
    setup = Seed(dev)
    setup.restart(("--oversellrate=1", "--status-interval=1"))
    dev.kubectl("apply", "-f", str(SEED / "00-namespaces.yaml"))
    dev.kubectl("apply", "-f", str(SEED / "02-priorityclasses.yaml"))
    try:
        with installed_tree(dev, _tree_spec()):
            wait_managed(dev, *USERS)
            yield setup
            for namespace in USERS:
                dev.kubectl("delete", "jobs", "--all", "-n", namespace, "--wait=false")
    finally:
        dev.kubectl("delete", "-f", str(SEED / "00-namespaces.yaml"), "--wait=false", "--ignore-not-found")
        dev.kubectl("delete", "-f", str(SEED / "02-priorityclasses.yaml"), "--ignore-not-found")
        dev.restart_service()


def seed_job(namespace: str) -> dict[str, Any]:
    """The seed's Job (examples/seed/jobs/pi.yaml) with ``suspend: false``, as a user who ignores the queue
    writes it."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"generateName": "pi-", "namespace": namespace},
        "spec": {
            "suspend": False,
            "completions": 6,
            "parallelism": 6,
            "template": {
                "spec": {
                    "schedulerName": "default-scheduler",
                    "containers": [
                        {
                            "name": "pi",
                            "image": "perl:5.34.0",
                            "command": ["sleep", "1d"],
                            "resources": {
                                "requests": {"cpu": "10", "memory": "10Gi"},
                                "limits": {"cpu": "10", "memory": "10Gi"},
                            },
                        }
                    ],
                    "restartPolicy": "Never",
                }
            },
        },
    }


@pytest.fixture(scope="module")
def managed(dev_cluster: DevCluster) -> Iterator[tuple[str, str, str]]:
    """A tree shaped like the seed's, over fresh namespaces: (dept-a namespace, dept-b namespace, unmanaged)."""
    ns_a, ns_b, outside = unique("wh-a"), unique("wh-b"), unique("wh-out")
    create_namespaces(dev_cluster, ns_a, ns_b, outside)
    for ns in (ns_a, ns_b, outside):  # alice is an ordinary developer: she may edit her namespaces
        dev_cluster.kubectl("create", "rolebinding", "alice-edit", "--clusterrole=edit", "--user=alice", "-n", ns)
    spec = copy.deepcopy(SEED_TREE_SPEC)
    spec["root"]["children"][0]["namespaces"] = [ns_a]
    spec["root"]["children"][1]["namespaces"] = [ns_b]
    try:
        with installed_tree(dev_cluster, spec):
            wait_managed(dev_cluster, ns_a, ns_b)
            yield ns_a, ns_b, outside
    finally:
        for ns in (ns_a, ns_b, outside):
            dev_cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def pytorchjob(name: str, namespace: str, workers: int) -> dict[str, Any]:
    def replicas(count: int) -> dict[str, Any]:
        container = {"name": "pytorch", "image": "pytorch", "resources": {"requests": {"cpu": "10"}}}
        return {"replicas": count, "template": {"spec": {"containers": [container]}}}

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "runPolicy": {"suspend": False},
            "pytorchReplicaSpecs": {"Master": replicas(1), "Worker": replicas(workers)},
        },
    }


def developer_tree_spec(team_a: str, team_a2: str, team_b: str) -> dict[str, Any]:
    """The developer commands' two-department tree over three fresh namespaces."""
    whole = {"cpu": 100, "memory": "100Gi", "nvidia.com/gpu": 4}
    return {
        "root": {
            "name": "root",
            "min": whole,
            "max": whole,
            "children": [
                {"name": "Department-a", "min": {"cpu": 60, "memory": "60Gi", "nvidia.com/gpu": 3}, "max": whole,
                 "namespaces": [team_a, team_a2]},
                {"name": "Department-b", "min": {"cpu": 40, "memory": "40Gi", "nvidia.com/gpu": 1}, "max": whole,
                 "namespaces": [team_b]},
            ],
        }
    }


FILLERS = 250
"""Extra nodes for the placement tests: on ~256 nodes the scheduler's default sampling filters about 120 per
cycle and asks the extender about those only."""
UNIT_AT = (125, 126)
"""The fillers that make up those tests' ECS unit: far (in the scheduler's node order) from the virtual node."""


@contextlib.contextmanager
def filler_nodes(dev_cluster: DevCluster, namespace: str) -> Iterator[tuple[dict[str, str], tuple[str, ...]]]:
    """:data:`FILLERS` fake nodes with room, tainted so that only pods tolerating the taint (the test's) may use
    them, those at :data:`UNIT_AT` labelled ``pool=<namespace>``; deleted afterwards. Yields the taint and the
    names of the pool's nodes."""
    taint = {"key": "kube-queue.test/filler", "value": namespace, "effect": "NoSchedule"}
    label = f"filler={namespace}"
    nodes: list[dict[str, Any]] = []
    for index in range(FILLERS):
        manifest: dict[str, Any] = NodeSpec(f"filler-{namespace}-{index:03d}", "32", "128Gi").manifest()
        manifest["metadata"]["labels"]["filler"] = namespace
        if index in UNIT_AT:
            manifest["metadata"]["labels"]["pool"] = namespace
        manifest["spec"] = {"taints": [taint]}
        nodes.append(manifest)
    dev_cluster.kubectl("create", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes}))
    try:

        def ready() -> bool:
            items = dev_cluster.get_json("nodes", "-l", label)["items"]
            return len(items) == FILLERS and all(
                any(c["type"] == "Ready" and c["status"] == "True" for c in item["status"].get("conditions", []))
                for item in items
            )

        dev_cluster.wait_until(ready, 120, f"{FILLERS} filler nodes Ready")
        yield taint, tuple(f"filler-{namespace}-{index:03d}" for index in UNIT_AT)
    finally:
        dev_cluster.kubectl("delete", "nodes", "-l", label, "--wait=false", check=False)


def resource_policy(namespace: str, selector: dict[str, str], units: list[dict[str, Any]],
                    name: str = "rp") -> dict[str, Any]:
    """A ResourcePolicy (strategy ``prefer``) selecting pods by ``selector`` over ``units``."""
    return {
        "apiVersion": "scheduling.alibabacloud.com/v1alpha1",
        "kind": "ResourcePolicy",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": selector, "strategy": "prefer", "units": units},
    }


def wait_routed_to_placement(dev_cluster: DevCluster, namespace: str) -> None:
    """Wait until the controller labelled a namespace outside the quota tree for the placement webhook (its
    ResourcePolicy needs it), then for the extender's and the webhook's watches to hold its policies."""

    def labelled() -> bool:
        labels = dev_cluster.get_json("namespace", namespace)["metadata"].get("labels", {})
        return bool(labels.get(PLACEMENT_NAMESPACE_LABEL) == "true")

    dev_cluster.wait_until(labelled, 60, "the controller to label the namespace for the placement webhook")
    policies_watched(dev_cluster, namespace)
