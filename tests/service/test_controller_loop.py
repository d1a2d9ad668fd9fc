"""The controller against the in-memory apiserver: the seed's scenarios, restarts, stale views, API
hiccups, the tree changing under it, and rate-limited status writes."""

from __future__ import annotations

import argparse
import asyncio
import json

from prometheus_client import REGISTRY

from tests.service.controller_support import (
    EVENTS,
    NAMESPACES,
    PODS,
    PRIORITY_CLASSES,
    QUEUES,
    TREES,
    admitted,
    bound_pod,
    catch_up,
    driven,
    events,
    job,
    job_writes,
    pi,
    seed_api,
    settings,
    step,
)
from tests.service.kubeclient_fake import JOBS
from webhook.api.names import (
    ADMISSION_ANNOTATION,
    EVICTION_ANNOTATION,
    MANAGED_NAMESPACE_LABEL,
    NAMESPACE_QUOTA_LABEL,
)
from webhook.api.objects import job_spec
from webhook.controller import add_controller_args, run_controller
from webhook.controller.controller import Controller


async def test_seed_scenario_1_queues_labels_admission_positions_status_and_events() -> None:
    api = seed_api()
    api.put(JOBS, pi("pi-1"))
    api.put(JOBS, pi("pi-2"))
    async with driven(api) as controller:
        await step(api, controller, passes=2)
        await controller.events.flush()
    assert sorted(q["metadata"]["name"] for q in api.objects(QUEUES)) == [
        "root-department-a-user-a", "root-department-a-user-b", "root-department-b-user-c"
    ]
    for name, leaf in (("user-a", "Department-a"), ("user-b", "Department-a"), ("user-c", "Department-b")):
        assert api.obj(NAMESPACES, name)["metadata"]["labels"] == {MANAGED_NAMESPACE_LABEL: "true",
                                                                   NAMESPACE_QUOTA_LABEL: leaf}
    assert "labels" not in api.obj(NAMESPACES, "kube-queue")["metadata"]
    assert admitted(api, "pi-1") and not admitted(api, "pi-2")
    queue = api.obj(QUEUES, "root-department-a-user-a", "kube-queue")
    assert queue["spec"] == {"queuePolicy": "Round"}
    assert queue["status"]["queueItemDetails"]["active"] == [
        {"name": "pi-2", "namespace": "user-a", "priority": 0, "position": 1}
    ]
    tree = api.obj(TREES, "elasticquotatree", "kube-system")
    assert tree["status"]["root"]["used"]["cpu"] == "60"
    assert tree["status"]["root"]["request"]["cpu"] == "120"
    assert events(api, "Admitted") == ["pi-1"]
    assert events(api, "Queued") == ["pi-2"]


async def test_a_restarted_controller_rebuilds_the_ledger_from_records_and_writes_no_job() -> None:
    api = seed_api()
    api.put(JOBS, pi("pi-1"))
    api.put(JOBS, pi("pi-2"))
    async with driven(api) as controller:
        await step(api, controller, passes=2)
    record = job(api, "pi-1")["metadata"]["annotations"][ADMISSION_ANNOTATION]
    writes = job_writes(api)
    async with driven(api) as restarted:
        await step(api, restarted, passes=3)
    assert job_writes(api) == writes
    assert job(api, "pi-1")["metadata"]["annotations"][ADMISSION_ANNOTATION] == record
    assert not admitted(api, "pi-2")


async def test_its_own_writes_count_even_before_the_watch_delivers_them() -> None:
    # Between a pass's snapshot and its write, a higher-priority job arrives; the watch delivers that job but
    # not yet the admission: the next pass must still count the admitted job (or it admits both, 120 > 100).
    api = seed_api()
    api.put(JOBS, pi("first"))
    created: list[int] = []

    def urgent_arrives(method: str, path: str) -> None:
        if "/jobs/first" in path and not created:
            api.put(JOBS, pi("urgent", priority_class="priority-3"))
            created.append(api.version)
            api.deliver_until = api.version

    api.before_write = urgent_arrives
    async with driven(api) as controller:
        await catch_up(api, controller)
        await controller.reconcile()
        assert admitted(api, "first")
        job_cache = controller.cache.job_caches["Job.batch"][2]
        for _ in range(1000):
            if int(job_cache.resource_version or 0) >= created[0]:
                break
            await asyncio.sleep(0.001)
        assert job_cache.get("urgent", "user-a") is not None
        seen = job_cache.get("first", "user-a")
        assert seen is not None and job_spec(seen).get("suspend") is True, "the watch lags behind the write"
        await controller.reconcile()
        api.release()
        await step(api, controller)
    assert admitted(api, "first") and not admitted(api, "urgent")


async def test_back_to_back_passes_never_double_book_the_quota() -> None:
    api = seed_api()
    api.put(JOBS, pi("pi-1"))
    api.put(JOBS, pi("pi-2", "user-b"))
    async with driven(api) as controller:
        await catch_up(api, controller)
        await controller.reconcile()
        await controller.reconcile()  # the watch has not delivered the first admission yet
        await step(api, controller)
    assert [admitted(api, "pi-1"), admitted(api, "pi-2", "user-b")] == [True, False]


async def test_a_write_refused_as_stale_is_retried_on_the_next_pass() -> None:
    api = seed_api()
    api.put(JOBS, pi("pi-1"))
    api.fail(422, lambda method, path: method == "PATCH" and "/jobs/" in path)
    async with driven(api) as controller:
        await step(api, controller)
        assert not admitted(api, "pi-1")
        assert controller.stats.conflicts == 1
        await step(api, controller)
    assert admitted(api, "pi-1")
    assert len(events(api, "Admitted")) <= 1


async def test_seed_scenario_2_strict_priority_blocks_and_orders_by_priority_class() -> None:
    api = seed_api()
    api.put(JOBS, pi("pi-1"))
    api.put(JOBS, pi("pi-2"))
    async with driven(api) as controller:
        await step(api, controller, passes=2)
    api.put(JOBS, pi("pi-3", priority_class="priority-2"))
    async with driven(api, strict_priority=True) as strict:
        await step(api, strict, passes=2)
    assert {q["spec"]["queuePolicy"] for q in api.objects(QUEUES)} == {"Block"}
    active = api.obj(QUEUES, "root-department-a-user-a", "kube-queue")["status"]["queueItemDetails"]["active"]
    assert [(item["name"], item["position"], item["priority"]) for item in active] == [("pi-3", 1, 2), ("pi-2", 2, 0)]
    async with driven(api) as relaxed:
        await step(api, relaxed)
    assert {q["spec"]["queuePolicy"] for q in api.objects(QUEUES)} == {"Round"}


async def test_seed_scenario_3_evicts_before_it_admits_and_tells_the_victim() -> None:
    api = seed_api()
    api.put(JOBS, pi("a1"))
    async with driven(api) as controller:
        await step(api, controller)
        api.put(JOBS, pi("b1", "user-b", pods=4))
        await step(api, controller)
        assert admitted(api, "b1", "user-b")
        api.put(JOBS, pi("c1", "user-c", pods=1, priority_class="priority-3"))
        await step(api, controller, passes=2)
        await controller.events.flush()
    victim = job(api, "b1", "user-b")
    assert victim["spec"]["suspend"] is True
    assert ADMISSION_ANNOTATION not in victim["metadata"]["annotations"]
    assert json.loads(victim["metadata"]["annotations"][EVICTION_ANNOTATION])["by"] == "Job/user-c/c1"
    assert admitted(api, "c1", "user-c") and admitted(api, "a1")
    order = [obj["metadata"]["name"] for _, kind, _, obj in api.log if kind == JOBS]
    assert order.index("b1", order.index("c1")) < len(order) - 1 - order[::-1].index("c1")
    assert events(api, "Evicted") == ["b1"]
    active = api.obj(QUEUES, "root-department-a-user-b", "kube-queue")["status"]["queueItemDetails"]["active"]
    assert [item["name"] for item in active] == ["b1"]


async def test_queues_and_labels_follow_the_tree() -> None:
    api = seed_api()
    async with driven(api) as controller:
        await step(api, controller)
        tree = api.obj(TREES, "elasticquotatree", "kube-system")
        tree["spec"]["root"]["children"][0]["namespaces"] = ["user-a"]
        api.put(TREES, tree)
        await step(api, controller)
        assert sorted(q["metadata"]["name"] for q in api.objects(QUEUES)) == [
            "root-department-a-user-a", "root-department-b-user-c"
        ]
        assert api.obj(NAMESPACES, "user-b")["metadata"].get("labels", {}) == {}  # managed and quota labels gone
        # A deleted tree opens no gate: namespaces stay managed and Queues stay (docs/accounting.md).
        api.remove(TREES, "elasticquotatree", "kube-system")
        await step(api, controller)
    assert sorted(q["metadata"]["name"] for q in api.objects(QUEUES)) == [
        "root-department-a-user-a", "root-department-b-user-c"
    ]
    assert api.obj(NAMESPACES, "user-a")["metadata"]["labels"] == {MANAGED_NAMESPACE_LABEL: "true",
                                                                   NAMESPACE_QUOTA_LABEL: "Department-a"}


async def test_an_invalid_tree_changes_nothing() -> None:
    api = seed_api()
    tree = api.obj(TREES, "elasticquotatree", "kube-system")
    tree["spec"]["root"]["max"]["cpu"] = 50
    api.put(TREES, tree)
    api.put(JOBS, pi("pi-1"))
    async with driven(api) as controller:
        await step(api, controller)
    assert api.objects(QUEUES) == [] and not admitted(api, "pi-1")


async def test_status_is_written_only_on_change_and_at_most_once_per_interval() -> None:
    api = seed_api()
    now = [1000.0]
    async with driven(api, status_interval=30.0) as controller:
        controller._clock = lambda: now[0]
        await step(api, controller, passes=3)

        def status_writes() -> int:
            return sum(1 for m, p in api.calls if m == "PATCH" and p.endswith("root-department-a-user-a/status"))

        first = status_writes()
        assert first == 1
        api.put(JOBS, pi("big", pods=11))
        await step(api, controller, passes=3)
        assert status_writes() == first, "a change within the interval waits"
        now[0] += 30
        await step(api, controller, passes=3)
        assert status_writes() == first + 1
        now[0] += 30
        await step(api, controller, passes=3)
        assert status_writes() == first + 1, "no change, no write"


async def test_a_job_that_cannot_be_sized_is_reported_once_and_skipped() -> None:
    api = seed_api()
    bad = pi("bad")
    bad["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    api.put(JOBS, bad)
    api.put(JOBS, pi("good"))
    async with driven(api) as controller:
        await step(api, controller, passes=3)
        await controller.events.flush()
    assert admitted(api, "good") and not admitted(api, "bad")
    assert events(api, "CannotSize") == ["bad"]


async def test_the_loop_converges_through_api_hiccups_without_double_admission() -> None:
    api = seed_api()
    for index in range(8):
        api.put(JOBS, pi(f"j{index}", ["user-a", "user-b", "user-c"][index % 3], pods=2))
    api.fail(0, lambda method, path: method in ("PATCH", "POST"), times=12, probability=0.5)
    stop = asyncio.Event()
    controller = Controller(api, settings())
    task = asyncio.ensure_future(controller.run(stop))
    try:
        for _ in range(2000):
            await asyncio.sleep(0.005)
            names = [(f"j{i}", ["user-a", "user-b", "user-c"][i % 3]) for i in range(8)]
            if sum(admitted(api, *n) for n in names) == 5 and controller.stats.passes > 5:
                break
        stop.set()
        await asyncio.wait_for(task, 10)
    finally:
        task.cancel()
    records = {
        obj["metadata"]["name"]: obj["metadata"]["annotations"][ADMISSION_ANNOTATION]
        for obj in api.objects(JOBS)
        if ADMISSION_ANNOTATION in (obj["metadata"].get("annotations") or {})
    }
    assert len(records) == 5, "100 CPU at 20 CPU a job"
    for name in records:
        ids = {
            json.loads(obj["metadata"]["annotations"][ADMISSION_ANNOTATION])["id"]
            for _, kind, _, obj in api.log
            if kind == JOBS and obj["metadata"]["name"] == name and ADMISSION_ANNOTATION in obj["metadata"].get(
                "annotations", {}
            )
        }
        assert len(ids) == 1, f"{name} admitted more than once"


async def test_run_controller_returns_at_once_with_no_controller() -> None:
    parser = argparse.ArgumentParser()
    add_controller_args(parser)
    api = seed_api()
    await asyncio.wait_for(run_controller(parser.parse_args(["--no-controller"]), api, asyncio.Event()), 5)
    assert api.calls == []


async def test_metrics_show_depth_usage_and_admissions() -> None:
    def sample(name: str, **labels: str) -> float | None:
        return REGISTRY.get_sample_value(name, labels)

    before = sample("kube_queue_admissions_total", quota="root/Department-a") or 0.0
    api = seed_api()
    api.put(JOBS, pi("pi-1"))
    api.put(JOBS, pi("pi-2"))
    async with driven(api) as controller:
        await step(api, controller, passes=2)
    assert sample("kube_queue_admissions_total", quota="root/Department-a") == before + 1
    assert sample("kube_queue_pending_jobs", quota="root/Department-a") == 1
    assert sample("kube_queue_quota_used", quota="root/Department-a", resource="cpu") == 60
    assert sample("kube_queue_quota_borrowed", quota="root/Department-a", resource="cpu") == 0
    assert sample("kube_queue_quota_max", quota="root", resource="cpu") == 100


async def test_a_queue_deleted_and_re_created_gets_its_status_again_at_once() -> None:
    # A new Queue object of the same name has no status, whatever was last written on the old one.
    api = seed_api()
    api.put(JOBS, pi("pi-1"))
    api.put(JOBS, pi("pi-2"))
    async with driven(api, status_interval=30.0) as controller:
        await step(api, controller, passes=2)
        first = api.obj(QUEUES, "root-department-a-user-a", "kube-queue")
        assert [item["name"] for item in first["status"]["queueItemDetails"]["active"]] == ["pi-2"]
        api.remove(QUEUES, "root-department-a-user-a", "kube-queue")
        await step(api, controller, passes=2)
        again = api.obj(QUEUES, "root-department-a-user-a", "kube-queue")
        assert again["metadata"]["uid"] != first["metadata"]["uid"]
        assert [item["name"] for item in again["status"]["queueItemDetails"]["active"]] == ["pi-2"]


async def test_pods_no_job_accounts_for_count_against_the_quota() -> None:
    # 30 CPU of Deployment pods in user-b and 10 in a Pod "owned" by a ConfigMap in user-a use Department-a's
    # 100 CPU: a job of 8 x 10 CPU is not released (it could not fully run), one of 6 x 10 is.
    api = seed_api()
    for index in range(3):
        api.put(PODS, bound_pod(f"web-{index}", "user-b", "10", ("ReplicaSet", "web-6d4")))
    api.put(PODS, bound_pod("sneaky", "user-a", "10", ("ConfigMap", "mine")))
    api.put(PODS, {**bound_pod("pending", "user-a", "50", None), "spec": {"containers": []}})  # not bound
    api.put(JOBS, pi("big", pods=8))
    async with driven(api) as controller:
        await step(api, controller, passes=2)
        assert not admitted(api, "big")
        tree = api.obj(TREES, "elasticquotatree", "kube-system")
        department_a = tree["status"]["root"]["children"][0]
        assert department_a["used"]["cpu"] == "40"
        api.put(JOBS, pi("fits", pods=6))
        await step(api, controller, passes=2)
        assert admitted(api, "fits") and not admitted(api, "big")
        # The job's own pods are counted by its admission, not twice.
        for index in range(6):
            api.put(PODS, bound_pod(f"fits-{index}", "user-a", "10", ("Job", "fits")))
        await step(api, controller, passes=2)
        tree = api.obj(TREES, "elasticquotatree", "kube-system")
        assert tree["status"]["root"]["children"][0]["used"]["cpu"] == "100"
        # Deployment pods scaled away: their quota comes back.
        for index in range(3):
            api.remove(PODS, f"web-{index}", "user-b")
        api.remove(PODS, "sneaky", "user-a")
        await step(api, controller, passes=2)
        tree = api.obj(TREES, "elasticquotatree", "kube-system")
        assert tree["status"]["root"]["children"][0]["used"]["cpu"] == "60"


async def test_a_job_running_before_its_namespace_joined_counts_at_once_and_is_told_so() -> None:
    api = seed_api()
    early = pi("early", pods=5)
    early["spec"]["suspend"] = False  # released by nobody: it ran before the tree listed user-a
    api.put(JOBS, early)
    api.put(JOBS, pi("queued", pods=6))
    async with driven(api) as controller:
        await step(api, controller, passes=3)
        await controller.events.flush()
    assert not admitted(api, "queued")  # 50 + 60 > 100: the early job's 50 CPU count
    tree = api.obj(TREES, "elasticquotatree", "kube-system")
    assert tree["status"]["root"]["children"][0]["used"]["cpu"] == "50"
    assert events(api, "RunsOutsideQueue") == ["early"]


async def test_a_job_whose_priority_class_disappeared_is_held_and_told_why() -> None:
    # Deleting a class that queued jobs use must not drop them to priority 0 and release them: their pods
    # would be refused by the API server for ever.
    api = seed_api()
    api.put(JOBS, pi("orphan", pods=1, priority_class="priority-3"))
    api.remove(PRIORITY_CLASSES, "priority-3")
    async with driven(api) as controller:
        await step(api, controller, passes=2)
        assert not admitted(api, "orphan")
        await controller.events.flush()
        assert events(api, "Held") == ["orphan"]
        held = [e["message"] for e in api.objects(EVENTS) if e["reason"] == "Held"]
        assert "its PriorityClass 'priority-3' does not exist" in held[0]
        api.put(PRIORITY_CLASSES, {"metadata": {"name": "priority-3"}, "value": 3})
        await step(api, controller, passes=2)
        assert admitted(api, "orphan")


async def test_a_pod_queued_as_itself_counts_once_whatever_owner_it_names() -> None:
    # A user's Pod naming her ConfigMap as owner is held like a bare Pod and queued (docs/security.md); once
    # released and bound it counts through its admission only, not again as a pod no job accounts for.
    api = seed_api()
    sneaky = bound_pod("sneaky", "user-a", "10", ("ConfigMap", "mine"))
    sneaky["metadata"]["labels"] = {"quota.scheduling.alibabacloud.com/name": "Department-a"}
    sneaky["spec"] = {"schedulingGates": [{"name": "kube-queue.x-k8s.io/admission"}],
                      "containers": sneaky["spec"]["containers"]}
    sneaky["status"] = {"phase": "Pending"}
    api.put(PODS, sneaky)
    async with driven(api) as controller:
        await step(api, controller, passes=2)
        released = api.obj(PODS, "sneaky", "user-a")
        assert "schedulingGates" not in released["spec"] or not released["spec"]["schedulingGates"]
        released["spec"]["nodeName"] = "ecs-0"
        released["status"] = {"phase": "Running"}
        api.put(PODS, released)
        await step(api, controller, passes=2)
        tree = api.obj(TREES, "elasticquotatree", "kube-system")
        assert tree["status"]["root"]["children"][0]["used"]["cpu"] == "10"
