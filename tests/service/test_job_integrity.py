"""Issue 17, hole 2: nobody picks their place in line. Literal priorities are refused at submission, what decides
a job's place is immutable once queued (every kind), and an admitted job cannot change its size."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest

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
)
from webhook.admission.mutate import mutate
from webhook.admission.review import AdmissionReview
from webhook.admission.state import AdmissionState, Settings
from webhook.admission.validate import validate
from webhook.api.names import QUOTA_LABEL, SUBMITTED_ANNOTATION
from webhook.core.integrity import PRIORITY_REFUSED_BY_API
from webhook.workloads.base import Adapter, apply_patch, value_at
from webhook.workloads.facts import field_name
from webhook.workloads.registry import adapter_for

TEMPLATE_KINDS = sorted(kind for kind in JOB_BUILDERS if kind not in ("Pod", "Workflow", "SparkApplication"))
"""Kinds written with pod templates (a Workflow's and a SparkApplication's rules: test_job_kinds.py)."""
CLASSES = {"high": 1000, "low": 1}


def adapter(obj: dict[str, Any]) -> Adapter:
    group = obj["apiVersion"].split("/")[0] if "/" in obj["apiVersion"] else ""
    found = adapter_for(group, obj["kind"])
    assert found is not None
    return found


def allowed(out: AdmissionReview) -> bool:
    return bool(response(out)["allowed"])


@pytest.fixture
def classes_state(state: AdmissionState) -> AdmissionState:
    return dataclasses.replace(state, priority_classes=CLASSES)


def first_template(obj: dict[str, Any]) -> tuple[tuple[str | int, ...], dict[str, Any]]:
    """The path and the (mutable) object of the job's first pod template."""
    path = adapter(obj).pod_templates(obj)[0].path
    target = value_at(obj, *path) if path else obj
    assert isinstance(target, dict)
    return path, target


def held(obj: dict[str, Any], state: AdmissionState, settings: Settings) -> dict[str, Any]:
    out = mutate(review(obj), state, settings)
    assert allowed(out), message(out)
    return patched(obj, out)


def released(obj: dict[str, Any]) -> dict[str, Any]:
    return apply_patch(obj, adapter(obj).resume_patch(obj))


def update(old: dict[str, Any], new: dict[str, Any], state: AdmissionState, user: str = "alice") -> AdmissionReview:
    return validate(review(new, operation="UPDATE", old=old, user=user), state, Settings())


# A literal priority is refused at submission ----------------------------------------------------------------


@pytest.mark.parametrize("kind", TEMPLATE_KINDS)
def test_a_literal_priority_in_a_pod_template_is_refused_at_submission(
    kind: str, classes_state: AdmissionState, settings: Settings
) -> None:
    obj = JOB_BUILDERS[kind]()
    path, template = first_template(obj)
    template["spec"]["priority"] = 1_000_000_000
    for handler in (mutate, validate):
        out = handler(review(obj), classes_state, settings)
        assert not allowed(out)
        text = message(out)
        assert field_name(*path, "spec", "priority") in text
        assert PRIORITY_REFUSED_BY_API in text and "PriorityClass" in text
        assert "warnings" not in response(out)


@pytest.mark.parametrize("kind", TEMPLATE_KINDS)
def test_a_priority_class_alone_is_accepted(kind: str, classes_state: AdmissionState, settings: Settings) -> None:
    obj = JOB_BUILDERS[kind]()
    first_template(obj)[1]["spec"]["priorityClassName"] = "high"
    assert allowed(mutate(review(obj), classes_state, settings))
    assert allowed(validate(review(obj), classes_state, settings))


def test_a_pods_priority_must_be_its_classes(classes_state: AdmissionState, settings: Settings) -> None:
    # The API server resolves a Pod's spec.priority from its class before any webhook; a value that is not
    # the class's can only come from a cluster without that check, and must not buy a place.
    assert allowed(mutate(review(pod(priority=0)), classes_state, settings))
    assert allowed(mutate(review(pod(priority=1000, priorityClassName="high")), classes_state, settings))
    for bad in (pod(priority=1_000_000_000), pod(priority=5, priorityClassName="high")):
        out = mutate(review(bad), classes_state, settings)
        assert not allowed(out)
        assert "spec.priority" in message(out)
    # A Pod of a Job is its owner's business (the API server checked it); it is not refused here.
    assert allowed(mutate(review(pod(owner=OWNING_JOB, priority=0)), classes_state, settings))


def test_refused_creations_carry_no_queued_warning(state: AdmissionState, settings: Settings) -> None:
    ray = JOB_BUILDERS["RayJob"]()
    ray["spec"]["shutdownAfterJobFinishes"] = False
    out = mutate(review(ray), state, settings)
    assert not allowed(out)
    assert "spec.shutdownAfterJobFinishes" in message(out)
    assert "warnings" not in response(out)
    accepted = mutate(review(batch_job()), state, settings)
    assert "queued for quota" in response(accepted)["warnings"][0]


# No node named where an operator copies it into the pods ---------------------------------------------------


@pytest.mark.parametrize("kind", TEMPLATE_KINDS)
def test_a_template_naming_its_node_is_refused_at_submission_and_cannot_gain_one(
    kind: str, state: AdmissionState, settings: Settings
) -> None:
    """The kind's operator (the Job controller, the training operator, KubeRay) copies a template's nodeName
    into the pods, which would skip the scheduler and the extender; the pod guard refuses them one by one, where
    only the operator's Events say why. So the job is refused where its author sees it."""
    obj = JOB_BUILDERS[kind]()
    path, template = first_template(obj)
    template["spec"]["nodeName"] = "virtual-kubelet"
    field = field_name(*path, "spec", "nodeName")
    for handler in (mutate, validate):
        out = handler(review(obj), state, settings)
        assert not allowed(out)
        assert f"{field}: in a namespace under quota" in message(out) and "nodeSelector" in message(out)
    queued = held(JOB_BUILDERS[kind](), state, settings)
    for old in (queued, released(queued)):
        new = copy.deepcopy(old)
        first_template(new)[1]["spec"]["nodeName"] = "ecs-0"
        out = update(old, new, state)
        assert not allowed(out)
        assert f"{field}: in a namespace under quota" in message(out)
    if kind == "Job":
        return  # every write of a Job whose template names its node is refused (the templates guard)
    # One written before the rule does not stop other edits (its pods are refused by the pod guard).
    old = copy.deepcopy(queued)
    first_template(old)[1]["spec"]["nodeName"] = "ecs-0"
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["team"] = "vision"
    assert allowed(update(old, new, state))


PINNED_JSON = '{"nodeName": "virtual-kubelet", "containers": [{"name": "main"}]}'
PINNED_YAML = "nodeName: ecs-0\ncontainers:\n- name: main\n"


@pytest.mark.parametrize(("place", "patch"), [
    (("spec",), PINNED_JSON),
    (("spec", "templateDefaults"), PINNED_YAML),
    (("spec", "templates", 1), PINNED_YAML),
    (("spec", "templates", 0), '{"nodeName": "{{workflow.parameters.node}}"}'),
])
def test_a_workflow_whose_pod_spec_patch_names_a_node_is_refused(
    place: tuple[str | int, ...], patch: str, state: AdmissionState, settings: Settings
) -> None:
    """Argo writes each podSpecPatch into the step pods: a nodeName there binds them without the scheduler."""
    obj = JOB_BUILDERS["Workflow"]()
    set_at(obj, (*place, "podSpecPatch"), patch)
    field = field_name(*place, "podSpecPatch")
    out = mutate(review(obj), state, settings)
    assert not allowed(out)
    assert f"{field}: in a namespace under quota" in message(out)
    old = held(JOB_BUILDERS["Workflow"](), state, settings)
    new = copy.deepcopy(old)
    set_at(new, (*place, "podSpecPatch"), patch)
    assert f"{field}: in a namespace under quota" in message(update(old, new, state))


# What decides a job's place is immutable once queued --------------------------------------------------------


def class_fields(obj: dict[str, Any]) -> list[tuple[str | int, ...]]:
    """Every field that names the job's PriorityClass."""
    kind_adapter = adapter(obj)
    fields = [(*template.path, "spec", "priorityClassName") for template in kind_adapter.pod_templates(obj)]
    if kind_adapter.priority_class_path:
        fields.append(kind_adapter.priority_class_path)
    return fields


def set_at(obj: dict[str, Any], path: tuple[str | int, ...], value: Any) -> None:
    current: Any = obj
    for step in path[:-1]:
        current = current.setdefault(step, {}) if isinstance(current, dict) else current[step]
    current[path[-1]] = value


@pytest.mark.parametrize("kind", sorted(JOB_BUILDERS))
def test_the_priority_class_of_a_queued_job_cannot_change(
    kind: str, classes_state: AdmissionState, settings: Settings
) -> None:
    fresh = JOB_BUILDERS[kind]()
    for path in class_fields(fresh):
        obj = copy.deepcopy(fresh)
        set_at(obj, path, "low")
        old = held(obj, classes_state, settings)
        new = copy.deepcopy(old)
        set_at(new, path, "high")
        out = update(old, new, classes_state)
        assert not allowed(out), path
        assert field_name(*path) in message(out)
        assert "low -> high" in message(out) and "resubmit" in message(out)
        assert allowed(update(old, new, classes_state, user=CONTROLLER))


def test_pytorchjob_scheduling_policy_class_cannot_be_added_later(
    classes_state: AdmissionState, settings: Settings
) -> None:
    old = held(JOB_BUILDERS["PyTorchJob"](), classes_state, settings)
    new = copy.deepcopy(old)
    new["spec"]["runPolicy"]["schedulingPolicy"] = {"priorityClass": "high"}
    out = update(old, new, classes_state)
    assert not allowed(out)
    assert "spec.runPolicy.schedulingPolicy.priorityClass" in message(out)
    assert "none -> high" in message(out)


@pytest.mark.parametrize("kind", TEMPLATE_KINDS)
def test_a_templates_quota_label_cannot_change(kind: str, state: AdmissionState, settings: Settings) -> None:
    old = held(JOB_BUILDERS[kind](), state, settings)
    new = copy.deepcopy(old)
    path, template = first_template(new)
    template["metadata"]["labels"][QUOTA_LABEL] = "root"
    out = update(old, new, state)
    assert not allowed(out)
    assert field_name(*path, "metadata", "labels", QUOTA_LABEL) in message(out)


def test_a_literal_priority_cannot_be_added_to_a_queued_job(
    classes_state: AdmissionState, settings: Settings
) -> None:
    old = held(JOB_BUILDERS["TFJob"](), classes_state, settings)
    new = copy.deepcopy(old)
    first_template(new)[1]["spec"]["priority"] = 1_000_000_000
    out = update(old, new, classes_state)
    assert not allowed(out)
    assert PRIORITY_REFUSED_BY_API in message(out)


def test_the_submission_stamp_cannot_change(state: AdmissionState, settings: Settings) -> None:
    old = held(batch_job(), state, settings)
    new = copy.deepcopy(old)
    new["metadata"]["annotations"][SUBMITTED_ANNOTATION] = "2000-01-01T00:00:00.000000Z"
    out = update(old, new, state)
    assert not allowed(out)
    assert SUBMITTED_ANNOTATION in message(out)


# An admitted job cannot change its size ---------------------------------------------------------------------


def grown(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` with one more pod in its first pod set."""
    out = copy.deepcopy(obj)
    kind = out["kind"]
    if kind == "Job":
        out["spec"]["parallelism"] += 4
    elif kind == "RayJob":
        out["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] += 1
    elif kind == "RayCluster":
        out["spec"]["workerGroupSpecs"][0]["replicas"] += 1
    elif kind == "JobSet":
        out["spec"]["replicatedJobs"][0]["replicas"] = out["spec"]["replicatedJobs"][0].get("replicas", 1) + 1
    else:
        specs = next(value for key, value in out["spec"].items() if key.endswith("ReplicaSpecs"))
        role = next(iter(specs))
        specs[role]["replicas"] = specs[role].get("replicas", 1) + 1
    return out


def bigger_pods(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` with more CPU for the first container of its first pod template."""
    out = copy.deepcopy(obj)
    first_template(out)[1]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "99"
    return out


@pytest.mark.parametrize("kind", TEMPLATE_KINDS)
@pytest.mark.parametrize("change", [grown, bigger_pods])
def test_an_admitted_job_cannot_change_its_size(
    kind: str, change: Any, state: AdmissionState, settings: Settings
) -> None:
    running = released(held(JOB_BUILDERS[kind](), state, settings))
    out = update(running, change(running), state)
    assert not allowed(out)
    text = message(out)
    assert "runs under quota root/Department-a" in text
    assert "cannot change its size or requests" in text and "suspend it first" in text and "resubmit" in text
    assert "pod set " in text


@pytest.mark.parametrize("kind", TEMPLATE_KINDS)
def test_a_held_job_may_change_its_size_and_keeps_its_place(
    kind: str, state: AdmissionState, settings: Settings
) -> None:
    old = held(JOB_BUILDERS[kind](), state, settings)
    new = bigger_pods(grown(old))
    assert allowed(update(old, new, state))
    assert new["metadata"]["annotations"][SUBMITTED_ANNOTATION] == old["metadata"]["annotations"][SUBMITTED_ANNOTATION]


def test_an_admitted_job_may_be_suspended_and_resized_at_once(state: AdmissionState, settings: Settings) -> None:
    queued = held(batch_job(parallelism=2), state, settings)
    running = released(queued)
    resized = grown(queued)  # suspend: true again, parallelism 6
    assert allowed(update(running, resized, state))
    assert not allowed(update(running, grown(running), state))


def test_the_controller_may_resize_an_admitted_job(state: AdmissionState, settings: Settings) -> None:
    running = released(held(batch_job(), state, settings))
    assert allowed(update(running, grown(running), state, user=CONTROLLER))


def test_other_changes_of_an_admitted_job_are_allowed(state: AdmissionState, settings: Settings) -> None:
    running = released(held(batch_job(), state, settings))
    new = copy.deepcopy(running)
    new["metadata"]["labels"]["team"] = "vision"
    first_template(new)[1]["spec"]["containers"][0]["resources"]["limits"] = {"cpu": "10"}
    assert allowed(update(running, new, state))
