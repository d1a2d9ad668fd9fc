"""While ``kq serve`` hangs, admitted jobs keep running and nothing new runs around the queue (issue 40,
docs/security.md "While the service is down").

The tree: one leaf ``Team-down`` of 1 CPU over one namespace where ``alice`` has ``edit``. A Job of 3 pods
made one after another (parallelism 1, completions 3, each pod succeeding after 3 s, 1 CPU: the whole quota)
is admitted and its first pod runs; alice's bare Pod of 2 CPU waits held (beside the Job's 1 CPU it would take
the quota over its admission limit, max 1 CPU times the service's default oversell rate 2). Then the
service is frozen with SIGSTOP (a hang: the API server's calls to it time out rather than being refused at
once), and:

* the admitted Job's next pods are still created, scheduled and run, and the Job completes;
* a Job alice creates meanwhile is refused or stays held: it never runs a pod;
* a bare Pod alice creates meanwhile is refused or stays gated;
* alice cannot set ``nodeName``, remove the held Pod's scheduling gate, strip a pod's quota label or remove
  its extender marker.

The service is thawed (SIGCONT) and restarted at the end, so the cluster is healthy for the next module.
"""

from __future__ import annotations

import functools
import json
import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from tests import builders
from tests.builders import job_manifest
from tests.e2e.conftest import DevCluster
from tests.e2e.harness import create_namespaces, installed_tree, unique, wait_managed, wait_routed
from webhook.api.names import ADMISSION_GATE, EXTENDER_RESOURCE, QUOTA_LABEL, SUCCEED_AFTER_ANNOTATION
from webhook.devcluster import processes

pytestmark = pytest.mark.e2e

USER = "alice"
STEADY = "steady"
"""The Job admitted before the service hangs."""
WAITING = "waiting"
"""alice's bare Pod, held (gated) before the service hangs: the quota cannot admit it beside the steady Job."""

_pod = functools.partial(builders.pod, cpu="1", namespace=None, container="c", terminationGracePeriodSeconds=0)


def _service_pid(dev: DevCluster) -> int:
    pid = processes.running_pid(dev.config.run, "kq-serve", str(dev.config.state_dir))
    assert pid is not None, "kq serve of the test cluster is not running"
    return pid


def _pods(dev: DevCluster, namespace: str, selector: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = dev.get_json("pods", "-n", namespace, "-l", selector)["items"]
    return items


def _service_lines(dev: DevCluster, space: str) -> list[str]:
    """The lines of ``kq serve``'s log that name ``space`` (its decisions there)."""
    log = dev.config.logs / "kq-serve.log"
    lines = log.read_text(errors="replace").splitlines() if log.exists() else [f"no log at {log}"]
    return [line for line in lines if space in line][-40:]


@pytest.fixture(scope="module")
def frozen(dev_cluster: DevCluster) -> Iterator[str]:
    """The namespace, once the steady Job runs its first pod, alice's bare Pod waits held, and ``kq serve``
    is stopped with SIGSTOP; thawed and restarted afterwards."""
    dev = dev_cluster
    space = unique("down")
    spec = {"root": {"name": "root", "min": {"cpu": 1}, "max": {"cpu": 1}, "children": [
        {"name": "Team-down", "min": {"cpu": 1}, "max": {"cpu": 1}, "namespaces": [space]}]}}
    stopped: int | None = None
    try:
        create_namespaces(dev, space)
        dev.kubectl("create", "rolebinding", "alice-edit", "-n", space, "--clusterrole=edit", f"--user={USER}")
        with installed_tree(dev, spec):
            wait_managed(dev, space)
            wait_routed(dev, space)  # the steady Job's first pod is marked like the ones made while frozen
            steady = job_manifest(STEADY, pods=1, completions=3, cpu=1,
                                  template_annotations={SUCCEED_AFTER_ANNOTATION: "3s"})
            dev.kubectl("create", "-n", space, "-f", "-", stdin=json.dumps(steady), user=USER)
            dev.wait_until(
                lambda: any(pod["status"].get("phase") == "Running"
                            for pod in _pods(dev, space, f"job-name={STEADY}")),
                60, "the steady Job admitted and its first pod running",
            )
            # 2 CPU: at 1 CPU the queue may admit it at once (1 + 1 is within max x 2), and the scheduler
            # keeps it pending; a test of the gate needs a pod the queue holds.
            created = dev.kubectl_result("create", "-n", space, "-f", "-",
                                         stdin=json.dumps(_pod(WAITING, cpu="2")), user=USER)
            assert created.returncode == 0, created.stderr
            waiting = dev.get_json("pod", WAITING, "-n", space)
            # On failure, say who wrote the pod, how its namespace was labelled, whether the steady Job went
            # through the queue, and what the service decided in that namespace.
            assert {"name": ADMISSION_GATE} in waiting["spec"].get("schedulingGates", []), json.dumps({
                "pod": waiting["metadata"], "namespace": dev.get_json("namespace", space)["metadata"],
                "steady": dev.get_json("job", STEADY, "-n", space)["metadata"],
                "steady pods": [pod["metadata"] for pod in _pods(dev, space, f"job-name={STEADY}")],
                "service": _service_lines(dev, space)}, indent=1)
            stopped = _service_pid(dev)
            os.kill(stopped, signal.SIGSTOP)
            try:
                yield space
            finally:
                os.kill(stopped, signal.SIGCONT)
                stopped = None
                dev.restart_service()
    finally:
        if stopped is not None:
            os.kill(stopped, signal.SIGCONT)
        dev.kubectl("delete", "namespace", space, "--wait=false", "--ignore-not-found")


def test_a_new_job_is_refused_or_stays_held(dev_cluster: DevCluster, frozen: str) -> None:
    dev, space = dev_cluster, frozen
    late = job_manifest("late", pods=1, cpu=1, suspend=False)
    created = dev.kubectl_result("create", "-n", space, "-f", "-", stdin=json.dumps(late), user=USER)
    if created.returncode != 0:
        assert "late" not in dev.kubectl("get", "jobs", "-n", space, "-o", "name")
        return
    assert dev.get_json("job", "late", "-n", space)["spec"].get("suspend") is True

    def seen_suspended() -> bool:
        """The Job controller has synced the Job and found it suspended (its own condition, not a pause)."""
        conditions = dev.get_json("job", "late", "-n", space).get("status", {}).get("conditions", [])
        return any(c.get("type") == "Suspended" and c.get("status") == "True" for c in conditions)

    dev.wait_until(seen_suspended, 60, "the Job controller to mark the late Job Suspended")
    assert _pods(dev, space, "job-name=late") == []


def test_a_users_bare_pod_is_refused_or_stays_gated(dev_cluster: DevCluster, frozen: str) -> None:
    dev, space = dev_cluster, frozen
    created = dev.kubectl_result("create", "-n", space, "-f", "-", stdin=json.dumps(_pod("bare")), user=USER)
    if created.returncode != 0:
        assert "bare" not in dev.kubectl("get", "pods", "-n", space, "-o", "name")
        return
    # Stored with the gate, nobody but the frozen service may lift it (the next test), so kube-scheduler
    # cannot place it: what the API server stored is the whole answer, no pause needed.
    pod = dev.get_json("pod", "bare", "-n", space)
    assert {"name": ADMISSION_GATE} in pod["spec"].get("schedulingGates", [])
    assert not pod["spec"].get("nodeName")


def test_a_user_cannot_bind_ungate_or_unmark_a_pod(dev_cluster: DevCluster, frozen: str) -> None:
    dev, space = dev_cluster, frozen
    bound = dev.kubectl_result("create", "-n", space, "-f", "-", stdin=json.dumps(_pod("bound", nodeName="ecs-0")),
                               user=USER)
    assert bound.returncode != 0
    assert "bound" not in dev.kubectl("get", "pods", "-n", space, "-o", "name")

    ungate = json.dumps([{"op": "remove", "path": "/spec/schedulingGates"}])
    result = dev.kubectl_result("patch", "pod", WAITING, "-n", space, "--type=json", "-p", ungate, user=USER)
    assert result.returncode != 0
    assert {"name": ADMISSION_GATE} in dev.get_json("pod", WAITING, "-n", space)["spec"]["schedulingGates"]

    unlabel = json.dumps([{"op": "remove", "path": "/metadata/labels/" + QUOTA_LABEL.replace("/", "~1")}])
    result = dev.kubectl_result("patch", "pod", WAITING, "-n", space, "--type=json", "-p", unlabel, user=USER)
    assert result.returncode != 0
    assert dev.get_json("pod", WAITING, "-n", space)["metadata"]["labels"][QUOTA_LABEL] == "Team-down"

    marker = "/spec/containers/0/resources/requests/" + EXTENDER_RESOURCE.replace("/", "~1")
    unmark = json.dumps([{"op": "remove", "path": marker}])
    # Refused, or (a plain pod update cannot change resources) taken back by the API server: the marker stays.
    dev.kubectl_result("patch", "pod", WAITING, "-n", space, "--type=json", "-p", unmark, user=USER)
    requests = dev.get_json("pod", WAITING, "-n", space)["spec"]["containers"][0]["resources"]["requests"]
    assert requests[EXTENDER_RESOURCE] == "1"


def test_an_admitted_jobs_next_pods_still_run_and_it_completes(dev_cluster: DevCluster, frozen: str) -> None:
    dev, space = dev_cluster, frozen

    def succeeded() -> int:
        return int(dev.get_json("job", STEADY, "-n", space).get("status", {}).get("succeeded", 0))

    dev.wait_until(lambda: succeeded() == 3, 150, "the steady Job's 3 pods to succeed one after another")
    pods = _pods(dev, space, f"job-name={STEADY}")
    assert len(pods) == 3
    for pod in pods:  # each went through the scheduler (and its extender), with its quota label and marker
        assert pod["metadata"]["labels"][QUOTA_LABEL] == "Team-down"
        assert pod["spec"]["containers"][0]["resources"]["requests"][EXTENDER_RESOURCE] == "1"
        assert pod["spec"]["nodeName"]
