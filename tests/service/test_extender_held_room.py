"""The extender keeps pods no queued job accounts for out of the room admitted jobs hold (docs/pod-quota.md):
the controller's reservation ConfigMap says what the jobs hold per quota node; a loose pod (a Deployment's)
fits only within what they leave, a job's pod keeps the plain rule, and a reservation the controller stopped
writing is not trusted."""

from __future__ import annotations

import json
from typing import Any

from tests.builders import pod
from tests.service.extender_support import Cluster, seed_quota_tree
from webhook.api.names import (
    ADMISSION_ANNOTATION,
    RESERVATIONS,
    RESERVATIONS_KEY,
    RESERVATIONS_TTL_SECONDS,
    RESERVED_AT_KEY,
)
from webhook.api.objects import rfc3339
from webhook.extender.protocol import NodeVictims

ECS = ("ecs-0", "ecs-1", "ecs-2", "ecs-3")
REPLICA_SET = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web-1", "uid": "rs"}}
JOB = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "carol", "uid": "job"}}


def _reservation(reserved: dict[str, dict[str, str]], at: float) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": RESERVATIONS, "namespace": "kube-queue"},
            "data": {RESERVATIONS_KEY: json.dumps(reserved), RESERVED_AT_KEY: rfc3339(at)}}


def _cluster() -> Cluster:
    cluster = Cluster()
    cluster.state.set_trees([seed_quota_tree()])
    # Department-a runs 90 CPU of a Deployment in user-a; a job of user-b was admitted for 10 more.
    for index in range(9):
        cluster.add(pod(f"web-{index}", "10", namespace="user-a", owner=REPLICA_SET, node_name="ecs-0"))
    cluster.state.set_reservations([_reservation({"root": {"cpu": "10"}, "department-a": {"cpu": "10"}},
                                                 cluster.now)])
    return cluster


def test_a_deployment_pod_does_not_take_the_room_an_admitted_job_holds() -> None:
    cluster = _cluster()
    decision = cluster.filter(pod("web-9", "10", namespace="user-a", owner=REPLICA_SET), ECS)
    assert decision.passing == ()
    assert decision.summary.startswith("pod-level quota (room held by admitted jobs")
    assert "quota root/Department-a: cpu request 10 + used 100 > max 100" in decision.summary
    # The job's own pod still fits: its job holds that room.
    job_pod = pod("carol-0", "10", namespace="user-b", owner=JOB)
    assert cluster.filter(job_pod, ECS).passing == ECS
    # So does a bare Pod the queue released (it carries the admission record), in its place.
    released = pod("bare", "10", namespace="user-b", owner=None, annotations={ADMISSION_ANNOTATION: "{}"})
    assert _cluster().filter(released, ECS).passing == ECS


def test_when_the_job_finishes_the_room_goes_to_the_deployment() -> None:
    cluster = _cluster()
    assert cluster.filter(pod("web-9", "10", namespace="user-a", owner=REPLICA_SET), ECS).passing == ()
    cluster.state.set_reservations([_reservation({}, cluster.now)])
    assert cluster.filter(pod("web-9", "10", namespace="user-a", owner=REPLICA_SET), ECS).passing == ECS


def test_a_placed_loose_pod_counts_until_it_is_bound() -> None:
    cluster = _cluster()
    cluster.state.set_reservations([_reservation({}, cluster.now)])
    assert cluster.filter(pod("web-9", "5", namespace="user-a", owner=REPLICA_SET), ECS).passing == ECS
    # Placed, not yet bound; the controller then admits a job for 10 CPU: the next Deployment pod must wait.
    cluster.state.set_reservations([_reservation({"root": {"cpu": "5"}, "department-a": {"cpu": "5"}}, cluster.now)])
    decision = cluster.filter(pod("web-10", "5", namespace="user-a", owner=REPLICA_SET), ECS)
    assert decision.passing == ()
    # The placed pod filtered again does not count against itself.
    assert cluster.filter(pod("web-9", "5", namespace="user-a", owner=REPLICA_SET), ECS).passing == ECS


def test_a_reservation_the_controller_stopped_writing_is_not_trusted() -> None:
    cluster = _cluster()
    cluster.now += RESERVATIONS_TTL_SECONDS + 1
    assert cluster.filter(pod("web-9", "10", namespace="user-a", owner=REPLICA_SET), ECS).passing == ECS


def _borrowed_by_user_c(owner: dict[str, Any] | None, reserved: dict[str, dict[str, str]]) -> Cluster:
    """user-c (Department-b, min 40) runs 50 CPU of ``owner``'s pods on ecs-1 (bare Pods the queue released
    when ``None``), borrowing 10; user-a (Department-a, min 50) runs 20 CPU of web pods; ``reserved`` is what
    admitted jobs hold."""
    cluster = Cluster()
    cluster.state.set_trees([seed_quota_tree()])
    released = {} if owner is not None else {ADMISSION_ANNOTATION: "{}"}
    cluster.add(*(pod(f"c-{index}", "10", namespace="user-c", owner=owner, annotations=released, node_name="ecs-1")
                  for index in range(5)),
                *(pod(f"web-{index}", "10", namespace="user-a", owner=REPLICA_SET, node_name="ecs-0")
                  for index in range(2)))
    cluster.state.set_reservations([_reservation(reserved, cluster.now)])
    return cluster


def _offer(cluster: Cluster, name: str) -> dict[str, NodeVictims]:
    (uid,) = [uid for uid, record in cluster.state.cache.pods.items() if record.view.name == name]
    return {"ecs-1": NodeVictims((uid,), 0)}


URGENT = pod("web-urgent", "10", namespace="user-a", owner=REPLICA_SET, priority=3)


def test_a_deployment_pod_preempts_nobody_for_room_an_admitted_job_holds() -> None:
    # user-c's pods are a job's; user-b's job was admitted for 30 CPU a moment ago and its pods do not exist
    # yet. The quota rules let the web pod take one of user-c's (Department-a stays within its min,
    # Department-b keeps its own), but the job would make that pod again and its room stays held: at the root,
    # 80 held + 20 loose + 10 > 100, so the filter would refuse the web pod after the eviction too.
    reserved = {"root": {"cpu": "80"}, "department-a": {"cpu": "30"}, "department-b": {"cpu": "50"},
                "user-c": {"cpu": "50"}}
    cluster = _borrowed_by_user_c(JOB, reserved)
    refused = cluster.state.preempt(URGENT, _offer(cluster, "c-0"), cluster.now)
    assert refused.kept == {}
    assert refused.refused["ecs-1"] == ("pod-level quota (room held by admitted jobs, for a pod no queued job "
                                        "accounts for): quota root: cpu request 10 + used 100 > max 100")
    # The quota rules alone would let it go: with nothing held, it does.
    cluster.state.set_reservations([_reservation({}, cluster.now)])
    assert set(cluster.state.preempt(URGENT, _offer(cluster, "c-0"), cluster.now).kept) == {"ecs-1"}


def test_a_bare_pod_the_queue_released_frees_its_room_when_it_goes() -> None:
    # The same, but user-c's pods are bare Pods the queue released: each is its own job, which ends with it.
    reserved = {"root": {"cpu": "80"}, "department-a": {"cpu": "30"}, "department-b": {"cpu": "50"},
                "user-c": {"cpu": "50"}}
    cluster = _borrowed_by_user_c(None, reserved)
    assert set(cluster.state.preempt(URGENT, _offer(cluster, "c-0"), cluster.now).kept) == {"ecs-1"}


def test_a_loose_victim_frees_its_room_for_a_deployment_pod_beside_the_jobs() -> None:
    # user-c's pods are a Deployment's now; user-b's admitted job holds 30. At the root 30 held + 70 loose + 10
    # > 100: the web pod waits. One of user-c's pods going frees 10 of the loose room: 30 + 60 + 10 fits.
    cluster = _borrowed_by_user_c(REPLICA_SET, {"root": {"cpu": "30"}, "department-a": {"cpu": "30"}})
    assert cluster.filter(URGENT, ECS).passing == ()
    assert set(cluster.state.preempt(URGENT, _offer(cluster, "c-0"), cluster.now).kept) == {"ecs-1"}
