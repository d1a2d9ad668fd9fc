"""The dev cluster behaves like a real cluster: nodes Ready, Jobs complete, pods fit, the virtual node is
tainted, and ``up`` is idempotent."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.builders import pod
from tests.e2e.conftest import DevCluster
from webhook.api.names import LEGACY_SUCCEED_AFTER_ANNOTATION, SUCCEED_AFTER_ANNOTATION
from webhook.cli import devsystem
from webhook.devcluster import cluster


def _node_of(dev: DevCluster, namespace: str, pod: str) -> str:
    return str(dev.get_json("pod", pod, "-n", namespace)["spec"].get("nodeName") or "")


def _phase(dev: DevCluster, namespace: str, pod: str) -> str:
    return str(dev.get_json("pod", pod, "-n", namespace).get("status", {}).get("phase", ""))


def test_nodes_are_ready_with_the_requested_shape(dev_cluster: DevCluster) -> None:
    nodes = {n["metadata"]["name"]: n for n in dev_cluster.get_json("nodes")["items"]}
    assert set(nodes) == {"ecs-0", "ecs-1", "ecs-2", "ecs-3", "virtual-kubelet"}
    for name, node in nodes.items():
        ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
        assert ready and ready[0]["status"] == "True", name
    ecs = nodes["ecs-0"]
    assert ecs["status"]["allocatable"]["cpu"] == "32"
    assert ecs["status"]["allocatable"]["memory"] == "128Gi"
    assert ecs["status"]["allocatable"]["nvidia.com/gpu"] == "4"
    assert ecs["metadata"]["labels"]["type"] == "ecs"
    virtual = nodes["virtual-kubelet"]
    assert virtual["metadata"]["labels"]["type"] == "virtual-kubelet"
    assert {"key": "virtual-kubelet.io/provider", "value": "alibabacloud", "effect": "NoSchedule"} in virtual[
        "spec"
    ]["taints"]


def test_up_is_idempotent(dev_cluster: DevCluster) -> None:
    before = cluster.status(dev_cluster.config).running
    messages: list[str] = []
    cluster.up(dev_cluster.config, bins=dev_cluster.bins, echo=messages.append)
    assert any("already up" in m for m in messages)
    assert cluster.status(dev_cluster.config).running == before


@pytest.mark.parametrize("annotation", [SUCCEED_AFTER_ANNOTATION, LEGACY_SUCCEED_AFTER_ANNOTATION])
def test_a_job_runs_to_completion(dev_cluster: DevCluster, namespace: str, annotation: str) -> None:
    # The legacy spelling (dev.kube-queue.io) of an earlier release is still honoured by the fake kubelet.
    name = "pi" if annotation == SUCCEED_AFTER_ANNOTATION else "pi-legacy"
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "completions": 3,
            "parallelism": 3,
            "template": {
                "metadata": {"annotations": {annotation: "1s"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "pi", "image": "perl", "resources": {"requests": {"cpu": "10", "memory": "10Gi"}}}
                    ],
                },
            },
        },
    }
    dev_cluster.apply(job)
    dev_cluster.kubectl("wait", "--for=condition=Complete", f"job/{name}", "-n", namespace, "--timeout=90s")
    status = dev_cluster.get_json("job", name, "-n", namespace)["status"]
    assert status["succeeded"] == 3


def test_a_pod_without_the_annotation_keeps_running(dev_cluster: DevCluster, namespace: str) -> None:
    dev_cluster.apply(pod("runner", "1", namespace=namespace, container="c"))
    dev_cluster.wait_until(lambda: _phase(dev_cluster, namespace, "runner") == "Running", 60, "pod Running")
    assert _node_of(dev_cluster, namespace, "runner").startswith("ecs-")


def test_pods_land_only_on_nodes_that_can_hold_them(dev_cluster: DevCluster, namespace: str) -> None:
    # 5 pods of 20 CPU on 4 nodes of 32 CPU: one per node runs, the fifth stays Pending.
    for i in range(5):
        dev_cluster.apply(pod(f"big-{i}", "20", namespace=namespace, container="c"))
    names = [f"big-{i}" for i in range(5)]
    dev_cluster.wait_until(
        lambda: sum(_phase(dev_cluster, namespace, n) == "Running" for n in names) == 4, 60, "4 pods Running"
    )
    nodes = [_node_of(dev_cluster, namespace, n) for n in names]
    placed = [n for n in nodes if n]
    assert len(placed) == 4
    assert len(set(placed)) == 4
    assert all(n.startswith("ecs-") for n in placed)
    pending = [n for n, node in zip(names, nodes, strict=True) if not node]
    selector = f"involvedObject.name={pending[0]}"
    events = dev_cluster.kubectl("get", "events", "-n", namespace, "--field-selector", selector)
    assert "Insufficient cpu" in events
    # Larger than any node: never scheduled.
    dev_cluster.apply(pod("huge", "33", namespace=namespace, container="c"))
    dev_cluster.wait_until(
        lambda: "Insufficient cpu"
        in dev_cluster.kubectl("get", "events", "-n", namespace, "--field-selector", "involvedObject.name=huge"),
        60,
        "FailedScheduling for huge",
    )
    assert _node_of(dev_cluster, namespace, "huge") == ""


def test_the_virtual_node_taint_keeps_ordinary_pods_off(dev_cluster: DevCluster, namespace: str) -> None:
    # Aimed at the virtual node without the toleration: stays Pending, the taint named.
    dev_cluster.apply(pod("aimed", "1", namespace=namespace, container="c", nodeSelector={"type": "virtual-kubelet"}))
    toleration = {
        "key": "virtual-kubelet.io/provider",
        "operator": "Equal",
        "value": "alibabacloud",
        "effect": "NoSchedule",
    }
    # With the toleration and the ECI opt-in label (a pod under no ResourcePolicy needs both: the extender
    # keeps every other pod off the virtual node), it runs there.
    dev_cluster.apply(
        pod("tolerant", "1", namespace=namespace, container="c", labels={"alibabacloud.com/eci": "true"},
            nodeSelector={"type": "virtual-kubelet"}, tolerations=[toleration])
    )
    dev_cluster.wait_until(lambda: _phase(dev_cluster, namespace, "tolerant") == "Running", 60, "tolerant Running")
    assert _node_of(dev_cluster, namespace, "tolerant") == "virtual-kubelet"
    dev_cluster.wait_until(
        lambda: "untolerated taint"
        in dev_cluster.kubectl("get", "events", "-n", namespace, "--field-selector", "involvedObject.name=aimed"),
        60,
        "FailedScheduling naming the taint",
    )
    assert _node_of(dev_cluster, namespace, "aimed") == ""
    # Many ordinary pods, even tolerating the taint: none lands on the virtual node.
    for i in range(8):
        spec: dict[str, Any] = {"tolerations": [toleration]} if i % 2 else {}
        dev_cluster.apply(pod(f"o-{i}", "100m", namespace=namespace, container="c", **spec))
    dev_cluster.wait_until(
        lambda: all(_node_of(dev_cluster, namespace, f"o-{i}") for i in range(8)), 60, "ordinary pods bound"
    )
    assert all(_node_of(dev_cluster, namespace, f"o-{i}").startswith("ecs-") for i in range(8))


def test_status_lists_the_extender_and_the_service_listens_on_loopback_only(dev_cluster: DevCluster) -> None:
    config = dev_cluster.config
    running = cluster.status(config).running
    assert running.get("kq-serve") and running.get("kq-extender"), running
    argv = [sys.executable, "-m", "webhook.cli.main", "dev", "status", f"--dir={config.state_dir}",
            f"--port-base={config.ports.base}"]
    out = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60).stdout
    assert "kq-extender" in out and "kq-serve" in out
    listening = subprocess.run(["ss", "-ltnH", f"sport = :{config.ports.webhook}"], capture_output=True,
                               text=True, check=False, timeout=30).stdout
    assert listening.split() and all("127.0.0.1:" in line for line in listening.splitlines()), listening


def test_restart_applies_the_environment_and_flags_given(dev_cluster: DevCluster) -> None:
    config = dev_cluster.config
    common = [f"--dir={config.state_dir}", f"--port-base={config.ports.base}"]
    argv = [sys.executable, "-m", "webhook.cli.main", "dev", "restart", *common, "--env", "StrictPriority=true",
            "--service-arg=--oversellrate=1"]
    try:
        result = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=180)
        assert result.returncode == 0, result.stderr
        assert "kq serve restarted with --oversellrate=1, StrictPriority=true" in result.stdout
        pid = cluster.status(config).running["kq-serve"]
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert b"StrictPriority=true" in environ
        assert "--oversellrate=1" in Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
        bad = subprocess.run([*argv[:5], *common, "--env", "oops"], capture_output=True, text=True, check=False,
                             timeout=60)
        assert bad.returncode == 2 and "--env takes NAME=VALUE" in bad.stderr
    finally:
        devsystem.restart_service(config, dev_cluster.bins)


def test_the_system_runs_under_the_shipped_rbac_only(dev_cluster: DevCluster) -> None:
    # Issue 20: no cluster-admin anywhere; kq serve runs as the manifests' ServiceAccount (a TokenRequest token)
    # and kq extender as the user manifests/scheduler/rbac.yaml binds, so a permission missing from manifests/
    # fails the e2e tier here instead of on a customer's cluster.
    controller = "system:serviceaccount:kube-queue:kube-queue-controller"

    def can(*args: str) -> str:  # kubectl auth can-i prints yes/no and exits 1 on no
        return dev_cluster.kubectl_result("auth", "can-i", *args).stdout.strip()

    assert can("*", "*", "--as", controller) == "no"
    assert can("*", "*", "--as", "kube-queue-extender") == "no"
    assert can("patch", "jobs.batch", "-A", "--as", controller) == "yes"
    assert can("watch", "pods", "-A", "--as", controller) == "yes"
    gone = dev_cluster.kubectl_result("get", "clusterrolebinding", "kube-queue-dev-controller")
    assert gone.returncode != 0
    kubeconfig = json.loads((dev_cluster.config.state_dir / "controller.kubeconfig").read_text())
    assert set(kubeconfig["users"][0]["user"]) == {"token"}
