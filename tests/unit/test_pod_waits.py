"""No phantom charge (docs/pod-quota.md): what became of a pod the extender counts but has not seen bound
(webhook/core/assumed.py), and which pods refused for quota the room that appears can take
(webhook/core/waiting.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import node, res, tree
from webhook.core.assumed import Fate, assumed_fate, scheduling_mark
from webhook.core.waiting import WaitingPod, pods_to_wake

REFUSED = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
           "message": "0/5 nodes are available: pod-level quota", "lastTransitionTime": "2024-05-01T12:00:00Z"}
BIND_FAILED = {**REFUSED, "reason": "SchedulerError", "message": "binding rejected: denied by policy"}


def pod(uid: str = "u1", *, node_name: str | None = None, conditions: list[dict[str, Any]] | None = None,
        deleting: bool = False, phase: str = "Pending") -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "p", "namespace": "team", "uid": uid}
    if deleting:
        metadata["deletionTimestamp"] = "2024-05-01T12:00:05Z"
    spec: dict[str, Any] = {"nodeName": node_name} if node_name else {}
    return {"metadata": metadata, "spec": spec, "status": {"phase": phase, "conditions": conditions or []}}


def test_the_mark_is_the_pod_scheduled_condition() -> None:
    assert scheduling_mark(pod()) == ""
    assert scheduling_mark({"status": {"conditions": "junk"}}) == ""
    mark = scheduling_mark(pod(conditions=[{"type": "Ready", "status": "False"}, REFUSED]))
    assert mark.startswith("False\x1fUnschedulable\x1f0/5 nodes")
    assert mark != scheduling_mark(pod(conditions=[BIND_FAILED]))


@pytest.mark.parametrize(
    ("why", "filtered", "now", "fate"),
    [
        ("deleted before its binding", pod(), None, Fate.DELETED),
        ("re-created under its name", pod(), pod("u2"), Fate.DELETED),
        ("being deleted: never bound", pod(), pod(deleting=True), Fate.DELETED),
        ("finished", pod(), pod(phase="Failed"), Fate.DELETED),
        ("bound: the watch brings it", pod(), pod(node_name="ecs-1"), Fate.BOUND),
        ("nothing written since the filter: the binding may be on its way", pod(conditions=[REFUSED]),
         pod(conditions=[REFUSED]), Fate.PENDING),
        ("first attempt, nothing written yet", pod(), pod(), Fate.PENDING),
        ("the binding failed after the filter", pod(), pod(conditions=[BIND_FAILED]), Fate.UNSCHEDULED),
        ("refused before, the binding failed now", pod(conditions=[REFUSED]), pod(conditions=[BIND_FAILED]),
         Fate.UNSCHEDULED),
        ("scheduled=True but not bound (never seen): keep", pod(), pod(conditions=[{**REFUSED, "status": "True"}]),
         Fate.PENDING),
    ],
)
def test_the_fate_of_an_assumed_pod(why: str, filtered: dict[str, Any], now: dict[str, Any] | None,
                                    fate: Fate) -> None:
    assert assumed_fate("u1", scheduling_mark(filtered), now) is fate, why


TREE = tree(node("root", min=res(cpu=100), max=res(cpu=100), children=(
    node("Team", max=res(cpu=40), namespaces=("team",)),
    node("Other", max=res(cpu=100), namespaces=("other",)),
)))
CPU = 10**9


def waiting(name: str, cpu: int, *, priority: int = 0, created: float = 0.0, namespace: str = "team") -> WaitingPod:
    return WaitingPod(f"uid-{name}", namespace, name, f"uid-{name}", res(cpu=cpu), priority, created)


def names(pods: list[WaitingPod]) -> list[str]:
    return [pod.name for pod in pods]


def test_only_as_many_as_the_room_takes_oldest_first() -> None:
    pods = [waiting(f"p{index}", 10, created=float(10 - index)) for index in range(6)]
    used = {"team": {"cpu": 20 * CPU}, "root": {"cpu": 20 * CPU}}
    assert names(pods_to_wake(TREE, pods, used, limit=100)) == ["p5", "p4"]  # 20 of 40 free: two, the oldest


def test_higher_priority_first_then_the_oldest() -> None:
    pods = [waiting("old", 10, created=1.0), waiting("urgent", 10, priority=5, created=9.0),
            waiting("young", 10, created=5.0)]
    used = {"team": {"cpu": 20 * CPU}}
    assert names(pods_to_wake(TREE, pods, used, limit=100)) == ["urgent", "old"]


def test_a_pod_too_big_for_the_room_is_passed_over_for_a_smaller_one() -> None:
    pods = [waiting("big", 30, created=1.0), waiting("small", 10, created=2.0)]
    used = {"team": {"cpu": 20 * CPU}}
    assert names(pods_to_wake(TREE, pods, used, limit=100)) == ["small"]


def test_every_level_counts_and_usages_add_up() -> None:
    # Team has 30 free, but the root only 10: Other uses 70, and a pod woken before holds 10 (a reservation).
    pods = [waiting("a", 10, created=1.0), waiting("b", 10, created=2.0)]
    used = {"team": {"cpu": 10 * CPU}, "root": {"cpu": 80 * CPU}, "other": {"cpu": 70 * CPU}}
    reserved = {"root": {"cpu": 10 * CPU}, "other": {"cpu": 10 * CPU}}
    assert names(pods_to_wake(TREE, pods, used, reserved, limit=100)) == ["a"]


def test_the_rate_limit_caps_the_count() -> None:
    pods = [waiting(f"p{index}", 1, created=float(index)) for index in range(10)]
    assert names(pods_to_wake(TREE, pods, limit=3)) == ["p0", "p1", "p2"]
    assert pods_to_wake(TREE, pods, limit=0) == []


def test_without_a_tree_or_a_quota_nothing_is_checked() -> None:
    pods = [waiting("a", 500), waiting("b", 500, namespace="unmanaged")]
    assert names(pods_to_wake(None, pods, limit=5)) == ["a", "b"]
    assert names(pods_to_wake(TREE, pods, limit=5)) == ["b"]
