"""Only the pods whose rules live in the extender call it (docs/placement.md, "Which pods the extender sees").

The webhook writes the marker resource ``kube-queue.x-k8s.io/extender`` on every pod of the tree's namespaces
and every pod a ResourcePolicy selects; the scheduler's ``managedResources`` sends only those to the
extender. Here, on the dev cluster:

* alice (``edit`` in her namespaces) cannot create a pod of her quota's namespace without the marker, nor take
  it off afterwards, so the pod-level quota keeps holding her;
* a pod outside the tree that tolerates every taint is still kept off the virtual node, now by the default
  profile's ``addedAffinity``, without the extender being asked;
* with the extender killed (the operator's 3 a.m.), pods outside the tree are still scheduled, while the
  pods of the tree wait (never placed unchecked) and go once the extender is back;
* no quota counts the marker.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import DevCluster
from tests.e2e.setups import managed
from webhook.api.names import EXTENDER_RESOURCE
from webhook.cli import devsystem
from webhook.devcluster import processes

pytestmark = pytest.mark.e2e

__all__ = ["managed"]  # the seed's tree over fresh namespaces, alice with `edit` in each

ALICE = "alice"
VIRTUAL = "virtual-kubelet"
EXTENDER = "kq-extender"


def _pod(name: str, namespace: str, cpu: str = "100m", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"test": "marker"}},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}],
            **spec,
        },
    }


def _get(dev: DevCluster, namespace: str, name: str) -> dict[str, Any]:
    result: dict[str, Any] = dev.get_json("pod", name, "-n", namespace)
    return result


def _marker(pod: dict[str, Any]) -> tuple[str | None, str | None]:
    resources = pod["spec"]["containers"][0].get("resources") or {}
    return (resources.get("requests") or {}).get(EXTENDER_RESOURCE), (resources.get("limits") or {}).get(
        EXTENDER_RESOURCE
    )


def _node(dev: DevCluster, namespace: str, name: str) -> str:
    return str(_get(dev, namespace, name)["spec"].get("nodeName") or "")


def _asked_about(dev: DevCluster, namespace: str, name: str) -> bool:
    """Whether the extender's log holds a filter decision about the pod (one line per decision)."""
    log = dev.config.logs / f"{EXTENDER}.log"
    return any(f"pod={namespace}/{name} " in line for line in log.read_text(errors="replace").splitlines())


@pytest.fixture
def extender_killed(dev_cluster: DevCluster) -> Iterator[None]:
    """Kill ``kq extender``; start it again after the test whatever happens."""
    marker = str(dev_cluster.config.state_dir)
    assert processes.stop(dev_cluster.config.run, EXTENDER, marker)
    try:
        yield
    finally:
        start_extender(dev_cluster)


def start_extender(dev: DevCluster) -> None:
    if processes.running_pid(dev.config.run, EXTENDER, str(dev.config.state_dir)) is not None:
        return
    for component in devsystem.extender_components(dev.config, dev.bins):
        processes.start(component, dev.config.run, dev.config.logs)
        port = component.port
        assert port is not None
        processes.wait_for(lambda p=port: processes.port_open(p), 60, f"kq extender to listen on {port}")


def test_alice_cannot_create_or_make_a_pod_of_her_quota_without_the_marker(
    dev_cluster: DevCluster, managed: tuple[str, str, str]
) -> None:
    dev = dev_cluster
    namespace = managed[0]
    # She writes the marker at 0 herself, hoping the scheduler skips the extender: the webhook sets it to 1.
    sneaky = _pod("sneaky", namespace)
    sneaky["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "100m", EXTENDER_RESOURCE: "0"}, "limits": {EXTENDER_RESOURCE: "0"}}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "plain", "namespace": namespace},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "plain"}},
            "template": {"metadata": {"labels": {"app": "plain"}}, "spec": _pod("x", namespace)["spec"]},
        },
    }
    for obj in (sneaky, deployment):
        result = dev.create(obj, user=ALICE)
        assert result.returncode == 0, result.stderr
    assert _marker(_get(dev, namespace, "sneaky")) == ("1", "1")
    dev.wait_until(lambda: bool(dev.get_json("pods", "-n", namespace, "-l", "app=plain")["items"]), 60,
                   "the Deployment's pod")
    (owned,) = dev.get_json("pods", "-n", namespace, "-l", "app=plain")["items"]
    assert _marker(owned) == ("1", "1")  # a workload controller's pod too
    # Taking it off afterwards: the pod's resources do not change by update, nor by the resize subresource.
    # (Taking the request alone off changes nothing: the API server defaults it from the limit again.)
    escaped = EXTENDER_RESOURCE.replace("/", "~1")
    removal = json.dumps([
        {"op": "remove", "path": f"/spec/containers/0/resources/{field}/{escaped}"} for field in ("requests", "limits")
    ])
    for extra in ((), ("--subresource=resize",)):
        result = dev.kubectl_result("patch", "pod", "sneaky", "-n", namespace, "--type=json", "-p", removal, *extra,
                                    user=ALICE)
        assert result.returncode != 0, f"alice took the marker off with {extra}: {result.stdout}"
        assert _marker(_get(dev, namespace, "sneaky")) == ("1", "1")
    dev.kubectl("delete", "deployment", "plain", "-n", namespace)


def test_a_pod_outside_the_tree_tolerating_everything_stays_off_the_virtual_node_unasked(
    dev_cluster: DevCluster, managed: tuple[str, str, str]
) -> None:
    dev = dev_cluster
    outside = managed[2]
    names = [f"anything-{index}" for index in range(6)]
    for name in names:
        result = dev.create(_pod(name, outside, tolerations=[{"operator": "Exists"}]), user=ALICE)
        assert result.returncode == 0, result.stderr
    dev.wait_until(lambda: all(_node(dev, outside, name) for name in names), 90, "the pods bound")
    nodes = {_node(dev, outside, name) for name in names}
    assert VIRTUAL not in nodes and all(node.startswith("ecs-") for node in nodes), nodes
    assert all(_marker(_get(dev, outside, name)) == (None, None) for name in names)
    assert not any(_asked_about(dev, outside, name) for name in names)  # the scheduler never asked the extender
    # Aimed at the virtual node: refused by the default profile itself.
    dev.create(_pod("aimed", outside, tolerations=[{"operator": "Exists"}], nodeSelector={"type": VIRTUAL}),
               user=ALICE)

    def refused() -> bool:
        conditions = _get(dev, outside, "aimed").get("status", {}).get("conditions", [])
        return any(c.get("type") == "PodScheduled" and c.get("status") == "False" for c in conditions)

    dev.wait_until(refused, 60, "the pod aimed at the virtual node refused")
    assert not _node(dev, outside, "aimed")


def test_with_the_extender_dead_pods_outside_the_tree_still_run_and_the_tree_waits(
    dev_cluster: DevCluster, managed: tuple[str, str, str], extender_killed: None
) -> None:
    dev = dev_cluster
    inside, _, outside = managed
    dev.create(_pod("elsewhere", outside), user=ALICE)
    dev.create(_pod("queued", inside), user=ALICE)
    dev.wait_until(lambda: bool(_node(dev, outside, "elsewhere")), 60, "the pod outside the tree bound")
    # The bare pod of the tree is held by the queue's gate, then released; with no extender it is not placed.
    dev.wait_until(lambda: not _get(dev, inside, "queued")["spec"].get("schedulingGates"), 60, "the gate lifted")

    def failed_on_the_extender() -> bool:
        events = dev.kubectl("get", "events", "-n", inside, "--field-selector", "involvedObject.name=queued")
        return "FailedScheduling" in events

    dev.wait_until(failed_on_the_extender, 60, "the scheduler to fail the tree's pod on the dead extender")
    assert not _node(dev, inside, "queued")
    start_extender(dev)
    dev.wait_until(lambda: bool(_node(dev, inside, "queued")), 120, "the tree's pod placed once the extender is back")


def test_no_quota_counts_the_marker(dev_cluster: DevCluster, managed: tuple[str, str, str]) -> None:
    dev = dev_cluster
    inside = managed[0]
    dev.create(_pod("counted", inside, cpu="1"), user=ALICE)
    dev.wait_until(lambda: bool(_node(dev, inside, "counted")), 90, "the pod placed")
    assert _asked_about(dev, inside, "counted")  # the pod-level quota checked it

    def tree_status() -> dict[str, Any]:
        trees = dev.get_json("elasticquotatrees", "-n", "kube-system")["items"]
        status: dict[str, Any] = trees[0].get("status") or {}
        return status

    dev.wait_until(lambda: "cpu" in json.dumps(tree_status()), 60, "the tree's status to show usage")
    assert EXTENDER_RESOURCE not in json.dumps(tree_status())
    queues = dev.get_json("queues", "-n", "kube-queue")["items"]
    assert EXTENDER_RESOURCE not in json.dumps(queues)
