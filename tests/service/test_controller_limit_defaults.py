"""A job written before its namespace's LimitRange is sized with the LimitRange's defaults, and one written
before the RuntimeClass it names declared an overhead with that overhead (docs/queueing.md, "LimitRange
defaults", "RuntimeClass overhead"): the webhook writes both on a job when it holds the job, so a job held
before them lacks them, while its pods, created after it is admitted, will get them. The controller sizes it
with what they say now, and sizes it again when they change.

The seed's tree (oversell rate 1): Department-a (user-a) may run up to 100 CPU.
"""

from __future__ import annotations

import json
from typing import Any

from tests.service.controller_support import admitted, driven, job, pi, seed_api, step
from tests.service.kubeclient_fake import JOBS, Kind
from webhook.api.names import ADMISSION_ANNOTATION

LIMIT_RANGES: Kind = ("", "v1", "limitranges")
RUNTIME_CLASSES: Kind = ("node.k8s.io", "v1", "runtimeclasses")


def _bare(name: str, pods: int) -> dict[str, Any]:
    """A held Job whose container asks for nothing (written before any LimitRange of its namespace)."""
    obj = pi(name, pods=pods)
    del obj["spec"]["template"]["spec"]["containers"][0]["resources"]
    return obj


def _limit_range(cpu: str) -> dict[str, Any]:
    return {"metadata": {"name": "defaults", "namespace": "user-a"},
            "spec": {"limits": [{"type": "Container", "defaultRequest": {"cpu": cpu}, "default": {"cpu": cpu}}]}}


def _admitted_request(name: str, api: Any) -> dict[str, str]:
    record = json.loads(job(api, name)["metadata"]["annotations"][ADMISSION_ANNOTATION])
    return dict(record["request"])


async def test_a_job_held_before_its_namespaces_limit_range_is_sized_by_it() -> None:
    api = seed_api()
    api.put(JOBS, _bare("wide", 6))
    api.put(LIMIT_RANGES, _limit_range("50"))
    async with driven(api) as controller:
        await step(api, controller, passes=2)
        # 6 pods of 50 CPU each, as the API server will make them: never within Department-a's 100.
        assert not admitted(api, "wide")
        api.put(JOBS, _bare("narrow", 1))
        await step(api, controller, passes=2)
        assert admitted(api, "narrow")
        assert _admitted_request("narrow", api) == {"cpu": "50"}


async def test_a_changed_limit_range_sizes_a_waiting_job_again() -> None:
    api = seed_api()
    api.put(LIMIT_RANGES, _limit_range("50"))
    api.put(JOBS, _bare("wide", 6))
    async with driven(api) as controller:
        await step(api, controller, passes=2)
        assert not admitted(api, "wide")
        api.put(LIMIT_RANGES, _limit_range("10"))
        await step(api, controller, passes=2)
        assert admitted(api, "wide")
        assert _admitted_request("wide", api) == {"cpu": "60"}


async def test_a_job_that_names_its_requests_keeps_its_size() -> None:
    api = seed_api()
    api.put(LIMIT_RANGES, _limit_range("50"))
    api.put(JOBS, pi("pi1", pods=6))  # 6 x 10 CPU, written by the job itself
    async with driven(api) as controller:
        await step(api, controller, passes=2)
    assert admitted(api, "pi1")
    assert _admitted_request("pi1", api) == {"cpu": "60", "memory": "60Gi"}


def _kata(cpu: str) -> dict[str, Any]:
    return {"metadata": {"name": "kata"}, "handler": "kata", "overhead": {"podFixed": {"cpu": cpu}}}


async def test_a_job_held_before_its_runtime_class_declared_an_overhead_is_sized_with_it() -> None:
    api = seed_api()
    obj = pi("sandboxed", pods=2)  # 2 x 10 CPU
    obj["spec"]["template"]["spec"]["runtimeClassName"] = "kata"
    api.put(JOBS, obj)
    api.put(RUNTIME_CLASSES, _kata("45"))
    async with driven(api) as controller:
        await step(api, controller, passes=2)
        assert not admitted(api, "sandboxed"), "2 x (10 + 45) CPU exceed Department-a's 100"
        api.put(RUNTIME_CLASSES, _kata("5"))
        await step(api, controller, passes=2)
        assert admitted(api, "sandboxed")
        assert _admitted_request("sandboxed", api) == {"cpu": "30", "memory": "20Gi"}
