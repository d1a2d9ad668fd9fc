"""Reclaim in the mixed-resource case (issue 18, docs/reclaim.md), end to end through ``kubectl`` only.

The seed's tree and namespaces with the service at ``--oversellrate=1`` (the seed scenarios' module setup,
reused). Department-a runs ten jobs of (10 CPU, 1Gi): all 100 CPU, 40 of them borrowed from Department-b,
but only 10Gi of its 60Gi memory min. A (10 CPU, 1Gi) job of user-c (Department-b, using nothing of its
40 CPU min) must get its guarantee: only CPU is contended, so Department-a being under its memory min does not
protect its CPU. One Department-a job is evicted back to its queue (suspended again, not deleted) and the
user-c job runs; the tree's status shows the usage afterwards.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from tests.e2e.setups import Seed
from tests.e2e.setups import seed as seeded  # noqa: F401 - the seed scenarios' setup, reused
from webhook.api.names import ADMISSION_ANNOTATION, EVICTION_ANNOTATION

pytestmark = pytest.mark.e2e

DEPARTMENT_A = {"user-a": "root-department-a-user-a", "user-b": "root-department-a-user-b"}


def small_job(name: str, namespace: str) -> dict[str, Any]:
    """A held batch Job of one pod requesting (10 CPU, 1Gi), as the seed's job files write it."""
    amounts = {"cpu": "10", "memory": "1Gi"}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "suspend": True,
            "completions": 1,
            "parallelism": 1,
            "template": {
                "spec": {
                    "containers": [{"name": "pi", "image": "perl:5.34.0", "command": ["sleep", "1d"],
                                    "resources": {"requests": amounts, "limits": amounts}}],
                    "restartPolicy": "Never",
                }
            },
        },
    }


def tree_used(seed: Seed) -> dict[str, dict[str, str]]:
    """``used`` CPU and memory of every node of the ElasticQuotaTree's status, by node name."""
    status = seed.dev.get_json("eqtree", "elasticquotatree", "-n", "kube-system").get("status", {})
    out: dict[str, dict[str, str]] = {}
    pending = [status.get("root", {})]
    while pending:
        level = pending.pop()
        if level:
            used = level.get("used", {})
            out[level["name"]] = {name: used[name] for name in ("cpu", "memory") if name in used}
            pending.extend(level.get("children", []))
    return out


def test_user_c_reclaims_cpu_from_a_department_under_its_memory_min(seeded: Seed) -> None:  # noqa: F811
    seed, dev = seeded, seeded.dev
    names = [(f"mixed-a{index}", "user-a" if index % 2 == 0 else "user-b") for index in range(10)]
    for name, namespace in names:
        result = dev.create(small_job(name, namespace))
        assert result.returncode == 0, result.stderr

        def running(job_name: str = name, where: str = namespace) -> bool:
            return seed.running_pods(where, job_name) == 1

        dev.wait_until(running, 120, f"{name} running")
    used = {"cpu": "100", "memory": "10Gi"}
    dev.wait_until(lambda: tree_used(seed).get("Department-a") == used, 60, f"Department-a using {used}")

    started = time.monotonic()
    result = dev.create(small_job("mixed-c", "user-c"))
    assert result.returncode == 0, result.stderr
    dev.wait_until(lambda: seed.running_pods("user-c", "mixed-c") == 1, 120, "mixed-c running in user-c")
    running_after = time.monotonic() - started

    evicted = [(name, namespace) for name, namespace in names if seed.suspended(namespace, name)]
    assert len(evicted) == 1, f"exactly one Department-a job is evicted, got {evicted}"
    ((victim, home),) = evicted
    job = seed.job(home, victim)  # still there: evicted, not deleted
    annotations = job["metadata"]["annotations"]
    assert ADMISSION_ANNOTATION not in annotations
    note = json.loads(annotations[EVICTION_ANNOTATION])
    assert note["by"] == "Job/user-c/mixed-c"
    assert note["quota"] == "root/Department-b"
    dev.wait_until(
        lambda: [(i["name"], i["position"]) for i in seed.active(DEPARTMENT_A[home])] == [(victim, 1)],
        60,
        f"{victim} back in {DEPARTMENT_A[home]} at position 1",
    )
    dev.wait_until(lambda: seed.running_pods(home, victim) == 0, 60, f"{victim}'s pod gone")
    handed_off = time.monotonic() - started
    for name, namespace in names:
        if name != victim:
            assert not seed.suspended(namespace, name) and seed.running_pods(namespace, name) == 1, name

    expected = {
        "root": {"cpu": "100", "memory": "10Gi"},
        "Department-a": {"cpu": "90", "memory": "9Gi"},
        "Department-b": {"cpu": "10", "memory": "1Gi"},
    }

    def settled() -> bool:
        now = tree_used(seed)
        return all(now.get(name) == amounts for name, amounts in expected.items())

    dev.wait_until(settled, 60, f"the tree's status to show {expected}")
    assert "Admitted" in dev.kubectl("describe", "job", "mixed-c", "-n", "user-c")
    print(f"reclaim hand-off: user-c job running {running_after:.1f}s after it was created; "
          f"victim {home}/{victim} suspended, requeued and its pod gone after {handed_off:.1f}s")
