"""Fair sharing of the spare on the dev cluster (docs/fair-sharing.md), through kubectl only.

The seed's namespaces under a root of 100 CPU with Department-a's min at 30 and Department-b's at 20 (so 50 CPU
of spare), at ``--oversellrate=1``. Department-a floods 150 jobs of 2 CPU first, then Department-b submits
50. Every job runs 20 s. Without fair sharing, Department-b reclaims its min (20) and the room Department-a's jobs
free as they finish goes to the oldest waiting jobs, Department-a's: Department-b stays at 20. Then the root
shares the spare by weight (30 : 20): as the next round of jobs finishes, Department-b rises to its fair part,
40 CPU, while Department-a's queue is still deep.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import DevCluster
from tests.e2e.harness import installed_tree, passes_made, wait_managed
from tests.e2e.setups import SEED, USERS
from webhook.api.names import FAIR_SHARING_ATTRIBUTE, SUCCEED_AFTER_ANNOTATION

pytestmark = pytest.mark.e2e

RUNS = "20s"
CPU = 2
"""CPU of each job: the cluster holds 50 of them."""


def _spec(fair: bool) -> dict[str, Any]:
    import yaml  # noqa: PLC0415

    spec: dict[str, Any] = copy.deepcopy(yaml.safe_load((SEED / "01-elasticquotatree.yaml").read_text())["spec"])
    spec["root"]["children"][0]["min"] = {"cpu": 30, "memory": "30Gi", "nvidia.com/gpu": 0}
    spec["root"]["children"][1]["min"] = {"cpu": 20, "memory": "20Gi", "nvidia.com/gpu": 0}
    if fair:
        spec["root"]["attributes"] = {FAIR_SHARING_ATTRIBUTE: "true"}
    return spec


@pytest.fixture(scope="module")
def fair_cluster(dev_cluster: DevCluster) -> Iterator[DevCluster]:
    dev = dev_cluster
    dev.restart_service("--oversellrate=1", "--status-interval=1")
    dev.kubectl("apply", "-f", str(SEED / "00-namespaces.yaml"))
    try:
        with installed_tree(dev, _spec(fair=False)):
            wait_managed(dev, *USERS)
            yield dev
            for namespace in USERS:
                dev.kubectl("delete", "jobs", "--all", "-n", namespace, "--wait=false")
    finally:
        dev.kubectl("delete", "-f", str(SEED / "00-namespaces.yaml"), "--wait=false", "--ignore-not-found")
        dev.restart_service()


def _jobs(prefix: str, namespace: str, count: int) -> dict[str, Any]:
    items = [{
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"{prefix}-{index:03d}", "namespace": namespace},
        "spec": {"template": {
            "metadata": {"annotations": {SUCCEED_AFTER_ANNOTATION: RUNS}},
            "spec": {"containers": [{"name": "c", "image": "busybox",
                                     "resources": {"requests": {"cpu": str(CPU), "memory": "1Gi"}}}],
                     "restartPolicy": "Never"},
        }},
    } for index in range(count)]
    return {"apiVersion": "v1", "kind": "List", "items": items}


def _running_cpu(dev: DevCluster, namespace: str) -> int:
    pods = dev.get_json("pods", "-n", namespace, "--field-selector", "status.phase=Running")["items"]
    return CPU * len(pods)


def _admitted_cpu(dev: DevCluster, namespace: str) -> int:
    """The CPU of the namespace's Jobs released and not finished (what the queue has admitted)."""
    jobs = dev.get_json("jobs", "-n", namespace)["items"]
    return CPU * sum(1 for job in jobs if not job["spec"].get("suspend") and not any(
        condition.get("type") in ("Complete", "Failed") and condition.get("status") == "True"
        for condition in job.get("status", {}).get("conditions", [])))


def _queued(dev: DevCluster, namespace: str) -> int:
    jobs = dev.get_json("jobs", "-n", namespace)["items"]
    return sum(1 for job in jobs if job["spec"].get("suspend"))


def test_department_b_settles_at_its_fair_part_while_department_as_queue_is_deep(fair_cluster: DevCluster) -> None:
    dev = fair_cluster
    dev.kubectl("create", "-f", "-", stdin=json.dumps(_jobs("burst", "user-a", 150)))
    dev.wait_until(lambda: _running_cpu(dev, "user-a") == 100, 120, "Department-a running 100 CPU")
    dev.kubectl("create", "-f", "-", stdin=json.dumps(_jobs("later", "user-c", 50)))
    dev.wait_until(lambda: _running_cpu(dev, "user-c") == 20, 60, "Department-b reclaiming its min of 20")
    # Without fair sharing, the first round of completions goes to Department-a's older jobs (150 - 50 waiting,
    # 10 evicted back; 40 of them admitted when the first 40 finish).
    dev.wait_until(lambda: _queued(dev, "user-a") <= 70, 60, "Department-a's first jobs to finish")
    passes_made(dev, 2, "user-a")  # passes after that round, not a pause in which none may have run
    assert _admitted_cpu(dev, "user-c") <= 20, "without fair sharing the spare goes in time order"
    # Now the root shares the spare by weight: the next rounds go to Department-b until its fair part.
    patch = json.dumps([{"op": "replace", "path": "/spec", "value": _spec(fair=True)}])
    dev.kubectl("patch", "eqtree", "elasticquotatree", "-n", "kube-system", "--type=json", "-p", patch)
    dev.wait_until(lambda: _running_cpu(dev, "user-c") == 40 and _running_cpu(dev, "user-a") == 60, 90,
                   "Department-b at its fair part (40 CPU), Department-a at 60")
    assert _queued(dev, "user-a") > 0, "Department-a's queue is still deep"
