"""The mutating handler: every kind is held and tagged in managed namespaces; nothing else is touched."""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

import orjson
import pytest

from tests.service.helpers import (
    CONTROLLER,
    JOB_BUILDERS,
    OWNING_JOB,
    batch_job,
    patched,
    pod,
    response,
    review,
    template,
    tfjob,
)
from webhook.admission.mutate import mutate
from webhook.admission.state import AdmissionState, Settings
from webhook.api.names import (
    ADMISSION_GATE,
    DEFAULT_SCHEDULER,
    ECI_OPT_IN_LABEL,
    EXTENDER_RESOURCE,
    FULL_SCAN_SCHEDULER,
    QUOTA_FULLNAME_ANNOTATION,
    QUOTA_LABEL,
)
from webhook.core.placement import parse_policy
from webhook.workloads.base import ECI_TOLERATION
from webhook.workloads.registry import adapter_for

LEAF, FULL = "Department-a", "root/Department-a"


def eci_policy(namespace: str = "user-a", selector: dict[str, str] | None = None, eci: bool = True) -> Any:
    units: list[dict[str, Any]] = [{"resource": "ecs", "nodeSelector": {"pool": "a"}}]
    if eci:
        units.append({"resource": "eci", "max": 10})
    return parse_policy(
        {
            "apiVersion": "scheduling.alibabacloud.com/v1alpha1",
            "kind": "ResourcePolicy",
            "metadata": {"name": "rp", "namespace": namespace},
            "spec": {"selector": selector or {}, "strategy": "prefer", "units": units},
        }
    )


def templates_of(obj: dict[str, Any]) -> list[dict[str, Any]]:
    kind = obj["kind"]
    adapter = adapter_for(*{"Pod": ("", "Pod")}.get(kind, (obj["apiVersion"].split("/")[0], kind)))
    assert adapter is not None
    return [dict(t.template) for t in adapter.pod_templates(obj)]


def test_seed_job_with_suspend_false_comes_back_suspended_and_labelled(
    state: AdmissionState, settings: Settings
) -> None:
    job = batch_job(suspend=False)
    out = mutate(review(job), state, settings)
    resp = response(out)
    assert resp["uid"] == "req-1"
    assert resp["allowed"] is True
    assert resp["patchType"] == "JSONPatch"
    orjson.loads(base64.b64decode(resp["patch"]))  # valid base64 JSON
    result = patched(job, out)
    assert result["spec"]["suspend"] is True
    assert result["metadata"]["labels"][QUOTA_LABEL] == LEAF
    assert result["metadata"]["annotations"][QUOTA_FULLNAME_ANNOTATION] == FULL
    assert result["spec"]["template"]["metadata"]["labels"][QUOTA_LABEL] == LEAF
    assert "root-department-a-user-a" in resp["warnings"][0]


@pytest.mark.parametrize("kind", sorted(JOB_BUILDERS))
def test_every_kind_is_held_and_tagged_with_its_quota(kind: str, state: AdmissionState, settings: Settings) -> None:
    obj = JOB_BUILDERS[kind](namespace="user-c")
    result = patched(obj, mutate(review(obj), state, settings))
    adapter = adapter_for(*(("", "Pod") if kind == "Pod" else (obj["apiVersion"].split("/")[0], kind)))
    assert adapter is not None and adapter.is_suspended(result)
    assert result["metadata"]["labels"][QUOTA_LABEL] == "Department-b"
    assert result["metadata"]["annotations"][QUOTA_FULLNAME_ANNOTATION] == "root/Department-b"
    for each in templates_of(result):
        assert each["metadata"]["labels"][QUOTA_LABEL] == "Department-b"
        assert each["metadata"]["annotations"][QUOTA_FULLNAME_ANNOTATION] == "root/Department-b"


def test_kubeflow_suspend_false_is_forced_true(state: AdmissionState, settings: Settings) -> None:
    job = tfjob(suspend=False)
    assert patched(job, mutate(review(job), state, settings))["spec"]["runPolicy"]["suspend"] is True


def test_plain_pod_gets_the_admission_gate(state: AdmissionState, settings: Settings) -> None:
    obj = pod()
    result = patched(obj, mutate(review(obj), state, settings))
    assert {"name": ADMISSION_GATE} in result["spec"]["schedulingGates"]


JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"


def test_pod_of_a_job_is_tagged_but_not_gated(state: AdmissionState, settings: Settings) -> None:
    obj = pod(owner=OWNING_JOB)
    out = mutate(review(obj, user=JOB_CONTROLLER), state, settings)
    result = patched(obj, out)
    assert "schedulingGates" not in result["spec"]
    assert result["metadata"]["labels"][QUOTA_LABEL] == LEAF
    assert "warnings" not in response(out)


def test_a_users_pod_naming_an_owner_is_held_like_a_bare_pod(state: AdmissionState, settings: Settings) -> None:
    # The owner reference is the user's own words: only a workload controller's pods are trusted to belong to
    # the owner they name (docs/security.md).
    obj = pod(owner=OWNING_JOB)
    result = patched(obj, mutate(review(obj, user="alice"), state, settings))
    assert {"name": ADMISSION_GATE} in result["spec"]["schedulingGates"]
    adapter = adapter_for("", "Pod")
    assert adapter is not None and adapter.manages(result)  # the controller queues it as a Pod


def test_a_users_pod_bound_to_a_node_is_refused(state: AdmissionState, settings: Settings) -> None:
    obj = pod()
    obj["spec"]["nodeName"] = "ecs-3"
    out = mutate(review(obj, user="alice"), state, settings)
    assert response(out)["allowed"] is False
    assert "spec.nodeName: a Pod in a namespace under quota root/Department-a must go through the scheduler" in (
        response(out)["status"]["message"]
    )
    mirror = mutate(review(obj, user="system:node:ecs-3"), state, settings)
    assert response(mirror)["allowed"] is True
    # A workload controller copies a nodeName from what a user wrote (a template, an Argo podSpecPatch): its
    # pod is refused too, trusted or not (the webhook-only install; the pod guard policy elsewhere).
    owned = pod(owner=OWNING_JOB)
    owned["spec"]["nodeName"] = "ecs-3"
    for creator in ("system:kube-controller-manager", "system:serviceaccount:kubeflow:training-operator"):
        out = mutate(review(owned, user=creator), state, settings)
        assert response(out)["allowed"] is False, creator
        assert "spec.nodeName: a Pod in a namespace under quota" in response(out)["status"]["message"]


def test_already_tagged_and_held_job_gets_no_patch(state: AdmissionState, settings: Settings) -> None:
    job = patched(batch_job(), mutate(review(batch_job()), state, settings))
    resp = response(mutate(review(job), state, settings))
    assert resp["allowed"] is True
    assert "patch" not in resp


def test_namespaces_outside_the_tree_pass_untouched(state: AdmissionState, settings: Settings) -> None:
    for obj in (batch_job(namespace="default"), pod(namespace="kube-system"), tfjob(namespace="other")):
        resp = response(mutate(review(obj), state, settings))
        assert resp == {"uid": "req-1", "allowed": True}


def test_without_a_tree_nothing_is_managed(settings: Settings) -> None:
    resp = response(mutate(review(batch_job()), AdmissionState(), settings))
    assert resp == {"uid": "req-1", "allowed": True}


def test_controller_identities_are_never_mutated(state: AdmissionState) -> None:
    settings = Settings(controller_users=frozenset({CONTROLLER, "kq-dev-controller"}))
    for user in (CONTROLLER, "kq-dev-controller"):
        resp = response(mutate(review(batch_job(), user=user), state, settings))
        assert "patch" not in resp and resp["allowed"]


@pytest.mark.parametrize("operation", ["UPDATE", "DELETE"])
def test_only_creation_is_mutated(operation: str, state: AdmissionState, settings: Settings) -> None:
    job = batch_job()
    resp = response(mutate(review(job, operation=operation, old=job), state, settings))
    assert "patch" not in resp and resp["allowed"]


def test_unsupported_kinds_pass(state: AdmissionState, settings: Settings) -> None:
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "user-a"}}
    body = review(batch_job())
    body["request"]["kind"] = {"group": "apps", "version": "v1", "kind": "Deployment"}
    body["request"]["object"] = deployment
    assert "patch" not in response(mutate(body, state, settings))


def test_eci_toleration_on_templates_a_policy_with_an_eci_unit_selects(
    state: AdmissionState, settings: Settings
) -> None:
    state = dataclasses.replace(state, policies={"user-a": (eci_policy(selector={"team": "vision"}),)})
    job = tfjob()
    job["spec"]["tfReplicaSpecs"]["Worker"]["template"] = template("2", labels={"team": "vision"})
    result = patched(job, mutate(review(job), state, settings))
    worker = result["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]
    ps = result["spec"]["tfReplicaSpecs"]["PS"]["template"]["spec"]
    assert worker["tolerations"] == [ECI_TOLERATION]
    assert "tolerations" not in ps


def test_eci_toleration_matches_the_quota_label_the_webhook_adds(state: AdmissionState, settings: Settings) -> None:
    policy = eci_policy(selector={QUOTA_LABEL: LEAF})
    state = dataclasses.replace(state, policies={"user-a": (policy,)})
    result = patched(batch_job(), mutate(review(batch_job()), state, settings))
    assert result["spec"]["template"]["spec"]["tolerations"] == [ECI_TOLERATION]


def test_eci_toleration_is_appended_once_to_existing_tolerations(state: AdmissionState, settings: Settings) -> None:
    state = dataclasses.replace(state, policies={"user-a": (eci_policy(),)})
    other = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}
    obj = pod(tolerations=[other])
    result = patched(obj, mutate(review(obj), state, settings))
    assert result["spec"]["tolerations"] == [other, ECI_TOLERATION]
    again = patched(result, mutate(review(result), state, settings))
    assert again["spec"]["tolerations"] == [other, ECI_TOLERATION]


def test_no_toleration_without_an_eci_unit_or_in_another_namespace(state: AdmissionState, settings: Settings) -> None:
    state = dataclasses.replace(
        state, policies={"user-a": (eci_policy(eci=False),), "user-b": (eci_policy(namespace="user-b"),)}
    )
    result = patched(batch_job(), mutate(review(batch_job()), state, settings))
    assert "tolerations" not in result["spec"]["template"]["spec"]


def test_owned_pods_matched_by_an_eci_policy_get_the_toleration(state: AdmissionState, settings: Settings) -> None:
    state = dataclasses.replace(state, policies={"user-a": (eci_policy(),)})
    obj = pod(owner=OWNING_JOB)
    result = patched(obj, mutate(review(obj), state, settings))
    assert result["spec"]["tolerations"] == [ECI_TOLERATION]


def test_unreadable_job_is_refused_with_the_field_named(state: AdmissionState, settings: Settings) -> None:
    job = batch_job()
    job["spec"]["suspend"] = "no"
    resp = response(mutate(review(job), state, settings))
    assert resp["allowed"] is False
    assert resp["status"]["code"] == 422
    assert "/spec/suspend" in resp["status"]["message"]


def test_namespace_taken_from_the_object_when_the_request_has_none(state: AdmissionState, settings: Settings) -> None:
    body = review(batch_job(), namespace="")
    assert patched(batch_job(), mutate(body, state, settings))["spec"]["suspend"] is True


@pytest.mark.parametrize("metadata", [[], "x", 3])
def test_mistyped_metadata_is_refused_not_an_internal_error(
    metadata: object, state: AdmissionState, settings: Settings
) -> None:
    job = batch_job()
    job["metadata"] = metadata
    body = review(batch_job(), namespace="")
    body["request"]["object"] = job
    resp = response(mutate(body, state, settings))
    assert resp["allowed"] is False
    assert resp["status"]["code"] == 422
    body["request"]["namespace"] = "user-a"
    resp = response(mutate(body, state, settings))
    assert resp["status"]["code"] == 422


def test_a_pod_outside_the_tree_selected_by_an_eci_policy_gets_only_the_toleration(settings: Settings) -> None:
    from tests.builders import seed_tree  # noqa: PLC0415

    state = AdmissionState(tree=seed_tree(), policies={"free": (eci_policy(namespace="free"),)})
    obj = pod()
    obj["metadata"]["namespace"] = "free"
    out = mutate(review(obj, namespace="free"), state, settings)
    result = patched(obj, out)
    assert ECI_TOLERATION in result["spec"]["tolerations"]
    assert "schedulingGates" not in result["spec"]  # not queued: the namespace is not under a quota
    assert QUOTA_LABEL not in (result["metadata"].get("labels") or {})
    other = pod()
    other["metadata"]["namespace"] = "elsewhere"
    assert "patch" not in response(mutate(review(other, namespace="elsewhere"), state, settings))


def test_pods_of_a_policy_a_sample_could_mislead_get_the_full_scan_profile(
    state: AdmissionState, settings: Settings
) -> None:
    state = dataclasses.replace(state, policies={"user-a": (eci_policy(selector={"team": "vision"}),)})
    job = tfjob()
    job["spec"]["tfReplicaSpecs"]["Worker"]["template"] = template("2", labels={"team": "vision"})
    result = patched(job, mutate(review(job), state, settings))
    worker = result["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]
    ps = result["spec"]["tfReplicaSpecs"]["PS"]["template"]["spec"]
    assert worker["schedulerName"] == FULL_SCAN_SCHEDULER
    assert "schedulerName" not in ps  # no policy selects it: it keeps sampling
    owned = pod(owned=True)
    owned["metadata"]["labels"] = {"team": "vision"}
    owned["spec"]["schedulerName"] = DEFAULT_SCHEDULER  # as the API server defaults a Job's template
    result = patched(owned, mutate(review(owned), state, settings))
    assert result["spec"]["schedulerName"] == FULL_SCAN_SCHEDULER


def test_other_schedulers_and_policies_no_sample_misleads_keep_their_profile(
    state: AdmissionState, settings: Settings
) -> None:
    every_node = parse_policy(
        {
            "apiVersion": "scheduling.alibabacloud.com/v1alpha1",
            "kind": "ResourcePolicy",
            "metadata": {"name": "all", "namespace": "user-b"},
            "spec": {"selector": {}, "units": [{"resource": "ecs", "max": 5}]},
        }
    )
    state = dataclasses.replace(state, policies={"user-a": (eci_policy(),), "user-b": (every_node,)})
    mine = pod(owned=True)
    mine["spec"]["schedulerName"] = "my-scheduler"
    result = patched(mine, mutate(review(mine), state, settings))
    assert result["spec"]["schedulerName"] == "my-scheduler"
    assert result["spec"]["tolerations"] == [ECI_TOLERATION]  # the policy still applies otherwise
    plain = pod(owned=True)
    plain["metadata"]["namespace"] = "user-b"
    result = patched(plain, mutate(review(plain, namespace="user-b"), state, settings))
    assert "schedulerName" not in result["spec"]


def test_a_pod_outside_the_tree_gets_the_full_scan_profile_from_its_policy(settings: Settings) -> None:
    from tests.builders import seed_tree  # noqa: PLC0415

    state = AdmissionState(tree=seed_tree(), policies={"free": (eci_policy(namespace="free", eci=False),)})
    obj = pod()
    obj["metadata"]["namespace"] = "free"
    result = patched(obj, mutate(review(obj, namespace="free"), state, settings))
    assert result["spec"]["schedulerName"] == FULL_SCAN_SCHEDULER
    assert "tolerations" not in result["spec"]  # no eci unit
    assert "schedulingGates" not in result["spec"]


def _marker(obj: dict[str, Any]) -> tuple[str | None, str | None]:
    resources = obj["spec"]["containers"][0].get("resources") or {}
    return (resources.get("requests") or {}).get(EXTENDER_RESOURCE), (resources.get("limits") or {}).get(
        EXTENDER_RESOURCE
    )


@pytest.mark.parametrize("owned", [False, True])
def test_every_pod_of_the_tree_carries_the_extenders_marker(
    owned: bool, state: AdmissionState, settings: Settings
) -> None:
    # The pod-level quota lives in the extender, which the scheduler asks only about pods with the marker.
    obj = pod(owned=owned)
    obj["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1"}}
    result = patched(obj, mutate(review(obj), state, settings))
    assert _marker(result) == ("1", "1")
    assert result["spec"]["containers"][0]["resources"]["limits"]["cpu"] == "1"  # the rest is kept


def test_a_pod_cannot_keep_the_marker_away_by_writing_its_own(state: AdmissionState, settings: Settings) -> None:
    obj = pod(owned=True)
    obj["spec"]["containers"][0]["resources"] = {"requests": {EXTENDER_RESOURCE: "0"}}
    assert _marker(patched(obj, mutate(review(obj), state, settings))) == ("1", "1")


def test_outside_the_tree_only_pods_a_policy_selects_carry_the_marker(settings: Settings) -> None:
    from tests.builders import seed_tree  # noqa: PLC0415

    state = AdmissionState(tree=seed_tree(), policies={"free": (eci_policy(namespace="free", selector={"a": "b"}),)})
    selected, other = pod(), pod()
    for obj in (selected, other):
        obj["metadata"]["namespace"] = "free"
    selected["metadata"]["labels"] = {"a": "b"}
    assert _marker(patched(selected, mutate(review(selected, namespace="free"), state, settings))) == ("1", "1")
    assert "patch" not in response(mutate(review(other, namespace="free"), state, settings))


def test_job_templates_never_carry_the_marker(state: AdmissionState, settings: Settings) -> None:
    # The job's pods get it when they are created; a template with it would only add noise to the job.
    job = batch_job()
    result = patched(job, mutate(review(job), state, settings))
    containers = result["spec"]["template"]["spec"]["containers"]
    assert EXTENDER_RESOURCE not in orjson.dumps(containers).decode()


def test_a_pod_opted_into_eci_outside_the_tree_gets_the_profile_that_may_use_the_virtual_node(
    settings: Settings,
) -> None:
    from tests.builders import seed_tree  # noqa: PLC0415

    state = AdmissionState(tree=seed_tree())
    obj = pod()
    obj["metadata"]["namespace"] = "free"
    obj["metadata"]["labels"] = {ECI_OPT_IN_LABEL: "true"}
    result = patched(obj, mutate(review(obj, namespace="free"), state, settings))
    assert result["spec"]["schedulerName"] == FULL_SCAN_SCHEDULER
    assert _marker(result) == (None, None)  # the extender would pass it every node: it is not asked
