"""No ``nodeName`` in the pod templates users write, in both installs (docs/security.md, "Where each pod rule
lives"): the templates guard policy where the admission policies are installed, the ``templates.validate`` hook
of the webhook-only install elsewhere; both from :mod:`webhook.core.pod_templates`."""

from __future__ import annotations

from typing import Any

import pytest

from tests.service.helpers import CONTROLLER, message, response, review
from webhook.admission.configs import NOT_A_WORKLOAD_CONTROLLER, TEMPLATES_VALIDATE, cluster_webhook_configs
from webhook.admission.policies import TEMPLATES_GUARD, admission_policies
from webhook.admission.state import AdmissionState, Settings
from webhook.admission.validate import validate
from webhook.api.names import MANAGED_NAMESPACE_LABEL, MANAGED_ROUTE
from webhook.core.pod_templates import TEMPLATED_KINDS, TemplatedKind, node_message

KIND_IDS = [kind.kind for kind in TEMPLATED_KINDS]


def workload(kind: TemplatedKind, node: str | None = "ecs-0", namespace: str = "user-a") -> dict[str, Any]:
    """A ``kind`` of one container whose pod template names ``node`` (none when ``None``)."""
    pod_spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox",
                                                "resources": {"requests": {"cpu": "1"}}}], "restartPolicy": "Never"}
    if node is not None:
        pod_spec["nodeName"] = node
    body: dict[str, Any] = {"template": {"spec": pod_spec}}
    for key in reversed(kind.template[:-1]):
        body = {key: body}
    version = "apps/v1" if kind.group == "apps" else "batch/v1"
    return {"apiVersion": version, "kind": kind.kind, "metadata": {"name": "w", "namespace": namespace}, **body}


def allowed(out: Any) -> bool:
    return bool(response(out)["allowed"])


@pytest.mark.parametrize("kind", TEMPLATED_KINDS, ids=KIND_IDS)
@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_a_user_cannot_name_a_node_in_a_pod_template(
    kind: TemplatedKind, operation: str, state: AdmissionState, settings: Settings
) -> None:
    old = workload(kind, node=None) if operation == "UPDATE" else None
    out = validate(review(workload(kind), operation=operation, old=old), state, settings)
    assert not allowed(out)
    assert response(out)["status"]["code"] == 403
    assert node_message(kind) in message(out)
    assert f"{kind.kind} user-a/w" in message(out)


@pytest.mark.parametrize("kind", TEMPLATED_KINDS, ids=KIND_IDS)
def test_templates_without_a_node_trusted_writers_and_namespaces_outside_the_tree_pass(
    kind: TemplatedKind, state: AdmissionState, settings: Settings
) -> None:
    assert allowed(validate(review(workload(kind, node=None)), state, settings))
    assert allowed(validate(review(workload(kind), user=CONTROLLER), state, settings))
    by_controller = validate(review(workload(kind), user="system:serviceaccount:kube-system:cronjob-controller"),
                             state, settings)
    # A Job is queued whoever writes it, and the queue refuses one whose template names its node
    # (test_job_integrity.py); the guard itself lets trusted writers by.
    assert allowed(by_controller) == (kind.kind != "Job")
    assert allowed(validate(review(workload(kind, namespace="elsewhere")), state, settings))


def test_a_namespace_labelled_managed_before_the_tree_lists_it_is_guarded_too(settings: Settings) -> None:
    state = AdmissionState(namespace_labels={"joining": {MANAGED_NAMESPACE_LABEL: "true"}})
    deployment = TEMPLATED_KINDS[0]
    assert not allowed(validate(review(workload(deployment, namespace="joining")), state, settings))


def _policy() -> dict[str, Any]:
    (policy,) = [obj for obj in admission_policies()
                 if obj["kind"] == "ValidatingAdmissionPolicy" and obj["metadata"]["name"] == TEMPLATES_GUARD]
    return dict(policy)


def test_the_webhook_only_install_guards_what_the_policy_guards() -> None:
    """The same kinds and operations, the same namespaces, the same writers left out, failing closed; the
    install with the policies has no such hook (the policy does it in the API server)."""
    policy = _policy()["spec"]
    covered = {(group, resource, tuple(rule["operations"])) for rule in policy["matchConstraints"]["resourceRules"]
               for group in rule["apiGroups"] for resource in rule["resources"]}
    _, validating = cluster_webhook_configs(policies=False)
    (hook,) = [hook for hook in validating["webhooks"] if hook["name"] == TEMPLATES_VALIDATE]
    assert {(group, resource, tuple(rule["operations"])) for rule in hook["rules"]
            for group in rule["apiGroups"] for resource in rule["resources"]} == covered
    assert {(kind.group, kind.resource) for kind in TEMPLATED_KINDS} == {(g, r) for g, r, _ in covered}
    assert hook["namespaceSelector"]["matchLabels"] == {MANAGED_NAMESPACE_LABEL: "true"}
    assert hook["clientConfig"]["service"]["path"] == "/validate/" + MANAGED_ROUTE
    assert hook["failurePolicy"] == "Fail"
    assert hook["matchConditions"] == NOT_A_WORKLOAD_CONTROLLER
    assert [c["expression"] for c in hook["matchConditions"]] == [c["expression"] for c in policy["matchConditions"]]
    _, with_policies = cluster_webhook_configs()
    assert TEMPLATES_VALIDATE not in {hook["name"] for hook in with_policies["webhooks"]}


def test_the_policy_refuses_with_the_webhooks_words() -> None:
    messages = {validation["message"] for validation in _policy()["spec"]["validations"]}
    assert messages == {node_message(kind) for kind in TEMPLATED_KINDS}
