"""A SparkApplication's executors, which its driver creates under a ServiceAccount of the user's namespace and
the webhook holds like bare Pods: the controller releases them within the application's admission, and
neither queues nor counts them on their own (docs/job-kinds.md, "Spark")."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from tests.service.controller_support import EVENTS, driven, seed_api, step
from tests.service.kubeclient_fake import CORE, FakeApi, Kind
from webhook.api.names import ADMISSION_GATE, QUOTA_LABEL, REASON_HELD, REASON_RELEASED
from webhook.core.quota import QuotaTree

APPS: Kind = ("sparkoperator.k8s.io", "v1beta2", "sparkapplications")
PODS: Kind = ("", "v1", "pods")
EXECUTOR = {"cpu": "2", "memory": "2432Mi"}
"""What Spark asks for an executor of 2 cores and 2g (2g plus the 384Mi least overhead)."""


def spark_api() -> FakeApi:
    return FakeApi(kinds={*CORE, APPS})


def application(name: str = "sp", executors: int = 3, suspended: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
        "metadata": {"name": name, "namespace": "user-a", "uid": f"uid-{name}",
                     "labels": {QUOTA_LABEL: "Department-a"}},
        "spec": {"type": "Scala", "mode": "cluster", "suspend": suspended,
                 "driver": {"cores": 1, "memory": "512m"},
                 "executor": {"cores": 2, "memory": "2g", "instances": executors}},
    }


def driver(app: str = "sp") -> dict[str, Any]:
    return {
        "metadata": {"name": f"{app}-driver", "namespace": "user-a", "uid": f"uid-{app}-driver",
                     "labels": {QUOTA_LABEL: "Department-a", "spark-role": "driver"},
                     "ownerReferences": [{"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
                                          "name": app, "uid": f"uid-{app}", "controller": True}]},
        "spec": {"nodeName": "ecs-0", "containers": [{"name": "spark-kubernetes-driver", "resources": {
            "requests": {"cpu": "1", "memory": "896Mi"}, "limits": {"memory": "896Mi"}}}]},
        "status": {"phase": "Running"},
    }


def executor(number: int, owner: str = "sp-driver", request: dict[str, str] | None = None,
             created: str = "2026-12-07T10:00:00Z") -> dict[str, Any]:
    """An executor as Spark makes it and the webhook holds it: owned by the driver pod, gated, tagged."""
    requests = dict(request or EXECUTOR)
    return {
        "metadata": {"name": f"sp-exec-{number}", "namespace": "user-a", "uid": f"uid-exec-{number}",
                     "creationTimestamp": created,
                     "labels": {QUOTA_LABEL: "Department-a", "spark-role": "executor"},
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": owner, "uid": f"uid-{owner}",
                                          "controller": True}]},
        "spec": {"schedulingGates": [{"name": ADMISSION_GATE}],
                 "containers": [{"name": "spark-kubernetes-executor", "resources": {
                     "requests": requests, "limits": {"memory": requests["memory"]}}}]},
        "status": {"phase": "Pending"},
    }


def gated(api: FakeApi, name: str) -> bool:
    return bool(api.obj(PODS, name, "user-a")["spec"].get("schedulingGates"))


def events(api: FakeApi, reason: str) -> dict[str, str]:
    return {event["involvedObject"]["name"]: event["message"] for event in api.objects(EVENTS)
            if event.get("reason") == reason}


def queued_names(tree: QuotaTree | None, controller: Any) -> set[str]:
    assert tree is not None
    return {job.workload.key.name for job in controller.tracked_jobs(tree)}


async def test_executors_are_released_up_to_the_admitted_count_and_size_oldest_first() -> None:
    api = seed_api(spark_api)
    api.put(APPS, application())
    async with driven(api) as controller:
        await step(api, controller)
        assert api.obj(APPS, "sp", "user-a")["spec"]["suspend"] is False, "the application is admitted"
        api.put(PODS, driver())
        for number in range(1, 5):  # one more than the three executors admitted
            api.put(PODS, executor(number, created=f"2026-12-07T10:00:0{number}Z"))
        api.put(PODS, executor(9, request={"cpu": "3", "memory": "2432Mi"}, created="2026-12-07T09:00:00Z"))
        await step(api, controller, passes=2)
        assert [gated(api, f"sp-exec-{n}") for n in (1, 2, 3, 4, 9)] == [False, False, False, True, True]
        held = events(api, REASON_HELD)
        assert "admitted with 3 executor pod(s), and 3 exist already" in held["sp-exec-4"]
        assert "requests cpu=3, memory=2432Mi, more than the cpu=2, memory=2432Mi" in held["sp-exec-9"]
        assert set(events(api, REASON_RELEASED)) == {"sp-exec-1", "sp-exec-2", "sp-exec-3"}
        # Neither queued nor counted on their own: only the application is a job of the quota.
        tree = controller.cache.tree_parsed[0]
        assert queued_names(tree, controller) == {"sp"}
        # One released executor goes: the next held one of the right size takes its place, the big one never.
        api.remove(PODS, "sp-exec-2", "user-a")
        await step(api, controller, passes=2)
        assert not gated(api, "sp-exec-4") and gated(api, "sp-exec-9")


async def test_a_restarted_controller_counts_the_released_executors_and_releases_no_more() -> None:
    """The rule keeps no state of its own: a new controller (a restart, a new leader) counts the executors
    that run, so it never releases more than the admission holds."""
    api = seed_api(spark_api)
    api.put(APPS, application())
    async with driven(api) as controller:
        await step(api, controller)
        api.put(PODS, driver())
        for number in (1, 2, 3):
            api.put(PODS, executor(number))
        await step(api, controller, passes=2)
    assert [gated(api, f"sp-exec-{n}") for n in (1, 2, 3)] == [False, False, False]
    api.put(PODS, executor(4))
    api.put(PODS, executor(5))
    async with driven(api) as controller:  # the process was killed after its releases: a fresh one
        await step(api, controller, passes=2)
        assert gated(api, "sp-exec-4") and gated(api, "sp-exec-5")


async def test_executors_of_an_application_not_admitted_stay_held_and_are_not_queued() -> None:
    """An application held by the queue (its quota full) has no executors running; one a user makes to look
    like its executor is held with the reason, not queued as a Pod of its own."""
    api = seed_api(spark_api)
    api.put(APPS, application(executors=60))  # 121 CPU: more than the root holds
    async with driven(api) as controller:
        await step(api, controller)
        assert api.obj(APPS, "sp", "user-a")["spec"]["suspend"] is True
        api.put(PODS, driver())
        api.put(PODS, executor(1))
        await step(api, controller, passes=2)
        assert gated(api, "sp-exec-1")
        assert "held until SparkApplication sp is admitted" in events(api, REASON_HELD)["sp-exec-1"]
        assert queued_names(controller.cache.tree_parsed[0], controller) == {"sp"}


async def test_a_pod_owned_by_a_pod_no_job_spawns_through_is_still_queued_on_its_own() -> None:
    api = seed_api(spark_api)
    api.put(APPS, application())
    stray = copy.deepcopy(executor(1, owner="somebody-else"))
    stray["metadata"]["name"] = "stray"
    api.put(PODS, stray)
    async with driven(api) as controller:
        await step(api, controller)
        assert "stray" in queued_names(controller.cache.tree_parsed[0], controller)


async def test_an_application_whose_driver_runs_has_started_whatever_its_executors() -> None:
    """Spark is no gang: with dynamic allocation the driver starts with its initial executors (often none) and
    grows to ``maxExecutors``, so the start timeout does not back it off while only its driver runs."""
    api = seed_api(spark_api)
    app = application()
    app["spec"]["dynamicAllocation"] = {"enabled": True, "maxExecutors": 4}
    api.put(APPS, app)
    async with driven(api, start_timeout=0.2) as controller:
        await step(api, controller)
        assert api.obj(APPS, "sp", "user-a")["spec"]["suspend"] is False
        api.put(PODS, driver())
        await asyncio.sleep(0.3)  # past the start timeout: the verdict is what is tested, not a wait
        await step(api, controller, passes=2)
        assert api.obj(APPS, "sp", "user-a")["spec"]["suspend"] is False, "not backed off"
