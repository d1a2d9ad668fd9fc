"""Fair sharing through the controller (docs/fair-sharing.md): a tree whose root shares the spare by weight
admits by share, and the share and fair share are exported as metrics."""

from __future__ import annotations

import copy
from typing import Any

from prometheus_client import REGISTRY

from tests.builders import SEED_TREE_SPEC
from tests.service.controller_support import TREES, driven, pi, seed_api, step
from tests.service.kubeclient_fake import JOBS, FakeApi
from webhook.api.names import ADMISSION_ANNOTATION, FAIR_SHARING_ATTRIBUTE


def _fair_seed(api: FakeApi) -> None:
    """The seed's tree with mins of 30 and 20 CPU and the root sharing the spare by weight."""
    spec: dict[str, Any] = copy.deepcopy(SEED_TREE_SPEC)
    spec["root"]["attributes"] = {FAIR_SHARING_ATTRIBUTE: "true"}
    spec["root"]["children"][0]["min"] = {"cpu": 30, "memory": "30Gi"}
    spec["root"]["children"][1]["min"] = {"cpu": 20, "memory": "20Gi"}
    api.put(TREES, {"metadata": {"name": "elasticquotatree", "namespace": "kube-system"}, "spec": spec})


def _one_cpu(name: str, namespace: str) -> dict[str, Any]:
    job = pi(name, namespace, pods=1)
    job["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "1", "memory": "1Gi"}
    return job


async def test_the_spare_goes_by_weight_and_the_shares_are_exported() -> None:
    api = seed_api()
    _fair_seed(api)
    # Department-a's burst comes first; Department-b's jobs later. The spare of 50 CPU goes 30 : 20.
    for index in range(100):
        api.put(JOBS, _one_cpu(f"a{index:03d}", "user-a"))
    for index in range(100):
        api.put(JOBS, _one_cpu(f"c{index:03d}", "user-c"))
    async with driven(api) as controller:
        await step(api, controller, passes=2)
    admitted = [job["metadata"]["namespace"] for job in api.objects(JOBS)
                if ADMISSION_ANNOTATION in job["metadata"].get("annotations", {})]
    assert admitted.count("user-a") == 60 and admitted.count("user-c") == 40

    def sample(name: str, quota: str) -> float | None:
        return REGISTRY.get_sample_value(name, {"quota": quota})

    assert sample("kube_queue_quota_fair_share_ratio", "root/Department-a") == 0.6
    assert sample("kube_queue_quota_fair_share_ratio", "root/Department-b") == 0.4
    share_a = sample("kube_queue_quota_fair_share_used_ratio", "root/Department-a")
    share_b = sample("kube_queue_quota_fair_share_used_ratio", "root/Department-b")
    assert share_a is not None and share_b is not None and abs(share_a - share_b) < 0.05
