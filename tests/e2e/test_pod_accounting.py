"""Every pod in a quota's namespaces counts, and no pod walks around the queue (docs/accounting.md,
docs/security.md), tried on the dev cluster as a namespace user with the ``edit`` role would.

The tree: one department ``Team-p`` (40 CPU) with two namespaces, the service at ``--oversellrate=1``.

* ``alice`` (``edit`` in the first namespace) creates a Pod with ``spec.nodeName``: refused, naming the field.
* She creates a Pod whose controller ownerReference names her own ConfigMap: it is held like a bare Pod (the
  admission gate), not run around the queue.
* A Deployment of 3 pods x 10 CPU in the second namespace is counted: a Job of 2 x 10 CPU is not released
  (30 + 20 > 40) until the Deployment scales down, and the tree's status shows the Deployment's 30 CPU.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests import builders
from tests.builders import job_manifest
from tests.e2e.conftest import DevCluster
from tests.e2e.harness import create_namespaces, installed_tree, unique, wait_managed
from webhook.api.names import ADMISSION_GATE

pytestmark = pytest.mark.e2e

USER = "alice"


@pytest.fixture(scope="module")
def spaces(dev_cluster: DevCluster) -> Iterator[tuple[str, str]]:
    dev = dev_cluster
    first, second = unique("pods-a"), unique("pods-b")
    args = ("--oversellrate=1", "--status-interval=1")
    dev.restart_service(*args)
    spec = {"root": {"name": "root", "min": {"cpu": 40}, "max": {"cpu": 40}, "children": [
        {"name": "Team-p", "min": {"cpu": 40}, "max": {"cpu": 40}, "namespaces": [first, second]}]}}
    try:
        create_namespaces(dev, first, second)
        dev.kubectl("create", "rolebinding", "alice-edit", "-n", first, "--clusterrole=edit", f"--user={USER}")
        with installed_tree(dev, spec):
            wait_managed(dev, first, second)
            yield first, second
    finally:
        dev.kubectl("delete", "namespace", first, second, "--wait=false", "--ignore-not-found")
        dev.restart_service()


_pod = functools.partial(builders.pod, cpu="10", namespace=None, container="c", terminationGracePeriodSeconds=0)
"""A bare Pod manifest of 10 CPU (for ``kubectl -n``) that stops at once."""


def test_a_user_cannot_bind_a_pod_to_a_node(dev_cluster: DevCluster, spaces: tuple[str, str]) -> None:
    first, _ = spaces
    bound = json.dumps(_pod("bound", nodeName="ecs-3"))
    result = dev_cluster.kubectl_result("create", "-n", first, "-f", "-", stdin=bound, user=USER)
    assert result.returncode != 0
    assert "spec.nodeName: a Pod in a namespace under quota root/Team-p must go through the scheduler" in result.stderr
    assert "kube-queue" not in dev_cluster.kubectl("get", "pods", "-n", first, "-o", "name")


def test_a_forged_owner_does_not_take_a_pod_around_the_queue(dev_cluster: DevCluster, spaces: tuple[str, str]) -> None:
    dev, (first, _) = dev_cluster, spaces
    dev.kubectl("create", "configmap", "mine", "-n", first, user=USER)
    uid = dev.get_json("configmap", "mine", "-n", first)["metadata"]["uid"]
    pod = _pod("sneaky")
    pod["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "mine", "uid": uid, "controller": True}
    ]
    created = dev.create({**pod, "metadata": {**pod["metadata"], "namespace": first}}, user=USER)
    assert created.returncode == 0, created.stderr
    gates = json.loads(created.stdout)["spec"].get("schedulingGates", [])
    assert {"name": ADMISSION_GATE} in gates  # held like a bare Pod, released by the queue when it fits
    dev.wait_until(
        lambda: dev.get_json("pod", "sneaky", "-n", first)["status"].get("phase") == "Running", 60,
        "the held Pod released by the queue (it fits) and running",
    )
    dev.kubectl("delete", "pod", "sneaky", "-n", first, "--wait=true")


def _deployment(replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": _pod("x")["spec"]}},
    }


def test_deployment_pods_count_and_a_job_that_could_not_fully_run_waits(
    dev_cluster: DevCluster, spaces: tuple[str, str]
) -> None:
    dev, (first, second) = dev_cluster, spaces
    dev.kubectl("create", "-n", second, "-f", "-", stdin=json.dumps(_deployment(3)))

    def running(namespace: str, selector: str) -> int:
        pods = dev.get_json("pods", "-n", namespace, "-l", selector)["items"]
        return sum(1 for pod in pods if pod["status"].get("phase") == "Running")

    dev.wait_until(lambda: running(second, "app=web") == 3, 60, "3 Deployment pods running")

    def used() -> str:
        status = dev.get_json("eqtree", "-n", "kube-system")["items"][0].get("status", {})
        return str(status.get("root", {}).get("used", {}).get("cpu", "0"))

    dev.wait_until(lambda: used() == "30", 30, "the tree's status to count the Deployment's 30 CPU")
    dev.kubectl("create", "-n", first, "-f", "-", stdin=json.dumps(job_manifest("two", pods=2, cpu=10)), user=USER)
    queue = f"root-team-p-{first}"

    def waiting() -> list[str]:
        details = dev.get_json("queue", queue, "-n", "kube-queue").get("status", {}).get("queueItemDetails", {})
        return [item["name"] for item in details.get("active", [])]

    dev.wait_until(lambda: waiting() == ["two"], 30, "the Job waiting: 30 + 20 > 40")
    assert dev.get_json("job", "two", "-n", first)["spec"]["suspend"] is True
    dev.kubectl("scale", "deployment", "web", "-n", second, "--replicas=1")
    dev.wait_until(lambda: running(first, "job-name=two") == 2, 90, "the Job released once the Deployment shrank")
