"""Issue 4 on the dev cluster, as a new user would do it with kubectl: the seed's Job is held and tagged even
with ``suspend: false``; the seed's tree applies and every broken variant is refused with its rule named; a
user cannot un-suspend a held job or move it to another quota; unmanaged namespaces pass untouched."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.builders import SEED_TREE_SPEC
from tests.e2e.conftest import DevCluster
from tests.e2e.test_controller_harness import create_namespaces, installed_tree, unique, wait_managed
from tests.service.test_validate import BROKEN_TREES
from webhook.workloads.base import SUBMITTED_ANNOTATION as SUBMITTED
from webhook.workloads.base import creation_seconds

pytestmark = pytest.mark.e2e

SEED_JOB = Path(__file__).resolve().parents[2] / "examples" / "seed" / "jobs"
QUOTA_LABEL = "quota.scheduling.alibabacloud.com/name"
FULLNAME = "kube-queue/quota-fullname"


def _seed_job(namespace: str) -> dict[str, Any]:
    """The seed's Job (examples/seed/jobs/pi.yaml) with ``suspend: false``, as a user who ignores the queue
    writes it."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"generateName": "pi-", "namespace": namespace},
        "spec": {
            "suspend": False,
            "completions": 6,
            "parallelism": 6,
            "template": {
                "spec": {
                    "schedulerName": "default-scheduler",
                    "containers": [
                        {
                            "name": "pi",
                            "image": "perl:5.34.0",
                            "command": ["sleep", "1d"],
                            "resources": {
                                "requests": {"cpu": "10", "memory": "10Gi"},
                                "limits": {"cpu": "10", "memory": "10Gi"},
                            },
                        }
                    ],
                    "restartPolicy": "Never",
                }
            },
        },
    }


@pytest.fixture(scope="module")
def managed(dev_cluster: DevCluster) -> Iterator[tuple[str, str, str]]:
    """A tree shaped like the seed's, over fresh namespaces: (dept-a namespace, dept-b namespace, unmanaged)."""
    ns_a, ns_b, outside = unique("wh-a"), unique("wh-b"), unique("wh-out")
    create_namespaces(dev_cluster, ns_a, ns_b, outside)
    for ns in (ns_a, ns_b, outside):  # alice is an ordinary developer: she may edit her namespaces
        dev_cluster.kubectl("create", "rolebinding", "alice-edit", "--clusterrole=edit", "--user=alice", "-n", ns)
    spec = copy.deepcopy(SEED_TREE_SPEC)
    spec["root"]["children"][0]["namespaces"] = [ns_a]
    spec["root"]["children"][1]["namespaces"] = [ns_b]
    try:
        with installed_tree(dev_cluster, spec):
            wait_managed(dev_cluster, ns_a, ns_b)
            yield ns_a, ns_b, outside
    finally:
        for ns in (ns_a, ns_b, outside):
            dev_cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def test_the_seed_job_comes_back_suspended_and_labelled(
    dev_cluster: DevCluster, managed: tuple[str, str, str]
) -> None:
    ns_a, _, _ = managed
    result = dev_cluster.create(_seed_job(ns_a), user="alice")
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
    job = _seed_job(ns_a)
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


def test_unmanaged_namespaces_pass_untouched(dev_cluster: DevCluster, managed: tuple[str, str, str]) -> None:
    _, _, outside = managed
    job = _seed_job(outside)
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
