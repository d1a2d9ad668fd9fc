"""kube-scheduler's preemption does not evict for room the extender's filter would not give the preemptor
afterwards (docs/pod-quota.md, "Preemption"), on the dev cluster, as namespace users with ``edit`` would try it.

The tree: root 100 CPU; Serve (min 80: alice's namespace) and Batch (min 20: carol's). Carol runs 30 CPU on
ecs-1, alice a Deployment of 64 CPU elsewhere. Alice then scales a ``priority-3`` Deployment pinned to ecs-1:
the node is full, and at the root the room admitted jobs hold (30), her loose pods (64) and the new pod (10) come
to 104 of 100, so the filter refuses it. kube-scheduler offers one of carol's pods as the victim, and the quota
rules allow it (Serve stays within its min, Batch keeps its own).

* When carol's pods are a Job's, the Job makes the evicted pod again and keeps its room: evicting would be in
  vain (and again on each retry). Nobody is evicted.
* When they are bare Pods the queue released, each is its own job and ends with it: the preemption happens and
  alice's pod runs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.e2e import preemption_support as pre
from tests.e2e.conftest import DevCluster
from tests.e2e.harness import kq_as, running_pods, wait_running

pytestmark = pytest.mark.e2e

NODE = "ecs-1"


@pytest.fixture(scope="module")
def spaces(dev_cluster: DevCluster) -> Iterator[pre.Spaces]:
    with pre.serve_and_batch(dev_cluster, "held", serve_min=80, batch_min=20) as names:
        yield names


def _urgent_pod(dev: DevCluster, namespace: str) -> str:
    names: list[str] = []

    def made() -> bool:
        names[:] = [item["metadata"]["name"] for item in dev.get_json("pods", "-n", namespace, "-l", "app=urgent")
                    ["items"]]
        return len(names) == 1

    dev.wait_until(made, 60, "the urgent Deployment's pod")
    return names[0]


def test_a_jobs_pod_is_not_preempted_for_room_its_job_keeps(dev_cluster: DevCluster, spaces: pre.Spaces) -> None:
    dev = dev_cluster
    pre.create(dev, spaces.batch, pre.job("train", 3, 10, NODE), "carol")
    carol = wait_running(dev, spaces.batch, "batch.kubernetes.io/job-name=train", 3)
    pre.create(dev, spaces.serve, pre.deployment("web", 4, 16), "alice")
    wait_running(dev, spaces.serve, "app=web", 4)
    refused = pre.preempt_requests(dev, "refused")  # a Deployment's pod is tried at once
    pre.create(dev, spaces.serve, pre.deployment("urgent", 1, 10, node=NODE, priority_class="priority-3"), "alice")
    urgent = _urgent_pod(dev, spaces.serve)
    pre.refused_preemption_keeps(dev, spaces.serve, urgent, {name: (spaces.batch, uid) for name, uid in carol.items()},
                                 before=refused)
    assert running_pods(dev, spaces.batch, "batch.kubernetes.io/job-name=train") == carol
    # kq why names the refusal beside the scheduler's words.
    why = kq_as(dev.config.kubeconfig, "why", "deployment/urgent", "-o", "json", "-n", spaces.serve)
    assert why.returncode == 0, why.stderr
    (waiting,) = json.loads(why.stdout)["podsWaiting"]
    assert waiting["names"] == [urgent]
    assert "room held by admitted jobs" in waiting["preemptionRefused"], waiting

    # The same room held by bare Pods the queue released: each ends with its eviction, so one goes.
    dev.kubectl("delete", "deployment", "urgent", "-n", spaces.serve, "--wait=true")
    dev.kubectl("delete", "job", "train", "-n", spaces.batch, "--wait=true", "--cascade=foreground")
    bare = pre.fill(dev, spaces.batch, "carol", NODE, [(f"bare-{index}", 10) for index in range(3)])
    before = pre.preempt_requests(dev, "allowed")
    pre.create(dev, spaces.serve, pre.deployment("urgent", 1, 10, node=NODE, priority_class="priority-3"), "alice")
    urgent = _urgent_pod(dev, spaces.serve)
    dev.wait_until(lambda: any(pre.evicted(dev, spaces.batch, name, uid) for name, uid in bare.items()), 90,
                   "one of carol's bare pods preempted")
    dev.wait_until(lambda: pre.running(dev, spaces.serve, urgent), 90, "alice's urgent pod running on ecs-1")
    assert pre.preempt_requests(dev, "allowed") > before
