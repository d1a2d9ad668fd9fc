"""A Kubeflow kind end to end: PyTorchJobs are held through ``spec.runPolicy.suspend``, tagged, admitted in
order when the quota allows and queued otherwise, by the same webhook and controller as batch Jobs.

The dev cluster has no Kubeflow CRDs; this module installs a stand-in CRD (``crds/``) and restarts the
service so its controller discovers the kind at once (it otherwise looks every minute). No training operator
runs, so admitted PyTorchJobs make no pods: the queue is what is checked.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import DevCluster
from tests.e2e.harness import create_namespaces, installed_tree, unique, wait_managed
from tests.e2e.setups import CRD, pytorchjob
from webhook.api.names import ADMISSION_ANNOTATION, QUOTA_LABEL, SUBMITTED_ANNOTATION

pytestmark = pytest.mark.e2e

@pytest.fixture(scope="module")
def kubeflow(dev_cluster: DevCluster) -> Iterator[str]:
    dev = dev_cluster
    dev.kubectl("apply", "-f", str(CRD))
    dev.kubectl("wait", "--for=condition=Established", "--timeout=60s", "-f", str(CRD))
    dev.restart_service()
    namespace = unique("kf")
    spec = {
        "root": {
            "name": "root",
            "min": {"cpu": 40},
            "max": {"cpu": 40},
            "children": [{"name": "Research", "min": {"cpu": 40}, "max": {"cpu": 40}, "namespaces": [namespace]}],
        }
    }
    create_namespaces(dev, namespace)
    # alice is an ordinary developer who may run PyTorchJobs in her namespace.
    dev.kubectl("create", "role", "pytorchjobs", "--verb=*", "--resource=pytorchjobs.kubeflow.org", "-n", namespace)
    dev.kubectl("create", "rolebinding", "alice-pytorchjobs", "--role=pytorchjobs", "--user=alice", "-n", namespace)
    try:
        with installed_tree(dev, spec):
            wait_managed(dev, namespace)
            yield namespace
    finally:
        dev.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        dev.kubectl("delete", "-f", str(CRD), "--ignore-not-found", "--wait=false", check=False)


def _get(dev: DevCluster, namespace: str, name: str) -> dict[str, Any]:
    result: dict[str, Any] = dev.get_json("pytorchjobs.kubeflow.org", name, "-n", namespace)
    return result


def test_pytorchjobs_are_held_tagged_admitted_in_order_and_queued(dev_cluster: DevCluster, kubeflow: str) -> None:
    dev, namespace = dev_cluster, kubeflow
    # 1 master + 4 workers of 10 CPU = 50 each; the quota's limit is max 40 x the service's default oversell
    # rate 2 = 80: the first fits, the second waits.
    first = dev.create(pytorchjob("first", namespace, workers=4), user="alice")
    assert first.returncode == 0, first.stderr
    created = json.loads(first.stdout)
    assert created["spec"]["runPolicy"]["suspend"] is True, "held even though the submitter wrote false"
    assert created["metadata"]["labels"][QUOTA_LABEL] == "Research"
    assert SUBMITTED_ANNOTATION in created["metadata"]["annotations"]
    for role in ("Master", "Worker"):
        template = created["spec"]["pytorchReplicaSpecs"][role]["template"]
        assert template["metadata"]["labels"][QUOTA_LABEL] == "Research"
    second = dev.create(pytorchjob("second", namespace, workers=4), user="alice")
    assert second.returncode == 0, second.stderr

    dev.wait_until(lambda: _get(dev, namespace, "first")["spec"]["runPolicy"]["suspend"] is False, 60,
                   "the first PyTorchJob to be admitted")
    record = json.loads(_get(dev, namespace, "first")["metadata"]["annotations"][ADMISSION_ANNOTATION])
    assert record["quota"] == "root/Research"
    assert record["request"] == {"cpu": "50"}

    def waiting_at_1() -> bool:
        queue = dev.get_json("queue", f"root-research-{namespace}", "-n", "kube-queue")
        active = queue.get("status", {}).get("queueItemDetails", {}).get("active", [])
        return [(item["name"], item["position"]) for item in active] == [("second", 1)]

    dev.wait_until(waiting_at_1, 60, "the second PyTorchJob at position 1")
    assert _get(dev, namespace, "second")["spec"]["runPolicy"]["suspend"] is True
    refused = dev.kubectl_result(
        "patch", "pytorchjobs.kubeflow.org", "second", "-n", namespace, "--type=merge",
        "-p", '{"spec":{"runPolicy":{"suspend":false}}}', user="alice",
    )
    assert refused.returncode != 0 and "is queued for quota root/Research" in refused.stderr

    dev.kubectl("delete", "pytorchjobs.kubeflow.org", "first", "-n", namespace)
    dev.wait_until(lambda: _get(dev, namespace, "second")["spec"]["runPolicy"]["suspend"] is False, 60,
                   "the second PyTorchJob to be admitted once the first is gone")
