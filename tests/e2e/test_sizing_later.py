"""A job held before its namespace got a LimitRange is sized by it once it comes (docs/queueing.md, "LimitRange
defaults"), on the dev cluster: the pods the API server makes for it after its admission get the defaults, so
the queue counts them before it admits the job, not after.

The tree: one leaf Team of 20 CPU over alice's namespace, with at most one job at a time (``max-jobs`` 1). Alice's
first Job (one pod of 10 CPU) runs; her second, whose container asks for nothing, waits behind it for the job
count. Then the operator adds a LimitRange whose default request is 15 CPU: the waiting Job's two pods will ask
for 30 CPU, more than Team's 20, so when the first Job is deleted it stays queued, and ``kq why`` says why. Before
this, it was sized as nothing and admitted, and the extender kept its second pod out of the quota. With a default
of 5 CPU (10 in all) it is admitted and both pods run, each with 5 CPU.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.e2e import preemption_support as pre
from tests.e2e.conftest import DevCluster
from tests.e2e.harness import edit_kubeconfig, kq_as, passes_made, quotas, unique, wait_running
from webhook.api.names import MAX_JOBS

pytestmark = pytest.mark.e2e


def _limit_range(namespace: str, cpu: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "defaults", "namespace": namespace},
            "spec": {"limits": [{"type": "Container", "defaultRequest": {"cpu": cpu}}]}}


def test_a_job_held_before_its_namespaces_limit_range_is_sized_by_it(dev_cluster: DevCluster) -> None:
    dev = dev_cluster
    space = unique("sized")
    team = {"name": "Team", "min": {"cpu": 20}, "max": {"cpu": 20, MAX_JOBS: 1}, "namespaces": [space]}
    with quotas(dev, [team], {space: "alice"}):
        kubeconfig = edit_kubeconfig(dev, space, "dev")

        def why(name: str) -> dict[str, Any]:
            result = kq_as(kubeconfig, "why", name, "-n", space, "-o", "json")
            assert result.returncode == 0, result.stderr
            answer: dict[str, Any] = json.loads(result.stdout)
            return answer

        pre.create(dev, space, pre.job("first", 1, 10), "alice")
        wait_running(dev, space, "batch.kubernetes.io/job-name=first", 1)
        pre.create(dev, space, pre.job("late", 2, None), "alice")
        dev.wait_until(lambda: why("late")["status"] == "QUEUING", 60, "the late Job queued behind the job count")

        dev.apply(_limit_range(space, "15"))
        dev.kubectl("delete", "job", "first", "-n", space, "--wait=false")
        dev.wait_until(lambda: not dev.get_json("pods", "-n", space, "-l", "batch.kubernetes.io/job-name=first")
                       ["items"], 60, "the first Job's pod gone")
        passes_made(dev, 2, space)  # with the job count free: a job sized as nothing would be admitted now
        answer: dict[str, Any] = {}

        def explained() -> bool:
            answer.clear()
            answer.update(why("late"))
            return "cpu request 30" in " ".join(str(answer["explanation"]).split())

        dev.wait_until(explained, 60, "the controller's answer naming the late Job's 30 CPU")
        assert answer["status"] == "QUEUING", json.dumps(answer, indent=1)
        assert dev.get_json("job", "late", "-n", space)["spec"].get("suspend") is True

        dev.apply(_limit_range(space, "5"))
        pods = wait_running(dev, space, "batch.kubernetes.io/job-name=late", 2)
        for name in pods:
            pod = dev.get_json("pod", name, "-n", space)
            assert pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "5", pod["spec"]
