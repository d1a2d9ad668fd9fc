"""manifests/console/ against the dev cluster's API server: the kustomization is accepted (server-side dry
run), and the console's ServiceAccount, once created, may do nothing with jobs, pods or secrets anywhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import DevCluster

pytestmark = pytest.mark.e2e

CONSOLE = Path(__file__).resolve().parents[2] / "manifests" / "console"
ACCOUNT = "system:serviceaccount:kube-queue:kube-queue-console"


def test_the_console_kustomization_is_accepted(dev_cluster: DevCluster) -> None:
    result = dev_cluster.kubectl_result("apply", "-k", str(CONSOLE), "--server-side", "--dry-run=server")
    assert result.returncode == 0, result.stderr
    for expected in ("serviceaccount/kube-queue-console", "deployment.apps/kube-queue-console",
                     "service/kube-queue-console", "clusterrole.rbac.authorization.k8s.io/kube-queue-quota-viewer"):
        assert expected in result.stdout, result.stdout


def test_the_consoles_own_account_has_no_rights_over_jobs_or_pods(dev_cluster: DevCluster) -> None:
    dev = dev_cluster
    dev.kubectl("apply", "-f", str(CONSOLE / "rbac.yaml"))
    try:
        for verb, resource in (("list", "jobs.batch"), ("create", "jobs.batch"), ("delete", "jobs.batch"),
                               ("list", "pods"), ("get", "pods/log"), ("list", "secrets"),
                               ("list", "elasticquotatrees.scheduling.sigs.k8s.io")):
            answer = dev.kubectl_result("auth", "can-i", verb, resource, "--all-namespaces", f"--as={ACCOUNT}")
            assert answer.stdout.strip() == "no", f"{ACCOUNT} may {verb} {resource}: {answer.stdout}{answer.stderr}"
    finally:
        dev.kubectl("delete", "serviceaccount", "kube-queue-console", "-n", "kube-queue", "--ignore-not-found",
                    check=False)
