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
