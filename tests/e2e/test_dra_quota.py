"""GPUs claimed through Dynamic Resource Allocation count against the quota (issue 34 item 3, docs/pod-quota.md
"Devices"), on the dev cluster, as carol (``edit`` in user-c) would try it.

The operator's part, as the cluster admin: a DeviceClass annotated ``kube-queue.x-k8s.io/quota-resource:
nvidia.com/gpu`` and ResourceSlices of 4 devices on each of two kwok nodes (8 devices: more than the quota, so
only the quota can stop the pods); kube-scheduler allocates claims from them for real. The seed's tree at
``--oversellrate=1``: Department-b (user-c) has a max of 4 nvidia.com/gpu, the root 4.

- A 6-replica Deployment each claiming one device through a ResourceClaimTemplate: 4 run, 2 wait Pending with the
  pod-level quota reason (the extender counts the devices the claims hold), and the tree's status shows 4 GPUs.
- A Job of 6 such pods is sized at 6 GPUs and waits in its queue (the controller sizes jobs by their claim
  templates).
- carol cannot create a template asking for every device of the class (``allocationMode: All``: it could not be
  counted), nor write a DeviceClass.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import DevCluster
from tests.e2e.harness import passes_made, refused_again
from tests.e2e.setups import Seed
from tests.e2e.setups import seed as seeded  # noqa: F401 - the seed scenarios' setup, reused
from webhook.api.names import QUOTA_RESOURCE_ANNOTATION

pytestmark = pytest.mark.e2e

CAROL, NAMESPACE = "carol", "user-c"
DRIVER = "gpu.kube-queue.example"
CLASS = "gpu.kube-queue.example"
SLICE_NODES = ("ecs-0", "ecs-1")
DEVICES_PER_NODE = 4
REPLICAS = 6
GPU_MAX = 4
"""Department-b's (and the root's) max of nvidia.com/gpu in the seed's tree."""


def _device_class() -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": CLASS, "annotations": {QUOTA_RESOURCE_ANNOTATION: "nvidia.com/gpu"}},
            "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]}}


def _slice(node: str) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": f"gpus-{node}"},
            "spec": {"driver": DRIVER, "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": f"gpu-{index}"} for index in range(DEVICES_PER_NODE)]}}


def _template(name: str, exactly: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": exactly or {"deviceClassName": CLASS, "count": 1}}]}}}}


def _pod_spec(template: str) -> dict[str, Any]:
    amounts = {"cpu": "1", "memory": "1Gi"}
    return {"terminationGracePeriodSeconds": 0,
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
            "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "1d"],
                            "resources": {"requests": dict(amounts), "limits": dict(amounts),
                                          "claims": [{"name": "gpu"}]}}]}


def _pods(dev: DevCluster, selector: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = dev.get_json("pods", "-n", NAMESPACE, "-l", selector)["items"]
    return [pod for pod in items if not pod["metadata"].get("deletionTimestamp")]


def _phases(dev: DevCluster, selector: str) -> list[str]:
    return sorted(pod.get("status", {}).get("phase", "") for pod in _pods(dev, selector))


def _scheduled_message(pod: dict[str, Any]) -> str:
    for condition in pod.get("status", {}).get("conditions", []):
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return str(condition.get("message", ""))
    return ""


def _gpus_used(dev: DevCluster) -> dict[str, str]:
    status = dev.get_json("eqtree", "elasticquotatree", "-n", "kube-system").get("status", {})
    children = status.get("root", {}).get("children", [])
    return {child["name"]: child.get("used", {}).get("nvidia.com/gpu", "0") for child in children}


def _create(dev: DevCluster, obj: dict[str, Any]) -> None:
    result = dev.create(obj, user=CAROL)
    assert result.returncode == 0, result.stderr


@pytest.fixture(scope="module")
def devices(seeded: Seed) -> Iterator[DevCluster]:  # noqa: F811
    dev = seeded.dev
    dev.kubectl("create", "rolebinding", "carol-edit", "--clusterrole=edit", f"--user={CAROL}", "-n", NAMESPACE)
    dev.apply([_device_class(), *(_slice(node) for node in SLICE_NODES)])
    _create(dev, _template("one-gpu"))
    try:
        yield dev
    finally:
        for kind in ("deployments", "jobs", "pods", "resourceclaimtemplates", "resourceclaims"):
            dev.kubectl("delete", kind, "--all", "-n", NAMESPACE, "--wait=false", check=False)
        dev.kubectl("delete", "rolebinding", "carol-edit", "-n", NAMESPACE, "--ignore-not-found")
        dev.kubectl("delete", "deviceclass", CLASS, "--ignore-not-found")
        for node in SLICE_NODES:
            dev.kubectl("delete", "resourceslice", f"gpus-{node}", "--ignore-not-found")


def test_a_deployment_claiming_devices_runs_only_as_many_pods_as_its_gpu_quota(devices: DevCluster) -> None:
    dev = devices
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment",
                  "metadata": {"name": "gpu-web", "namespace": NAMESPACE},
                  "spec": {"replicas": REPLICAS, "selector": {"matchLabels": {"app": "gpu-web"}},
                           "template": {"metadata": {"labels": {"app": "gpu-web"}}, "spec": _pod_spec("one-gpu")}}}
    _create(dev, deployment)
    try:
        _six_claim_four_run(dev)
    finally:
        dev.kubectl("delete", "deployment", "gpu-web", "-n", NAMESPACE, user=CAROL)
        dev.wait_until(lambda: not _pods(dev, "app=gpu-web"), 120, "gpu-web's pods gone")


def _six_claim_four_run(dev: DevCluster) -> None:
    def decided() -> bool:
        """Every replica runs or was refused by pod-level quota - or more run than the quota allows."""
        pods = _pods(dev, "app=gpu-web")
        running = sum(1 for pod in pods if pod.get("status", {}).get("phase") == "Running")
        return len(pods) == REPLICAS and (running > GPU_MAX or all(
            pod.get("status", {}).get("phase") == "Running" or "pod-level quota" in _scheduled_message(pod)
            for pod in pods))

    dev.wait_until(decided, 120, "every gpu-web replica running or refused by pod-level quota")
    # The waiting pods must stay out when asked again on the settled state, not get in a moment later.
    refused_again(dev, NAMESPACE, [pod["metadata"]["name"] for pod in _pods(dev, "app=gpu-web")
                                   if pod.get("status", {}).get("phase") != "Running"])
    assert _phases(dev, "app=gpu-web") == [*["Pending"] * (REPLICAS - GPU_MAX), *["Running"] * GPU_MAX]
    for pod in _pods(dev, "app=gpu-web"):
        if pod["status"].get("phase") == "Pending":
            said = _scheduled_message(pod)
            assert "pod-level quota (bound and placed pods): quota root/Department-b: nvidia.com/gpu request 1 + " \
                   "used 4 > max 4" in said, said
    # The devices were really allocated: each running pod's claim holds one device of the slices.
    claims = dev.get_json("resourceclaims", "-n", NAMESPACE)["items"]
    allocated = [result["device"] for claim in claims
                 for result in (claim.get("status", {}).get("allocation") or {}).get("devices", {}).get("results", [])]
    assert len(allocated) == GPU_MAX, claims
    dev.wait_until(lambda: _gpus_used(dev).get("Department-b") == str(GPU_MAX), 60,
                   "the tree's status: Department-b using 4 GPUs")


def test_a_job_of_more_devices_than_its_quota_waits_in_its_queue(devices: DevCluster) -> None:
    dev = devices
    dev.wait_until(lambda: not dev.get_json("resourceclaims", "-n", NAMESPACE)["items"], 120,
                   "the claims of earlier pods deleted")
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "gpu-train", "namespace": NAMESPACE},
           "spec": {"parallelism": REPLICAS, "completions": REPLICAS,
                    "template": {"spec": {**_pod_spec("one-gpu"), "restartPolicy": "Never"}}}}
    _create(dev, job)

    def queued() -> bool:
        queue = dev.get_json("queue", "root-department-b-user-c", "-n", "kube-queue")
        active = queue.get("status", {}).get("queueItemDetails", {}).get("active", [])
        return any(item.get("name") == "gpu-train" for item in active)

    dev.wait_until(queued, 60, "gpu-train listed in its queue")
    passes_made(dev, 3, NAMESPACE)  # passes that would have admitted it, counted rather than waited for
    assert dev.get_json("job", "gpu-train", "-n", NAMESPACE)["spec"]["suspend"] is True
    assert _pods(dev, "job-name=gpu-train") == []
    tree = dev.get_json("eqtree", "elasticquotatree", "-n", "kube-system").get("status", {})
    (department,) = [child for child in tree["root"]["children"] if child["name"] == "Department-b"]
    assert department.get("request", {}).get("nvidia.com/gpu") == str(REPLICAS), department
    dev.kubectl("delete", "job", "gpu-train", "-n", NAMESPACE, user=CAROL)


def test_carol_cannot_ask_for_every_device_nor_write_a_device_class(devices: DevCluster) -> None:
    dev = devices
    every = _template("every-gpu", {"deviceClassName": CLASS, "allocationMode": "All"})
    result = dev.create(every, user=CAROL)
    assert result.returncode != 0
    assert "spec.spec.devices.requests[0].exactly: allocationMode All of DeviceClass gpu.kube-queue.example " \
           "cannot be counted against quota resource nvidia.com/gpu" in result.stderr, result.stderr
    assert "ask for an exact count" in result.stderr
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": "every-gpu", "namespace": NAMESPACE}, "spec": every["spec"]["spec"]}
    result = dev.create(claim, user=CAROL)
    assert result.returncode != 0 and "allocationMode All" in result.stderr, result.stderr
    # The class decides what counts: only operators write DeviceClasses.
    unmarked = json.loads(json.dumps(_device_class()))
    unmarked["metadata"] = {"name": "free-gpus"}
    result = dev.create(unmarked, user=CAROL)
    assert result.returncode != 0 and "forbidden" in result.stderr.lower(), result.stderr
    result = dev.kubectl_result("annotate", "deviceclass", CLASS, f"{QUOTA_RESOURCE_ANNOTATION}-", user=CAROL)
    assert result.returncode != 0 and "forbidden" in result.stderr.lower(), result.stderr
