"""In-place resizes (``pods/resize``) of the tree's pods stay within the quota (docs/security.md): a pod of a
queued job may not grow at all (its job was admitted at its size), any other pod by what its quota leaves;
shrinking is always allowed. And a pod counts at the larger of what it asks and what it was allocated."""

from __future__ import annotations

import copy
from typing import Any

from tests.builders import seed_tree
from tests.service.helpers import message, response, review
from webhook.admission.review import AdmissionReview
from webhook.admission.state import AdmissionState, Settings
from webhook.admission.validate import validate
from webhook.api.names import ADMISSION_ANNOTATION
from webhook.core.resources import Resources
from webhook.core.workload import running_pod_request

# Department-a: max 100 CPU under a root of 100; the status says 90 CPU of it are used.
USED = {"root": Resources.of(cpu=90), "department-a": Resources.of(cpu=90), "department-b": Resources.of()}


def _pod(cpu: str, owner: str | None = "ReplicaSet", annotations: dict[str, str] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "web-1", "namespace": "user-a", "annotations": dict(annotations or {})}
    if owner:
        metadata["ownerReferences"] = [{"apiVersion": "v1", "kind": owner, "name": "x", "uid": "u",
                                        "controller": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}}


def _resize(old: str, new: str, *, state: AdmissionState | None = None, **pod: Any) -> AdmissionReview:
    before, after = _pod(old, **pod), _pod(new, **pod)
    request = review(after, operation="UPDATE", old=before, sub_resource="resize")
    return validate(request, state or AdmissionState(tree=seed_tree(), tree_used=USED), Settings())


def test_a_loose_pod_grows_by_what_its_quota_leaves() -> None:
    assert response(_resize("10", "20"))["allowed"] is True  # 90 + 10 <= 100
    refused = _resize("10", "30")
    assert response(refused)["allowed"] is False
    assert "growing cpu by 20 takes quota root/Department-a to 110 of its max 100" in message(refused)
    assert "quota root to 110 of its max 100" in message(refused)
    assert response(_resize("30", "10"))["allowed"] is True  # shrinking


def test_a_pod_of_a_queued_job_may_not_grow() -> None:
    for pod in ({"owner": "Job"}, {"owner": None, "annotations": {ADMISSION_ANNOTATION: "{}"}}):
        refused = _resize("10", "11", **pod)
        assert response(refused)["allowed"] is False
        assert "suspend the job and change its pod template, or resubmit it" in message(refused)
        assert response(_resize("10", "5", **pod))["allowed"] is True


def test_growth_is_refused_while_the_usage_is_unknown() -> None:
    refused = _resize("10", "11", state=AdmissionState(tree=seed_tree()))
    assert response(refused)["allowed"] is False and "retry in a few seconds" in message(refused)


def test_a_pod_outside_the_tree_is_left_alone() -> None:
    before, after = _pod("1"), _pod("500")
    for pod in (before, after):
        pod["metadata"]["namespace"] = "elsewhere"
    request = review(after, operation="UPDATE", old=before, sub_resource="resize")
    assert response(validate(request, AdmissionState(tree=seed_tree(), tree_used=USED), Settings()))["allowed"]


def test_a_pod_counts_at_what_it_was_allocated_until_the_resize_is_done() -> None:
    pod = copy.deepcopy(_pod("10"))
    pod["status"] = {"containerStatuses": [{"name": "c", "allocatedResources": {"cpu": "30"},
                                            "resources": {"requests": {"cpu": "30"}}}]}
    assert running_pod_request(pod) == Resources.of(cpu=30)  # shrunk in the spec, still running at 30
    pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "40"
    assert running_pod_request(pod) == Resources.of(cpu=40)  # grown in the spec, not yet running at 40
