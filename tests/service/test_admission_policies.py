"""The admission policies of the tree's pods and the webhook hooks that count on them (issue 40).

The policies' CEL runs in the API server: tests/e2e/test_service_down.py checks it there with kq serve frozen.
Here: the policies and the webhook configurations come from the same names and identities, and a pod hook
fails open only where a policy does its job.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from webhook.admission.configs import (
    CLAIMS_FROM_TEMPLATES,
    CLAIMS_VALIDATE,
    PODS_MUTATE,
    PODS_MUTATE_WORKLOADS,
    PODS_MUTATE_WORKLOADS_OPT_IN,
    PODS_VALIDATE,
    cluster_webhook_configs,
)
from webhook.admission.manifests import generated_files
from webhook.admission.manifests import main as write
from webhook.admission.policies import PODS_GUARD, PODS_MARK, TEMPLATES_GUARD, admission_policies, creator_is_trusted
from webhook.admission.registration import Webhook
from webhook.admission.state import DEFAULT_CONTROLLER_USER
from webhook.api.names import (
    ADMISSION_GATE,
    CLAIM_CONTROLLER_USER,
    CONTROLLER_ANNOTATIONS,
    ECI_OPT_IN_LABEL,
    EXTENDER_RESOURCE,
    MANAGED_NAMESPACE_LABEL,
    NAMESPACE_QUOTA_LABEL,
    PLACEMENT_NAMESPACE_LABEL,
    QUOTA_LABEL,
    SUBMITTED_ANNOTATION,
)
from webhook.core.integrity import NODE_BINDERS, WORKLOAD_CONTROLLERS


def _objects() -> dict[tuple[str, str], Mapping[str, Any]]:
    return {(obj["kind"], obj["metadata"]["name"]): obj for obj in admission_policies()}


def _hooks(policies: bool) -> dict[str, Webhook]:
    mutating, validating = cluster_webhook_configs(policies=policies)
    return {hook["name"]: hook for hook in [*mutating["webhooks"], *validating["webhooks"]]}


def test_each_policy_is_bound_and_matches_the_pod_hooks_namespaces() -> None:
    objects = _objects()
    mark = objects["MutatingAdmissionPolicy", PODS_MARK]
    guard = objects["ValidatingAdmissionPolicy", PODS_GUARD]
    assert objects["MutatingAdmissionPolicyBinding", PODS_MARK]["spec"] == {"policyName": PODS_MARK}
    assert objects["ValidatingAdmissionPolicyBinding", PODS_GUARD]["spec"] == {
        "policyName": PODS_GUARD, "validationActions": ["Deny"]}
    selector = _hooks(True)[PODS_MUTATE]["namespaceSelector"]
    for policy in (mark, guard):
        assert policy["spec"]["matchConstraints"]["namespaceSelector"] == selector
        assert policy["spec"]["failurePolicy"] == "Fail"
    assert [rule["operations"] for rule in mark["spec"]["matchConstraints"]["resourceRules"]] == [["CREATE"]]
    assert [rule["operations"] for rule in guard["spec"]["matchConstraints"]["resourceRules"]] == [
        ["CREATE", "UPDATE"]]


def test_the_mark_policy_writes_the_extender_marker_and_the_namespaces_quota() -> None:
    mutations = _objects()["MutatingAdmissionPolicy", PODS_MARK]["spec"]["mutations"]
    assert {mutation["patchType"] for mutation in mutations} == {"JSONPatch"}  # no structured merge of the pod
    marker, quota = (mutation["jsonPatch"]["expression"] for mutation in mutations)
    escaped = EXTENDER_RESOURCE.replace("/", "~1")
    for part in ("requests", "limits"):
        assert f'path: "/spec/containers/0/resources/{part}/{escaped}", value: "1"' in marker
        assert f'path: "/spec/containers/0/resources/{part}", value: {{"{EXTENDER_RESOURCE}": "1"}}' in marker
    assert f'value: {{"{QUOTA_LABEL}": namespaceObject.metadata.labels["{NAMESPACE_QUOTA_LABEL}"]}}' in quota
    assert f'path: "/metadata/labels/{QUOTA_LABEL.replace("/", "~1")}"' in quota


def test_the_guard_policy_keeps_the_gate_the_quota_label_and_the_records_and_lets_the_controller_by() -> None:
    spec = _objects()["ValidatingAdmissionPolicy", PODS_GUARD]["spec"]
    # The controller and the workload controllers are let by before any rule is read: the pods of a burst of
    # admissions (the Job controller's) cost the API server no evaluation of the rules. But a pod a workload
    # controller creates bound to a node is read too (it copied the nodeName from what a user wrote), unless a
    # kubelet creates it (a mirror pod): tests/e2e/test_operator_kinds.py tries it with the training operator.
    not_trusted = [{"name": "not-a-trusted-creator", "expression": f"!({creator_is_trusted()})"}]
    bound = "request.operation == 'CREATE' && has(object.spec.nodeName) && object.spec.nodeName != ''"
    assert spec["matchConditions"] == [{
        "name": "not-a-trusted-creator-or-bound-at-creation",
        "expression": f"!({creator_is_trusted()}) || (({bound}) && !({creator_is_trusted(NODE_BINDERS)}))",
    }]
    assert creator_is_trusted(NODE_BINDERS) == '["system:node:"].exists(p, request.userInfo.username.startsWith(p))'
    assert _objects()["ValidatingAdmissionPolicy", TEMPLATES_GUARD]["spec"]["matchConditions"] == not_trusted
    assert f'"{DEFAULT_CONTROLLER_USER}"' in not_trusted[0]["expression"]
    node, gate, label, records = (validation["expression"] for validation in spec["validations"])
    assert "object.spec.nodeName" in node
    assert f'g.name == "{ADMISSION_GATE}"' in gate
    assert f'"{QUOTA_LABEL}" in oldObject.metadata.labels' in label
    for annotation in (SUBMITTED_ANNOTATION, *CONTROLLER_ANNOTATIONS):
        assert f'"{annotation}" in oldObject.metadata.annotations' in records
    assert "variables" not in spec


def test_trusted_creators_are_the_webhooks_workload_controllers_and_the_controller() -> None:
    expression = creator_is_trusted()
    for pattern in WORKLOAD_CONTROLLERS:
        assert (f'"{pattern[:-1]}"' if pattern.endswith("*") else f'"{pattern}"') in expression
    assert f'"{DEFAULT_CONTROLLER_USER}"' in expression
    assert creator_is_trusted(()) == "false"


def test_only_a_workload_controllers_pods_skip_the_pod_webhook_and_only_beside_the_policies() -> None:
    """The pods a workload controller creates (their owner was queued) are marked and tagged by the policy, so
    their hooks fail open, and only the pods a ResourcePolicy or the ECI opt-in asks something of reach one: in
    a namespace labelled for its policy (the admission labels it before the policy is stored), or labelled to
    opt in elsewhere. Everyone else's pods still fail closed (held, sized, priority checked by the webhook).
    Without the policies every pod hook fails closed and pod updates go to the webhook."""
    hooks = _hooks(True)
    trusted = creator_is_trusted()
    managed = hooks[PODS_MUTATE]["namespaceSelector"]
    for name in (PODS_MUTATE_WORKLOADS, PODS_MUTATE_WORKLOADS_OPT_IN):
        assert hooks[name]["failurePolicy"] == "Ignore"
        assert hooks[name]["matchConditions"] == [{"name": "a-workload-controller", "expression": trusted}]
        assert hooks[name]["rules"] == hooks[PODS_MUTATE]["rules"]
    assert hooks[PODS_MUTATE]["failurePolicy"] == "Fail"
    assert hooks[PODS_MUTATE]["matchConditions"] == [{"name": "not-a-workload-controller",
                                                      "expression": f"!({trusted})"}]
    routed = hooks[PODS_MUTATE_WORKLOADS]["namespaceSelector"]
    assert routed["matchLabels"] == {**managed["matchLabels"], PLACEMENT_NAMESPACE_LABEL: "true"}
    assert routed["matchExpressions"] == managed["matchExpressions"]
    assert "objectSelector" not in hooks[PODS_MUTATE_WORKLOADS]
    others = hooks[PODS_MUTATE_WORKLOADS_OPT_IN]["namespaceSelector"]
    assert others["matchLabels"] == managed["matchLabels"]
    assert others["matchExpressions"] == [*managed["matchExpressions"],
                                          {"key": PLACEMENT_NAMESPACE_LABEL, "operator": "DoesNotExist"}]
    assert hooks[PODS_MUTATE_WORKLOADS_OPT_IN]["objectSelector"] == {"matchLabels": {ECI_OPT_IN_LABEL: "true"}}
    assert PODS_VALIDATE not in hooks
    only = _hooks(False)
    assert PODS_MUTATE_WORKLOADS not in only and PODS_MUTATE_WORKLOADS_OPT_IN not in only
    assert "matchConditions" not in only[PODS_MUTATE]
    assert only[PODS_VALIDATE]["failurePolicy"] == "Fail"
    pod_hooks = [hook for hook in only.values() if any("pods" in rule["resources"] for rule in hook["rules"])
                 and hook.get("namespaceSelector", {}).get("matchLabels") == {MANAGED_NAMESPACE_LABEL: "true"}]
    assert pod_hooks and {hook["failurePolicy"] for hook in pod_hooks} == {"Fail"}


def test_the_generator_writes_every_generated_manifest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(["--manifests", str(tmp_path)])
    printed = capsys.readouterr().out
    for relative, text in generated_files().items():
        assert (tmp_path / relative).read_text() == text
        assert f"wrote {tmp_path / relative}" in printed
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*.yaml")) == sorted(generated_files())


def test_only_the_claims_kubernetes_makes_from_templates_skip_the_claims_webhook() -> None:
    """A claim made from a template: the template was checked when it was created, and the extender keeps a pod
    whose claim it cannot count waiting (tests/service/test_extender_devices.py), so an admitted job's DRA pods do
    not wait on the service; every other claim and template still fails closed."""
    hooks = _hooks(True)
    templated, checked = hooks[CLAIMS_FROM_TEMPLATES], hooks[CLAIMS_VALIDATE]
    controller = f"request.userInfo.username == '{CLAIM_CONTROLLER_USER}'"
    assert templated["failurePolicy"] == "Ignore"
    assert templated["matchConditions"] == [{"name": "the-claim-controller", "expression": controller}]
    assert [rule["resources"] for rule in templated["rules"]] == [["resourceclaims"]]
    assert checked["failurePolicy"] == "Fail"
    assert checked["matchConditions"] == [{"name": "not-the-claim-controller", "expression": f"!({controller})"}]
    only = _hooks(False)
    assert CLAIMS_FROM_TEMPLATES not in only and "matchConditions" not in only[CLAIMS_VALIDATE]
