"""Issue 17 on the dev cluster, tried as the issue's attacker: alice, a developer with the ordinary ``edit`` role
in her own namespace (``kubectl create rolebinding alice-edit --clusterrole=edit --user=alice``), using
``kubectl --as=alice``. Each test tries one hole and asserts the refusal (or that the attempt changed nothing),
so none of them could pass with the hole open.

Hole 2 (nobody picks their place in line): a literal ``priority`` bought position 1; a held PyTorchJob's
priority class could be changed; an admitted Job could raise its parallelism; a held Job's template could be
relabelled into another quota. Hole 4 (bad input): tree node names that cannot be label values; a
ResourcePolicy of 5,000 units; the "queued for quota" warning printed on refused requests; a Job without
requests sized as zero although its pods get the namespace's LimitRange defaults.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.builders import SEED_TREE_SPEC, UNLABELLABLE_NAMES
from tests.e2e.conftest import DevCluster
from tests.e2e.harness import cronjob, deployment
from tests.e2e.setups import managed, pytorchjob, seed_job
from webhook.api.names import ADMISSION_ANNOTATION, QUOTA_LABEL, SUBMITTED_ANNOTATION
from webhook.core.placement import MAX_UNITS

pytestmark = pytest.mark.e2e

__all__ = ["managed"]  # the module's namespaces: the seed's tree over fresh ones, alice with `edit` in each

ALICE = "alice"


@pytest.fixture(scope="module")
def user_a(dev_cluster: DevCluster, managed: tuple[str, str, str]) -> Iterator[str]:
    """Department-a's namespace, where alice may also run PyTorchJobs (the training operator's, which the dev
    cluster runs) and write ResourcePolicies (as an operator grants when the kinds are installed)."""
    dev = dev_cluster
    namespace = managed[0]
    for resource in ("pytorchjobs.kubeflow.org", "resourcepolicies.scheduling.alibabacloud.com"):
        role = resource.split(".")[0]
        dev.kubectl("create", "role", role, "--verb=*", f"--resource={resource}", "-n", namespace)
        dev.kubectl("create", "rolebinding", f"alice-{role}", f"--role={role}", f"--user={ALICE}", "-n", namespace)
    # The classes the PyTorchJob below names (a job naming a class that does not exist is refused).
    classes = [{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
                "value": value} for name, value in (("low", 1), ("high", 1000))]
    dev.apply(classes)
    try:
        yield namespace
    finally:
        dev.kubectl("delete", "priorityclass", "low", "high", "--ignore-not-found", check=False)


def _job(namespace: str, *, parallelism: int, completions: int, cpu: str = "10") -> dict[str, Any]:
    job = seed_job(namespace)
    job["spec"]["parallelism"], job["spec"]["completions"] = parallelism, completions
    for container in job["spec"]["template"]["spec"]["containers"]:
        container["resources"] = {"requests": {"cpu": cpu, "memory": "1Gi"}, "limits": {"cpu": cpu, "memory": "1Gi"}}
    return job


def _created(dev: DevCluster, obj: dict[str, Any]) -> dict[str, Any]:
    result = dev.create(obj, user=ALICE)
    assert result.returncode == 0, result.stderr
    created: dict[str, Any] = json.loads(result.stdout)
    return created


def _patch(dev: DevCluster, kind: str, name: str, namespace: str, patch: object) -> Any:
    return dev.kubectl_result(
        "patch", kind, name, "-n", namespace, "--type=merge", "-p", json.dumps(patch), user=ALICE
    )


# Hole 2 -----------------------------------------------------------------------------------------------------


def test_a_literal_priority_is_refused_at_submission(dev_cluster: DevCluster, user_a: str) -> None:
    job = _job(user_a, parallelism=1, completions=1)
    job["spec"]["template"]["spec"]["priority"] = 1_000_000_000
    result = dev_cluster.create(job, user=ALICE)
    assert result.returncode != 0
    assert "spec.template.spec.priority" in result.stderr
    assert "the integer value of priority must not be provided in pod spec" in result.stderr
    assert "PriorityClass" in result.stderr
    assert "queued for quota" not in result.stderr  # hole 4: no warning on a refused request
    pytorch = pytorchjob("literal", user_a, workers=1)
    pytorch["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["priority"] = 1_000_000_000
    result = dev_cluster.create(pytorch, user=ALICE)
    assert result.returncode != 0
    assert "spec.pytorchReplicaSpecs.Worker.template.spec.priority" in result.stderr


def test_a_queued_pytorchjobs_priority_class_cannot_change(dev_cluster: DevCluster, user_a: str) -> None:
    # 31 pods x 10 CPU: more than Department-a's max x the oversell rate, so it stays held.
    job = pytorchjob("climber", user_a, workers=30)
    job["spec"]["runPolicy"]["schedulingPolicy"] = {"priorityClass": "low"}
    created = _created(dev_cluster, job)
    assert created["spec"]["runPolicy"]["suspend"] is True
    refused = _patch(
        dev_cluster, "pytorchjobs.kubeflow.org", "climber", user_a,
        {"spec": {"runPolicy": {"schedulingPolicy": {"priorityClass": "high"}}}},
    )
    assert refused.returncode != 0
    assert "spec.runPolicy.schedulingPolicy.priorityClass" in refused.stderr
    assert "low -> high" in refused.stderr and "resubmit" in refused.stderr
    worker = {"spec": {"pytorchReplicaSpecs": {"Worker": {"template": {"spec": {"priorityClassName": "high"}}}}}}
    refused = _patch(dev_cluster, "pytorchjobs.kubeflow.org", "climber", user_a, worker)
    assert refused.returncode != 0
    assert "spec.pytorchReplicaSpecs.Worker.template.spec.priorityClassName" in refused.stderr
    stored = dev_cluster.get_json("pytorchjobs.kubeflow.org", "climber", "-n", user_a)
    assert stored["spec"]["runPolicy"]["schedulingPolicy"] == {"priorityClass": "low"}


def test_a_held_jobs_pods_cannot_be_relabelled_into_another_quota(dev_cluster: DevCluster, user_a: str) -> None:
    created = _created(dev_cluster, _job(user_a, parallelism=25, completions=25))  # 250 CPU: stays held
    name = created["metadata"]["name"]
    relabel = {"spec": {"template": {"metadata": {"labels": {QUOTA_LABEL: "Department-b"}}}}}
    refused = _patch(dev_cluster, "job", name, user_a, relabel)
    assert refused.returncode != 0
    assert f"spec.template.metadata.labels.{QUOTA_LABEL}" in refused.stderr
    stored = dev_cluster.get_json("job", name, "-n", user_a)
    assert stored["spec"]["template"]["metadata"]["labels"][QUOTA_LABEL] == "Department-a"


def test_an_admitted_job_cannot_grow_but_may_be_suspended_and_resized(
    dev_cluster: DevCluster, user_a: str
) -> None:
    created = _created(dev_cluster, _job(user_a, parallelism=2, completions=10, cpu="1"))
    name = created["metadata"]["name"]
    stamp = created["metadata"]["annotations"][SUBMITTED_ANNOTATION]
    dev_cluster.wait_until(
        lambda: dev_cluster.get_json("job", name, "-n", user_a)["spec"].get("suspend") is False,
        60,
        f"job {name} to be admitted",
    )
    refused = _patch(dev_cluster, "job", name, user_a, {"spec": {"parallelism": 10}})
    assert refused.returncode != 0
    assert "cannot change its size or requests" in refused.stderr
    assert "suspend it first (spec.suspend: true" in refused.stderr and "resubmit" in refused.stderr
    assert dev_cluster.get_json("job", name, "-n", user_a)["spec"]["parallelism"] == 2
    # Held again, it may change, and keeps its place in the queue.
    resized = _patch(dev_cluster, "job", name, user_a, {"spec": {"suspend": True, "parallelism": 10}})
    assert resized.returncode == 0, resized.stderr
    stored = dev_cluster.get_json("job", name, "-n", user_a)
    assert stored["spec"]["parallelism"] == 10
    assert stored["metadata"]["annotations"][SUBMITTED_ANNOTATION] == stamp


# Hole 4 -----------------------------------------------------------------------------------------------------


def test_tree_node_names_that_cannot_be_label_values_are_refused(
    dev_cluster: DevCluster, user_a: str
) -> None:
    name = dev_cluster.get_json("elasticquotatrees", "-n", "kube-system")["items"][0]["metadata"]["name"]
    current = dev_cluster.get_json("elasticquotatree", name, "-n", "kube-system")["spec"]
    # alice cannot touch the tree at all (RBAC); an operator's bad names are refused by the webhook.
    spec = copy.deepcopy(current)
    spec["root"]["children"][1]["name"] = "team b"
    patch = json.dumps([{"op": "replace", "path": "/spec", "value": spec}], ensure_ascii=False)
    as_alice = dev_cluster.kubectl_result(
        "patch", "elasticquotatree", name, "-n", "kube-system", "--type=json", "-p", patch, user=ALICE
    )
    assert as_alice.returncode != 0 and "forbidden" in as_alice.stderr.lower()
    for bad in UNLABELLABLE_NAMES:
        spec = copy.deepcopy(current)
        spec["root"]["children"][1]["name"] = bad
        patch = json.dumps([{"op": "replace", "path": "/spec", "value": spec}], ensure_ascii=False)
        result = dev_cluster.kubectl_result(
            "patch", "elasticquotatree", name, "-n", "kube-system", "--type=json", "-p", patch, "--dry-run=server"
        )
        assert result.returncode != 0, bad
        assert f"root/{bad}" in result.stderr and "[rule: label-value]" in result.stderr, result.stderr
    assert SEED_TREE_SPEC["root"]["children"][1]["name"] == "Department-b"


def test_a_resource_policy_of_5000_units_is_refused_and_jobs_still_admit(
    dev_cluster: DevCluster, user_a: str
) -> None:
    units = [{"resource": "ecs", "nodeSelector": {"pool": f"p{index}"}} for index in range(5000)]
    policy = {
        "apiVersion": "scheduling.alibabacloud.com/v1alpha1",
        "kind": "ResourcePolicy",
        "metadata": {"name": "huge", "namespace": user_a},
        "spec": {"strategy": "prefer", "units": units},
    }
    result = dev_cluster.create(policy, user=ALICE)
    assert result.returncode != 0
    assert f"spec.units: 5000 units; at most {MAX_UNITS} are allowed" in result.stderr
    created = _created(dev_cluster, _job(user_a, parallelism=1, completions=1, cpu="1"))
    assert created["spec"]["suspend"] is True


def test_a_job_without_requests_is_sized_by_the_namespaces_limit_range(
    dev_cluster: DevCluster, user_a: str
) -> None:
    dev = dev_cluster
    limit_range = {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": {"name": "defaults", "namespace": user_a},
        "spec": {"limits": [{"type": "Container", "default": {"cpu": "3"}, "defaultRequest": {"cpu": "3"}}]},
    }
    dev.apply(limit_range)  # the operator's; alice's `edit` cannot write LimitRanges
    job = _job(user_a, parallelism=2, completions=2)
    for container in job["spec"]["template"]["spec"]["containers"]:
        del container["resources"]

    def requests_written() -> bool:  # once the webhook's cache has the LimitRange
        dry = dev.kubectl_result("create", "--dry-run=server", "-o", "json", "-f", "-", stdin=json.dumps(job))
        containers = json.loads(dry.stdout)["spec"]["template"]["spec"]["containers"] if dry.returncode == 0 else []
        return bool(containers) and containers[0].get("resources", {}).get("requests") == {"cpu": "3"}

    try:
        dev.wait_until(requests_written, 30, "the LimitRange's defaults in the webhook")
        created = _created(dev, job)
        name = created["metadata"]["name"]
        assert created["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "3"}

        def admitted_with_record() -> bool:
            annotations = dev.get_json("job", name, "-n", user_a)["metadata"].get("annotations", {})
            return ADMISSION_ANNOTATION in annotations

        dev.wait_until(admitted_with_record, 60, f"job {name} to be admitted")
        record = json.loads(dev.get_json("job", name, "-n", user_a)["metadata"]["annotations"][ADMISSION_ANNOTATION])
        assert record["request"]["cpu"] == "6"  # 2 pods x 3 CPU, not zero
    finally:
        dev.kubectl("delete", "limitrange", "defaults", "-n", user_a, "--ignore-not-found", check=False)


def test_a_pod_template_cannot_name_its_node(dev_cluster: DevCluster, user_a: str) -> None:
    """A Deployment's (a CronJob's...) pods are made by a trusted controller, which may set ``nodeName``: a pod
    bound that way skips the scheduler and the extender, which keeps the quota's max. So the template alice
    writes may not name a node (policy kube-queue-templates-guard), at creation or by a later edit."""
    dev = dev_cluster
    node = "a-node"

    def refused_at_creation() -> bool:
        result = dev.create(deployment(user_a, "pinned", node), user=ALICE)
        if result.returncode == 0:
            dev.kubectl("delete", "deployment", "pinned", "-n", user_a, "--ignore-not-found", check=False)
            return False
        assert "spec.template.spec.nodeName" in result.stderr, result.stderr
        return True

    dev.wait_until(refused_at_creation, 30, "a Deployment naming its node to be refused")
    result = dev.create(cronjob(user_a, "pinned", node), user=ALICE)
    assert result.returncode != 0 and "spec.jobTemplate.spec.template.spec.nodeName" in result.stderr, result.stderr
    created = dev.create(deployment(user_a, "free"), user=ALICE)
    assert created.returncode == 0, created.stderr  # a template without a node is a Deployment like any other
    try:
        patch = json.dumps({"spec": {"template": {"spec": {"nodeName": node}}}})
        edited = dev.kubectl_result("patch", "deployment", "free", "-n", user_a, "--type=merge", "-p", patch,
                                    user=ALICE)
        assert edited.returncode != 0 and "spec.template.spec.nodeName" in edited.stderr, edited.stderr
        template = dev.get_json("deployment", "free", "-n", user_a)["spec"]["template"]["spec"]
        assert "nodeName" not in template
    finally:
        dev.kubectl("delete", "deployment", "free", "-n", user_a, "--ignore-not-found", check=False)
