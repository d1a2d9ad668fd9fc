"""The validating handler: every tree rule, ResourcePolicy and Queue checks, and the queue's integrity."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from tests.builders import BROKEN_TREES, SEED_TREE_SPEC, UNLABELLABLE_NAMES, Spec, tree_child, tree_object
from tests.service.helpers import (
    CONTROLLER,
    JOB_BUILDERS,
    OWNING_JOB,
    batch_job,
    message,
    patched,
    pod,
    response,
    review,
    tfjob,
)
from webhook.admission.mutate import mutate
from webhook.admission.review import AdmissionReview
from webhook.admission.state import AdmissionState, Settings
from webhook.admission.validate import validate
from webhook.api.names import ADMISSION_GATE, QUOTA_LABEL
from webhook.workloads.base import apply_patch
from webhook.workloads.registry import adapter_for


def allowed(out: AdmissionReview) -> bool:
    return bool(response(out)["allowed"])


# ElasticQuotaTree -------------------------------------------------------------------------------------------


def test_seed_tree_is_accepted(settings: Settings) -> None:
    assert allowed(validate(review(tree_object()), AdmissionState(), settings))


def test_update_of_the_one_existing_tree_is_accepted(state: AdmissionState, settings: Settings) -> None:
    obj = tree_object()
    assert allowed(validate(review(obj, operation="UPDATE", old=obj), state, settings))


def test_a_second_tree_is_refused(state: AdmissionState, settings: Settings) -> None:
    out = validate(review(tree_object(name="another")), state, settings)
    assert not allowed(out)
    assert "one-tree-per-cluster" in message(out)
    assert response(out)["status"]["code"] == 422


def test_a_tree_outside_kube_system_is_refused(settings: Settings) -> None:
    out = validate(review(tree_object(namespace="default")), AdmissionState(), settings)
    assert not allowed(out)
    assert "tree-namespace" in message(out)


@pytest.mark.parametrize(("case", "breaker", "rule", "node"), BROKEN_TREES, ids=[c[0] for c in BROKEN_TREES])
def test_each_broken_tree_is_refused_naming_the_node_and_rule(
    case: str, breaker: Callable[[Spec], None], rule: str, node: str, settings: Settings
) -> None:
    spec = copy.deepcopy(SEED_TREE_SPEC)
    breaker(spec)
    out = validate(review(tree_object(spec)), AdmissionState(), settings)
    assert not allowed(out), case
    text = message(out)
    assert f"[rule: {rule}]" in text
    assert node in text


@pytest.mark.parametrize("name", UNLABELLABLE_NAMES)
@pytest.mark.parametrize("index", [0, 1])
def test_node_names_that_cannot_be_label_values_are_refused(name: str, index: int, settings: Settings) -> None:
    spec = copy.deepcopy(SEED_TREE_SPEC)
    tree_child(spec, index)["name"] = name
    out = validate(review(tree_object(spec)), AdmissionState(), settings)
    assert not allowed(out)
    text = message(out)
    assert f"root/{name}: " in text and "[rule: label-value]" in text
    assert "label value" in text


def test_seed_variant_with_children_max_summing_above_root_max_is_accepted(settings: Settings) -> None:
    # docs/quota-tree.md: "root max >= sum of children's max" contradicts the seed's own example; not enforced.
    assert allowed(validate(review(tree_object()), AdmissionState(), settings))


def test_tree_deletion_is_not_checked(state: AdmissionState, settings: Settings) -> None:
    obj = tree_object(namespace="default")
    assert allowed(validate(review(None, operation="DELETE", old=obj), state, settings))


# ResourcePolicy and Queue ------------------------------------------------------------------------------------


def resource_policy(**spec: Any) -> dict[str, Any]:
    body = {
        "selector": {"app": "x"},
        "strategy": "prefer",
        "units": [{"resource": "ecs"}, {"resource": "eci", "max": 5}],
    }
    body.update(spec)
    return {
        "apiVersion": "scheduling.alibabacloud.com/v1alpha1",
        "kind": "ResourcePolicy",
        "metadata": {"name": "rp", "namespace": "user-a"},
        "spec": body,
    }


def test_valid_resource_policy_is_accepted(state: AdmissionState, settings: Settings) -> None:
    assert allowed(validate(review(resource_policy()), state, settings))


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"units": [{"resource": "gpu-box"}]}, "resource"),
        ({"units": [{"resource": "eci", "max": -1}]}, "max"),
        ({"whenTryNextUnits": {"policy": "Sometimes"}}, "policy"),
        ({"strategy": "spread"}, "strategy"),
        # Issue 17 hole 4: 5,000 units stalled the event loop for 11 s; refused on their number.
        ({"units": [{"resource": "ecs", "nodeSelector": {"pool": f"p{i}"}} for i in range(5000)]}, "spec.units"),
    ],
)
def test_invalid_resource_policies_are_refused(
    spec: dict[str, Any], field: str, state: AdmissionState, settings: Settings
) -> None:
    out = validate(review(resource_policy(**spec)), state, settings)
    assert not allowed(out)
    assert field in message(out)
    assert "ResourcePolicy user-a/rp is invalid" in message(out)


def queue(policy: object) -> dict[str, Any]:
    spec = {} if policy is None else {"queuePolicy": policy}
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "Queue",
        "metadata": {"name": "root-department-a-user-a", "namespace": "kube-queue"},
        "spec": spec,
    }


@pytest.mark.parametrize("policy", [None, "Round", "Priority", "Block"])
def test_known_queue_policies_are_accepted(policy: object, state: AdmissionState, settings: Settings) -> None:
    assert allowed(validate(review(queue(policy)), state, settings))


@pytest.mark.parametrize("policy", ["FIFO", "round", 3])
def test_unknown_queue_policies_are_refused(policy: object, state: AdmissionState, settings: Settings) -> None:
    out = validate(review(queue(policy)), state, settings)
    assert not allowed(out)
    assert "spec.queuePolicy" in message(out) and "Round, Priority, Block" in message(out)


# Queue integrity ---------------------------------------------------------------------------------------------


def held(obj: dict[str, Any], state: AdmissionState, settings: Settings) -> dict[str, Any]:
    return patched(obj, mutate(review(obj), state, settings))


def released(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    group = "" if kind == "Pod" else obj["apiVersion"].split("/")[0]
    adapter = adapter_for(group, kind)
    assert adapter is not None
    return apply_patch(obj, adapter.resume_patch(obj))


@pytest.mark.parametrize("kind", sorted(JOB_BUILDERS))
def test_a_user_cannot_release_a_held_job(kind: str, state: AdmissionState, settings: Settings) -> None:
    old = held(JOB_BUILDERS[kind](), state, settings)
    new = released(kind, old)
    out = validate(review(new, operation="UPDATE", old=old), state, settings)
    assert not allowed(out)
    text = message(out)
    assert "is queued for quota root/Department-a" in text
    assert "kubectl get queue -n kube-queue root-department-a-user-a -o yaml" in text
    assert "kq why" in text
    assert response(out)["status"]["code"] == 403


@pytest.mark.parametrize("kind", sorted(JOB_BUILDERS))
def test_the_controller_may_release_a_held_job(kind: str, state: AdmissionState) -> None:
    settings = Settings(controller_users=frozenset({CONTROLLER, "dev-controller"}))
    old = held(JOB_BUILDERS[kind](), state, settings)
    new = released(kind, old)
    for user in (CONTROLLER, "dev-controller"):
        assert allowed(validate(review(new, operation="UPDATE", old=old, user=user), state, settings))


def test_gate_removal_message_names_the_gate(state: AdmissionState, settings: Settings) -> None:
    old = held(pod(), state, settings)
    new = copy.deepcopy(old)
    new["spec"]["schedulingGates"] = []
    out = validate(review(new, operation="UPDATE", old=old), state, settings)
    assert "scheduling gate" in message(out)
    assert ADMISSION_GATE in str(old["spec"]["schedulingGates"])


@pytest.mark.parametrize("change", ["remove", "change", "add"])
def test_a_user_cannot_touch_the_quota_label(change: str, state: AdmissionState, settings: Settings) -> None:
    old = held(batch_job(), state, settings)
    new = copy.deepcopy(old)
    if change == "remove":
        del new["metadata"]["labels"][QUOTA_LABEL]
    elif change == "change":
        new["metadata"]["labels"][QUOTA_LABEL] = "Department-b"
    else:
        del old["metadata"]["labels"][QUOTA_LABEL]
    out = validate(review(new, operation="UPDATE", old=old), state, settings)
    assert not allowed(out)
    assert QUOTA_LABEL in message(out)


def test_relabelling_a_running_jobs_pod_is_refused(state: AdmissionState, settings: Settings) -> None:
    owned = pod(owner=OWNING_JOB)
    by_job_controller = review(owned, user="system:serviceaccount:kube-system:job-controller")
    old = patched(owned, mutate(by_job_controller, state, settings))
    new = copy.deepcopy(old)
    new["metadata"]["labels"][QUOTA_LABEL] = "Department-b"
    out = validate(review(new, operation="UPDATE", old=old), state, settings)
    assert not allowed(out)
    assert "runs under quota root/Department-a" in message(out)


def test_other_updates_and_re_suspension_are_allowed(state: AdmissionState, settings: Settings) -> None:
    old = held(batch_job(), state, settings)
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["team"] = "vision"
    assert allowed(validate(review(new, operation="UPDATE", old=old), state, settings))
    running = released("Job", old)
    assert allowed(validate(review(old, operation="UPDATE", old=running), state, settings))


def test_integrity_is_not_checked_outside_the_tree(state: AdmissionState, settings: Settings) -> None:
    old = batch_job(namespace="default", suspend=True)
    new = batch_job(namespace="default", suspend=False)
    assert allowed(validate(review(new, operation="UPDATE", old=old), state, settings))


def test_status_updates_are_not_checked(state: AdmissionState, settings: Settings) -> None:
    old = held(batch_job(), state, settings)
    new = released("Job", old)
    assert allowed(validate(review(new, operation="UPDATE", old=old, sub_resource="status"), state, settings))


def test_job_whose_pods_cannot_be_sized_is_refused_at_creation(state: AdmissionState, settings: Settings) -> None:
    job = tfjob()
    job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = "two"
    out = validate(review(job), state, settings)
    assert not allowed(out)
    assert "replicas" in message(out)
    job = batch_job()
    assert allowed(validate(review(job), state, settings))


def test_settings_are_what_the_state_sees(state: AdmissionState) -> None:
    # A state is plain data: replacing the tree un-manages every namespace.
    empty = dataclasses.replace(state, tree=None)
    old = held(batch_job(), state, Settings())
    new = released("Job", old)
    assert allowed(validate(review(new, operation="UPDATE", old=old), empty, Settings()))


def test_rayjob_that_keeps_its_cluster_is_refused_with_the_fix(state: AdmissionState, settings: Settings) -> None:
    job = JOB_BUILDERS["RayJob"]()
    job["spec"]["shutdownAfterJobFinishes"] = False
    out = validate(review(job), state, settings)
    assert not allowed(out)
    assert "spec.shutdownAfterJobFinishes must be true" in message(out)


def test_rayjob_on_an_existing_cluster_is_tagged_not_held(state: AdmissionState, settings: Settings) -> None:
    job = JOB_BUILDERS["RayJob"]()
    del job["spec"]["rayClusterSpec"]
    job["spec"]["clusterSelector"] = {"ray.io/cluster": "shared"}
    result = held(job, state, settings)
    assert "suspend" not in result["spec"]
    assert result["metadata"]["labels"][QUOTA_LABEL] == "Department-a"
    assert allowed(validate(review(result), state, settings))
