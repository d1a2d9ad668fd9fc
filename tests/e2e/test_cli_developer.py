"""The developer's ``kq`` commands on the dev cluster, run as a new user would (a subprocess per command).

The module installs the seed's tree shape (Department-a: min 60 / max 100 CPU; Department-b: min 40) over
namespaces of its own and restarts the service with ``--oversellrate=1`` (strictly by quota, as in the
seed's scenario 1), then: ``kq submit job --name pi1 --cpu 10 --memory 10Gi --workers 6 -- sleep 60`` and the
same as ``pi2``; ``pi2`` is QUEUING at position 1; ``kq why pi2`` names the quota, resource and shortfall;
``kq top quota`` matches the tree's status; ``kq logs`` (and ``kubectl logs``) print the log kwok serves for
the fake pods, and ``kq logs -f`` follows it.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.e2e.conftest import DevCluster
from tests.e2e.harness import create_namespaces, installed_tree, unique, wait_managed
from tests.e2e.setups import developer_tree_spec

pytestmark = pytest.mark.e2e


@dataclass
class Kq:
    dev: DevCluster
    team_a: str
    team_a2: str
    team_b: str

    def run(self, *args: str, namespace: str | None = None) -> subprocess.CompletedProcess[str]:
        flags = [f"--kubeconfig={self.dev.config.kubeconfig}", *(["-n", namespace] if namespace else [])]
        cut = args.index("--") if "--" in args else len(args)  # flags go before the job's command
        argv = [sys.executable, "-m", "webhook.cli.main", *args[:cut], *flags, *args[cut:]]
        return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=120)

    def ok(self, *args: str, namespace: str | None = None) -> str:
        result = self.run(*args, namespace=namespace)
        assert result.returncode == 0, f"kq {' '.join(args)} failed ({result.returncode}): {result.stderr}"
        return result.stdout

    def jobs(self, namespace: str) -> dict[str, dict[str, Any]]:
        items = json.loads(self.ok("list", "-o", "json", namespace=namespace))["items"]
        return {item["name"]: item for item in items}


@pytest.fixture(scope="module")
def kq(dev_cluster: DevCluster) -> Iterator[Kq]:
    dev = dev_cluster
    names = (unique("cli-a"), unique("cli-a2"), unique("cli-b"))
    dev.restart_service("--oversellrate=1", "--status-interval=1")
    try:
        create_namespaces(dev, *names)
        with installed_tree(dev, developer_tree_spec(*names)):
            wait_managed(dev, *names)
            yield Kq(dev, *names)
            for namespace in names:
                dev.kubectl("delete", "jobs", "--all", "-n", namespace, "--wait=false")
    finally:
        for namespace in names:
            dev.kubectl("delete", "namespace", namespace, "--wait=false", "--ignore-not-found")
        dev.restart_service()


def test_pi2_queues_at_position_1_behind_pi1_and_kq_why_names_the_quota_resource_and_shortfall(kq: Kq) -> None:
    ns, dev = kq.team_a, kq.dev
    submitted = kq.ok("submit", "job", "--name", "pi1", "--cpu", "10", "--memory", "10Gi", "--workers", "6",
                      "--", "sleep", "60", namespace=ns)
    assert f"job.batch/pi1 created in namespace {ns}" in submitted
    assert "queued: quota root/Department-a" in submitted
    assert f"kq why pi1 -n {ns}" in submitted
    dev.wait_until(lambda: kq.jobs(ns)["pi1"]["status"] == "RUNNING", 120, "pi1 RUNNING")
    kq.ok("submit", "job", "--name", "pi2", "--cpu", "10", "--memory", "10Gi", "--workers", "6",
          "--", "sleep", "60", namespace=ns)

    def pi2_queuing_first() -> bool:
        pi2 = kq.jobs(ns)["pi2"]
        return bool(pi2["status"] == "QUEUING" and pi2["position"] == 1)

    dev.wait_until(pi2_queuing_first, 60, "pi2 QUEUING at position 1")
    # ... and the Queue's own status says the same.
    def queue_status() -> list[tuple[str, int]]:
        queue = dev.get_json("queue", f"root-department-a-{ns}", "-n", "kube-queue")
        active = queue.get("status", {}).get("queueItemDetails", {}).get("active", [])
        return [(item["name"], item["position"]) for item in active]

    dev.wait_until(lambda: queue_status() == [("pi2", 1)], 60, "the Queue's status to list pi2 at position 1")
    table = kq.ok("list", namespace=ns).splitlines()
    assert table[0].split() == ["NAME", "KIND", "STATUS", "QUEUE", "POSITION", "ETA", "AGE"]
    rows = {line.split()[0]: line.split() for line in table[1:]}
    assert rows["pi1"][1:5] == ["Job", "RUNNING", "Department-a", "-"]
    assert rows["pi2"][1:5] == ["Job", "QUEUING", "Department-a", "1"]
    assert all(len(line) <= 80 for line in table)

    why = kq.ok("why", "pi2", namespace=ns)
    flat = " ".join(why.split())
    assert f"Job {ns}/pi2 is QUEUING: position 1 of 1 in quota root/Department-a" in flat
    # The controller states its rate on its Queues; kq reads it there (never from Event text).
    assert "Oversell rate 1 (from annotation kube-queue.x-k8s.io/oversell-rate on Queue" in flat
    shortfalls = [line.split() for line in why.splitlines() if line.startswith(("root/Department-a ", "root "))]
    assert ["root/Department-a", "cpu", "60", "60", "100", "100", "20"] in shortfalls
    assert ["root/Department-a", "memory", "60Gi", "60Gi", "100Gi", "100Gi", "20Gi"] in shortfalls
    assert "Nobody is ahead of it in quota root/Department-a." in why
    assert "Reclaim cannot help" in flat and "guaranteed min" in flat

    running = " ".join(kq.ok("why", "pi1", namespace=ns).split())
    assert f"Job {ns}/pi1 is RUNNING: admitted by quota root/Department-a" in running
    details = kq.ok("get", "pi2", namespace=ns)
    assert "QUEUING, position 1 in quota root/Department-a" in details
    assert "Queued" in details
    queue = kq.ok("queue", "get", namespace=ns)
    assert [line.split() for line in queue.splitlines() if line.strip().startswith("1 ")] == [
        ["1", "pi2", ns, "Job", "0"]
    ]


def test_kq_top_quota_matches_the_trees_status(kq: Kq) -> None:
    dev = kq.dev

    def matches() -> bool:
        status = dev.get_json("eqtree", "-n", "kube-system")["items"][0].get("status", {})
        shown = json.loads(kq.ok("top", "quota", "-o", "json"))
        by_name = {q["quota"]: q for q in shown["quotas"]}

        def walk(node: dict[str, Any], prefix: str) -> bool:
            full = f"{prefix}/{node['name']}" if prefix else node["name"]
            mine = by_name.get(full)
            if mine is None or mine["used"] != node.get("used", {}) or mine["request"] != node.get("request", {}):
                return False
            return all(walk(child, full) for child in node.get("children", []))

        return shown["source"] == "the ElasticQuotaTree's status" and walk(status["root"], "")

    dev.wait_until(matches, 60, "kq top quota -o json to match the tree's status")
    table = kq.ok("top", "quota")
    assert all(len(line) <= 80 for line in table.splitlines())
    status = dev.get_json("eqtree", "-n", "kube-system")["items"][0]["status"]["root"]
    department_a = next(child for child in status["children"] if child["name"] == "Department-a")
    cpu_row = next(line for line in table.splitlines() if "Department-a" in line).split()
    assert cpu_row[cpu_row.index("cpu") + 3] == department_a["used"].get("cpu", "0")


def _follow(argv: list[str], seconds: float) -> tuple[list[str], int | None, str]:
    """Run ``argv`` for at most ``seconds``: the lines it printed, its exit code if it ended by itself (``None``
    when it was still following and was stopped), its stderr."""
    lines: queue.Queue[str] = queue.Queue()
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        stdout, stderr = proc.stdout, proc.stderr
        assert stdout is not None and stderr is not None

        def pump() -> None:
            for line in stdout:
                lines.put(line.rstrip("\n"))

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        code = proc.poll()
        if code is None:
            proc.terminate()
        proc.wait(10)
        reader.join(10)
        err = stderr.read()
    return [lines.get() for _ in range(lines.qsize())], code, err


def test_kq_logs_prints_the_kwok_pod_log_and_follows_it(kq: Kq) -> None:
    ns, dev = kq.team_a, kq.dev
    pod = next(item["metadata"]["name"] for item in dev.get_json("pods", "-n", ns, "-l", "job-name=pi1")["items"])
    # kubectl reads it the same way (the API server asks kwok's server, the fake node's "kubelet").
    assert "fake log line" in dev.kubectl("logs", pod, "-n", ns, "--tail", "2")

    printed = kq.run("logs", "pi1", "--tail", "3", namespace=ns)
    assert printed.returncode == 0, printed.stderr
    lines = printed.stdout.splitlines()
    assert len(lines) == 3, printed.stdout
    assert all(line.startswith("fake log line ") and line.endswith("(the same for every pod)") for line in lines)
    whole = kq.ok("logs", "pi1", namespace=ns).splitlines()
    assert "kwok fake node" in whole[0] and "every pod" in whole[1]  # the file says what these logs are

    both = kq.ok("logs", "pi1", "--all", "--tail", "1", namespace=ns).splitlines()
    assert len(both) == 6 and all(line.startswith("[pi1-") for line in both)

    # -f keeps the stream open and prints the lines written after it started (one every 2 s).
    flags = [f"--kubeconfig={dev.config.kubeconfig}", "-n", ns]
    followed, code, err = _follow(
        [sys.executable, "-m", "webhook.cli.main", "logs", "pi1", "-f", "--tail", "1", *flags], 9
    )
    assert code is None, f"kq logs -f ended by itself ({code}): {err}"
    numbers = [int(line.split()[3]) for line in followed if line.startswith("fake log line ")]
    assert len(numbers) >= 3, followed
    assert numbers == sorted(set(numbers)), followed  # new lines, in order, none twice

    queued = kq.run("logs", "pi2", namespace=ns)
    assert queued.returncode == 1
    assert queued.stderr.startswith("error: pi2 has no pods yet: it is QUEUING at position 1")


def test_a_short_job_runs_to_success_and_delete_removes_it(kq: Kq) -> None:
    ns, dev = kq.team_b, kq.dev
    out = kq.ok("submit", "job", "--name", "quick", "--cpu", "1", "--workers", "2",
                "--annotation", "dev.kube-queue.x-k8s.io/succeed-after=2s", "--wait", "--", "true", namespace=ns)
    assert out.splitlines()[-1].startswith("quick: RUNNING") or "SUCCEEDED" in out
    dev.wait_until(lambda: kq.jobs(ns)["quick"]["status"] == "SUCCEEDED", 120, "quick SUCCEEDED")
    assert "has finished: SUCCEEDED" in " ".join(kq.ok("why", "quick", namespace=ns).split())
    assert kq.ok("delete", "quick", namespace=ns) == f"job.batch/quick deleted from namespace {ns}\n"
    missing = kq.run("why", "quick", namespace=ns)
    assert missing.returncode == 1
    assert missing.stderr.startswith(f"error: job 'quick' not found in namespace {ns}")


def test_errors_name_the_problem_in_one_line(kq: Kq, namespace: str) -> None:
    unmanaged = kq.run("submit", "job", "--name", "free", "--", "true", namespace=namespace)
    assert unmanaged.returncode == 0, unmanaged.stderr
    assert f"namespace {namespace} is not managed by kube-queue" in unmanaged.stdout
    # The dev cluster runs the training operator, so a PyTorchJob is served (a kind that is not: unit tests).
    pytorch = kq.run("submit", "pytorchjob", "--name", "mnist", "--workers", "0", "--", "python", "train.py",
                     namespace=kq.team_a)
    assert pytorch.returncode == 1
    assert pytorch.stderr == "error: --workers must be at least 1, got 0\n"
    elsewhere = kq.run("why", "pi2", namespace=kq.team_a2)
    assert elsewhere.returncode == 1
    assert elsewhere.stderr.startswith(f"error: job 'pi2' not found in namespace {kq.team_a2}; it is in namespace ")
