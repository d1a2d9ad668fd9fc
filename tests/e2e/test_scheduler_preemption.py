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

from collections.abc import Iterator

import pytest

from tests.e2e import preemption_support as pre
from tests.e2e import setups
from tests.e2e.conftest import DevCluster
from tests.e2e.harness import policies_watched, quotas, unique

pytestmark = pytest.mark.e2e

class Spaces:
    def __init__(self) -> None:
        self.a, self.a2, self.b = unique("pre-a"), unique("pre-a2"), unique("pre-b")
        self.p, self.p2 = unique("pre-p"), unique("pre-p2")


@pytest.fixture(scope="module")
def spaces(dev_cluster: DevCluster) -> Iterator[Spaces]:
    names = Spaces()
    children = [
        {"name": "Department-a", "min": {"cpu": 20}, "max": {"cpu": 100}, "namespaces": [names.a, names.a2]},
        {"name": "Department-b", "min": {"cpu": 40}, "max": {"cpu": 100}, "namespaces": [names.b]},
        {"name": "Team-p", "min": {"cpu": 40}, "max": {"cpu": 100}, "namespaces": [names.p, names.p2],
         "attributes": {"preempt-policy": "PreemptLowerPriority"}},
    ]
    users = {names.a: "alice", names.a2: "bob", names.b: "carol", names.p: "alice", names.p2: "bob"}
    with quotas(dev_cluster, children, users):
        yield names


def test_a_colleagues_pod_of_the_same_quota_is_not_preempted(dev_cluster: DevCluster, spaces: Spaces) -> None:
    # The first escape: Department-a sets no preempt-policy, so priorities inside it do not preempt.
    dev = dev_cluster
    uids = pre.fill(dev, spaces.a2, "bob", "ecs-1", [("colleague", 20)])
    pre.create(dev, spaces.a, pre.pod("mine", 20, "ecs-1", "priority-3"), "alice")
    pre.refused_preemption_keeps(dev, spaces.a, "mine", {"colleague": (spaces.a2, uids["colleague"])})
    dev.kubectl("delete", "pod", "mine", "-n", spaces.a, "--wait=true")
    dev.kubectl("delete", "pod", "colleague", "-n", spaces.a2, "--wait=true")


def test_a_quota_under_its_min_keeps_its_pods(dev_cluster: DevCluster, spaces: Spaces) -> None:
    # The second escape: Department-b runs 30 of its 40 min; alice's Department-a is within its own
    # min (20 of 20 with her pod), but that gives her no right to Department-b's guarantee.
    dev = dev_cluster
    uids = pre.fill(dev, spaces.b, "carol", "ecs-2", [("c1", 15), ("c2", 15)])
    pre.create(dev, spaces.a, pre.pod("mine2", 20, "ecs-2", "priority-3"), "alice")
    pre.refused_preemption_keeps(dev, spaces.a, "mine2", {name: (spaces.b, uid) for name, uid in uids.items()})
    dev.kubectl("delete", "pod", "mine2", "-n", spaces.a, "--wait=true")
    dev.kubectl("delete", "pod", "--all", "-n", spaces.b, "--wait=true")


def test_preemption_inside_a_quota_that_allows_it_still_works(dev_cluster: DevCluster, spaces: Spaces) -> None:
    # Team-p sets preempt-policy: PreemptLowerPriority, and alice's pod keeps it within its min (20 + 20 of 40).
    dev = dev_cluster
    uids = pre.fill(dev, spaces.p2, "bob", "ecs-3", [("batch", 20)])
    before = pre.preempt_requests(dev, "allowed")
    pre.create(dev, spaces.p, pre.pod("urgent", 20, "ecs-3", "priority-3"), "alice")
    dev.wait_until(lambda: pre.evicted(dev, spaces.p2, "batch", uids["batch"]), 90,
                   "bob's lower-priority pod preempted")
    dev.wait_until(lambda: pre.running(dev, spaces.p, "urgent"), 90, "alice's pod running in its place")
    assert pre.preempt_requests(dev, "allowed") > before
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
    policies_watched(dev, spaces.p)
    try:
        pre.create(dev, spaces.b, pre.pod("peer", 20, "ecs-2", "priority-3"), "carol")
        dev.wait_until(lambda: pre.running(dev, spaces.b, "peer"), 90, "carol's priority-3 pod running on ecs-2")
        uids = pre.fill(dev, spaces.p2, "bob", "ecs-3", [("batch2", 20)])
        unpinned = dict(pre.pod("pinned", 20, "ecs-0", "priority-3"))
        del unpinned["spec"]["nodeSelector"]  # the policy alone says where it may go
        pre.create(dev, spaces.p, unpinned, "alice")
        pre.refused_preemption_keeps(dev, spaces.p, "pinned", {"batch2": (spaces.p2, uids["batch2"])})
        # The same pod under a policy that moves on when unit 1 lacks room: bob's pod goes, hers runs there.
        dev.kubectl("delete", "pod", "pinned", "-n", spaces.p, "--wait=true")
        del policy["spec"]["whenTryNextUnits"]
        dev.apply(policy)
        policies_watched(dev, spaces.p)
        pre.create(dev, spaces.p, unpinned, "alice")
        dev.wait_until(lambda: pre.evicted(dev, spaces.p2, "batch2", uids["batch2"]), 90, "bob's pod preempted")
        dev.wait_until(lambda: pre.running(dev, spaces.p, "pinned"), 90, "alice's pod running on ecs-3")
        placed = pre.pod_state(dev, spaces.p, "pinned")
        assert placed is not None and placed["spec"]["nodeName"] == "ecs-3"
    finally:
        dev.kubectl("delete", "resourcepolicy", "pinned", "-n", spaces.p, "--ignore-not-found")
        for namespace in (spaces.p, spaces.p2, spaces.b):
            dev.kubectl("delete", "pod", "--all", "-n", namespace, "--wait=true")
