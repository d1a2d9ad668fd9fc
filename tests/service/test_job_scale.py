"""A job kind's scale subresource may not resize a job of the tree's namespaces (docs/security.md): a user with
``edit`` may create a HorizontalPodAutoscaler whose target is her PyTorchJob, and the HPA controller would
scale its workers through ``pytorchjobs/scale``, which the job update rules never see."""

from __future__ import annotations

from typing import Any

from webhook.admission.state import DEFAULT_CONTROLLER_USER, AdmissionState, Settings
from webhook.admission.validate import validate

HPA_CONTROLLER = "system:serviceaccount:kube-system:horizontal-pod-autoscaler"


def scale_review(replicas: int, before: int = 1, *, namespace: str = "user-a", user: str = HPA_CONTROLLER,
                 resource: str = "pytorchjobs", group: str = "kubeflow.org") -> dict[str, Any]:
    """The AdmissionReview of an update of ``<resource>/scale`` as the API server sends it (an autoscaling/v1
    Scale object, not the job)."""
    def scale(count: int) -> dict[str, Any]:
        return {"apiVersion": "autoscaling/v1", "kind": "Scale",
                "metadata": {"name": "mnist", "namespace": namespace}, "spec": {"replicas": count}}

    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "req-scale", "kind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
        "resource": {"group": group, "version": "v1", "resource": resource}, "subResource": "scale",
        "name": "mnist", "namespace": namespace, "operation": "UPDATE",
        "userInfo": {"username": user, "groups": ["system:serviceaccounts"]},
        "object": scale(replicas), "oldObject": scale(before), "dryRun": False}}


def test_scaling_a_job_of_the_tree_is_refused(state: AdmissionState, settings: Settings) -> None:
    out = validate(scale_review(4), state, settings)["response"]
    assert not out["allowed"]
    assert out["status"]["code"] == 403
    assert out["status"]["message"].startswith(
        "PyTorchJob user-a/mnist: its scale subresource may not change spec.replicas (1 -> 4) in a namespace under "
        "quota")


def test_what_does_not_resize_a_queued_job_passes(state: AdmissionState, settings: Settings) -> None:
    assert validate(scale_review(1), state, settings)["response"]["allowed"]  # the replicas stay
    assert validate(scale_review(4, namespace="elsewhere"), state, settings)["response"]["allowed"]  # no quota
    assert validate(scale_review(4, resource="deployments"), state, settings)["response"]["allowed"]  # no job kind
    # Another group's resource of the same plural is no job kind of ours either.
    assert validate(scale_review(4, group="example.com"), state, settings)["response"]["allowed"]
    assert not validate(scale_review(4, resource="jobs", group="batch"), state, settings)["response"]["allowed"]
    assert validate(scale_review(4, resource="jobs", group="example.com"), state, settings)["response"]["allowed"]
    assert validate(scale_review(4, user=DEFAULT_CONTROLLER_USER), state, settings)["response"]["allowed"]
