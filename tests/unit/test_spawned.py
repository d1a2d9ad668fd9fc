"""The rule for the pods a job's pod creates (webhook/core/spawned.py) and which pods those are
(webhook/workloads/spawned.py)."""

from __future__ import annotations

from typing import Any

from tests.builders import res
from webhook.core.spawned import release_spawned
from webhook.core.workload import PodSet, Workload, WorkloadKey
from webhook.workloads.pod import PodAdapter
from webhook.workloads.sparkapplication import SparkApplicationAdapter
from webhook.workloads.spawned import separate_spawned, spawner_of, spawning_pods

EXECUTOR = res(cpu=2, memory="2432Mi")


def held(name: str, created: float, **request: int | str) -> Workload:
    """A held Pod as the queue sizes it."""
    per_pod = res(**request) if request else EXECUTOR
    return Workload(WorkloadKey("Pod", "ns", name), "q", (PodSet("main", 1, per_pod),), created=created)


def test_only_the_admitted_count_is_released_oldest_first() -> None:
    verdict = release_spawned("SparkApplication sp", "executor", admitted=True, allowed=3, present=1,
                              per_pod=EXECUTOR, held=[held("c", 3.0), held("a", 1.0), held("b", 2.0)])
    assert verdict.release == ("a", "b")
    assert [name for name, _ in verdict.kept] == ["c"]
    assert "admitted with 3 executor pod(s), and 3 exist already" in verdict.kept[0][1]


def test_a_bigger_pod_or_one_asking_for_another_resource_stays_held_whatever_the_room() -> None:
    verdict = release_spawned("SparkApplication sp", "executor", admitted=True, allowed=5, present=0,
                              per_pod=EXECUTOR, held=[held("big", 1.0, cpu=3, memory="2432Mi"),
                                                      held("gpu", 2.0, cpu=2, memory="2432Mi", gpu=1),
                                                      held("small", 3.0, cpu=1, memory="1Gi")])
    assert verdict.release == ("small",)
    kept = dict(verdict.kept)
    assert "requests cpu=3, memory=2432Mi, more than the cpu=2, memory=2432Mi" in kept["big"]
    assert "nvidia.com/gpu=1" in kept["gpu"]


def test_nothing_is_released_while_the_job_is_not_admitted_nor_past_what_is_there() -> None:
    waiting = release_spawned("SparkApplication sp", "executor", admitted=False, allowed=3, present=0,
                              per_pod=EXECUTOR, held=[held("a", 1.0)])
    assert waiting.release == () and "held until SparkApplication sp is admitted" in waiting.kept[0][1]
    over = release_spawned("SparkApplication sp", "executor", admitted=True, allowed=2, present=4,
                           per_pod=EXECUTOR, held=[held("a", 1.0)])
    assert over.release == ()


def _app(name: str, driver: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"driver": {"podName": driver}} if driver else {}
    return {"kind": "SparkApplication", "metadata": {"name": name, "namespace": "ns"}, "spec": spec}


def _pod(name: str, owner_kind: str, owner: str, api_version: str = "v1") -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {"name": name, "namespace": "ns", "ownerReferences": [
        {"apiVersion": api_version, "kind": owner_kind, "name": owner, "uid": "u", "controller": True}]}}


def test_the_pods_a_driver_owns_are_its_applications_and_no_other_pods_are() -> None:
    spark, pods = SparkApplicationAdapter(), PodAdapter()
    jobs = [("one", spark, _app("one")), ("two", spark, _app("two", driver="custom"))]
    spawners = spawning_pods(jobs)
    assert spawners == {("ns", "one-driver"): "one", ("ns", "custom"): "two"}
    assert spawner_of(_pod("e1", "Pod", "one-driver"), spawners) == (("ns", "one-driver"), "one")
    assert spawner_of(_pod("e2", "Pod", "custom"), spawners) == (("ns", "custom"), "two")
    assert spawner_of(_pod("x", "Pod", "two-driver"), spawners) is None
    assert spawner_of(_pod("e1", "Pod", "one-driver"), {("ns", "one-driver"): None}) == (("ns", "one-driver"), None)
    assert spawner_of(_pod("y", "Job", "one-driver", "batch/v1"), spawners) is None
    other_namespace = _pod("z", "Pod", "one-driver")
    other_namespace["metadata"]["namespace"] = "elsewhere"
    assert spawner_of(other_namespace, spawners) is None
    listed = [*jobs, ("e1", pods, _pod("e1", "Pod", "one-driver")), ("x", pods, _pod("x", "Pod", "two-driver"))]
    kept, spawned = separate_spawned(listed)
    assert [name for name, _, _ in kept] == ["one", "two", "x"]
    assert spawned == {("ns", "e1"): "one"}
