"""Issue 4 on the dev cluster, as a new user would do it with kubectl: the seed's Job is held and tagged even
with ``suspend: false``; the seed's tree applies and every broken variant is refused with its rule named; a
user cannot un-suspend a held job or move it to another quota; unmanaged namespaces pass untouched."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.builders import BROKEN_TREES, SEED_TREE_SPEC
from tests.e2e.conftest import DevCluster
from tests.e2e.setups import managed, seed_job
from webhook.api.names import CONTROLLER_COMPONENT
from webhook.api.names import SUBMITTED_ANNOTATION as SUBMITTED
from webhook.workloads.base import creation_seconds

pytestmark = pytest.mark.e2e
__all__ = ["managed"]  # the module's namespaces: a seed-shaped tree over fresh ones

SEED_JOB = Path(__file__).resolve().parents[2] / "examples" / "seed" / "jobs"
QUOTA_LABEL = "quota.scheduling.alibabacloud.com/name"
FULLNAME = "kube-queue/quota-fullname"


def test_the_seed_job_comes_back_suspended_and_labelled(
    dev_cluster: DevCluster, managed: tuple[str, str, str]
) -> None:
    ns_a, _, _ = managed
    result = dev_cluster.create(seed_job(ns_a), user="alice")
    assert result.returncode == 0, result.stderr
    job = json.loads(result.stdout)
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["labels"][QUOTA_LABEL] == "Department-a"
    assert job["metadata"]["annotations"][FULLNAME] == "root/Department-a"
    assert job["spec"]["template"]["metadata"]["labels"][QUOTA_LABEL] == "Department-a"
    # Stamped to the microsecond, within the creation second the API server gave it (the queue's order).
    created = job["metadata"]["creationTimestamp"]
    assert creation_seconds(job) - creation_seconds({"metadata": {"creationTimestamp": created}}) < 1
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", job["metadata"]["annotations"][SUBMITTED])


def test_a_user_cannot_unsuspend_a_held_job_or_change_its_quota(
    dev_cluster: DevCluster, managed: tuple[str, str, str]
) -> None:
    ns_a, _, _ = managed
    # 250 CPU: above max x oversell rate (100 x 2) on its own, so it is never admitted and stays held.
    job = seed_job(ns_a)
    job["spec"]["parallelism"] = job["spec"]["completions"] = 25
    created = json.loads(dev_cluster.create(job, user="alice").stdout)
    name = created["metadata"]["name"]
    refused = dev_cluster.kubectl_result(
        "patch", "job", name, "-n", ns_a, "--type=merge", "-p", '{"spec":{"suspend":false}}', user="alice"
    )
    assert refused.returncode != 0
    assert "queued" in refused.stderr
    assert "kube-queue" in refused.stderr  # says how to see the position
    relabel = dev_cluster.kubectl_result(
        "label", "job", name, "-n", ns_a, f"{QUOTA_LABEL}=Department-b", "--overwrite", user="alice"
    )
    assert relabel.returncode != 0
    assert dev_cluster.get_json("job", name, "-n", ns_a)["spec"]["suspend"] is True


def test_the_release_is_written_under_the_controllers_name(
    dev_cluster: DevCluster, managed: tuple[str, str, str]
) -> None:
    """An operator asking who set ``spec.suspend: false`` on a job reads it in its ``managedFields``: the
    controller writes under its component name, never under a client library's default."""
    ns_a, _, _ = managed
    created = json.loads(dev_cluster.create(seed_job(ns_a), user="alice").stdout)
    name = created["metadata"]["name"]

    def owner_of_suspend() -> str | None:
        job = dev_cluster.get_json("job", name, "-n", ns_a, "--show-managed-fields")
        if job["spec"].get("suspend") is not False:
            return None
        for entry in job["metadata"].get("managedFields") or []:
            if "f:suspend" in (entry.get("fieldsV1") or {}).get("f:spec", {}):
                return str(entry.get("manager"))
        return ""

    dev_cluster.wait_until(lambda: owner_of_suspend() is not None, 60, "the job released")
    assert owner_of_suspend() == CONTROLLER_COMPONENT


def test_unmanaged_namespaces_pass_untouched(dev_cluster: DevCluster, managed: tuple[str, str, str]) -> None:
    _, _, outside = managed
    job = seed_job(outside)
    job["spec"]["parallelism"] = job["spec"]["completions"] = 1
    created = json.loads(dev_cluster.create(job, user="alice").stdout)
    assert created["spec"]["suspend"] is False
    assert QUOTA_LABEL not in created["metadata"].get("labels", {})


def test_the_seed_tree_file_passes_validation(dev_cluster: DevCluster, managed: tuple[str, str, str]) -> None:
    seed_file = Path(__file__).resolve().parents[2] / "examples" / "seed" / "01-elasticquotatree.yaml"
    docs = [d for d in yaml.safe_load_all(seed_file.read_text()) if d]
    tree = next(d for d in docs if d["kind"] == "ElasticQuotaTree")
    existing = dev_cluster.get_json("elasticquotatrees", "-n", "kube-system")["items"][0]["metadata"]["name"]
    tree["metadata"]["name"] = existing  # the cluster holds one tree: apply the seed's spec onto it
    result = dev_cluster.kubectl_result("apply", "--dry-run=server", "-f", "-", stdin=json.dumps(tree))
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(("case", "breaker", "rule", "node"), BROKEN_TREES, ids=[c[0] for c in BROKEN_TREES])
def test_each_broken_tree_is_refused_with_its_rule(
    dev_cluster: DevCluster,
    managed: tuple[str, str, str],
    case: str,
    breaker: Callable[[dict[str, Any]], None],
    rule: str,
    node: str,
) -> None:
    name = dev_cluster.get_json("elasticquotatrees", "-n", "kube-system")["items"][0]["metadata"]["name"]
    spec = copy.deepcopy(SEED_TREE_SPEC)
    breaker(spec)
    patch = json.dumps([{"op": "replace", "path": "/spec", "value": spec}])
    result = dev_cluster.kubectl_result(
        "patch", "elasticquotatree", name, "-n", "kube-system", "--type=json", "-p", patch, "--dry-run=server"
    )
    assert result.returncode != 0, case
    assert node in result.stderr
    # The webhook names the rule; the few shapes the CRD's schema already refuses (no root) are named by the
    # apiserver's own "is invalid: <field>" message before the webhook is asked.
    assert f"rule: {rule}" in result.stderr or "is invalid: spec.root" in result.stderr, result.stderr


def test_a_second_tree_and_a_tree_outside_kube_system_are_refused(
    dev_cluster: DevCluster, managed: tuple[str, str, str]
) -> None:
    for namespace, name in (("kube-system", "second"), ("default", "elsewhere")):
        tree = {
            "apiVersion": "scheduling.sigs.k8s.io/v1beta1",
            "kind": "ElasticQuotaTree",
            "metadata": {"name": name, "namespace": namespace},
            "spec": yaml.safe_load(yaml.safe_dump(SEED_TREE_SPEC)),
        }
        result = dev_cluster.kubectl_result("create", "--dry-run=server", "-f", "-", stdin=json.dumps(tree))
        assert result.returncode != 0, (namespace, name)
        assert ("kube-system" in result.stderr) or ("one" in result.stderr), result.stderr
