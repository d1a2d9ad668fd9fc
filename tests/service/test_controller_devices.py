"""GPUs claimed through Dynamic Resource Allocation count against the quota in the controller (docs/accounting.md,
"Devices"): a DeviceClass annotated ``kube-queue.x-k8s.io/quota-resource: nvidia.com/gpu`` makes each device a
claim asks for one GPU of the quota. Jobs are sized by their pods' claim templates and shared claims; pods no
job accounts for count what their claims hold, a shared claim once.

The seed's tree: Department-b (user-c) has a max of 4 nvidia.com/gpu, the root 4.
"""

from __future__ import annotations

import json
from typing import Any

from tests.service.controller_support import (
    EVENTS,
    PODS,
    TREES,
    admitted,
    bound_pod,
    driven,
    pi,
    seed_api,
    step,
)
from tests.service.kubeclient_fake import JOBS, FakeApi, Kind
from webhook.api.names import ADMISSION_ANNOTATION, QUOTA_RESOURCE_ANNOTATION

CLASSES: Kind = ("resource.k8s.io", "v1", "deviceclasses")
TEMPLATES: Kind = ("resource.k8s.io", "v1", "resourceclaimtemplates")
CLAIMS: Kind = ("resource.k8s.io", "v1", "resourceclaims")


def _devices(api: FakeApi) -> None:
    api.put(CLASSES, {"metadata": {"name": "gpu.example.com",
                                   "annotations": {QUOTA_RESOURCE_ANNOTATION: "nvidia.com/gpu"}},
                      "spec": {"selectors": []}})
    api.put(CLASSES, {"metadata": {"name": "nic.example.com"}, "spec": {}})  # not counted
    api.put(TEMPLATES, {"metadata": {"name": "one-gpu", "namespace": "user-c"},
                        "spec": {"spec": {"devices": {"requests": [
                            {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com", "count": 1}},
                            {"name": "nic", "exactly": {"deviceClassName": "nic.example.com"}},
                        ]}}}})


def _gpu_job(name: str, pods: int, claim: dict[str, str] | None = None) -> dict[str, Any]:
    job = pi(name, "user-c", pods=pods)
    spec = job["spec"]["template"]["spec"]
    spec["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    spec["resourceClaims"] = [{"name": "gpu", **(claim or {"resourceClaimTemplateName": "one-gpu"})}]
    return job


def _gpus_used(api: FakeApi, department: str = "Department-b") -> str:
    tree = api.obj(TREES, "elasticquotatree", "kube-system")
    (node,) = [child for child in tree["status"]["root"]["children"] if child["name"] == department]
    return str(node["used"].get("nvidia.com/gpu", "0"))


async def test_a_job_is_sized_by_the_devices_its_pods_claim() -> None:
    api = seed_api()
    _devices(api)
    api.put(JOBS, _gpu_job("six", 6))
    api.put(JOBS, _gpu_job("three", 3))
    async with driven(api) as controller:
        await step(api, controller, passes=2)
    assert not admitted(api, "six", "user-c"), "6 GPUs can never fit Department-b's max of 4"
    assert admitted(api, "three", "user-c")
    record = json.loads(api.obj(JOBS, "three", "user-c")["metadata"]["annotations"][ADMISSION_ANNOTATION])
    assert record["request"]["nvidia.com/gpu"] == "3"
    assert _gpus_used(api) == "3"


async def test_a_shared_claim_counts_once_for_the_whole_job() -> None:
    api = seed_api()
    _devices(api)
    api.put(CLAIMS, {"metadata": {"name": "pair", "namespace": "user-c"},
                     "spec": {"devices": {"requests": [
                         {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com", "count": 2}}]}}})
    api.put(JOBS, _gpu_job("shared", 5, {"resourceClaimName": "pair"}))
    async with driven(api) as controller:
        await step(api, controller, passes=2)
    assert admitted(api, "shared", "user-c")
    assert _gpus_used(api) == "2"


async def test_a_job_whose_template_does_not_exist_yet_waits_until_it_does() -> None:
    api = seed_api()
    api.put(CLASSES, {"metadata": {"name": "gpu.example.com",
                                   "annotations": {QUOTA_RESOURCE_ANNOTATION: "nvidia.com/gpu"}}, "spec": {}})
    api.put(JOBS, _gpu_job("early", 2))
    async with driven(api) as controller:
        await step(api, controller, passes=2)
        assert not admitted(api, "early", "user-c")
        await controller.events.flush()
        told = [e["message"] for e in api.objects(EVENTS, "user-c") if e["reason"] == "CannotSize"]
        assert told and "ResourceClaimTemplate user-c/one-gpu does not exist (yet)" in told[0]
        _devices(api)
        await step(api, controller, passes=2)
    assert admitted(api, "early", "user-c")


async def test_pods_no_job_accounts_for_count_the_devices_their_claims_hold() -> None:
    # Three Deployment pods of user-c hold a GPU each through claims made from the template; two more share
    # one claim of a GPU: 4 GPUs in all, Department-b's max. A job asking one more GPU waits.
    api = seed_api()
    _devices(api)
    for index in range(3):
        claim = f"web-{index}-gpu-x1"
        api.put(CLAIMS, {"metadata": {"name": claim, "namespace": "user-c",
                                      "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": f"web-{index}",
                                                           "uid": "p", "controller": True}]},
                         "spec": {"devices": {"requests": [
                             {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}}})
        pod = bound_pod(f"web-{index}", "user-c", "1", ("ReplicaSet", "web-1"))
        pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
        pod["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": claim}]
        api.put(PODS, pod)
    api.put(CLAIMS, {"metadata": {"name": "shared", "namespace": "user-c"},
                     "spec": {"devices": {"requests": [
                         {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}}})
    for index in range(2):
        pod = bound_pod(f"pair-{index}", "user-c", "1", ("ReplicaSet", "pair-1"))
        pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "shared"}]
        api.put(PODS, pod)
    api.put(JOBS, _gpu_job("more", 1))
    async with driven(api) as controller:
        await step(api, controller, passes=2)
    assert _gpus_used(api) == "4"
    assert not admitted(api, "more", "user-c")


async def test_a_controller_that_may_not_read_devices_still_admits(caplog: Any) -> None:
    # An operator upgraded the code but not the RBAC: the DRA lists are forbidden. The controller must not wait
    # for caches it cannot fill; it admits as before and says what to grant.
    api = seed_api()
    api.fail(403, lambda method, path: method == "GET" and "/resource.k8s.io/" in path and "deviceclasses" in path,
             times=-1)
    api.put(JOBS, pi("plain", "user-c", pods=1))
    async with driven(api) as controller:
        assert controller.cache.devices.caches == []
        await step(api, controller, passes=2)
    assert admitted(api, "plain", "user-c")
    assert "event=devices_not_counted" in caplog.text and "manifests/controller/rbac.yaml" in caplog.text
