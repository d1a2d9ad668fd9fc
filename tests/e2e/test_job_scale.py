"""A job cannot be resized through its scale subresource (docs/security.md), on the dev cluster with the genuine
training operator, as a user with ``edit`` would try it.

A PyTorchJob's CRD declares a scale subresource over its workers. Alice may not scale it herself, but ``edit``
lets her create a HorizontalPodAutoscaler, and the HPA controller scales its target through that subresource
(below its ``minReplicas`` it does so without any metric), past the job update rules. Her running PyTorchJob of
one worker, under an HPA of three, keeps its one worker; the HPA says why it cannot scale.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e import setups
from tests.e2e.conftest import DevCluster
from tests.e2e.harness import quotas, unique, wait_running
from tests.e2e.kinds import alice_role

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def namespace(dev_cluster: DevCluster) -> Iterator[str]:
    name = unique("scale")
    with quotas(dev_cluster, [{"name": "Team", "min": {"cpu": 60}, "max": {"cpu": 60}, "namespaces": [name]}],
                {name: "alice"}):
        dev_cluster.apply(alice_role(name))
        yield name


def _hpa(target: str) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "grow"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": target},
            "minReplicas": 3,
            "maxReplicas": 3,
            "metrics": [{"type": "Resource", "resource": {
                "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}}],
        },
    }


def _workers(dev: DevCluster, namespace: str) -> int:
    job = dev.get_json("pytorchjob", "mnist", "-n", namespace)
    return int(job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"])


def test_an_hpa_cannot_grow_a_queued_pytorchjob(dev_cluster: DevCluster, namespace: str) -> None:
    dev = dev_cluster
    created = dev.create(setups.pytorchjob("mnist", namespace, 1), user="alice")
    assert created.returncode == 0, created.stderr

    wait_running(dev, namespace, "training.kubeflow.org/job-name=mnist", 2)  # its master and worker
    hpa = dev.create({**_hpa("mnist"), "metadata": {"name": "grow", "namespace": namespace}}, user="alice")
    assert hpa.returncode == 0, hpa.stderr
    refused: list[str] = []

    def tried() -> bool:
        conditions = dev.get_json("hpa", "grow", "-n", namespace).get("status", {}).get("conditions", [])
        refused[:] = [c.get("message", "") for c in conditions
                      if c.get("type") == "AbleToScale" and c.get("reason") == "FailedUpdateScale"]
        return bool(refused) or _workers(dev, namespace) != 1

    dev.wait_until(tried, 120, "the HPA controller's attempt to scale the PyTorchJob")
    assert _workers(dev, namespace) == 1, "the HPA resized the PyTorchJob behind the queue"
    assert "its scale subresource may not change spec.replicas (1 -> 3)" in refused[0]
