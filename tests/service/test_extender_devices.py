"""GPUs claimed through Dynamic Resource Allocation count in the extender's pod-level quota (docs/pod-quota.md,
"Devices"): a pod's quota request is what its containers request plus what its claims hold; a claim shared by
several pods counts once, from the first pod that holds it until the last goes; a pod whose devices would take
its quota over ``max`` is refused; and a cluster that does not serve ``resource.k8s.io/v1`` works as before.

The seed's tree: Department-b (user-c) and Department-a (user-a, user-b) each have a max of 4 nvidia.com/gpu,
the root 4. DeviceClass ``gpu.example.com`` counts as ``nvidia.com/gpu``, ``nic.example.com`` counts nothing.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.builders import (
    device_class,
    device_request,
    resource_claim,
    tree_child,
    tree_object,
    with_claims,
)
from tests.service.extender_support import Cluster, node, pod
from tests.service.kubeclient_fake import CORE, FakeApi, Kind
from webhook.api.names import RESERVATIONS, RESERVATIONS_KEY, RESERVED_AT_KEY
from webhook.api.objects import rfc3339
from webhook.core.quantity import NANO
from webhook.extender.protocol import NodeVictims
from webhook.extender.sources import build_caches, running
from webhook.extender.state import ExtenderState

ECS = ("ecs-0", "ecs-1", "ecs-2", "ecs-3")
GPU = "nvidia.com/gpu"
NIC = "nic.example.com"
REPLICA_SET = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web-1", "uid": "rs"}}
CLASSES: Kind = ("resource.k8s.io", "v1", "deviceclasses")
CLAIMS: Kind = ("resource.k8s.io", "v1", "resourceclaims")
NODES: Kind = ("", "v1", "nodes")
TREES: Kind = ("scheduling.sigs.k8s.io", "v1beta1", "elasticquotatrees")


def _api(kinds: set[Kind]) -> FakeApi:
    """A fake API server with the ecs nodes and the seed's tree."""
    api = FakeApi(kinds | {NODES})
    for name in ECS:
        api.put(NODES, node(name))
    api.put(TREES, tree_object())
    return api


def _cluster(*claims: dict[str, Any], classes: bool = True) -> Cluster:
    cluster = Cluster()
    cluster.state.set_trees([tree_object()])
    cluster.state.set_device_classes([device_class(), device_class(NIC, None)] if classes else [])
    cluster.state.replace_claims(list(claims))
    return cluster


def _gpus(cluster: Cluster, quota: str = "department-b") -> float:
    """GPUs the bound pods of quota node ``quota`` hold (whole units)."""
    return cluster.state.used(quota).get(GPU, 0) / NANO


def gpu_pod(name: str, namespace: str = "user-c", *, made: dict[str, str] | None = None,
            shared: dict[str, str] | None = None, node_name: str | None = None, **extra: Any) -> dict[str, Any]:
    """A pod of 1 CPU in ``namespace`` with DRA claims (``made``: entry -> its claim made from a template)."""
    return with_claims(pod(name, "1", namespace=namespace, node_name=node_name, **extra), made=made, shared=shared)


def test_a_pod_whose_devices_would_take_its_quota_over_max_is_refused() -> None:
    cluster = _cluster(*(resource_claim(f"c{i}") for i in range(6)))
    for i in range(3):
        cluster.add(gpu_pod(f"p{i}", made={"gpu": f"c{i}"}, node_name="ecs-0"))
    assert _gpus(cluster) == 3
    fourth = gpu_pod("p3", made={"gpu": "c3"})
    assert cluster.filter(fourth, ECS).passing == ECS
    cluster.bind(fourth, "ecs-1")
    decision = cluster.filter(gpu_pod("p4", made={"gpu": "c4"}), ECS)
    assert decision.passing == ()
    assert decision.quota == "root/Department-b"
    assert "quota root/Department-b: nvidia.com/gpu request 1 + used 4 > max 4" in decision.summary
    assert set(decision.unresolvable) == set(ECS)
    # The root's 4 GPUs are shared: a pod of Department-a is refused at the root.
    cluster.state.upsert_claim(resource_claim("a0", "user-a"))
    refused = cluster.filter(gpu_pod("a0", "user-a", made={"gpu": "a0"}), ECS)
    assert "quota root: nvidia.com/gpu request 1 + used 4 > max 4" in refused.summary


def test_a_claim_asking_for_several_devices_counts_each() -> None:
    cluster = _cluster(resource_claim("three", "user-c", device_request(3)),
                       resource_claim("two", "user-c", device_request(1, name="a"), device_request(1, name="b")))
    cluster.add(gpu_pod("p0", made={"gpu": "three"}, node_name="ecs-0"))
    assert _gpus(cluster) == 3
    decision = cluster.filter(gpu_pod("p1", made={"gpu": "two"}), ECS)
    assert "nvidia.com/gpu request 2 + used 3 > max 4" in decision.summary


def test_a_claim_shared_by_bound_pods_is_charged_once_until_the_last_one_goes() -> None:
    cluster = _cluster(resource_claim("pair", "user-c", device_request(2)), resource_claim("mine", "user-c",
                                                                                             device_request(2)))
    sharing = [gpu_pod(f"s{i}", shared={"gpu": "pair"}, node_name=f"ecs-{i}") for i in range(3)]
    cluster.add(*sharing)
    assert _gpus(cluster) == 2  # not 6
    # Another pod sharing it adds nothing, even with the quota at its max.
    cluster.add(gpu_pod("own", made={"gpu": "mine"}, node_name="ecs-3"))
    assert _gpus(cluster) == 4
    assert cluster.filter(gpu_pod("s3", shared={"gpu": "pair"}), ECS).passing == ECS
    cluster.state.delete_pod(sharing[0])
    cluster.state.delete_pod(sharing[1])
    assert _gpus(cluster) == 4
    cluster.state.delete_pod(sharing[2])
    assert _gpus(cluster) == 2


def test_pods_placed_but_not_yet_bound_hold_their_devices() -> None:
    cluster = _cluster(resource_claim("three", "user-c", device_request(3)), resource_claim("two", "user-c",
                                                                                              device_request(2)))
    first = gpu_pod("a", made={"gpu": "three"})
    assert cluster.filter(first, ECS).passing == ECS
    second = gpu_pod("b", made={"gpu": "two"})
    decision = cluster.filter(second, ECS)
    assert "nvidia.com/gpu request 2 + used 3 > max 4" in decision.summary
    # The placed pod filtered again does not count against itself.
    assert cluster.filter(first, ECS).passing == ECS
    cluster.bind(first, "ecs-0")
    assert _gpus(cluster) == 3
    assert cluster.filter(second, ECS).passing == ()
    cluster.state.delete_pod(cluster.bind(first, "ecs-0"))
    assert cluster.filter(second, ECS).passing == ECS


def test_pods_placed_back_to_back_sharing_a_claim_count_it_once() -> None:
    cluster = _cluster(resource_claim("trio", "user-c", device_request(3)), resource_claim("two", "user-c",
                                                                                             device_request(2)))
    assert cluster.filter(gpu_pod("a", shared={"gpu": "trio"}), ECS).passing == ECS
    assert cluster.filter(gpu_pod("b", shared={"gpu": "trio"}), ECS).passing == ECS
    decision = cluster.filter(gpu_pod("c", made={"gpu": "two"}), ECS)
    assert "nvidia.com/gpu request 2 + used 3 > max 4" in decision.summary


def test_a_claim_the_extender_has_not_seen_keeps_the_pod_out_until_it_has() -> None:
    cluster = _cluster()
    late = gpu_pod("late", made={"gpu": "late-gpu"})
    decision = cluster.filter(late, ECS)
    assert decision.passing == ()
    assert decision.summary == ("pod-level quota: ResourceClaim user-c/late-gpu is not known yet; the pod is "
                                "tried again once it is")
    cluster.state.upsert_claim(resource_claim("late-gpu"))
    assert cluster.filter(late, ECS).passing == ECS
    # A template's claim the control plane has not made yet is not known either.
    unmade = with_claims(pod("new", "1", namespace="user-c"), templates={"gpu": "gpu-template"})
    assert "the claim for spec.resourceClaims 'gpu' is not made yet" in cluster.filter(unmade, ECS).summary


def test_a_claim_that_cannot_be_counted_refuses_its_pod_saying_why() -> None:
    cluster = _cluster(resource_claim("every", "user-c", device_request(None, mode="All")))
    decision = cluster.filter(gpu_pod("p", made={"gpu": "every"}), ECS)
    assert decision.passing == ()
    assert decision.summary.startswith("pod-level quota cannot count the pod's devices: ResourceClaim user-c/every: "
                                       "spec.devices.requests[0].exactly: allocationMode All of DeviceClass "
                                       "gpu.example.com")
    assert set(decision.unresolvable) == set(ECS)


def test_devices_of_classes_that_do_not_count_and_pods_outside_the_tree_are_not_counted() -> None:
    cluster = _cluster(*(resource_claim(f"c{i}") for i in range(4)),
                       resource_claim("nic", "user-c", device_request(8, device_class=NIC)))
    for i in range(4):
        cluster.add(gpu_pod(f"p{i}", made={"gpu": f"c{i}"}, node_name="ecs-0"))
    assert cluster.filter(gpu_pod("nic", made={"nic": "nic"}), ECS).passing == ECS
    outside = gpu_pod("free", "elsewhere", made={"gpu": "never-seen"})
    assert cluster.filter(outside, ECS).passing == ECS


def test_a_class_annotated_later_counts_the_claims_already_held_and_unmarking_it_gives_room_back() -> None:
    cluster = _cluster(*(resource_claim(f"c{i}") for i in range(5)), classes=False)
    for i in range(4):
        cluster.add(gpu_pod(f"p{i}", made={"gpu": f"c{i}"}, node_name="ecs-0"))
    assert _gpus(cluster) == 0
    cluster.state.set_device_classes([device_class()])
    assert _gpus(cluster) == 4
    waiting = gpu_pod("p4", made={"gpu": "c4"})
    assert cluster.filter(waiting, ECS).passing == ()
    rooms: list[int] = []
    cluster.state.on_room = lambda: rooms.append(1)
    cluster.state.set_device_classes([device_class(quota_resource=None)])
    assert _gpus(cluster) == 0
    assert rooms
    assert cluster.filter(waiting, ECS).passing == ECS


def test_a_pod_that_finishes_gives_its_devices_back_to_the_pod_waiting_for_them() -> None:
    cluster = _cluster(*(resource_claim(f"c{i}") for i in range(5)))
    running = [gpu_pod(f"p{i}", made={"gpu": f"c{i}"}, node_name="ecs-0") for i in range(4)]
    cluster.add(*running)
    waiting = gpu_pod("p4", made={"gpu": "c4"})
    assert cluster.filter(waiting, ECS).passing == ()
    assert [pod.name for pod in cluster.state.pods_to_wake(cluster.now, 10)] == []
    finished = dict(running[0], status={**running[0]["status"], "phase": "Succeeded"})
    cluster.state.upsert_pod(finished)
    assert _gpus(cluster) == 3
    assert [pod.name for pod in cluster.state.pods_to_wake(cluster.now, 10)] == ["p4"]


def test_a_deployments_pod_counts_its_devices_against_the_room_admitted_jobs_hold() -> None:
    cluster = _cluster(resource_claim("w0"), resource_claim("w1"))
    held = {"root": {GPU: "3"}, "department-b": {GPU: "3"}}
    cluster.state.set_reservations([{"metadata": {"name": RESERVATIONS, "namespace": "kube-queue"},
                                     "data": {RESERVATIONS_KEY: json.dumps(held),
                                              RESERVED_AT_KEY: rfc3339(cluster.now)}}])
    web0 = gpu_pod("web-0", made={"gpu": "w0"}, owner=REPLICA_SET)
    assert cluster.filter(web0, ECS).passing == ECS
    cluster.bind(web0, "ecs-0")
    decision = cluster.filter(gpu_pod("web-1", made={"gpu": "w1"}, owner=REPLICA_SET), ECS)
    assert decision.passing == ()
    assert "room held by admitted jobs" in decision.summary
    assert "nvidia.com/gpu request 1 + used 4 > max 4" in decision.summary


def test_a_tree_change_counts_the_claims_held_again() -> None:
    cluster = _cluster(resource_claim("pair", "user-c", device_request(2)), resource_claim("one"))
    cluster.add(gpu_pod("s0", shared={"gpu": "pair"}, node_name="ecs-0"),
                gpu_pod("s1", shared={"gpu": "pair"}, node_name="ecs-1"))
    spec = tree_object()["spec"]
    tree_child(spec, 1)["max"][GPU] = 2
    cluster.state.set_trees([tree_object(spec)])
    assert _gpus(cluster) == 2
    decision = cluster.filter(gpu_pod("p", made={"gpu": "one"}), ECS)
    assert "quota root/Department-b: nvidia.com/gpu request 1 + used 2 > max 2" in decision.summary


def test_preemption_counts_the_devices_the_preemptor_would_add() -> None:
    cluster = _cluster(*(resource_claim(f"c{i}") for i in range(4)), resource_claim("two", "user-c",
                                                                                       device_request(2)))
    cluster.add(*(gpu_pod(f"p{i}", made={"gpu": f"c{i}"}, node_name="ecs-1") for i in range(3)))
    victim = pod("outside", "1", namespace="elsewhere", node_name="ecs-0")  # no quota is owed it
    cluster.add(victim)
    offer = {"ecs-0": NodeVictims((victim["metadata"]["uid"],), 0)}
    allowed = cluster.state.preempt(gpu_pod("one", made={"gpu": "c3"}), offer, cluster.now)
    assert set(allowed.kept) == {"ecs-0"}
    # With 2 GPUs it would be over its max whatever it evicts: nobody is evicted for it.
    refused = cluster.state.preempt(gpu_pod("two", made={"gpu": "two"}), offer, cluster.now)
    assert refused.kept == {}
    assert "nvidia.com/gpu" in refused.refused["ecs-0"]


def test_a_pod_whose_devices_cannot_be_counted_yet_preempts_nobody() -> None:
    # The filter refuses it on every node until its claim is known, so victims evicted for it would go in vain.
    cluster = _cluster()
    victim = pod("outside", "1", namespace="elsewhere", node_name="ecs-0")  # no quota is owed it
    cluster.add(victim)
    offer = {"ecs-0": NodeVictims((victim["metadata"]["uid"],), 0)}
    late = gpu_pod("late", made={"gpu": "late-gpu"})
    refused = cluster.state.preempt(late, offer, cluster.now)
    assert refused.kept == {}
    assert refused.refused == {"ecs-0": "pod-level quota: ResourceClaim user-c/late-gpu is not known yet; the pod "
                                         "is tried again once it is"}
    cluster.state.upsert_claim(resource_claim("late-gpu"))
    assert set(cluster.state.preempt(late, offer, cluster.now).kept) == {"ecs-0"}


async def _run(api: FakeApi, state: ExtenderState) -> None:
    caches = build_caches(api, state)
    async with running(caches, state):
        for _ in range(200):
            if state.ready:
                break
            await asyncio.sleep(0.01)
        for _ in range(20):
            await asyncio.sleep(0)


async def test_the_watches_bring_device_classes_and_claims() -> None:
    api = _api(set(CORE))
    api.put(CLASSES, device_class())
    for i in range(4):
        api.put(CLAIMS, resource_claim(f"c{i}"))
        api.put(("", "v1", "pods"), gpu_pod(f"p{i}", made={"gpu": f"c{i}"}, node_name="ecs-0"))
    state = ExtenderState()
    await _run(api, state)
    assert state.ready
    assert state.used("department-b").get(GPU, 0) == 4 * NANO
    api.put(CLAIMS, resource_claim("c4"))
    await _run(api, state)
    decision = state.filter(gpu_pod("p4", made={"gpu": "c4"}), ECS, 0.0)
    assert "nvidia.com/gpu request 1 + used 4 > max 4" in decision.summary


@pytest.mark.parametrize("served", [False, True])
async def test_a_cluster_without_dynamic_resource_allocation_works_as_before(served: bool) -> None:
    kinds = set(CORE) if served else {kind for kind in CORE if kind[0] != "resource.k8s.io"}
    api = _api(kinds)
    api.put(("", "v1", "pods"), pod("busy", "98", namespace="user-c", node_name="ecs-0"))
    state = ExtenderState()
    await _run(api, state)
    assert state.ready
    assert state.filter(pod("fits", "1", namespace="user-c"), ECS, 0.0).passing
    # A pod naming claims: with no DeviceClass that counts, nothing is counted, and nothing waits for a claim.
    assert state.filter(gpu_pod("claims", made={"gpu": "c0"}), ECS, 0.0).passing
    refused = state.filter(pod("over", "1", namespace="user-c"), ECS, 0.0)
    assert "cpu request 1 + used 100 > max 100" in refused.summary  # 98 bound, 2 placed
