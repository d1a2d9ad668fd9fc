"""The seed's three scenarios once more, with PyTorchJobs that the Kubeflow training operator runs
(``examples/seed/pytorchjobs/``), through ``kubectl`` only, on the seed scenarios' set-up (the seed's
namespaces, tree and PriorityClasses, ``--oversellrate=1``):

* Scenario 1: two PyTorchJobs of a master and 5 workers x (10 CPU, 10Gi) in user-a; the operator runs the
  first's 6 pods, the second waits at position 1.
* Scenario 2 (``StrictPriority=true``): a priority-2 PyTorchJob goes to position 1 ahead of the earlier one.
* Scenario 3: user-b fills Department-a up to the whole cluster; user-c's priority-3 PyTorchJob of one pod
  reclaims Department-b's guarantee: user-b's PyTorchJob is suspended (its pods removed by the operator) and
  requeued at position 1, user-c's runs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.setups import SEED, Seed, seed
from webhook.api.names import ADMISSION_ANNOTATION, EVICTION_ANNOTATION

pytestmark = pytest.mark.e2e
__all__ = ["seed"]  # the module's set-up: the seed's namespaces, tree and PriorityClasses

FILES = SEED / "pytorchjobs"
RESOURCE = "pytorchjobs.kubeflow.org"
jobs: dict[str, str] = {}


def create(setup: Seed, role: str, path: Path) -> str:
    out = setup.dev.kubectl("create", "-f", str(path))
    match = re.search(r"pytorchjob\.kubeflow\.org/(\S+) created", out)
    assert match, out
    jobs[role] = match.group(1)
    return match.group(1)


def job(setup: Seed, namespace: str, name: str) -> dict[str, Any]:
    result: dict[str, Any] = setup.dev.get_json(RESOURCE, name, "-n", namespace)
    return result


def suspended(setup: Seed, namespace: str, name: str) -> bool:
    return bool(job(setup, namespace, name)["spec"]["runPolicy"].get("suspend"))


def running(setup: Seed, namespace: str, name: str) -> int:
    pods = setup.dev.get_json("pods", "-n", namespace, "-l", f"training.kubeflow.org/job-name={name}")["items"]
    return sum(1 for pod in pods if pod["status"].get("phase") == "Running" and not pod["metadata"].get(
        "deletionTimestamp"))


def test_scenario_1_with_pytorchjobs_the_second_waits_at_position_1(seed: Seed) -> None:
    dev = seed.dev
    first = create(seed, "first", FILES / "pi.yaml")
    second = create(seed, "second", FILES / "pi.yaml")
    dev.wait_until(lambda: running(seed, "user-a", first) == 6, 120, f"the operator's 6 pods of {first} Running")
    dev.wait_until(
        lambda: [(i["name"], i["position"]) for i in seed.active("root-department-a-user-a")] == [(second, 1)],
        60, f"{second} at position 1",
    )
    assert suspended(seed, "user-a", second) and running(seed, "user-a", second) == 0
    record = json.loads(job(seed, "user-a", first)["metadata"]["annotations"][ADMISSION_ANNOTATION])
    assert record["request"] == {"cpu": "60", "memory": "60Gi"}


def test_scenario_2_with_pytorchjobs_strict_priority_puts_the_priority_2_job_first(seed: Seed) -> None:
    seed.restart_strict()
    dev = seed.dev
    urgent = create(seed, "urgent", FILES / "pi-priority-2.yaml")

    def order() -> list[tuple[str, int, int]]:
        return [(i["name"], i["position"], i.get("priority", 0)) for i in seed.active("root-department-a-user-a")]

    dev.wait_until(lambda: order() == [(urgent, 1, 2), (jobs["second"], 2, 0)], 60, f"{urgent} at position 1")
    assert running(seed, "user-a", jobs["first"]) == 6


def test_scenario_3_with_pytorchjobs_user_c_reclaims_its_guarantee(seed: Seed) -> None:
    dev = seed.dev
    dev.kubectl("delete", RESOURCE, jobs["urgent"], jobs["second"], "-n", "user-a")
    borrower = create(seed, "borrower", FILES / "pi-user-b.yaml")
    dev.wait_until(lambda: running(seed, "user-b", borrower) == 4, 120, f"4 Running pods of {borrower}")
    reclaimer = create(seed, "reclaimer", FILES / "pi-user-c.yaml")
    dev.wait_until(lambda: running(seed, "user-c", reclaimer) == 1, 120, f"{reclaimer} running in user-c")
    dev.wait_until(lambda: suspended(seed, "user-b", borrower), 30, f"{borrower} evicted (suspended again)")
    note = json.loads(job(seed, "user-b", borrower)["metadata"]["annotations"][EVICTION_ANNOTATION])
    assert note["by"] == f"PyTorchJob/user-c/{reclaimer}" and note["quota"] == "root/Department-b"
    dev.wait_until(lambda: running(seed, "user-b", borrower) == 0, 60, f"the operator removed {borrower}'s pods")
    dev.wait_until(
        lambda: [(i["name"], i["position"]) for i in seed.active("root-department-a-user-b")] == [(borrower, 1)],
        60, f"{borrower} back in its queue at position 1",
    )
    assert running(seed, "user-a", jobs["first"]) == 6, "Department-a keeps its guaranteed 60 CPU"
    for namespace in ("user-a", "user-b", "user-c"):
        dev.kubectl("delete", RESOURCE, "--all", "-n", namespace, "--wait=false")
