"""The extender on the dev cluster with the real kube-scheduler: ECS first, then the virtual node under its
pod cap, pending pods told why, scale-in from the virtual node, and no virtual node for pods without a policy.
"""

from __future__ import annotations

import re
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e import setups
from tests.e2e.conftest import DevCluster
from tests.e2e.harness import nodes_watched, policies_watched
from webhook.api.names import FULL_SCAN_SCHEDULER, PLACEMENT_RETRY_ANNOTATION
from webhook.core.placement import DELETION_COST_ANNOTATION, VIRTUAL_NODE_TOLERATION

VIRTUAL = "virtual-kubelet"
ECS_NODES = ("ecs-0", "ecs-1", "ecs-2", "ecs-3")


def _cpu_millis(quantity: str) -> int:
    return int(quantity[:-1]) if quantity.endswith("m") else int(float(quantity) * 1000)


def _requested_cpu(dev: DevCluster) -> dict[str, int]:
    """Millicores requested by live pods on each ECS node."""
    used = dict.fromkeys(ECS_NODES, 0)
    for item in dev.get_json("pods", "--all-namespaces")["items"]:
        node = item["spec"].get("nodeName")
        if node not in used or item["status"].get("phase") in ("Succeeded", "Failed"):
            continue
        for container in item["spec"]["containers"]:
            used[node] += _cpu_millis(container.get("resources", {}).get("requests", {}).get("cpu", "0"))
    return used


@pytest.fixture
def pool(dev_cluster: DevCluster, namespace: str) -> Iterator[tuple[str, ...]]:
    """Two empty ECS nodes labelled ``pool=<namespace>`` (the label is removed afterwards)."""
    chosen: list[str] = []

    def two_empty() -> bool:
        used = _requested_cpu(dev_cluster)
        chosen[:] = sorted((node for node in ECS_NODES if used[node] == 0), key=ECS_NODES.index)[:2]
        return len(chosen) == 2

    dev_cluster.wait_until(two_empty, 180, "two ECS nodes without pods (earlier tests' pods to go)")
    for node in chosen:
        dev_cluster.kubectl("label", "node", node, f"pool={namespace}", "--overwrite")
    try:
        yield tuple(chosen)
    finally:
        for node in chosen:
            dev_cluster.kubectl("label", "node", node, "pool-", check=False)


def _deployment(namespace: str, replicas: int, cpu: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "burst", "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "burst"}},
            "template": {
                "metadata": {"labels": {"app": "burst"}},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "tolerations": [dict(VIRTUAL_NODE_TOLERATION)],
                    "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}],
                },
            },
        },
    }


def _pods(dev: DevCluster, namespace: str, selector: str = "app=burst") -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = dev.get_json("pods", "-n", namespace, "-l", selector)["items"]
    return [pod for pod in items if not pod["metadata"].get("deletionTimestamp")]


def _unschedulable_message(pod: dict[str, Any]) -> str:
    for condition in pod.get("status", {}).get("conditions", []):
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return str(condition.get("message", ""))
    return ""


def _extender_metrics(dev: DevCluster) -> str:
    url = f"http://127.0.0.1:{dev.config.ports.extender}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


def _extender_requests(dev: DevCluster) -> dict[tuple[str, str], float]:
    """``kube_queue_extender_requests_total`` of the dev cluster's extender, by (verb, result)."""
    text = _extender_metrics(dev)
    counts: dict[tuple[str, str], float] = {}
    for match in re.finditer(r'kube_queue_extender_requests_total\{result="(\w+)",verb="(\w+)"\} (\S+)', text):
        counts[match.group(2), match.group(1)] = float(match.group(3))
    return counts


def test_a_deployment_fills_ecs_then_the_capped_virtual_node_and_shrinks_from_it(
    dev_cluster: DevCluster, namespace: str, pool: tuple[str, ...]
) -> None:
    dev = dev_cluster
    units: list[dict[str, Any]] = [
        {"resource": "ecs", "nodeSelector": {"pool": namespace}},
        {"resource": "eci", "max": 4},
    ]
    dev.apply(setups.resource_policy(namespace, {"app": "burst"}, units, name="burst"))
    policies_watched(dev, namespace)
    nodes_watched(dev, pool)  # their pool labels
    dev.apply(_deployment(namespace, 12, "10"))

    def placed() -> bool:
        pods = _pods(dev, namespace)
        bound = [p for p in pods if p["spec"].get("nodeName")]
        pending = [p for p in pods if not p["spec"].get("nodeName")]
        return len(bound) == 10 and len(pending) == 2 and all(_unschedulable_message(p) for p in pending)

    dev.wait_until(placed, 120, "10 pods bound and 2 refused")
    pods = _pods(dev, namespace)
    nodes = sorted(p["spec"].get("nodeName") or "" for p in pods)
    on_pool = [n for n in nodes if n in pool]
    assert len(on_pool) == 6
    assert {n: on_pool.count(n) for n in pool} == dict.fromkeys(pool, 3)
    assert nodes.count(VIRTUAL) == 4
    assert nodes.count("") == 2
    for pending in (p for p in pods if not p["spec"].get("nodeName")):
        message = _unschedulable_message(pending)
        assert f"ResourcePolicy {namespace}/burst: unit 2 (eci) is at its max of 4 pods" in message, message
    # The scheduler asks the filter only (no prioritizeVerb): the placement above needs nothing else.
    requests = _extender_requests(dev)
    assert requests.get(("filter", "passed"), 0) >= 10
    assert requests.get(("prioritize", "scored"), 0) == 0

    def cost(pod: dict[str, Any]) -> str:
        return str(pod["metadata"].get("annotations", {}).get(DELETION_COST_ANNOTATION, "0"))

    def costs_set() -> bool:
        on_virtual = [p for p in _pods(dev, namespace) if p["spec"].get("nodeName") == VIRTUAL]
        return len(on_virtual) == 4 and all(cost(p) == "-100" for p in on_virtual)

    dev.wait_until(costs_set, 60, "the deletion cost -100 on the virtual node's pods")
    for pod in _pods(dev, namespace):
        if pod["spec"].get("nodeName") in pool:
            assert cost(pod) == "0"  # the preferred unit's cost is the default: no write needed

    dev.kubectl("scale", "deployment", "burst", "-n", namespace, "--replicas=6")

    def shrunk() -> bool:
        pods = _pods(dev, namespace)
        return len(pods) == 6 and all(p["spec"].get("nodeName") in pool for p in pods)

    dev.wait_until(shrunk, 120, "the Deployment to shrink to its 6 ECS pods")
    remaining = [p["spec"]["nodeName"] for p in _pods(dev, namespace)]
    assert VIRTUAL not in remaining
    assert sorted(remaining) == sorted([*pool, *pool, *pool])


def test_pods_without_a_policy_never_land_on_the_virtual_node(dev_cluster: DevCluster, namespace: str) -> None:
    dev = dev_cluster
    tolerating: dict[str, Any] = {
        "terminationGracePeriodSeconds": 0,
        "tolerations": [dict(VIRTUAL_NODE_TOLERATION)],
        "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}],
    }
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"free-{index}", "namespace": namespace, "labels": {"app": "free"}},
            "spec": tolerating,
        }
        for index in range(4)
    ]
    only_virtual = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "wants-virtual", "namespace": namespace, "labels": {"app": "pinned"}},
        "spec": {**tolerating, "nodeSelector": {"type": "virtual-kubelet"}},
    }
    dev.apply([*pods, only_virtual])

    def settled() -> bool:
        free = _pods(dev, namespace, "app=free")
        pinned = _pods(dev, namespace, "app=pinned")
        return (
            len(free) == 4
            and all(p["spec"].get("nodeName") for p in free)
            and len(pinned) == 1
            and bool(_unschedulable_message(pinned[0]))
        )

    dev.wait_until(settled, 90, "4 pods bound and the pinned one refused")
    assert {p["spec"]["nodeName"] for p in _pods(dev, namespace, "app=free")} <= set(ECS_NODES)
    (pinned,) = _pods(dev, namespace, "app=pinned")
    assert not pinned["spec"].get("nodeName")
    # The namespace is outside the tree: the extender never sees these pods (no marker), and the default
    # profile's addedAffinity refuses the virtual node.
    assert "scheduler-enforced node affinity" in _unschedulable_message(pinned)


def test_a_pod_waits_out_its_timeout_then_takes_the_next_unit(dev_cluster: DevCluster, namespace: str) -> None:
    dev = dev_cluster
    policy = setups.resource_policy(
        namespace,
        {"app": "patient"},
        [{"resource": "ecs", "nodeSelector": {"pool": f"none-{namespace}"}}, {"resource": "eci"}],
        name="burst",
    )
    policy["spec"]["whenTryNextUnits"] = {"policy": "TimeoutOrExceedMax", "timeout": "5s"}
    dev.apply(policy)
    policies_watched(dev, namespace)
    dev.apply(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "patient", "namespace": namespace, "labels": {"app": "patient"}},
            "spec": {
                "terminationGracePeriodSeconds": 0,
                "tolerations": [dict(VIRTUAL_NODE_TOLERATION)],
                "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}],
            },
        }
    )

    def waited_then_placed() -> bool:
        (patient,) = _pods(dev, namespace, "app=patient")
        return bool(patient["spec"].get("nodeName") == VIRTUAL)

    dev.wait_until(waited_then_placed, 90, "the pod on the virtual node once its 5s wait is over")
    events = dev.kubectl("get", "events", "-n", namespace, "--field-selector", "involvedObject.name=patient")
    assert "TimeoutOrExceedMax moves on after 5s" in events

    def nudged() -> bool:
        """The extender touched the pod when its wait ended (another event may have had kube-scheduler try it
        again a moment before that touch, so the pod can be placed first)."""
        (patient,) = _pods(dev, namespace, "app=patient")
        return PLACEMENT_RETRY_ANNOTATION in patient["metadata"].get("annotations", {})

    dev.wait_until(nudged, 30, "the extender's touch of the pod once its wait ended")




@pytest.fixture
def filler_nodes(dev_cluster: DevCluster, namespace: str) -> Iterator[tuple[dict[str, str], tuple[str, ...]]]:
    """The shared filler nodes (:func:`tests.e2e.setups.filler_nodes`)."""
    with setups.filler_nodes(dev_cluster, namespace) as fillers:
        yield fillers


def test_the_first_unit_wins_on_a_cluster_the_scheduler_would_only_sample(
    dev_cluster: DevCluster, namespace: str, filler_nodes: tuple[dict[str, str], tuple[str, ...]]
) -> None:
    """With more than 100 nodes the scheduler filters only part of them by default, and the extender hears of
    those only: a pod whose sample held the virtual node but not its pool would go to the virtual node (with
    default sampling, most runs of this test put some there). The webhook gives the policy's pods the
    scheduler profile that filters every node (``kube-queue-full-scan``): every pod on the pool."""
    dev = dev_cluster
    taint, unit_nodes = filler_nodes
    units: list[dict[str, Any]] = [{"resource": "ecs", "nodeSelector": {"pool": namespace}}, {"resource": "eci"}]
    dev.apply(setups.resource_policy(namespace, {"app": "pooled"}, units, name="burst"))
    setups.wait_routed_to_placement(dev, namespace)  # outside the quota tree: routed by the controller
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"pooled-{index}", "namespace": namespace, "labels": {"app": "pooled"}},
            "spec": {
                "terminationGracePeriodSeconds": 0,
                "tolerations": [dict(VIRTUAL_NODE_TOLERATION), {**taint, "operator": "Equal"}],
                "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}],
            },
        }
        for index in range(10)
    ]
    dev.apply(pods)

    def bound() -> bool:
        placed = _pods(dev, namespace, "app=pooled")
        return len(placed) == len(pods) and all(p["spec"].get("nodeName") for p in placed)

    dev.wait_until(bound, 120, "the 10 pods bound")
    nodes = sorted(p["spec"]["nodeName"] for p in _pods(dev, namespace, "app=pooled"))
    assert set(nodes) <= set(unit_nodes), f"pods outside the unit's nodes {unit_nodes}: {nodes}"
    assert {p["spec"]["schedulerName"] for p in _pods(dev, namespace, "app=pooled")} == {FULL_SCAN_SCHEDULER}
    # Asked about every node, so no request looked cut short by sampling (no false alarm on ~256 nodes).
    assert "kube_queue_extender_scheduler_sampled_filters_total 0.0" in _extender_metrics(dev)


def test_a_policy_outside_the_quota_tree_sends_its_pods_to_the_virtual_node(
    dev_cluster: DevCluster, namespace: str
) -> None:
    # docs/placement.md: the namespace is in no leaf; the Deployment asks for no toleration. The controller
    # labels the namespace for the placement webhook, which adds the virtual node's toleration, so the pods
    # run there when the ECS unit has no room (here: no node in its pool).
    dev = dev_cluster
    units: list[dict[str, Any]] = [
        {"resource": "ecs", "nodeSelector": {"pool": f"{namespace}-none"}},
        {"resource": "eci", "max": 3},
    ]
    dev.apply(setups.resource_policy(namespace, {"app": "burst"}, units, name="burst"))

    def labelled() -> bool:
        labels = dev.get_json("namespace", namespace)["metadata"].get("labels", {})
        return bool(labels.get("kube-queue.x-k8s.io/placement") == "true")

    dev.wait_until(labelled, 60, "the controller to label the namespace for the placement webhook")
    policies_watched(dev, namespace)
    deployment = _deployment(namespace, 3, "100m")
    del deployment["spec"]["template"]["spec"]["tolerations"]
    dev.apply(deployment)

    def on_virtual() -> bool:
        pods = _pods(dev, namespace)
        return len(pods) == 3 and all(p["spec"].get("nodeName") == VIRTUAL for p in pods)

    dev.wait_until(on_virtual, 120, "the 3 pods on the virtual node")
    for pod in _pods(dev, namespace):
        assert dict(VIRTUAL_NODE_TOLERATION) in pod["spec"]["tolerations"]
        assert "schedulingGates" not in pod["spec"]  # not queued: no quota lists the namespace
    dev.kubectl("delete", "resourcepolicy", "burst", "-n", namespace)
    dev.wait_until(lambda: not labelled(), 60, "the placement label to go with the policy")
