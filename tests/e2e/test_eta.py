"""When a waiting job should start (docs/eta.md), on the dev cluster, through kubectl and ``kq why -o json``.

The module restarts the service strictly by quota (``--oversellrate=1``) with estimates refreshed every second,
over the developer tree (root 100 CPU). Pods succeed after set times (``dev.kube-queue.x-k8s.io/succeed-after``):
a first ``warm`` job teaches the controller how long ``warm`` jobs run (its Queue's ``status.runtimeHistory``);
a second one then takes the whole root and a job that declares its run time waits behind it. ``kq why -o json``
replays the queue and gives its ``estimatedStart`` from the history, the Queue's status carries the controller's
own, ``kq list`` shows it, and the job starts about when it said. A restart keeps the history.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.builders import job_manifest
from tests.e2e.conftest import DevCluster
from tests.e2e.harness import create_namespaces, installed_tree, unique, wait_managed
from tests.e2e.setups import developer_tree_spec
from webhook.api.names import EXPECTED_RUNTIME_ANNOTATION, SUCCEED_AFTER_ANNOTATION
from webhook.api.objects import parse_time

pytestmark = pytest.mark.e2e

SERVICE_ARGS = ("--oversellrate=1", "--status-interval=1", "--eta-interval=1")
WARM_SECONDS = 12


@dataclass
class Setup:
    dev: DevCluster
    namespace: str

    def kq(self, *args: str) -> str:
        argv = [sys.executable, "-m", "webhook.cli.main", *args, f"--kubeconfig={self.dev.config.kubeconfig}",
                "-n", self.namespace]
        result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)
        assert result.returncode == 0, f"kq {' '.join(args)} failed ({result.returncode}): {result.stderr}"
        return result.stdout

    def create(self, name: str, pods: int, *, succeed_after: int, declared: str | None = None) -> None:
        manifest = job_manifest(name, namespace=self.namespace, pods=pods, cpu=10, memory="1Gi",
                                template_annotations={SUCCEED_AFTER_ANNOTATION: f"{succeed_after}s"})
        if declared is not None:
            manifest["metadata"]["annotations"] = {EXPECTED_RUNTIME_ANNOTATION: declared}
        created = self.dev.create(manifest)
        assert created.returncode == 0, created.stderr

    def job(self, name: str) -> dict[str, Any]:
        found: dict[str, Any] = self.dev.get_json("job", name, "-n", self.namespace)
        return found

    def queue(self) -> dict[str, Any]:
        found: dict[str, Any] = self.dev.get_json("queue", f"root-department-a-{self.namespace}", "-n", "kube-queue")
        return found

    def pod_start(self, job: str) -> float | None:
        pods = self.dev.get_json("pods", "-n", self.namespace, "-l", f"job-name={job}")["items"]
        starts = [parse_time(pod.get("status", {}).get("startTime")) for pod in pods
                  if pod.get("status", {}).get("phase") in ("Running", "Succeeded")]
        found = [moment for moment in starts if moment is not None]
        return min(found) if found else None


@pytest.fixture(scope="module")
def setup(dev_cluster: DevCluster) -> Iterator[Setup]:
    dev = dev_cluster
    names = (unique("eta-a"), unique("eta-a2"), unique("eta-b"))
    dev.restart_service(*SERVICE_ARGS)
    try:
        create_namespaces(dev, *names)
        with installed_tree(dev, developer_tree_spec(*names)):
            wait_managed(dev, *names)
            yield Setup(dev, names[0])
            for namespace in names:
                dev.kubectl("delete", "jobs", "--all", "-n", namespace, "--wait=false")
    finally:
        for namespace in names:
            dev.kubectl("delete", "namespace", namespace, "--wait=false", "--ignore-not-found")
        dev.restart_service()


def _history(setup: Setup) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = setup.queue().get("status", {}).get("runtimeHistory", [])
    return history


def _succeeded(setup: Setup, name: str) -> bool:
    return any(condition.get("type") == "Complete" and condition.get("status") == "True"
               for condition in setup.job(name).get("status", {}).get("conditions", []))


def test_a_waiting_job_is_told_when_it_starts_and_starts_about_then(setup: Setup) -> None:
    dev = setup.dev
    setup.create("warm-1", 1, succeed_after=WARM_SECONDS)
    dev.wait_until(lambda: _succeeded(setup, "warm-1"), 120, "warm-1 to succeed")
    dev.wait_until(lambda: [item["stem"] for item in _history(setup)] == ["warm"], 60,
                   "the controller to keep warm-1's run time in its Queue's status")
    (learned,) = _history(setup)[0]["seconds"]
    assert WARM_SECONDS <= learned <= WARM_SECONDS + 6  # from its pods first seen running (or its admission)

    setup.create("warm-2", 10, succeed_after=WARM_SECONDS)  # the whole root: 10 pods of 10 CPU
    dev.wait_until(lambda: setup.pod_start("warm-2") is not None, 120, "warm-2 to run")
    setup.create("next-1", 1, succeed_after=3, declared="30s")
    dev.wait_until(lambda: setup.job("next-1").get("spec", {}).get("suspend") is True, 30, "next-1 to be held")

    answer: dict[str, Any] = json.loads(setup.kq("why", "next-1", "-o", "json"))
    asked = time.time()
    assert answer["status"] == "QUEUING" and answer["position"] == 1
    estimated = parse_time(answer.get("estimatedStart"))
    assert estimated is not None, answer
    basis = answer["estimateBasis"]
    assert basis["source"] == "replay" and basis["completedJobs"] >= 1 and basis["historyRuntimes"] >= 1
    assert basis["ownRuntime"] == {"source": "declared", "p50Seconds": 30, "p90Seconds": 30}
    assert parse_time(answer["estimatedFinish"]) == estimated + 30
    started = setup.pod_start("warm-2")
    assert started is not None
    # warm-2 runs about as long as warm-1 did, from its start: next-1 starts then.
    assert abs(estimated - (started + learned)) <= 5, (estimated - started, learned)
    assert estimated >= asked - 5

    def published() -> float | None:
        items = setup.queue().get("status", {}).get("queueItemDetails", {}).get("active", [])
        found = [parse_time(item.get("estimatedStart")) for item in items if item["name"] == "next-1"]
        return found[0] if found else None

    dev.wait_until(lambda: published() is not None, 30, "the controller's estimate on the Queue's status")
    controller_says = published()
    assert controller_says is not None and abs(controller_says - estimated) <= 30
    row = next(line.split() for line in setup.kq("list").splitlines() if line.startswith("next-1 "))
    assert row[5].startswith("~") or row[2] != "QUEUING", row  # the controller's estimate, while it waits
    dev.wait_until(lambda: setup.pod_start("next-1") is not None, 120, "next-1 to run")
    actual = setup.pod_start("next-1")
    assert actual is not None, "next-1 has no running pod"
    assert abs(actual - estimated) <= 15, f"started {actual - estimated:+.1f} s from the estimate"


def test_a_restarted_controller_keeps_the_run_time_history(setup: Setup) -> None:
    dev = setup.dev

    def counts() -> dict[str, int]:
        return {item["stem"]: len(item["seconds"]) for item in _history(setup)}

    # The first test's jobs all succeeded: warm-1 and warm-2, then next-1.
    dev.wait_until(lambda: counts() == {"warm": 2, "next": 1}, 60, "the history of the first test's jobs")
    before = {item["stem"]: item["seconds"] for item in _history(setup)}
    dev.restart_service(*SERVICE_ARGS)
    setup.create("after-1", 1, succeed_after=2)
    dev.wait_until(lambda: _succeeded(setup, "after-1"), 120, "after-1 to succeed after the restart")
    dev.wait_until(lambda: "after" in {item["stem"] for item in _history(setup)}, 60,
                   "the restarted controller to learn after-1's run time")
    after = {item["stem"]: item["seconds"] for item in _history(setup)}
    assert {stem: seconds for stem, seconds in after.items() if stem in before} == before  # kept, none counted twice
