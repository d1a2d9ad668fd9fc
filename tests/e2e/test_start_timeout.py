"""Start timeout and backoff on the dev cluster (docs/start-timeout.md): a released job whose pods cannot run
gives its quota back to the jobs behind it, waits in its Queue's backoff list, and retries at its place.

The service runs with an 8 s start timeout and 6-12 s backoff so the module takes about a minute. The quota
``Team-s`` (20 CPU) is filled by a job whose pods can never be scheduled (a nodeSelector no node has); the
job behind it must run once the first is backed off. ``Team-g`` holds a gang of 5 pods of 20 CPU on four
32-CPU nodes: four run, one cannot, and the whole gang is held again (its pods deleted), not left half
started on the nodes.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.builders import job_manifest
from tests.e2e.conftest import DevCluster
from tests.e2e.harness import create_namespaces, installed_tree, unique, wait_managed
from webhook.api.names import ADMISSION_ANNOTATION, BACKOFF_ANNOTATION
from webhook.api.objects import parse_time

pytestmark = pytest.mark.e2e

TIMEOUT = 8


@dataclasses.dataclass
class Setup:
    dev: DevCluster
    small: str
    gang: str

    def job(self, namespace: str, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self.dev.get_json("job", name, "-n", namespace)
        return result

    def queue(self, namespace: str, leaf: str) -> dict[str, Any]:
        result: dict[str, Any] = self.dev.get_json("queue", f"root-{leaf}-{namespace}", "-n", "kube-queue")
        details: dict[str, Any] = result.get("status", {}).get("queueItemDetails", {})
        return details

    def pods(self, namespace: str, job: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.dev.get_json("pods", "-n", namespace, "-l", f"job-name={job}")["items"]
        return items

    def kq(self, *args: str, namespace: str) -> str:
        argv = [sys.executable, "-m", "webhook.cli.main", *args, f"--kubeconfig={self.dev.config.kubeconfig}",
                "-n", namespace]
        result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
        assert result.returncode == 0, result.stderr
        return result.stdout


def _spec(small: str, gang: str) -> dict[str, Any]:
    return {
        "root": {
            "name": "root",
            "min": {"cpu": 140},
            "max": {"cpu": 140},
            "children": [
                {"name": "Team-s", "min": {"cpu": 20}, "max": {"cpu": 20}, "namespaces": [small]},
                {"name": "Team-g", "min": {"cpu": 120}, "max": {"cpu": 120}, "namespaces": [gang]},
            ],
        }
    }


@pytest.fixture(scope="module")
def setup(dev_cluster: DevCluster) -> Iterator[Setup]:
    dev = dev_cluster
    small, gang = unique("start-s"), unique("start-g")
    args = ("--oversellrate=1", "--status-interval=1", f"--start-timeout={TIMEOUT}s", "--backoff-base=6s",
            "--backoff-max=12s")
    dev.restart_service(*args)
    try:
        create_namespaces(dev, small, gang)
        with installed_tree(dev, _spec(small, gang)):
            wait_managed(dev, small, gang)
            yield Setup(dev, small, gang)
            for namespace in (small, gang):
                dev.kubectl("delete", "jobs", "--all", "-n", namespace, "--wait=false")
    finally:
        dev.kubectl("delete", "namespace", small, gang, "--wait=false", "--ignore-not-found")
        dev.restart_service()


def _admitted_at(job: dict[str, Any]) -> float | None:
    raw = job["metadata"].get("annotations", {}).get(ADMISSION_ANNOTATION)
    return parse_time(json.loads(raw).get("admittedAt")) if raw else None


def _backoff(job: dict[str, Any]) -> dict[str, Any] | None:
    raw = job["metadata"].get("annotations", {}).get(BACKOFF_ANNOTATION)
    return json.loads(raw) if raw else None


def test_an_unplaceable_job_gives_its_quota_to_the_job_behind_it_and_retries_in_order(setup: Setup) -> None:
    dev, ns = setup.dev, setup.small
    dev.kubectl("create", "-n", ns, "-f", "-", stdin=json.dumps(
        job_manifest("stuck", pods=2, cpu=10, memory="1Gi", nodeSelector={"kube-queue.test/no-such-node": "true"})))
    dev.wait_until(lambda: _admitted_at(setup.job(ns, "stuck")) is not None, 30, "stuck admitted")
    time.sleep(0.5)  # created after: behind it in the queue
    dev.kubectl("create", "-n", ns, "-f", "-", stdin=json.dumps(job_manifest("behind", pods=1, cpu=10, memory="1Gi")))
    dev.wait_until(lambda: [item["name"] for item in setup.queue(ns, "team-s").get("active", [])] == ["behind"],
                   30, "behind waiting at position 1")
    first_admission = _admitted_at(setup.job(ns, "stuck"))
    assert first_admission is not None

    # Past the timeout: stuck is held again, in backoff, and behind runs on the quota it gave back.
    dev.wait_until(lambda: _backoff(setup.job(ns, "stuck")) is not None, TIMEOUT + 30, "stuck backed off")
    stuck = setup.job(ns, "stuck")
    assert stuck["spec"]["suspend"] is True
    assert ADMISSION_ANNOTATION not in stuck["metadata"]["annotations"]
    note = _backoff(stuck)
    assert note is not None and note["attempts"] == 1 and note["category"] == "Unschedulable"
    assert "node affinity/selector" in note["reason"]
    dev.wait_until(lambda: sum(1 for pod in setup.pods(ns, "behind") if pod["status"].get("phase") == "Running") == 1,
                   30, "behind running")
    handoff = (_admitted_at(setup.job(ns, "behind")) or 0) - first_admission
    print(f"hand-off: behind admitted {handoff:.1f} s after stuck (start timeout {TIMEOUT} s)")
    assert handoff >= TIMEOUT
    dev.wait_until(lambda: [item["name"] for item in setup.queue(ns, "team-s").get("backoff", [])] == ["stuck"],
                   15, "stuck in the Queue's backoff list")
    (item,) = setup.queue(ns, "team-s")["backoff"]
    assert item["reason"] == "Unschedulable" and item["attempts"] == 1 and item["retryAt"]
    events = dev.get_json("events", "-n", ns, "--field-selector", "involvedObject.name=stuck,reason=BackOff")
    assert any(f"Did not start within {TIMEOUT}s" in event["message"] for event in events["items"])

    # The developer's view: BACKOFF, and why.
    listed = {item["name"]: item for item in json.loads(setup.kq("list", "-o", "json", namespace=ns))["items"]}
    assert listed["stuck"]["status"] in ("BACKOFF", "QUEUING")  # QUEUING once its retry time has come
    why = setup.kq("why", "stuck", namespace=ns)
    assert "BACKOFF" in why or "QUEUING" in why

    # At its retry time it queues again at its place (position 1: nothing else waits), and when behind is
    # deleted it is released again, fails again, and counts a second attempt.
    dev.wait_until(lambda: [item["name"] for item in setup.queue(ns, "team-s").get("active", [])] == ["stuck"],
                   30, "stuck back in the active list")
    dev.kubectl("delete", "job", "behind", "-n", ns)
    dev.wait_until(lambda: (_backoff(setup.job(ns, "stuck")) or {}).get("attempts") == 2, TIMEOUT + 40,
                   "a second failed start")


def test_a_half_started_gang_is_held_again_and_its_pods_leave_the_nodes(setup: Setup) -> None:
    dev, ns = setup.dev, setup.gang
    dev.kubectl("create", "-n", ns, "-f", "-", stdin=json.dumps(job_manifest("gang", pods=5, cpu=20, memory="1Gi")))

    def partly_running() -> bool:
        pods = setup.pods(ns, "gang")
        return sum(1 for pod in pods if pod["status"].get("phase") == "Running") == 4 and len(pods) == 5

    dev.wait_until(partly_running, 30, "4 of 5 gang pods running")
    dev.wait_until(lambda: _backoff(setup.job(ns, "gang")) is not None, TIMEOUT + 30, "gang backed off")
    note = _backoff(setup.job(ns, "gang"))
    assert note is not None and note["category"] == "PartialStart"
    assert note["reason"].startswith("only 4 of 5 pods run and it needs all at once")
    dev.wait_until(lambda: not setup.pods(ns, "gang"), 30, "the gang's pods deleted")
    status = dev.get_json("elasticquotatrees", "-n", "kube-system")["items"][0].get("status", {})
    team_g = next(child for child in status["root"]["children"] if child["name"] == "Team-g")
    assert team_g.get("used", {}).get("cpu", "0") in ("0", 0)


def test_a_job_whose_pods_the_api_server_refuses_is_backed_off_with_the_refusal(setup: Setup) -> None:
    """The namespace's ResourceQuota allows no pod: the Job controller cannot create the admitted Job's pods, and
    the backoff says what it was told, where `kq why` shows it (before, only "none of its 1 pod(s) was
    created")."""
    dev, ns = setup.dev, setup.gang
    dev.kubectl("delete", "jobs", "--all", "-n", ns, "--wait=true")  # the gang above, if it ran
    dev.apply({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "no-pods", "namespace": ns},
               "spec": {"hard": {"pods": "0"}}})
    try:
        dev.kubectl("create", "-n", ns, "-f", "-", stdin=json.dumps(job_manifest("unmade", pods=1, cpu=1,
                                                                                  memory="1Gi")))
        dev.wait_until(lambda: _backoff(setup.job(ns, "unmade")) is not None, TIMEOUT + 30, "unmade backed off")
        note = _backoff(setup.job(ns, "unmade"))
        assert note is not None and note["category"] == "NotCreated", note
        assert "its operator could not create them" in note["reason"] and "exceeded quota: no-pods" in note[
            "reason"], note
        why = setup.kq("why", "unmade", namespace=ns)
        assert "exceeded quota: no-pods" in why, why
    finally:
        dev.kubectl("delete", "resourcequota", "no-pods", "-n", ns, "--ignore-not-found")
