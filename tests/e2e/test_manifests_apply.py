"""The shipped manifests and the Helm chart against the dev cluster's real API server (issue 20): the
kustomization and the chart (for a matrix of values) are accepted as a whole (server-side dry run: schema,
RBAC objects, webhook configurations), and re-applying them over a running system with jobs held and admitted
changes nothing: no job released, lost or re-queued, the tree, the Queues and their order kept, and the
controller goes on queueing afterwards.

Deployments, Services, the PodDisruptionBudget and the webhook configurations are only dry-run here: the dev
cluster runs the service as a local process (the shipped configurations point at an in-cluster Service it does
not have). Everything else an upgrade re-applies (CRDs, namespace, RBAC, the extender's files) is applied for
real, from manifests/ and from the chart (``helm template | kubectl apply --server-side``).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.builders import job_manifest
from tests.e2e.conftest import DevCluster
from tests.e2e.harness import create_namespaces, installed_tree, passes_made, unique, wait_managed
from webhook.devcluster.cluster import helm_binary

pytestmark = pytest.mark.e2e

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"
CHART = MANIFESTS / "helm" / "kube-queue"
UPGRADED = ("namespace.yaml", "crds", "controller/rbac.yaml", "webhook/rbac.yaml", "scheduler/rbac.yaml")
DRY_RUN_ONLY = {"Deployment", "Service", "PodDisruptionBudget", "MutatingWebhookConfiguration",
                "ValidatingWebhookConfiguration", "APIService"}
"""Kinds that would replace the dev cluster's local service (see the module notes): never applied for real."""
VALUES_MATRIX: dict[str, dict[str, Any]] = {
    "defaults": {},
    "ha-custom-flags": {
        "replicas": 3, "oversellrate": "1.5", "strictPriority": True, "startTimeout": "10m",
        "backoff": {"base": "30s", "max": "1h", "limit": 3}, "logLevel": "debug", "metricsPort": 9191,
        "extraArgs": ["--status-interval=2"], "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ops", "effect": "NoSchedule"}],
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname", "labelSelector": {
                "matchLabels": {"app.kubernetes.io/name": "kube-queue"}}}}]}},
    },
    "single-replica-existing-namespace": {"replicas": 1, "createNamespace": False},
    "extender-console": {"extender": {"enabled": True, "port": 18888}, "console": {"enabled": True}},
}

UPGRADE_VALUES: dict[str, Any] = {"extender": {"enabled": True}, "console": {"enabled": True}}
"""What the upgrade re-applies from the chart: every part, the optional ones included."""


def helm_template(values: dict[str, Any], tmp: Path) -> str:
    path = tmp / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    result = subprocess.run(
        [str(helm_binary()), "template", "kube-queue", str(CHART), "--include-crds", "--values", str(path)],
        capture_output=True, text=True, check=False, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def as_list(objects: list[dict[str, Any]]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})


def test_the_kustomization_is_accepted_by_the_api_server(dev_cluster: DevCluster) -> None:
    result = dev_cluster.kubectl_result("apply", "-k", str(MANIFESTS), "--server-side", "--dry-run=server",
                                        "--force-conflicts")
    assert result.returncode == 0, result.stderr
    applied = result.stdout
    for expected in (
        "customresourcedefinition.apiextensions.k8s.io/elasticquotatrees.scheduling.sigs.k8s.io",
        "deployment.apps/kube-queue",
        "mutatingwebhookconfiguration.admissionregistration.k8s.io/kube-queue",
        "clusterrole.rbac.authorization.k8s.io/kube-queue-controller",
    ):
        assert expected in applied, applied


@pytest.mark.parametrize("case", sorted(VALUES_MATRIX))
def test_the_chart_is_accepted_by_the_api_server(dev_cluster: DevCluster, tmp_path: Path, case: str) -> None:
    rendered = helm_template(VALUES_MATRIX[case], tmp_path)
    objects = [doc for doc in yaml.safe_load_all(rendered) if doc]
    result = dev_cluster.kubectl_result("apply", "--server-side", "--dry-run=server", "--force-conflicts", "-f", "-",
                                        stdin=as_list(objects))
    assert result.returncode == 0, result.stderr
    applied = result.stdout
    # Every rendered object was sent, and the API server took each one.
    assert len([line for line in applied.splitlines() if line.strip()]) == len(objects), applied
    assert "deployment.apps/kube-queue serverside-applied (server dry run)" in applied, applied
    if case == "extender-console":
        assert "configmap/kube-queue-scheduler serverside-applied (server dry run)" in applied, applied
        assert "deployment.apps/kube-queue-console serverside-applied (server dry run)" in applied, applied


@pytest.fixture(scope="module")
def running(dev_cluster: DevCluster) -> Iterator[str]:
    dev = dev_cluster
    namespace = unique("upgrade")
    args = ("--oversellrate=1", "--status-interval=1")
    dev.restart_service(*args)
    spec = {"root": {"name": "root", "min": {"cpu": 20}, "max": {"cpu": 20}, "children": [
        {"name": "Team-u", "min": {"cpu": 20}, "max": {"cpu": 20}, "namespaces": [namespace]}]}}
    try:
        create_namespaces(dev, namespace)
        with installed_tree(dev, spec):
            wait_managed(dev, namespace)
            yield namespace
            dev.kubectl("delete", "jobs", "--all", "-n", namespace, "--wait=false")
    finally:
        dev.kubectl("delete", "namespace", namespace, "--wait=false", "--ignore-not-found")
        dev.restart_service()


def test_re_applying_the_manifests_and_the_chart_over_running_work_changes_nothing(
    dev_cluster: DevCluster, running: str, tmp_path: Path
) -> None:
    dev, namespace = dev_cluster, running
    for name in ("first", "second", "third"):
        dev.kubectl("create", "-n", namespace, "-f", "-", stdin=json.dumps(job_manifest(name, pods=2, cpu=10)))
        time.sleep(0.5)

    def running_pods(name: str) -> dict[str, str]:
        pods = dev.get_json("pods", "-n", namespace, "-l", f"job-name={name}")["items"]
        return {pod["metadata"]["name"]: pod["metadata"]["uid"] for pod in pods
                if pod["status"].get("phase") == "Running"}

    dev.wait_until(lambda: len(running_pods("first")) == 2, 60, "the first job running")
    queue = f"root-team-u-{namespace}"

    def queue_object() -> dict[str, Any]:
        return dev.get_json("queue", queue, "-n", "kube-queue")  # type: ignore[no-any-return]

    def active() -> list[str]:
        details = queue_object().get("status", {}).get("queueItemDetails", {})
        return [item["name"] for item in details.get("active", [])]

    dev.wait_until(lambda: active() == ["second", "third"], 30, "the second and third job waiting, in order")

    def jobs() -> dict[str, tuple[str, bool, dict[str, str]]]:
        items = dev.get_json("jobs", "-n", namespace)["items"]
        return {item["metadata"]["name"]: (
            item["metadata"]["uid"],
            bool(item["spec"].get("suspend")),
            {k: v for k, v in item["metadata"].get("annotations", {}).items() if k.startswith("kube-queue.")},
        ) for item in items}

    def tree() -> dict[str, Any]:
        return dev.get_json("elasticquotatrees", "-n", "kube-system")["items"][0]  # type: ignore[no-any-return]

    passes_made(dev, 2, namespace)  # passes that wrote the statuses (every 1 s at most) before the snapshot
    jobs_before, pods_before, queue_before, tree_before = jobs(), running_pods("first"), queue_object(), tree()
    assert {name: held for name, (_, held, _) in jobs_before.items()} == {
        "first": False, "second": True, "third": True}
    assert jobs_before["first"][2].get("kube-queue.x-k8s.io/admission"), "the first job carries its admission"

    # The upgrade: manifests/ parts, then every chart object the dev cluster can take for real.
    for part in UPGRADED:
        dev.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(MANIFESTS / part))
    rendered = [doc for doc in yaml.safe_load_all(helm_template(UPGRADE_VALUES, tmp_path)) if doc]
    real = [obj for obj in rendered if obj["kind"] not in DRY_RUN_ONLY]
    assert {obj["kind"] for obj in real} >= {"CustomResourceDefinition", "Namespace", "ClusterRole", "ConfigMap"}
    dev.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", stdin=as_list(real))
    dev.kubectl("apply", "--server-side", "--force-conflicts", "--dry-run=server", "-f", "-",
                stdin=as_list([obj for obj in rendered if obj["kind"] in DRY_RUN_ONLY]))
    passes_made(dev, 3, namespace)  # passes of the controller over the upgraded objects, writing the statuses

    assert jobs() == jobs_before, "no job released, re-queued, re-admitted or re-created"
    assert running_pods("first") == pods_before, "the admitted job's pods kept running, none re-created"
    assert active() == ["second", "third"]
    queue_after = queue_object()
    assert queue_after["metadata"]["uid"] == queue_before["metadata"]["uid"]
    assert queue_after["spec"] == queue_before["spec"]
    assert queue_after.get("status") == queue_before.get("status")
    tree_after = tree()
    assert tree_after["metadata"]["uid"] == tree_before["metadata"]["uid"]
    assert tree_after["spec"] == tree_before["spec"]
    assert tree_after.get("status") == tree_before.get("status")
    events = dev.get_json("events", "-n", namespace, "--field-selector", "reason=Evicted")["items"]
    assert events == []

    # And the system still queues after the upgrade: a new job is held and joins the end of the queue.
    dev.kubectl("create", "-n", namespace, "-f", "-", stdin=json.dumps(job_manifest("fourth", pods=1, cpu=10)))
    dev.wait_until(lambda: active() == ["second", "third", "fourth"], 30, "the new job queued last")
    assert jobs()["fourth"][1] is True
