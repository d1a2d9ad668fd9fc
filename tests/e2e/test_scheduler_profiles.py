"""The two scheduler profiles on the dev cluster (docs/placement.md): the webhook gives ``kube-queue-full-scan``
(every node filtered) to the pods of a ResourcePolicy a sample of the nodes could mislead, other pods keep
``default-scheduler`` (sampling) - and the extender, called on both profiles, keeps its guarantees whatever
profile a user names: alice, a developer with ``edit`` in her namespaces, cannot pick a profile that escapes
her quota's ``max`` or a unit's cap on the virtual node, nor stay on the sampling profile with a policy pod.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e import setups
from tests.e2e.conftest import DevCluster
from tests.e2e.harness import policies_watched
from tests.e2e.setups import managed
from webhook.api.names import DEFAULT_SCHEDULER, FULL_SCAN_SCHEDULER, PLACEMENT_NAMESPACE_LABEL
from webhook.core.placement import VIRTUAL_NODE_TOLERATION

pytestmark = pytest.mark.e2e

__all__ = ["managed"]  # the seed's tree over fresh namespaces, alice with `edit` in each

ALICE = "alice"
VIRTUAL = "virtual-kubelet"


def _pod(name: str, namespace: str, app: str, *, tolerations: list[dict[str, str]]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": app}},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "tolerations": tolerations,
            "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}],
        },
    }


def _deployment(name: str, namespace: str, replicas: int, cpu: str, scheduler: str, app: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": app, "deployment": name}},
            "template": {
                "metadata": {"labels": {"app": app, "deployment": name}},
                "spec": {
                    "schedulerName": scheduler,
                    "terminationGracePeriodSeconds": 0,
                    "tolerations": [dict(VIRTUAL_NODE_TOLERATION)],
                    "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}],
                },
            },
        },
    }


def _pods(dev: DevCluster, namespace: str, selector: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = dev.get_json("pods", "-n", namespace, "-l", selector)["items"]
    return [pod for pod in items if not pod["metadata"].get("deletionTimestamp")]


def _unschedulable_message(pod: dict[str, Any]) -> str:
    for condition in pod.get("status", {}).get("conditions", []):
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return str(condition.get("message", ""))
    return ""


def _as_alice(dev: DevCluster, obj: dict[str, Any]) -> None:
    result = dev.create(obj, user=ALICE)
    assert result.returncode == 0, result.stderr


@pytest.fixture
def filler_nodes(dev_cluster: DevCluster, namespace: str) -> Iterator[tuple[dict[str, str], tuple[str, ...]]]:
    """The shared filler nodes (:func:`tests.e2e.setups.filler_nodes`)."""
    with setups.filler_nodes(dev_cluster, namespace) as fillers:
        yield fillers


def test_policy_pods_get_the_full_scan_and_land_in_their_first_unit_while_other_pods_keep_sampling(
    dev_cluster: DevCluster, namespace: str, filler_nodes: tuple[dict[str, str], tuple[str, ...]]
) -> None:
    dev = dev_cluster
    taint, unit_nodes = filler_nodes
    units: list[dict[str, Any]] = [{"resource": "ecs", "nodeSelector": {"pool": namespace}}, {"resource": "eci"}]
    dev.apply(setups.resource_policy(namespace, {"app": "pooled"}, units))
    setups.wait_routed_to_placement(dev, namespace)  # outside the quota tree: routed by the controller
    filler = {**taint, "operator": "Equal"}
    pooled = [_pod(f"pooled-{i}", namespace, "pooled", tolerations=[filler]) for i in range(10)]
    # Pods under no policy, allowed on the fillers and (by toleration) on the virtual node: on the sampling
    # profile, still kept off the virtual node by the extender.
    anywhere = [filler, dict(VIRTUAL_NODE_TOLERATION)]
    free = [_pod(f"free-{i}", namespace, "free", tolerations=anywhere) for i in range(10)]
    dev.apply([*pooled, *free])

    def bound() -> bool:
        placed = _pods(dev, namespace, "app in (pooled,free)")
        return len(placed) == 20 and all(p["spec"].get("nodeName") for p in placed)

    dev.wait_until(bound, 120, "the 20 pods bound")
    policy_pods = _pods(dev, namespace, "app=pooled")
    assert {p["spec"]["schedulerName"] for p in policy_pods} == {FULL_SCAN_SCHEDULER}
    nodes = sorted(p["spec"]["nodeName"] for p in policy_pods)
    assert set(nodes) <= set(unit_nodes), f"policy pods outside the first unit's nodes {unit_nodes}: {nodes}"
    free_pods = _pods(dev, namespace, "app=free")
    assert {p["spec"]["schedulerName"] for p in free_pods} == {DEFAULT_SCHEDULER}
    assert VIRTUAL not in {p["spec"]["nodeName"] for p in free_pods}


@pytest.fixture(scope="module")
def alice_policies(dev_cluster: DevCluster, managed: tuple[str, str, str]) -> Iterator[str]:
    """Department-a's namespace, where alice may also write ResourcePolicies (as an operator grants)."""
    namespace = managed[0]
    resource = "resourcepolicies.scheduling.alibabacloud.com"
    dev_cluster.kubectl("create", "role", "resourcepolicies", "--verb=*", f"--resource={resource}", "-n", namespace)
    dev_cluster.kubectl(
        "create", "rolebinding", "alice-resourcepolicies", "--role=resourcepolicies", f"--user={ALICE}", "-n", namespace
    )
    yield namespace


def test_naming_the_full_scan_profile_does_not_escape_the_quota_max(
    dev_cluster: DevCluster, managed: tuple[str, str, str]
) -> None:
    """Pods of a Deployment are tagged, not queued: the extender's pod-level quota is what holds the quota's
    ``max`` (100 CPU for Department-b, the root too). Alice names the full-scan profile herself: the
    extender still runs for it, and the pods beyond the max wait."""
    dev = dev_cluster
    namespace = managed[1]
    _as_alice(dev, _deployment("greedy", namespace, 11, "10", FULL_SCAN_SCHEDULER, "greedy"))

    def settled() -> bool:
        pods = _pods(dev, namespace, "app=greedy")
        pending = [p for p in pods if not p["spec"].get("nodeName")]
        return len(pods) == 11 and bool(pending) and all(_unschedulable_message(p) for p in pending)

    dev.wait_until(settled, 120, "the Deployment's pods placed up to the quota, the rest refused")
    pods = _pods(dev, namespace, "app=greedy")
    placed = [p for p in pods if p["spec"].get("nodeName")]
    assert len(placed) <= 10  # 10 x 10 CPU: Department-b's max
    assert {p["spec"]["schedulerName"] for p in pods} == {FULL_SCAN_SCHEDULER}
    assert VIRTUAL not in {p["spec"]["nodeName"] for p in placed}  # no policy: never the virtual node
    for pending in (p for p in pods if not p["spec"].get("nodeName")):
        message = _unschedulable_message(pending)
        assert "pod-level quota" in message and "Department-b" in message, message
    dev.kubectl("delete", "deployment", "greedy", "-n", namespace)


def test_no_profile_a_user_names_escapes_a_units_cap_on_the_virtual_node(
    dev_cluster: DevCluster, alice_policies: str
) -> None:
    """Alice's policy caps the virtual node at 2 pods; her first unit has no node. She asks for the sampling
    profile by name on one Deployment (the webhook still gives its pods the full scan) and names the
    full-scan profile on another: 2 pods on the virtual node between them, the rest told the unit is full."""
    dev = dev_cluster
    namespace = alice_policies
    units: list[dict[str, Any]] = [
        {"resource": "ecs", "nodeSelector": {"pool": f"{namespace}-none"}},
        {"resource": "eci", "max": 2},
    ]
    # Inside the tree a Deployment's pods reach the webhook that applies the policy only in a namespace
    # labelled for it: the label is there as soon as the policy is stored, not a pass of the controller later.
    dev.kubectl("label", "namespace", namespace, f"{PLACEMENT_NAMESPACE_LABEL}-", check=False)
    _as_alice(dev, setups.resource_policy(namespace, {"app": "capped"}, units))
    labels = dev.get_json("namespace", namespace)["metadata"].get("labels", {})
    assert labels.get(PLACEMENT_NAMESPACE_LABEL) == "true", "the policy was stored before its namespace was routed"
    policies_watched(dev, namespace)
    _as_alice(dev, _deployment("asks-default", namespace, 2, "100m", DEFAULT_SCHEDULER, "capped"))
    _as_alice(dev, _deployment("asks-full", namespace, 2, "100m", FULL_SCAN_SCHEDULER, "capped"))

    def settled() -> bool:
        pods = _pods(dev, namespace, "app=capped")
        bound = [p for p in pods if p["spec"].get("nodeName")]
        pending = [p for p in pods if not p["spec"].get("nodeName")]
        return len(bound) == 2 and len(pending) == 2 and all(_unschedulable_message(p) for p in pending)

    dev.wait_until(settled, 120, "2 pods on the virtual node and 2 refused")
    pods = _pods(dev, namespace, "app=capped")
    assert {p["spec"]["schedulerName"] for p in pods} == {FULL_SCAN_SCHEDULER}
    assert [p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName")] == [VIRTUAL, VIRTUAL]
    for pending in (p for p in pods if not p["spec"].get("nodeName")):
        message = _unschedulable_message(pending)
        assert "unit 2 (eci) is at its max of 2 pods" in message, message
    dev.kubectl("delete", "resourcepolicy", "rp", "-n", namespace)
