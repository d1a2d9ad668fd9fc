"""The controller's start estimates through the in-memory apiserver (docs/eta.md): a pass offers its snapshot,
the estimate task refreshes off the pass, the next pass writes the estimate into the Queue's status; a
succeeded job's run time goes into the Queue's ``status.runtimeHistory`` and a restarted controller reads it
back."""

from __future__ import annotations

import asyncio
import datetime
import json
from typing import Any

from prometheus_client import REGISTRY

from tests.builders import cluster_pod
from tests.service.controller_support import PODS, QUEUES, TREES, admitted, driven, job, pi, seed_api, step
from tests.service.kubeclient_fake import JOBS, FakeApi
from webhook.api.names import ADMISSION_ANNOTATION, EXPECTED_RUNTIME_ANNOTATION
from webhook.api.objects import parse_time
from webhook.controller.controller import Controller


def declared(obj: dict[str, Any], runtime: str) -> dict[str, Any]:
    obj["metadata"]["annotations"] = {EXPECTED_RUNTIME_ANNOTATION: runtime}
    return obj


def active(api: FakeApi, namespace: str = "user-a") -> list[dict[str, Any]]:
    queue = api.obj(QUEUES, f"root-department-a-{namespace}", "kube-queue")
    items: list[dict[str, Any]] = queue.get("status", {}).get("queueItemDetails", {}).get("active", [])
    return items


async def refreshed(api: FakeApi, controller: Controller) -> None:
    """One pass, the estimate task's refresh it triggers, and the pass that writes what it published."""
    eta = controller.eta
    assert eta is not None
    before, published = eta.refreshes, eta.published()
    await step(api, controller)
    task = asyncio.ensure_future(eta.run())
    try:
        # Until the task has taken its refresh in: counted in the worker thread, it is published a step later.
        for _ in range(2000):
            if eta.refreshes > before and eta.published() is not published:
                break
            await asyncio.sleep(0.005)
        assert eta.refreshes > before and eta.published() is not published, "the estimate task did not refresh"
    finally:
        task.cancel()
    await step(api, controller)


def finish(api: FakeApi, name: str, after: float) -> None:
    obj = job(api, name)
    admitted_at = parse_time(json.loads(obj["metadata"]["annotations"][ADMISSION_ANNOTATION])["admittedAt"])
    assert admitted_at is not None
    ended = datetime.datetime.fromtimestamp(admitted_at + after, tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    obj["status"] = {"succeeded": 6, "completionTime": ended, "conditions": [
        {"type": "Complete", "status": "True", "lastTransitionTime": ended}]}
    api.put(JOBS, obj)


async def test_a_waiting_job_gets_its_estimated_start_in_its_queue_status() -> None:
    api = seed_api()
    api.put(JOBS, declared(pi("pi-1"), "10m"))
    api.put(JOBS, declared(pi("pi-2"), "5m"))
    async with driven(api, eta_interval=0.01) as controller:
        await step(api, controller)
        assert admitted(api, "pi-1") and not admitted(api, "pi-2")
        spent = REGISTRY.get_sample_value("kube_queue_eta_cpu_seconds_total") or 0.0
        await refreshed(api, controller)
        # The refresh's CPU is counted, as it goes (between the replay's passes) and in all.
        counted = (REGISTRY.get_sample_value("kube_queue_eta_cpu_seconds_total") or 0.0) - spent
        assert controller.eta is not None and counted > 0 and counted >= controller.eta.last_cpu - 0.005
    (item,) = active(api)
    record = json.loads(job(api, "pi-1")["metadata"]["annotations"][ADMISSION_ANNOTATION])
    started = parse_time(item["estimatedStart"])
    assert item["name"] == "pi-2" and started is not None
    # pi-1 runs 10 minutes from its admission (its pods are not seen running: it counts from the admission).
    assert abs(started - ((parse_time(record["admittedAt"]) or 0) + 600)) <= 1
    assert item["estimatedStartLatest"] == item["estimatedStart"]


async def test_the_history_of_succeeded_jobs_survives_a_restart_and_estimates_jobs_like_them() -> None:
    api = seed_api()
    api.put(JOBS, pi("pi-1"))
    async with driven(api, eta_interval=0.01) as controller:
        await step(api, controller)
        finish(api, "pi-1", 300)
        await refreshed(api, controller)
    queue = api.obj(QUEUES, "root-department-a-user-a", "kube-queue")
    history = queue["status"]["runtimeHistory"]
    # 300 s after its admission, to the second the Job's completionTime keeps.
    assert [(item["kind"], item["stem"]) for item in history] == [("Job", "pi")]
    assert history[0]["seconds"] in ([299], [300])
    learned = history[0]["seconds"][0]
    # A new controller (a restart) reads the history back, does not count pi-1 twice, and estimates pi-3 (a "pi"
    # job too, of unknown run time otherwise) from it while pi-4 waits behind it.
    api.put(JOBS, pi("pi-3"))
    api.put(JOBS, declared(pi("pi-4"), "1m"))
    async with driven(api, eta_interval=0.01) as controller:
        await step(api, controller)
        assert admitted(api, "pi-3") and not admitted(api, "pi-4")
        await refreshed(api, controller)
        assert controller.eta is not None
        assert controller.eta.history.groups == {("user-a", "Job", "pi"): [learned]}  # as persisted, once
    (item,) = active(api)
    record = json.loads(job(api, "pi-3")["metadata"]["annotations"][ADMISSION_ANNOTATION])
    started = parse_time(item["estimatedStart"])
    assert item["name"] == "pi-4" and started is not None
    assert abs(started - ((parse_time(record["admittedAt"]) or 0) + learned)) <= 1


async def test_with_estimates_off_the_queue_status_has_none() -> None:
    api = seed_api()
    api.put(JOBS, declared(pi("pi-1"), "10m"))
    api.put(JOBS, declared(pi("pi-2"), "5m"))
    async with driven(api, eta_interval=0) as controller:
        assert controller.eta is None
        await step(api, controller, passes=2)
    assert [set(item) for item in active(api)] == [{"name", "namespace", "priority", "position"}]


async def test_the_control_planes_time_per_turn_is_kept_on_the_tree_across_a_restart() -> None:
    """docs/eta.md, "the control plane's time": pi-1's pod starts (to the second) at its admission and its Job
    completes then; the pass that sees it finished measures the rest of the turn. The tree's status keeps both
    parts, a pass before the estimator read them back keeps them there, and a new controller reads them back."""
    api = seed_api()
    api.put(JOBS, pi("pi-1", pods=1))
    async with driven(api, eta_interval=0.01) as controller:
        await step(api, controller)
        assert admitted(api, "pi-1")
        owner = job(api, "pi-1")
        record = json.loads(owner["metadata"]["annotations"][ADMISSION_ANNOTATION])
        begun = datetime.datetime.fromtimestamp(parse_time(record["admittedAt"]) or 0.0, tz=datetime.UTC)
        pod = cluster_pod("pi-1-x", namespace="user-a", owner=owner,
                          status={"startTime": begun.strftime("%Y-%m-%dT%H:%M:%SZ")})
        api.put(PODS, pod)
        await refreshed(api, controller)  # its pods are seen running
        finish(api, "pi-1", 0)
        await refreshed(api, controller)  # a pass sees it finished; the refresh learns the turn
    handoff = api.obj(TREES, "elasticquotatree", "kube-system")["status"]["handoff"]
    assert handoff["startSeconds"] == [0.0]  # a start kept to the second is never before the admission
    (end,) = handoff["endSeconds"]
    assert 0.0 <= end <= 5.0
    async with driven(api, eta_interval=0.01) as controller:
        await step(api, controller)  # no refresh yet: the pass keeps what the tree holds
        assert api.obj(TREES, "elasticquotatree", "kube-system")["status"]["handoff"] == handoff
        await refreshed(api, controller)
        assert controller.eta is not None and controller.eta.handoff.items() == handoff


async def test_a_queue_is_not_rewritten_for_a_small_move_but_carries_fresh_figures_when_it_is() -> None:
    """An estimate that moves by a few seconds is not worth a write of its Queue's status; when the status is
    rewritten anyway (a job joined the queue), every estimate in it is the fresh one."""
    api = seed_api()
    api.put(JOBS, declared(pi("pi-1"), "10m"))
    api.put(JOBS, declared(pi("pi-2"), "5m"))
    async with driven(api, eta_interval=0.01) as controller:
        await step(api, controller)
        await refreshed(api, controller)
        (first,) = active(api)
        assert first["name"] == "pi-2"
        running = job(api, "pi-1")
        running["metadata"]["annotations"][EXPECTED_RUNTIME_ANNOTATION] = "605s"  # pi-2 would start 5 s later
        api.put(JOBS, running)
        await refreshed(api, controller)
        assert active(api) == [first]  # 5 s: not worth a write
        api.put(JOBS, declared(pi("pi-3"), "5m"))  # the queue changes: its status is rewritten
        await refreshed(api, controller)
        items = {item["name"]: item for item in active(api)}
        assert set(items) == {"pi-2", "pi-3"}
        moved, before = parse_time(items["pi-2"]["estimatedStart"]), parse_time(first["estimatedStart"])
        assert moved is not None and before is not None and moved - before == 5
