"""How the console is started and shipped: the dev cluster's process (loopback, its own port, printed by
``make up``), the ``kq console`` command, and manifests/console/ (a ServiceAccount bound to nothing)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from webhook.cli import devsystem
from webhook.cli.main import COMMANDS, SUBCOMMAND_MODULES
from webhook.console.command import is_loopback
from webhook.devcluster.config import ClusterConfig, Ports

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"


def test_the_dev_cluster_runs_the_console_on_loopback_and_says_where(tmp_path: Path) -> None:
    config = ClusterConfig(state_dir=tmp_path, ports=Ports(30000))
    (component,) = devsystem.console_components(config, tmp_path)
    assert component.name == "kq-console" and component.port == 30002
    assert "--host=127.0.0.1" in component.argv and "--port=30002" in component.argv
    assert "--act-as-kubeconfig" in component.argv
    assert f"--kubeconfig={config.kubeconfig}" in component.argv
    assert "kq-console" in [c.name for c in devsystem.system_components(config, tmp_path)]
    assert "kq-console" not in [c.name for c in devsystem.service_components(config, tmp_path)]
    assert len(set(config.ports.all().values())) == len(config.ports.all())  # no port shared
    assert "http://127.0.0.1:30002/" in devsystem.next_steps(config, seeded=True)


def test_kq_console_is_a_registered_command() -> None:
    assert COMMANDS["console"] == "webhook.console.command" and "webhook.console.command" in SUBCOMMAND_MODULES


def test_loopback_hosts() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.1") and not is_loopback("console.example")


def _docs(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def test_the_consoles_service_account_is_bound_to_nothing() -> None:
    console = MANIFESTS / "console"
    kustomization = _docs(console / "kustomization.yaml")[0]
    objects = [doc for name in kustomization["resources"] for doc in _docs(console / name)]
    kinds = {(doc["kind"], doc["metadata"]["name"]) for doc in objects}
    assert ("ServiceAccount", "kube-queue-console") in kinds
    assert ("Deployment", "kube-queue-console") in kinds and ("Service", "kube-queue-console") in kinds
    deployment = next(doc for doc in objects if doc["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "kube-queue-console"
    assert "--act-as-kubeconfig" not in pod["containers"][0]["args"]
    for path in MANIFESTS.rglob("*.yaml"):
        if "templates" in path.relative_to(MANIFESTS).parts:
            continue  # the Helm chart's Go templates: tests/service/test_helm_chart.py proves they render the above
        for doc in _docs(path):
            if doc.get("kind") in ("RoleBinding", "ClusterRoleBinding"):
                names = [subject.get("name") for subject in doc.get("subjects") or ()]
                assert "kube-queue-console" not in names, f"{path} binds the console's ServiceAccount"
    viewer = next(doc for doc in objects if doc["kind"] == "ClusterRole")
    verbs = {verb for rule in viewer["rules"] for verb in rule["verbs"]}
    resources = {resource for rule in viewer["rules"] for resource in rule["resources"]}
    assert verbs == {"get", "list", "watch"}
    assert not resources & {"jobs", "pods", "secrets"}
