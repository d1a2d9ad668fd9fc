"""The tree, namespaces, Queues and PriorityClasses change under running work (docs/accounting.md): what an
operator did in issue 24, on the dev cluster at ``--oversellrate=1``, checking that the controller (the tree's
status), the extender (every admitted pod runs) and ``kq why`` agree.

The tree: ``root`` 60 CPU; ``Team-x`` (min 20, max 40) and ``Team-y`` (min 20, max 40), one namespace each,
plus a spare namespace ``mover`` in ``Team-x``. Each test leaves the tree as it found it.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.builders import job_manifest
from tests.e2e.conftest import DevCluster
from tests.e2e.harness import create_namespaces, installed_tree, unique, wait_managed

pytestmark = pytest.mark.e2e


@dataclasses.dataclass
class Setup:
    dev: DevCluster
    x: str
    y: str
    mover: str
    tree: str

    def spec(self, mover_in: str = "Team-x") -> dict[str, Any]:
        leaves = {"Team-x": [self.x], "Team-y": [self.y]}
        leaves[mover_in].append(self.mover)
        return {"root": {"name": "root", "min": {"cpu": 60}, "max": {"cpu": 60}, "children": [
            {"name": name, "min": {"cpu": 20}, "max": {"cpu": 40}, "namespaces": namespaces}
            for name, namespaces in leaves.items()
        ]}}

    def set_tree(self, spec: dict[str, Any]) -> None:
        patch = json.dumps([{"op": "replace", "path": "/spec", "value": spec}])
        self.dev.kubectl("patch", "elasticquotatree", self.tree, "-n", "kube-system", "--type=json", "-p", patch)

    def used(self, node: str) -> str:
        status = self.dev.get_json("elasticquotatree", self.tree, "-n", "kube-system").get("status", {})
        found = [status.get("root", {})] if node == "root" else [
            child for child in status.get("root", {}).get("children", []) if child["name"] == node
        ]
        return str(found[0].get("used", {}).get("cpu", "0")) if found else "?"

    def job(self, namespace: str, name: str, pods: int, cpu: int, **spec: Any) -> None:
        body = job_manifest(name, pods=pods, cpu=cpu, **spec)
        self.dev.kubectl("create", "-n", namespace, "-f", "-", stdin=json.dumps(body))

    def running(self, namespace: str, name: str) -> int:
        pods = self.dev.get_json("pods", "-n", namespace, "-l", f"job-name={name}")["items"]
        return sum(1 for pod in pods if pod["status"].get("phase") == "Running")

    def suspended(self, namespace: str, name: str) -> bool:
        return bool(self.dev.get_json("job", name, "-n", namespace)["spec"].get("suspend"))

    def kq(self, *args: str, namespace: str) -> str:
        argv = [sys.executable, "-m", "webhook.cli.main", *args, f"--kubeconfig={self.dev.config.kubeconfig}",
                "-n", namespace]
        return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120).stdout


@pytest.fixture(scope="module")
def setup(dev_cluster: DevCluster) -> Iterator[Setup]:
    dev = dev_cluster
    x, y, mover = unique("cfg-x"), unique("cfg-y"), unique("cfg-m")
    args = ("--oversellrate=1", "--status-interval=1")
    dev.restart_service(*args)
    try:
        create_namespaces(dev, x, y, mover)
        probe = Setup(dev, x, y, mover, "")
        with installed_tree(dev, probe.spec()) as tree:
            wait_managed(dev, x, y, mover)
            yield Setup(dev, x, y, mover, tree)
            for namespace in (x, y, mover):
                dev.kubectl("delete", "jobs", "--all", "-n", namespace, "--wait=false")
    finally:
        dev.kubectl("delete", "namespace", x, y, mover, "--wait=false", "--ignore-not-found")
        dev.restart_service()


def test_a_namespace_moved_to_another_leaf_is_counted_once_and_its_pods_keep_running(setup: Setup) -> None:
    dev = setup.dev
    setup.job(setup.mover, "moving", 2, 10)
    dev.wait_until(lambda: setup.running(setup.mover, "moving") == 2, 60, "the mover's job running")
    dev.wait_until(lambda: setup.used("Team-x") == "20", 30, "Team-x counting it")
    setup.set_tree(setup.spec(mover_in="Team-y"))
    dev.wait_until(lambda: (setup.used("Team-x"), setup.used("Team-y")) == ("0", "20"), 30,
                   "the job counted under Team-y only")
    # The extender counts it in Team-y too: Team-y has 20 of 40 left, so a 2 x 10 job there runs whole.
    setup.job(setup.y, "after-move", 2, 10)
    dev.wait_until(lambda: setup.running(setup.y, "after-move") == 2, 60, "both pods of Team-y's new job running")
    # The tree's status is written at most once a second (--status-interval=1): wait for it, same value.
    dev.wait_until(lambda: setup.used("root") == "40", 30, "the tree's status to count both jobs once")
    setup.set_tree(setup.spec())
    dev.kubectl("delete", "job", "moving", "-n", setup.mover)
    dev.kubectl("delete", "job", "after-move", "-n", setup.y)
    dev.wait_until(lambda: setup.used("root") == "0", 60, "nothing used once the jobs are gone")


def test_jobs_created_while_the_tree_is_missing_stay_held_until_it_returns(setup: Setup) -> None:
    dev = setup.dev
    saved = dev.get_json("elasticquotatree", setup.tree, "-n", "kube-system")
    dev.kubectl("delete", "elasticquotatree", setup.tree, "-n", "kube-system")
    try:
        setup.job(setup.x, "orphan", 1, 10)
        assert setup.suspended(setup.x, "orphan"), "no tree must not open the gates"
        why = " ".join(setup.kq("why", "orphan", namespace=setup.x).split())
        assert "is QUEUING" in why and "no ElasticQuotaTree exists" in why, why
        user = f"{setup.x}-user"
        dev.kubectl("create", "rolebinding", "edit", "-n", setup.x, "--clusterrole=edit", f"--user={user}")
        patch = json.dumps({"spec": {"suspend": False}})
        refused = dev.kubectl_result("patch", "job", "orphan", "-n", setup.x, "--type=merge", "-p", patch, user=user)
        assert refused.returncode != 0 and "only kube-queue may un-suspend it" in refused.stderr
    finally:
        again = {key: copy.deepcopy(saved[key]) for key in ("apiVersion", "kind", "spec")}
        again["metadata"] = {"name": setup.tree, "namespace": "kube-system"}
        dev.apply(again)
    dev.wait_until(lambda: setup.running(setup.x, "orphan") == 1, 60, "the held job released once the tree is back")
    dev.wait_until(lambda: setup.used("Team-x") == "10", 30, "counted once, within max")
    dev.kubectl("delete", "job", "orphan", "-n", setup.x)


def test_a_missing_priority_class_is_refused_and_a_deleted_one_holds_its_jobs(setup: Setup) -> None:
    dev = setup.dev
    refused = dev.kubectl_result("create", "-n", setup.y, "-f", "-", stdin=json.dumps({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "no-class"},
        "spec": {"template": {"spec": {"priorityClassName": "no-such-class", "restartPolicy": "Never",
                                       "containers": [{"name": "c", "image": "busybox"}]}}}}))
    assert refused.returncode != 0 and "PriorityClass 'no-such-class' does not exist" in refused.stderr
    klass = unique("doomed")
    dev.apply({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": klass},
               "value": 5})
    setup.job(setup.y, "blocker", 4, 10)
    dev.wait_until(lambda: setup.running(setup.y, "blocker") == 4, 60, "Team-y full")
    setup.job(setup.y, "classy", 1, 10, priorityClassName=klass)
    dev.kubectl("delete", "priorityclass", klass)
    dev.kubectl("delete", "job", "blocker", "-n", setup.y)
    dev.wait_until(lambda: setup.used("Team-y") == "0", 60, "Team-y's quota free")

    def told() -> bool:
        events = dev.get_json("events", "-n", setup.y, "--field-selector", "involvedObject.name=classy,reason=Held")
        return bool(events["items"])

    dev.wait_until(told, 30, "a Held event on the job whose class is gone")
    assert setup.suspended(setup.y, "classy"), "not released at priority 0"
    assert f"its PriorityClass '{klass}' does not exist" in " ".join(setup.kq("why", "classy",
                                                                             namespace=setup.y).split())
    dev.kubectl("delete", "job", "classy", "-n", setup.y)


def test_a_queue_deleted_by_hand_gets_its_status_back_at_once(setup: Setup) -> None:
    dev = setup.dev
    setup.job(setup.x, "fill", 4, 10)
    dev.wait_until(lambda: setup.running(setup.x, "fill") == 4, 60, "Team-x full")
    for index in range(3):
        setup.job(setup.x, f"wait-{index}", 1, 10)
    queue = f"root-team-x-{setup.x}"

    def waiting() -> int:
        obj = dev.get_json("queue", queue, "-n", "kube-queue")
        return len(obj.get("status", {}).get("queueItemDetails", {}).get("active", []))

    dev.wait_until(lambda: waiting() == 3, 30, "3 jobs waiting")
    dev.kubectl("delete", "queue", queue, "-n", "kube-queue")
    dev.wait_until(lambda: dev.kubectl_result("get", "queue", queue, "-n", "kube-queue").returncode == 0
                   and waiting() == 3, 20, "the re-created Queue listing the 3 waiting jobs")
    dev.kubectl("delete", "jobs", "--all", "-n", setup.x)
