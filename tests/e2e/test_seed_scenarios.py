"""The seed's three scenarios, end to end through ``kubectl`` only, with the service's own controller.

They build on each other as in the seed (scenario 2 runs on scenario 1's jobs, scenario 3 on the cluster
they leave), so the module shares one setup: the seed's namespaces, quota tree and PriorityClasses from
``examples/seed/``, and the service restarted with ``--oversellrate=1``. Everything is removed afterwards
and the service restarted as it was.

* Scenario 1 (oversellrate 1, Round): two jobs of 6 pods x (10 CPU, 10Gi) in user-a; the first runs 6 pods,
  the second waits at position 1 of ``root-department-a-user-a``, whose policy is Round.
* Scenario 2 (restarted with ``StrictPriority=true``): every queue is Block, and a priority-2 job goes to
  position 1 ahead of the earlier one.
* Scenario 3: user-b fills Department-a up to the whole cluster (100 CPU, 40 of it borrowed from
  Department-b); user-c (Department-b, guaranteed 40, using 0) submits a priority-3 job of 10 CPU; user-b's
  job is evicted back to its queue (not deleted) and user-c's job runs.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.e2e.setups import QUEUES, Seed, seed
from webhook.api.names import ADMISSION_ANNOTATION, EVICTION_ANNOTATION

pytestmark = pytest.mark.e2e
__all__ = ["seed"]  # the module's set-up: the seed's namespaces, tree and PriorityClasses




def test_the_controller_creates_one_queue_per_namespace_of_each_leaf(seed: Seed) -> None:
    def listed() -> bool:
        out = seed.dev.kubectl("get", "queue", "-n", "kube-queue", "-o", "name")
        return {line.split("/")[-1] for line in out.split()} >= QUEUES

    seed.dev.wait_until(listed, 60, f"queues {sorted(QUEUES)}")
    queue = seed.queue("root-department-a-user-a")
    assert queue["metadata"]["labels"]["create-by-kubequeue"] == "true"
    assert queue["metadata"]["annotations"]["kube-queue/quota-fullname"] == "root/Department-a"
    # The service runs --oversellrate=1 here: the controller states it on its Queues (what `kq why` reads).
    seed.dev.wait_until(
        lambda: seed.queue("root-department-a-user-a")["metadata"]["annotations"].get(
            "kube-queue.x-k8s.io/oversell-rate") == "1", 30, "the oversell rate on the Queue")
    assert seed.queue("root-department-b-user-c")["metadata"]["annotations"]["kube-queue/quota-fullname"] == (
        "root/Department-b"
    )


def test_scenario_1_round_the_second_job_waits_at_position_1(seed: Seed) -> None:
    first = seed.create("first", "pi.yaml")
    second = seed.create("second", "pi.yaml")
    dev = seed.dev
    dev.wait_until(lambda: seed.running_pods("user-a", first) == 6, 120, f"6 Running pods of {first}")
    dev.wait_until(
        lambda: [(i["name"], i["position"]) for i in seed.active("root-department-a-user-a")] == [(second, 1)],
        60,
        f"{second} at position 1 of root-department-a-user-a",
    )
    assert seed.queue("root-department-a-user-a")["spec"]["queuePolicy"] == "Round"
    assert seed.suspended("user-a", second)
    assert seed.running_pods("user-a", second) == 0
    pods = dev.get_json("pods", "-n", "user-a")["items"]
    assert len(pods) == 6, "only the first job has pods"
    record = json.loads(seed.job("user-a", first)["metadata"]["annotations"][ADMISSION_ANNOTATION])
    assert record["quota"] == "root/Department-a"
    assert record["request"] == {"cpu": "60", "memory": "60Gi"}

    def tree_used() -> dict[str, Any]:
        status = dev.get_json("eqtree", "elasticquotatree", "-n", "kube-system").get("status", {})
        return dict(status.get("root", {}).get("used", {}))

    dev.wait_until(lambda: tree_used().get("cpu") == "60", 60, "the tree's status to show cpu 60 used")
    describe = dev.kubectl("describe", "job", second, "-n", "user-a")
    assert "Queued" in describe and "position 1" in describe


def test_scenario_2_strict_priority_blocks_and_the_priority_2_job_goes_first(seed: Seed) -> None:
    seed.restart_strict()
    dev = seed.dev
    urgent = seed.create("urgent", "pi-priority-2.yaml")
    second = seed.jobs["second"]

    def order() -> list[tuple[str, int, int]]:
        return [(i["name"], i["position"], i.get("priority", 0)) for i in seed.active("root-department-a-user-a")]

    dev.wait_until(lambda: order() == [(urgent, 1, 2), (second, 2, 0)], 60, f"{urgent} at position 1")
    assert seed.running_pods("user-a", seed.jobs["first"]) == 6
    assert seed.suspended("user-a", urgent) and seed.suspended("user-a", second)


def test_scenario_3_user_c_reclaims_its_guarantee_from_department_a(seed: Seed) -> None:
    dev = seed.dev
    # Scenario 2's waiting jobs would hold Department-a's Block queue: clear them, then let user-b fill the
    # cluster (Department-a: 60 + 40 = 100 CPU, 40 of them borrowed from Department-b's guarantee).
    dev.kubectl("delete", "job", seed.jobs["urgent"], seed.jobs["second"], "-n", "user-a")
    borrower = seed.create("borrower", "pi-user-b.yaml")
    dev.wait_until(lambda: seed.running_pods("user-b", borrower) == 4, 120, f"4 Running pods of {borrower}")
    reclaimer = seed.create("reclaimer", "pi-user-c.yaml")
    dev.wait_until(lambda: seed.running_pods("user-c", reclaimer) == 1, 120, f"{reclaimer} running in user-c")
    dev.wait_until(lambda: seed.suspended("user-b", borrower), 30, f"{borrower} evicted (suspended again)")
    job = seed.job("user-b", borrower)
    annotations = job["metadata"]["annotations"]
    assert ADMISSION_ANNOTATION not in annotations
    note = json.loads(annotations[EVICTION_ANNOTATION])
    assert note["by"] == f"Job/user-c/{reclaimer}"
    assert note["quota"] == "root/Department-b"
    dev.wait_until(
        lambda: [(i["name"], i["position"]) for i in seed.active("root-department-a-user-b")] == [(borrower, 1)],
        60,
        f"{borrower} back in its queue at position 1",
    )
    dev.wait_until(lambda: seed.running_pods("user-b", borrower) == 0, 60, f"{borrower}'s pods gone")
    assert seed.running_pods("user-a", seed.jobs["first"]) == 6, "Department-a keeps its guaranteed 60 CPU"
    events = dev.kubectl("get", "events", "-n", "user-b", "--field-selector", f"involvedObject.name={borrower}")
    assert "Evicted" in events
    assert "Admitted" in dev.kubectl("describe", "job", reclaimer, "-n", "user-c")
