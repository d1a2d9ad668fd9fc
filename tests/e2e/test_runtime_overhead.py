"""A Job under a RuntimeClass with a pod overhead is queued for what its pods will use (docs/queueing.md,
"RuntimeClass overhead"), on the dev cluster, as a namespace user with ``edit`` would try it.

The operator's RuntimeClass adds 1 CPU to every pod; alice's quota has a max of 8 CPU. Her Job of four 1-CPU
pods under the class needs 8 with the overhead, and runs; a second Job of one such pod needs 2 more, and waits in
the queue. Counted without the overhead (4 + 1 of 8) the queue released both, and the second Job's pod then
waited for room at the scheduler (the extender counts the pods as the API server admitted them). Alice can
neither lower the recorded overhead nor forge it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import DevCluster
from tests.e2e.harness import passes_made, quotas, recorded_overhead, unique, wait_class_known, wait_running
from tests.e2e.harness import runtime_class as harness_runtime_class
from webhook.api.names import POD_OVERHEAD_ANNOTATION

pytestmark = pytest.mark.e2e

OVERHEAD = {"cpu": "1", "memory": "64Mi"}


@pytest.fixture(scope="module")
def namespace(dev_cluster: DevCluster) -> Iterator[str]:
    name = unique("overhead")
    children = [{"name": "Team", "min": {"cpu": 8}, "max": {"cpu": 8}, "namespaces": [name]}]
    with quotas(dev_cluster, children, {name: "alice"}):
        yield name


@pytest.fixture(scope="module")
def runtime_class(dev_cluster: DevCluster) -> Iterator[str]:
    with harness_runtime_class(dev_cluster, OVERHEAD) as name:
        yield name


def _job(name: str, pods: int, runtime_class: str, *, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, **({"annotations": annotations} if annotations else {})},
        "spec": {"parallelism": pods, "completions": pods, "template": {"spec": {
            "restartPolicy": "Never",
            "runtimeClassName": runtime_class,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}],
        }}},
    }


def _create(dev: DevCluster, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
    result = dev.kubectl_result("create", "-n", namespace, "-o", "json", "-f", "-", stdin=json.dumps(obj),
                                user="alice")
    assert result.returncode == 0, result.stderr
    created: dict[str, Any] = json.loads(result.stdout)
    return created


def test_a_job_is_queued_for_its_pods_overhead(dev_cluster: DevCluster, namespace: str, runtime_class: str) -> None:
    dev = dev_cluster

    wait_class_known(dev, namespace, _job("probe", 1, runtime_class), runtime_class)
    # Alice writes an overhead of her own: the webhook records the class's.
    first = _create(dev, namespace, _job("first", 4, runtime_class, annotations={
        POD_OVERHEAD_ANNOTATION: json.dumps({runtime_class: {"cpu": "0"}})}))
    assert recorded_overhead(first) == {runtime_class: OVERHEAD}

    wait_running(dev, namespace, "batch.kubernetes.io/job-name=first", 4, timeout=90)
    pods = dev.get_json("pods", "-n", namespace, "-l", "batch.kubernetes.io/job-name=first")["items"]
    assert all(item["spec"].get("overhead") == OVERHEAD for item in pods)  # what the API server gave them

    _create(dev, namespace, _job("second", 1, runtime_class))
    passes_made(dev, 3, namespace)
    second = dev.get_json("job", "second", "-n", namespace)
    assert second["spec"]["suspend"] is True, "the second Job was released beyond the quota's max"
    assert not dev.get_json("pods", "-n", namespace, "-l", "batch.kubernetes.io/job-name=second")["items"]

    # The record is kube-queue's: alice cannot lower it.
    lowered = dev.kubectl_result("annotate", "job", "second", "-n", namespace, "--overwrite",
                                 f"{POD_OVERHEAD_ANNOTATION}={json.dumps({runtime_class: {'cpu': '1m'}})}",
                                 user="alice")
    assert lowered.returncode != 0
    assert POD_OVERHEAD_ANNOTATION in lowered.stderr
