"""The controller publishes what admitted jobs hold per quota node before it releases them (ConfigMap
``kube-queue-reservations``), so the scheduler extender can keep pods no job accounts for out of that room
(docs/pod-quota.md)."""

from __future__ import annotations

import json
from typing import Any

from tests.builders import job, seed_tree
from tests.service.controller_support import PODS, admitted, bound_pod, driven, pi, seed_api, step
from tests.service.kubeclient_fake import JOBS, FakeApi, Kind
from webhook.api.names import RESERVATIONS, RESERVATIONS_KEY, RESERVED_AT_KEY
from webhook.core.ledger import build_ledger
from webhook.core.loose import LoosePod, loose_workload, reserved_for_jobs
from webhook.core.resources import Resources
from webhook.core.workload import Phase

CONFIG_MAPS: Kind = ("", "v1", "configmaps")


def _reserved(api: FakeApi) -> dict[str, Any]:
    data = api.obj(CONFIG_MAPS, RESERVATIONS, "kube-queue")["data"]
    assert data[RESERVED_AT_KEY].endswith("Z")
    decoded: dict[str, Any] = json.loads(data[RESERVATIONS_KEY])
    return decoded


async def test_reservations_are_written_before_the_jobs_they_hold_are_released() -> None:
    api = seed_api()
    for index in range(3):
        api.put(PODS, bound_pod(f"web-{index}", "user-a", "10", ("ReplicaSet", "web-1")))
    api.put(JOBS, pi("a1", pods=3))
    api.put(JOBS, pi("c1", "user-c", pods=2))
    async with driven(api) as controller:
        await step(api, controller, passes=2)
    assert admitted(api, "a1") and admitted(api, "c1", "user-c")
    # Jobs only: a1's 30 CPU and 30Gi, c1's 20; the Deployment's pods are no job's.
    assert _reserved(api) == {
        "root": {"cpu": "50", "memory": "50Gi"},
        "department-a": {"cpu": "30", "memory": "30Gi"},
        "department-b": {"cpu": "20", "memory": "20Gi"},
    }
    writes = [(method, path) for method, path in api.calls if method in ("PATCH", "POST")]
    reserve = writes.index(("POST", "/api/v1/namespaces/kube-queue/configmaps"))
    release = next(index for index, (method, path) in enumerate(writes) if "/jobs/" in path)
    assert reserve < release


async def test_nothing_is_released_while_the_reservation_cannot_be_written() -> None:
    api = seed_api()
    api.put(JOBS, pi("a1", pods=3))
    api.fail(403, lambda method, path: "/configmaps" in path, times=-1)
    async with driven(api) as controller:
        await step(api, controller, passes=3)
        assert not admitted(api, "a1")
        api.injected.clear()
        await step(api, controller, passes=2)
    assert admitted(api, "a1")
    assert _reserved(api)["department-a"] == {"cpu": "30", "memory": "30Gi"}


async def test_an_unchanged_reservation_is_written_again_only_for_its_heartbeat() -> None:
    api = seed_api()
    api.put(JOBS, pi("a1", pods=3))
    now = [1000.0]
    async with driven(api) as controller:
        controller.reservations._clock = lambda: now[0]
        await step(api, controller, passes=3)
        writes = controller.reservations.writes
        await step(api, controller, passes=3)
        assert controller.reservations.writes == writes
        now[0] += 61
        await step(api, controller, passes=1)
        assert controller.reservations.writes == writes + 1


def test_reservations_leave_the_loose_pods_and_the_evicted_ones_out() -> None:
    tree = seed_tree()
    running = job("j", "user-a", "Department-a", cpu=20, phase=Phase.ADMITTED)
    pods = [loose_workload(LoosePod("user-b", f"web-{i}", Resources.of(cpu=10)), "Department-a") for i in range(2)]
    ledger = build_ledger(tree, [running, *pods])
    assert reserved_for_jobs(ledger, pods) == {"root": Resources.of(cpu=20), "department-a": Resources.of(cpu=20)}
    assert reserved_for_jobs(build_ledger(tree, pods), pods) == {}
    # A pod the pass evicts is out of the ledger already: it is not taken off twice.
    after = ledger.without(pods[0])
    assert reserved_for_jobs(after, pods, {pods[0].key}) == {"root": Resources.of(cpu=20),
                                                             "department-a": Resources.of(cpu=20)}
