"""Reclaim takes back what pods no queued job accounts for borrow (docs/reclaim.md, "Pods"): a Deployment's
or StatefulSet's pods, an orphan of a deleted job, a released bare Pod. They are evicted through the Eviction
API under the same rules as jobs, a PodDisruptionBudget that forbids it moves reclaim to the next victim.

The seed's tree at oversell rate 1: Department-a (user-a, user-b; min 60 CPU, max 100) and Department-b
(user-c; min 40, max 100) share a root of 100 CPU.
"""

from __future__ import annotations

from typing import Any

from tests.service.controller_support import (
    BUDGETS,
    EVENTS,
    PODS,
    admitted,
    bound_pod,
    driven,
    pi,
    seed_api,
    step,
)
from tests.service.kubeclient_fake import JOBS, FakeApi
from webhook.api.names import QUOTA_LABEL


def _deployment(api: FakeApi, count: int, namespace: str = "user-a", app: str = "web") -> None:
    """``count`` Running pods of 10 CPU of a ReplicaSet, created one minute apart (the last is the newest)."""
    for index in range(count):
        api.put(PODS, bound_pod(f"{app}-{index}", namespace, "10", ("ReplicaSet", f"{app}-6d4"),
                                labels={"app": app}, created=f"2024-04-08T02:{index:02d}:00Z"))


def _carol(api: FakeApi, name: str = "carol", pods: int = 1) -> None:
    api.put(JOBS, {**pi(name, "user-c", pods=pods)})


def _pods(api: FakeApi, namespace: str = "user-a") -> list[str]:
    return sorted(pod["metadata"]["name"] for pod in api.objects(PODS, namespace))


def _budget(api: FakeApi, name: str, app: str, allowed: int, namespace: str = "user-a") -> None:
    api.put(BUDGETS, {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": {"matchLabels": {"app": app}}, "maxUnavailable": 0},
        "status": {"disruptionsAllowed": allowed},
    })


def _evictions(api: FakeApi) -> list[str]:
    return [path.split("/")[-2] for method, path in api.calls if method == "POST" and path.endswith("/eviction")]


async def test_a_deployment_that_borrows_gives_back_a_quota_its_min() -> None:
    # Department-a runs a Deployment of 10 x 10 CPU: 40 of it borrowed. user-c's job of 10 CPU is within
    # Department-b's min of 40 and the root is full: the newest Deployment pod goes, the job runs.
    api = seed_api()
    _deployment(api, 10)
    _carol(api)
    async with driven(api) as controller:
        await step(api, controller, passes=2)
        assert admitted(api, "carol", "user-c")
        assert _evictions(api) == ["web-9"]
        assert "web-9" not in _pods(api)
        await controller.events.flush()
    told = [event for event in api.objects(EVENTS, "user-a") if event["involvedObject"]["name"] == "web-9"]
    assert told and told[0]["reason"] == "Evicted"
    assert "reclaims cpu=10 from root/Department-a by evicting Pod/user-a/web-9" in told[0]["message"]
    admitted_event = [e for e in api.objects(EVENTS, "user-c") if e["reason"] == "Admitted"]
    assert "after reclaim" in admitted_event[0]["message"]


async def test_pods_of_a_quota_within_its_min_are_never_taken() -> None:
    # Department-a runs 6 x 10 CPU pods (its min): nothing is borrowed, so nothing is reclaimed from it, even
    # though a root-level max blocks a Department-b job.
    api = seed_api()
    _deployment(api, 6)
    api.put(JOBS, pi("fill", "user-c", pods=4))
    _carol(api, "late")
    async with driven(api) as controller:
        await step(api, controller, passes=3)
        assert admitted(api, "fill", "user-c")
        assert not admitted(api, "late", "user-c")  # Department-b would go beyond its min: no reclaim
        assert _evictions(api) == []
        assert len(_pods(api)) == 6


async def test_a_disruption_budget_that_forbids_an_eviction_moves_reclaim_to_the_next_victim() -> None:
    # The web pods are protected by a budget that allows no disruption now; a StatefulSet's pods in user-b
    # borrow too, and one of them goes instead.
    api = seed_api()
    _deployment(api, 6, app="web")
    for index in range(4):
        api.put(PODS, bound_pod(f"db-{index}", "user-b", "10", ("StatefulSet", "db"),
                                labels={"app": "db"}, created=f"2024-04-08T01:{index:02d}:00Z"))
    _budget(api, "web", "web", 0)
    _carol(api)
    async with driven(api) as controller:
        await step(api, controller, passes=2)
        assert admitted(api, "carol", "user-c")
        assert _evictions(api) == ["db-3"]
        assert len(_pods(api)) == 6


async def test_when_every_borrower_is_protected_nothing_is_evicted() -> None:
    api = seed_api()
    _deployment(api, 10)
    _budget(api, "web", "web", 0)
    _carol(api)
    async with driven(api) as controller:
        await step(api, controller, passes=3)
        assert not admitted(api, "carol", "user-c")
        assert _evictions(api) == []
        # The budget lets one go: reclaim takes it.
        _budget(api, "web", "web", 1)
        await step(api, controller, passes=2)
        assert admitted(api, "carol", "user-c")
        assert _evictions(api) == ["web-9"]


async def test_a_refused_eviction_is_left_alone_and_the_next_victim_taken() -> None:
    # The API server refuses the first eviction (a budget the pass did not know about yet): the plan stops,
    # nothing is admitted, and the next pass takes the next pod instead of asking again.
    api = seed_api()
    _deployment(api, 10)
    _carol(api)
    api.fail(429, lambda method, path: method == "POST" and path.endswith("/web-9/eviction"))
    async with driven(api) as controller:
        await step(api, controller, passes=1)
        assert not admitted(api, "carol", "user-c")
        assert "web-9" in _pods(api)
        await step(api, controller, passes=2)
        assert admitted(api, "carol", "user-c")
        assert _evictions(api) == ["web-9", "web-8"]
        assert "web-9" in _pods(api) and "web-8" not in _pods(api)


async def test_an_orphan_of_a_deleted_job_is_a_pod_like_any_other() -> None:
    # A Job deleted with --cascade=orphan leaves its tagged pods running without an owner: they count, and
    # reclaim evicts them as it does any pod that borrows.
    api = seed_api()
    for index in range(10):
        pod: dict[str, Any] = bound_pod(f"big-{index}", "user-a", "10", None,
                                        labels={QUOTA_LABEL: "Department-a", "job-name": "big"})
        api.put(PODS, pod)
    _carol(api)
    async with driven(api) as controller:
        await step(api, controller, passes=2)
        assert admitted(api, "carol", "user-c")
        assert len(_evictions(api)) == 1
        assert len(_pods(api)) == 9
        await controller.events.flush()
    outside = [e["message"] for e in api.objects(EVENTS, "user-a") if e["reason"] == "RunsOutsideQueue"]
    assert outside and all("without an owner" in message for message in outside)


async def test_daemonset_pods_are_counted_but_never_evicted() -> None:
    api = seed_api()
    for index in range(10):
        api.put(PODS, bound_pod(f"agent-{index}", "user-a", "10", ("DaemonSet", "agent")))
    _carol(api)
    async with driven(api) as controller:
        await step(api, controller, passes=3)
        assert not admitted(api, "carol", "user-c")
        assert _evictions(api) == []
