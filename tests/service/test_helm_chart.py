"""The Helm chart (manifests/helm/kube-queue) against the kustomization it mirrors, with the real ``helm`` and
``kubectl kustomize`` (both built into the binary cache by webhook/devcluster/build-binaries.sh; no cluster).

One source of truth: with default values the chart renders exactly the objects of ``kubectl kustomize
manifests/`` (with the monitoring toggles on, those of manifests/monitoring/ as well; with the console on,
manifests/console/; with the extender on, manifests/scheduler/); its copied files equal their sources. The
values matrix (HA, monitoring off, custom flags, console, extender) renders flags that kq's own parsers accept
and read back as set.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.admission.configs import cluster_webhook_configs
from webhook.admission.policies import admission_policies
from webhook.cli import extender as extender_cli
from webhook.cli import serve as serve_cli
from webhook.cli.main import build_parser
from webhook.controller.settings import settings_from_args
from webhook.devcluster.cluster import binaries_dir, helm_binary
from webhook.extender.config import scheduler_profiles

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
CHART = MANIFESTS / "helm" / "kube-queue"
SYNC_SCRIPT = ROOT / "hack" / "sync-helm-chart.sh"

# On a cold machine the first test builds kubectl and helm from their Go modules (README: minutes each); the
# tier's 300 s per-test limit would cut that build short. A hang still ends, only later.
pytestmark = pytest.mark.timeout(2400)

Obj = dict[str, Any]
Key = tuple[str, str, str, str]


@pytest.fixture(scope="module")
def helm() -> Path:
    return helm_binary()


@pytest.fixture(scope="module")
def kubectl() -> Path:
    return binaries_dir() / "kubectl"


def key(obj: Obj) -> Key:
    meta = obj["metadata"]
    return (obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"])


def by_key(objects: list[Obj]) -> dict[Key, Obj]:
    keyed = {key(obj): obj for obj in objects}
    assert len(keyed) == len(objects), "an object is rendered twice"
    return keyed


def parse(text: str) -> list[Obj]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def render(helm: Path, values: Obj | None = None, tmp: Path | None = None) -> list[Obj]:
    """``helm template`` of the chart (CRDs included) with ``values``; fails the test on an error."""
    result = template(helm, values, tmp)
    assert result.returncode == 0, result.stderr
    return parse(result.stdout)


def template(helm: Path, values: Obj | None, tmp: Path | None) -> subprocess.CompletedProcess[str]:
    argv = [str(helm), "template", "kube-queue", str(CHART), "--include-crds"]
    if values:
        assert tmp is not None
        path = tmp / "values.yaml"
        path.write_text(yaml.safe_dump(values))
        argv += ["--values", str(path)]
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def kustomize(kubectl: Path, directory: Path) -> list[Obj]:
    result = subprocess.run([str(kubectl), "kustomize", str(directory)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    return parse(result.stdout)


def only(objects: list[Obj], kind: str, name: str) -> Obj:
    (found,) = [obj for obj in objects if obj["kind"] == kind and obj["metadata"]["name"] == name]
    return found


def assert_same_objects(rendered: list[Obj], expected: list[Obj]) -> None:
    got, want = by_key(rendered), by_key(expected)
    assert sorted(got) == sorted(want), "the chart and the kustomization render different objects"
    for k, obj in want.items():
        assert got[k] == obj, f"{k} differs between the chart and manifests/"


def copied_files() -> list[tuple[str, str]]:
    """The (source under manifests/, copy under the chart) pairs hack/sync-helm-chart.sh copies."""
    text = SYNC_SCRIPT.read_text()
    block = text.split("<<'LIST'\n", 1)[1].split("\nLIST", 1)[0]
    pairs = [tuple(line.split()) for line in block.splitlines() if line.strip()]
    return [(src, dst) for src, dst in pairs]


def test_the_chart_copies_equal_their_sources_in_manifests() -> None:
    pairs = copied_files()
    assert ("webhook/webhook-configurations.yaml", "files/webhook/webhook-configurations.yaml") in pairs
    for src, dst in pairs:
        assert (CHART / dst).read_bytes() == (MANIFESTS / src).read_bytes(), (
            f"{CHART / dst} is stale: run bash hack/sync-helm-chart.sh"
        )
    chart_crds = sorted(p.name for p in (CHART / "crds").iterdir())
    assert chart_crds == sorted(p.name for p in (MANIFESTS / "crds").glob("*.yaml"))


@pytest.mark.parametrize("values", [
    {},
    {"replicas": 1},
    {"monitoring": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True},
                    "dashboard": {"enabled": True}, "extenderPodMonitor": {"enabled": True}}},
    {"extender": {"enabled": True}, "console": {"enabled": True}, "logLevel": "debug"},
    {"admissionPolicies": False},
], ids=["defaults", "single", "monitoring", "extender-console", "webhook-only"])
def test_helm_lint_passes(helm: Path, tmp_path: Path, values: Obj) -> None:
    argv = [str(helm), "lint", "--strict", str(CHART)]
    if values:
        path = tmp_path / "values.yaml"
        path.write_text(yaml.safe_dump(values))
        argv += ["--values", str(path)]
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


def test_defaults_render_exactly_the_kustomization(helm: Path, kubectl: Path) -> None:
    rendered = render(helm)
    assert_same_objects(rendered, kustomize(kubectl, MANIFESTS))
    # Monitoring and the extender are off by default, as in manifests/kustomization.yaml.
    assert not [obj for obj in rendered if obj["apiVersion"].startswith("monitoring.coreos.com/")]
    assert not [obj for obj in rendered if "extender" in obj["metadata"]["name"]]


def test_webhook_only_renders_the_kustomization_with_the_webhook_only_component(
    helm: Path, kubectl: Path, tmp_path: Path
) -> None:
    """Clusters older than Kubernetes 1.36: ``admissionPolicies: false`` and the kustomize Component
    ``manifests/webhook-only`` (used as manifests/README.md shows) install the same objects: no admission
    policy, the webhook-only configurations; the defaults install the policies."""
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    up = os.path.relpath(MANIFESTS, overlay)
    (overlay / "kustomization.yaml").write_text(f"resources: [{up}]\ncomponents: [{up}/webhook-only]\n")
    rendered = render(helm, {"admissionPolicies": False}, tmp_path)
    assert_same_objects(rendered, kustomize(kubectl, overlay))
    assert not [obj for obj in rendered if obj["kind"].endswith(("AdmissionPolicy", "AdmissionPolicyBinding"))]
    assert [obj for obj in rendered if obj["kind"].endswith("WebhookConfiguration")] == cluster_webhook_configs(
        policies=False)
    defaults = render(helm)
    assert [obj for obj in defaults if obj["kind"].endswith(("AdmissionPolicy", "AdmissionPolicyBinding"))] == (
        admission_policies())
    assert [obj for obj in defaults if obj["kind"].endswith("WebhookConfiguration")] == cluster_webhook_configs()


def test_monitoring_toggles_render_the_monitoring_kustomization(helm: Path, kubectl: Path, tmp_path: Path) -> None:
    on = {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}, "dashboard": {"enabled": True}}
    rendered = render(helm, {"monitoring": on}, tmp_path)
    assert_same_objects(rendered, kustomize(kubectl, MANIFESTS) + kustomize(kubectl, MANIFESTS / "monitoring"))
    dashboard = only(rendered, "ConfigMap", "kube-queue-grafana-dashboard")
    assert json.loads(dashboard["data"]["grafana-dashboard.json"]) == json.loads(
        (MANIFESTS / "monitoring" / "grafana-dashboard.json").read_text())
    # Each toggle alone renders its object alone.
    base = {key(obj) for obj in render(helm)}
    for toggle, kind in (("serviceMonitor", "ServiceMonitor"), ("prometheusRule", "PrometheusRule"),
                         ("dashboard", "ConfigMap"), ("extenderPodMonitor", "PodMonitor")):
        objects = render(helm, {"monitoring": {toggle: {"enabled": True}}}, tmp_path)
        extra = [k for k in by_key(objects) if k not in base]
        assert [k[1] for k in extra] == [kind], toggle


def test_the_console_renders_manifests_console(helm: Path, kubectl: Path, tmp_path: Path) -> None:
    rendered = render(helm, {"console": {"enabled": True}}, tmp_path)
    assert_same_objects(rendered, kustomize(kubectl, MANIFESTS) + kustomize(kubectl, MANIFESTS / "console"))


def test_console_values_become_the_flags_kq_console_reads(helm: Path, tmp_path: Path) -> None:
    values = {"console": {"enabled": True, "namespace": "team-a", "port": 8081,
                          "extraArgs": ["--user-header=X-Remote-User"]}}
    rendered = render(helm, values, tmp_path)
    container = only(rendered, "Deployment", "kube-queue-console")["spec"]["template"]["spec"]["containers"][0]
    parsed = build_parser(container["args"]).parse_args(container["args"])
    assert (parsed.host, parsed.port, parsed.namespace, parsed.user_header) == (
        "0.0.0.0", 8081, "team-a", "X-Remote-User")
    assert container["ports"] == [{"name": "http", "containerPort": 8081}]


def test_the_extender_renders_manifests_scheduler(helm: Path, tmp_path: Path) -> None:
    values = {"extender": {"enabled": True}, "monitoring": {"extenderPodMonitor": {"enabled": True}}}
    rendered = render(helm, values, tmp_path)
    scheduler = MANIFESTS / "scheduler"
    expected = parse((scheduler / "rbac.yaml").read_text()) + parse(
        (MANIFESTS / "monitoring" / "podmonitor-extender.yaml").read_text())
    got = by_key(rendered)
    for obj in expected:
        assert got[key(obj)] == obj
    files = only(rendered, "ConfigMap", "kube-queue-scheduler")["data"]
    assert yaml.safe_load(files["kube-scheduler-config.yaml"]) == yaml.safe_load(
        (scheduler / "kube-scheduler-config.yaml").read_text())
    assert yaml.safe_load(files["kube-queue-extender.yaml"]) == yaml.safe_load(
        (scheduler / "extender-static-pod.yaml").read_text())


def test_extender_values_reach_the_static_pod_and_the_scheduler(helm: Path, tmp_path: Path) -> None:
    values = {"image": {"repository": "registry.example.com/kube-queue", "tag": "0.2.0"},
              "extender": {"enabled": True, "port": 18888, "httpTimeout": "2s", "percentageOfNodesToScore": 50,
                           "kubeconfig": "/etc/kq/ext.conf", "extraArgs": ["--pass-every-node"]}}
    files = only(render(helm, values, tmp_path), "ConfigMap", "kube-queue-scheduler")["data"]
    config = yaml.safe_load(files["kube-scheduler-config.yaml"])
    pod = yaml.safe_load(files["kube-queue-extender.yaml"])
    (entry,) = config["extenders"]
    assert entry["urlPrefix"] == "http://127.0.0.1:18888/extender"
    assert entry["httpTimeout"] == "2s"
    assert "percentageOfNodesToScore" not in config  # the default profile keeps sampling
    assert config["profiles"] == scheduler_profiles(full_scan_percentage=50)
    container = pod["spec"]["containers"][0]
    assert container["image"] == "registry.example.com/kube-queue:0.2.0"
    assert container["readinessProbe"]["httpGet"]["port"] == 18888
    assert pod["spec"]["volumes"][0]["hostPath"]["path"] == "/etc/kq/ext.conf"
    parser = argparse.ArgumentParser()
    extender_cli.register(parser.add_subparsers())
    options = extender_cli.options_from_args(parser.parse_args(container["args"]))
    assert (options.host, options.port, options.kubeconfig) == ("127.0.0.1", 18888, "/etc/kq/ext.conf")
    assert options.sample is False


def serve_flags(deployment: Obj) -> tuple[argparse.Namespace, dict[str, str]]:
    """The container's args parsed by kq's own parser, and its environment."""
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    args = container["args"]
    parsed = build_parser(args).parse_args(args)
    env = {item["name"]: item["value"] for item in container.get("env", [])}
    return parsed, env


def test_default_flags_are_kq_serves_defaults(helm: Path) -> None:
    parsed, env = serve_flags(only(render(helm), "Deployment", "kube-queue"))
    settings = settings_from_args(parsed, env)
    assert parsed.verbose is False
    assert settings.oversell_rate == Fraction(2)
    assert settings.strict_priority is False
    assert settings.start_timeout == 300.0
    assert (settings.backoff.base_delay, settings.backoff.max_delay, settings.backoff.limit) == (60.0, 1800.0, 0)
    assert settings.leader_elect is True
    assert serve_cli.options_from_args(parsed).metrics_port == 9090


def test_custom_values_become_the_flags_kq_serve_reads(helm: Path, tmp_path: Path) -> None:
    values = {
        "image": {"repository": "registry.example.com/kube-queue", "tag": "0.2.0", "pullPolicy": "Always"},
        "imagePullSecrets": [{"name": "regcred"}],
        "replicas": 3,
        "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
        "oversellrate": 1.5,
        "strictPriority": True,
        "startTimeout": "10m",
        "backoff": {"base": "30s", "max": "1h", "limit": 4},
        "logLevel": "debug",
        "metricsPort": 9191,
        "webhookPort": 8443,
        "extraArgs": ["--status-interval=2"],
        "extraEnv": [{"name": "TZ", "value": "UTC"}],
        "nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
        "tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists",
                         "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}]}}},
    }
    rendered = render(helm, values, tmp_path)
    deployment = only(rendered, "Deployment", "kube-queue")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert deployment["spec"]["replicas"] == 3
    assert only(rendered, "PodDisruptionBudget", "kube-queue")["spec"]["minAvailable"] == 1
    assert container["image"] == "registry.example.com/kube-queue:0.2.0"
    assert container["imagePullPolicy"] == "Always"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert container["resources"] == values["resources"]
    assert pod["nodeSelector"] == values["nodeSelector"]
    assert pod["tolerations"] == values["tolerations"]
    assert pod["affinity"] == values["affinity"]
    parsed, env = serve_flags(deployment)
    settings = settings_from_args(parsed, env)
    assert parsed.verbose is True
    assert settings.oversell_rate == Fraction(3, 2)
    assert settings.strict_priority is True
    assert settings.start_timeout == 600.0
    assert (settings.backoff.base_delay, settings.backoff.max_delay, settings.backoff.limit) == (30.0, 3600.0, 4)
    assert settings.status_interval == 2.0
    assert env["TZ"] == "UTC"
    options = serve_cli.options_from_args(parsed)
    assert (options.port, options.metrics_port) == (8443, 9191)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"https": 8443, "metrics": 9191}
    service = only(rendered, "Service", "kube-queue-webhook")
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {"https": 443, "metrics": 9191}


def test_one_replica_has_no_disruption_budget(helm: Path, tmp_path: Path) -> None:
    # minAvailable 1 over a single pod would block every node drain.
    rendered = render(helm, {"replicas": 1}, tmp_path)
    assert only(rendered, "Deployment", "kube-queue")["spec"]["replicas"] == 1
    assert not [obj for obj in rendered if obj["kind"] == "PodDisruptionBudget"]


def test_an_existing_namespace_is_left_out(helm: Path, tmp_path: Path) -> None:
    rendered = render(helm, {"createNamespace": False}, tmp_path)
    assert not [obj for obj in rendered if obj["kind"] == "Namespace"]
    assert only(rendered, "Deployment", "kube-queue")["metadata"]["namespace"] == "kube-queue"


def test_an_unknown_log_level_is_refused_with_what_to_use(helm: Path, tmp_path: Path) -> None:
    result = template(helm, {"logLevel": "trace"}, tmp_path)
    assert result.returncode != 0
    assert re.search(r'logLevel must be info or debug, not "trace"', result.stderr), result.stderr
