"""No ``nodeName`` in the pod templates users write (docs/security.md, "Where each pod rule lives")."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.core.pod_templates import TEMPLATED_KINDS, node_field, template_node_problems, templated_kind


def _with_template(path: tuple[str, ...], pod_spec: dict[str, Any]) -> dict[str, Any]:
    obj: dict[str, Any] = {"template": {"spec": pod_spec}}
    for key in reversed(path[:-1]):
        obj = {key: obj}
    return obj


@pytest.mark.parametrize("kind", TEMPLATED_KINDS, ids=lambda kind: kind.kind)
def test_a_node_name_in_the_template_is_refused_naming_its_field(kind: Any) -> None:
    obj = _with_template(kind.template, {"nodeName": "ecs-0", "containers": []})
    (problem,) = template_node_problems(kind, obj)
    assert problem.startswith(node_field(kind) + ": ")
    assert "nodeSelector" in problem  # what to do instead
    assert template_node_problems(kind, _with_template(kind.template, {"containers": []})) == []
    assert template_node_problems(kind, _with_template(kind.template, {"nodeName": ""})) == []


def test_a_cronjobs_template_is_the_one_of_its_job_template() -> None:
    cron = templated_kind("batch", "CronJob")
    assert cron is not None and node_field(cron) == "spec.jobTemplate.spec.template.spec.nodeName"
    # a nodeName where a Deployment keeps it is not a CronJob's: the API server's own validation refuses it
    assert template_node_problems(cron, {"spec": {"template": {"spec": {"nodeName": "ecs-0"}}}}) == []


@pytest.mark.parametrize("obj", [{}, {"spec": None}, {"spec": {"template": "x"}}, {"spec": {"template": {"spec": []}}}])
def test_a_template_that_is_not_an_object_all_the_way_is_left_to_the_api_server(obj: dict[str, Any]) -> None:
    deployment = templated_kind("apps", "Deployment")
    assert deployment is not None
    assert template_node_problems(deployment, obj) == []


def test_only_the_workload_kinds_have_templates_here() -> None:
    assert templated_kind("", "Pod") is None
    assert templated_kind("kubeflow.org", "PyTorchJob") is None
    assert {(kind.group, kind.kind) for kind in TEMPLATED_KINDS} == {
        ("apps", "Deployment"), ("apps", "ReplicaSet"), ("apps", "StatefulSet"), ("apps", "DaemonSet"),
        ("batch", "Job"), ("batch", "CronJob")}
