"""kube-scheduler's preemption follows the quota rules (issue 34, docs/pod-quota.md "Preemption"), on the dev
cluster, as namespace users with the built-in ``edit`` role would try it.

The tree: Department-a (min 20: alice's and bob's namespaces), Department-b (min 40: carol's), Team-p (min 40:
alice's and bob's other namespaces, ``preempt-policy: PreemptLowerPriority``); the seed's PriorityClasses
(``priority-3`` preempts lower priorities, as every PriorityClass does by default). Each test fills one 32-CPU
node (``nodeSelector``) with lower-priority pods and has alice create a ``priority-3`` pod that the queue
admits (its quota has room) but the node has not:

* a colleague's pod of her own quota, which sets no ``preempt-policy``, is not evicted (the issue's first
  escape);
* carol's pods are not evicted while Department-b is under its min (30 of 40: the second escape);
* in Team-p, whose ``preempt-policy`` allows it, bob's lower-priority pod is evicted and alice's runs;
* but not on a node of a unit alice's ResourcePolicy does not let her pod use yet: there bob's pod would be
  evicted in vain (docs/pod-quota.md, "Preemption").
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import setups
from tests.e2e.conftest import DevCluster
from tests.e2e.harness import create_namespaces, installed_tree, unique, wait_managed

pytestmark = pytest.mark.e2e

SEED_CLASSES = Path(__file__).resolve().parents[2] / "examples" / "seed" / "02-priorityclasses.yaml"
USERS = ("alice", "bob", "carol")


class Spaces:
    def __init__(self) -> None:
        self.a, self.a2, self.b = unique("pre-a"), unique("pre-a2"), unique("pre-b")
        self.p, self.p2 = unique("pre-p"), unique("pre-p2")

    def all(self) -> tuple[str, ...]:
        return (self.a, self.a2, self.b, self.p, self.p2)


@pytest.fixture(scope="module")
def spaces(dev_cluster: DevCluster) -> Iterator[Spaces]:
    dev = dev_cluster
    names = Spaces()
    dev.restart_service("--oversellrate=1", "--status-interval=1")
    dev.kubectl("apply", "-f", str(SEED_CLASSES))
    spec = {"root": {"name": "root", "min": {"cpu": 100, "memory": "100Gi"}, "max": {"cpu": 100, "memory": "100Gi"},
                     "children": [
        {"name": "Department-a", "min": {"cpu": 20}, "max": {"cpu": 100}, "namespaces": [names.a, names.a2]},
        {"name": "Department-b", "min": {"cpu": 40}, "max": {"cpu": 100}, "namespaces": [names.b]},
        {"name": "Team-p", "min": {"cpu": 40}, "max": {"cpu": 100}, "namespaces": [names.p, names.p2],
         "attributes": {"preempt-policy": "PreemptLowerPriority"}},
    ]}}
    try:
        create_namespaces(dev, *names.all())
        for user, namespace in (("alice", names.a), ("bob", names.a2), ("carol", names.b), ("alice", names.p),
                                ("bob", names.p2)):
            dev.kubectl("create", "rolebinding", f"{user}-edit", "-n", namespace, "--clusterrole=edit",
                        f"--user={user}")
        with installed_tree(dev, spec):
            wait_managed(dev, *names.all())
            yield names
    finally:
        dev.kubectl("delete", "namespace", *names.all(), "--wait=false", "--ignore-not-found")
        dev.restart_service()


def _pod(name: str, cpu: int, node: str, priority_class: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 0,
        "nodeSelector": {"kubernetes.io/hostname": node},
        "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": str(cpu)}}}],
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def _create(dev: DevCluster, namespace: str, obj: dict[str, Any], user: str) -> None:
    result = dev.create({**obj, "metadata": {**obj["metadata"], "namespace": namespace}}, user=user)
    assert result.returncode == 0, result.stderr


def _pod_state(dev: DevCluster, namespace: str, name: str) -> dict[str, Any] | None:
    result = dev.kubectl_result("get", "pod", name, "-n", namespace, "-o", "json")
    if result.returncode != 0:
        return None
    obj: dict[str, Any] = json.loads(result.stdout)
    return obj


def _running(dev: DevCluster, namespace: str, name: str) -> bool:
    pod = _pod_state(dev, namespace, name)
    return pod is not None and pod["status"].get("phase") == "Running" and not pod["metadata"].get(
        "deletionTimestamp")


def _evicted(dev: DevCluster, namespace: str, name: str, uid: str) -> bool:
    """Gone, being deleted, or re-created: evicted."""
    pod = _pod_state(dev, namespace, name)
    return pod is None or pod["metadata"]["uid"] != uid or bool(pod["metadata"].get("deletionTimestamp"))


def _preempt_requests(dev: DevCluster, result: str) -> float:
    url = f"http://127.0.0.1:{dev.config.ports.extender}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    wanted = f'kube_queue_extender_requests_total{{result="{result}",verb="preempt"}}'
    for line in text.splitlines():
        if line.startswith(wanted):
            return float(line.split()[-1])
    return 0.0


def _fill(dev: DevCluster, namespace: str, user: str, node: str, pods: list[tuple[str, int]]) -> dict[str, str]:
    """``pods`` (name, CPU) of priority 0 on ``node``, created as ``user`` and running; their uids."""
    for name, cpu in pods:
        _create(dev, namespace, _pod(name, cpu, node), user)
    uids: dict[str, str] = {}
    for name, _ in pods:

        def running(pod_name: str = name) -> bool:
            return _running(dev, namespace, pod_name)

        dev.wait_until(running, 90, f"{namespace}/{name} running on {node}")
        pod = _pod_state(dev, namespace, name)
        assert pod is not None
        uids[name] = pod["metadata"]["uid"]
    return uids


def _refused_preemption_keeps(dev: DevCluster, namespace: str, preemptor: str,
                              victims: dict[str, tuple[str, str]]) -> None:
    """The scheduler tries to preempt for ``preemptor`` and the extender refuses: ``victims`` (name -> namespace,
    uid) keep running, and the preemptor waits."""
    before = _preempt_requests(dev, "refused")

    def asked_or_evicted() -> bool:
        gone = any(_evicted(dev, ns, name, uid) for name, (ns, uid) in victims.items())
        return gone or _preempt_requests(dev, "refused") > before

    dev.wait_until(asked_or_evicted, 90, f"the scheduler's preemption attempt for {namespace}/{preemptor}")
    time.sleep(3)  # an eviction would show by now: the scheduler deletes its victims in the same cycle
    for name, (ns, uid) in victims.items():
        assert not _evicted(dev, ns, name, uid), f"the scheduler's preemption evicted {ns}/{name}"
    assert not _running(dev, namespace, preemptor)
    assert _preempt_requests(dev, "refused") > before


def test_a_colleagues_pod_of_the_same_quota_is_not_preempted(dev_cluster: DevCluster, spaces: Spaces) -> None:
    # The first escape: Department-a sets no preempt-policy, so priorities inside it do not preempt.
    dev = dev_cluster
    uids = _fill(dev, spaces.a2, "bob", "ecs-1", [("colleague", 20)])
    _create(dev, spaces.a, _pod("mine", 20, "ecs-1", "priority-3"), "alice")
    _refused_preemption_keeps(dev, spaces.a, "mine", {"colleague": (spaces.a2, uids["colleague"])})
    dev.kubectl("delete", "pod", "mine", "-n", spaces.a, "--wait=true")
    dev.kubectl("delete", "pod", "colleague", "-n", spaces.a2, "--wait=true")


def test_a_quota_under_its_min_keeps_its_pods(dev_cluster: DevCluster, spaces: Spaces) -> None:
    # The second escape: Department-b runs 30 of its 40 min; alice's Department-a is within its own
    # min (20 of 20 with her pod), but that gives her no right to Department-b's guarantee.
    dev = dev_cluster
    uids = _fill(dev, spaces.b, "carol", "ecs-2", [("c1", 15), ("c2", 15)])
    _create(dev, spaces.a, _pod("mine2", 20, "ecs-2", "priority-3"), "alice")
    _refused_preemption_keeps(dev, spaces.a, "mine2", {name: (spaces.b, uid) for name, uid in uids.items()})
    dev.kubectl("delete", "pod", "mine2", "-n", spaces.a, "--wait=true")
    dev.kubectl("delete", "pod", "--all", "-n", spaces.b, "--wait=true")


def test_preemption_inside_a_quota_that_allows_it_still_works(dev_cluster: DevCluster, spaces: Spaces) -> None:
    # Team-p sets preempt-policy: PreemptLowerPriority, and alice's pod keeps it within its min (20 + 20 of 40).
    dev = dev_cluster
    uids = _fill(dev, spaces.p2, "bob", "ecs-3", [("batch", 20)])
    before = _preempt_requests(dev, "allowed")
    _create(dev, spaces.p, _pod("urgent", 20, "ecs-3", "priority-3"), "alice")
    dev.wait_until(lambda: _evicted(dev, spaces.p2, "batch", uids["batch"]), 90, "bob's lower-priority pod preempted")
    dev.wait_until(lambda: _running(dev, spaces.p, "urgent"), 90, "alice's pod running in its place")
    assert _preempt_requests(dev, "allowed") > before
    dev.kubectl("delete", "pod", "urgent", "-n", spaces.p, "--wait=true")


def test_victims_on_a_unit_the_preemptors_policy_does_not_let_it_use_stay(dev_cluster: DevCluster,
                                                                           spaces: Spaces) -> None:
    # Alice's namespace places its pods on ecs-2 (unit 1) and only once that unit is at its max, which it has
    # not, on ecs-3 (unit 2). ecs-2 is full of carol's pod of alice's priority (no victim for the scheduler);
    # ecs-3 holds bob's lower-priority one. Team-p's rules let her take it (20 + 20 of its min 40), but her pod
    # could not use ecs-3 afterwards. The second half shows the quota alone would have let it go.
    dev = dev_cluster
    units = [{"resource": "ecs", "nodeSelector": {"kubernetes.io/hostname": node}} for node in ("ecs-2", "ecs-3")]
    policy = setups.resource_policy(spaces.p, {}, units, name="pinned")
    policy["spec"]["whenTryNextUnits"] = {"policy": "ExceedMax"}
    dev.apply(policy)
    time.sleep(setups.WATCH_PROPAGATION)  # the policy reaches the extender's watch
    try:
        _create(dev, spaces.b, _pod("peer", 20, "ecs-2", "priority-3"), "carol")
        dev.wait_until(lambda: _running(dev, spaces.b, "peer"), 90, "carol's priority-3 pod running on ecs-2")
        uids = _fill(dev, spaces.p2, "bob", "ecs-3", [("batch2", 20)])
        unpinned = dict(_pod("pinned", 20, "ecs-0", "priority-3"))
        del unpinned["spec"]["nodeSelector"]  # the policy alone says where it may go
        _create(dev, spaces.p, unpinned, "alice")
        _refused_preemption_keeps(dev, spaces.p, "pinned", {"batch2": (spaces.p2, uids["batch2"])})
        # The same pod under a policy that moves on when unit 1 lacks room: bob's pod goes, hers runs there.
        dev.kubectl("delete", "pod", "pinned", "-n", spaces.p, "--wait=true")
        del policy["spec"]["whenTryNextUnits"]
        dev.apply(policy)
        time.sleep(setups.WATCH_PROPAGATION)
        _create(dev, spaces.p, unpinned, "alice")
        dev.wait_until(lambda: _evicted(dev, spaces.p2, "batch2", uids["batch2"]), 90, "bob's pod preempted")
        dev.wait_until(lambda: _running(dev, spaces.p, "pinned"), 90, "alice's pod running on ecs-3")
        placed = _pod_state(dev, spaces.p, "pinned")
        assert placed is not None and placed["spec"]["nodeName"] == "ecs-3"
    finally:
        dev.kubectl("delete", "resourcepolicy", "pinned", "-n", spaces.p, "--ignore-not-found")
        for namespace in (spaces.p, spaces.p2, spaces.b):
            dev.kubectl("delete", "pod", "--all", "-n", namespace, "--wait=true")
