"""The shipped manifests against the dev cluster's real API server (issue 20): the kustomization is accepted
as a whole (server-side dry run: schema, RBAC objects, webhook configurations), and re-applying the parts an
upgrade re-applies (CRDs, namespace, RBAC) over a running system with jobs held and admitted changes nothing:
no job released, lost or re-queued, the tree and the Queues kept.

The Deployment and the webhook configurations are only dry-run here: the dev cluster runs the service as a
local process (the shipped configurations point at an in-cluster Service it does not have).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.builders import job_manifest
from tests.e2e.conftest import DevCluster
from tests.e2e.harness import create_namespaces, installed_tree, unique, wait_managed
from webhook.cli import devsystem

pytestmark = pytest.mark.e2e

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
UPGRADED = ("namespace.yaml", "crds", "controller/rbac.yaml", "webhook/rbac.yaml", "scheduler/rbac.yaml")


def test_the_kustomization_is_accepted_by_the_api_server(dev_cluster: DevCluster) -> None:
    result = dev_cluster.kubectl_result("apply", "-k", str(MANIFESTS), "--server-side", "--dry-run=server",
                                        "--force-conflicts")
    assert result.returncode == 0, result.stderr
    applied = result.stdout
    for expected in (
        "customresourcedefinition.apiextensions.k8s.io/elasticquotatrees.scheduling.sigs.k8s.io",
        "deployment.apps/kube-queue",
        "mutatingwebhookconfiguration.admissionregistration.k8s.io/kube-queue",
        "clusterrole.rbac.authorization.k8s.io/kube-queue-controller",
    ):
        assert expected in applied, applied


@pytest.fixture(scope="module")
def running(dev_cluster: DevCluster) -> Iterator[str]:
    dev = dev_cluster
    namespace = unique("upgrade")
    args = ("--oversellrate=1", "--status-interval=1")
    devsystem.restart_service(dataclasses.replace(dev.config, service_args=(*dev.config.service_args, *args)),
                              dev.bins)
    spec = {"root": {"name": "root", "min": {"cpu": 20}, "max": {"cpu": 20}, "children": [
        {"name": "Team-u", "min": {"cpu": 20}, "max": {"cpu": 20}, "namespaces": [namespace]}]}}
    try:
        create_namespaces(dev, namespace)
        with installed_tree(dev, spec):
            wait_managed(dev, namespace)
            yield namespace
            dev.kubectl("delete", "jobs", "--all", "-n", namespace, "--wait=false")
    finally:
        dev.kubectl("delete", "namespace", namespace, "--wait=false", "--ignore-not-found")
        devsystem.restart_service(dev.config, dev.bins)


def test_re_applying_the_manifests_over_running_work_changes_nothing(dev_cluster: DevCluster, running: str) -> None:
    dev, namespace = dev_cluster, running
    for name in ("first", "second"):
        dev.kubectl("create", "-n", namespace, "-f", "-", stdin=json.dumps(job_manifest(name, pods=2, cpu=10)))
        time.sleep(0.5)

    def pods_running(name: str) -> int:
        pods = dev.get_json("pods", "-n", namespace, "-l", f"job-name={name}")["items"]
        return sum(1 for pod in pods if pod["status"].get("phase") == "Running")

    dev.wait_until(lambda: pods_running("first") == 2, 60, "the first job running")
    queue = f"root-team-u-{namespace}"

    def active() -> list[str]:
        details = dev.get_json("queue", queue, "-n", "kube-queue").get("status", {}).get("queueItemDetails", {})
        return [item["name"] for item in details.get("active", [])]

    dev.wait_until(lambda: active() == ["second"], 30, "the second job waiting")

    def jobs() -> dict[str, tuple[bool, str | None]]:
        items = dev.get_json("jobs", "-n", namespace)["items"]
        return {item["metadata"]["name"]: (bool(item["spec"].get("suspend")),
                                           item["metadata"].get("annotations", {}).get("kube-queue.x-k8s.io/admission"))
                for item in items}

    before = jobs()
    tree_before = dev.get_json("elasticquotatrees", "-n", "kube-system")["items"][0]
    for part in UPGRADED:
        dev.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(MANIFESTS / part))
    time.sleep(5)  # a few passes of the controller and the status writer
    assert jobs() == before, "no job released, re-queued or re-admitted"
    assert active() == ["second"]
    assert pods_running("first") == 2
    tree_after = dev.get_json("elasticquotatrees", "-n", "kube-system")["items"][0]
    assert tree_after["metadata"]["uid"] == tree_before["metadata"]["uid"]
    assert tree_after["spec"] == tree_before["spec"]
    events = dev.get_json("events", "-n", namespace, "--field-selector", "reason=Evicted")["items"]
    assert events == []
