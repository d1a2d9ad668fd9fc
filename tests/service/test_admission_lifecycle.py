"""Admission across configuration changes and the controller's own records (docs/accounting.md,
docs/start-timeout.md): a managed namespace keeps holding jobs while no tree exists, a job naming a
PriorityClass that does not exist is refused, and the controller's records cannot be forged or removed."""

from __future__ import annotations

import copy
from typing import Any

from tests.service.helpers import batch_job, message, patched, response, review
from webhook.admission.mutate import mutate
from webhook.admission.state import AdmissionState, Settings
from webhook.admission.validate import validate
from webhook.api.names import ADMISSION_ANNOTATION, BACKOFF_ANNOTATION, MANAGED_NAMESPACE_LABEL, QUOTA_LABEL

MANAGED = {"user-a": {MANAGED_NAMESPACE_LABEL: "true"}}


def test_a_managed_namespace_holds_new_jobs_while_no_tree_exists(settings: Settings) -> None:
    no_tree = AdmissionState(tree=None, namespace_labels=MANAGED)
    out = mutate(review(batch_job(suspend=False)), no_tree, settings)
    held = patched(batch_job(suspend=False), out)
    assert held["spec"]["suspend"] is True
    assert QUOTA_LABEL not in (held["metadata"].get("labels") or {})  # no leaf to tag it with
    assert "kube-queue knows no ElasticQuotaTree that lists it now" in response(out)["warnings"][0]
    # ... and its user cannot release it meanwhile.
    released = copy.deepcopy(held)
    released["spec"]["suspend"] = False
    refused = validate(review(released, operation="UPDATE", old=held), no_tree, settings)
    assert response(refused)["allowed"] is False
    assert "spec.suspend: only kube-queue may un-suspend it" in message(refused)
    # A namespace the controller does not manage is left alone.
    assert "patch" not in response(mutate(review(batch_job(namespace="other")), no_tree, settings))


def test_a_dry_run_says_the_job_would_be_queued(state: AdmissionState, settings: Settings) -> None:
    request = review(batch_job())
    request["request"]["dryRun"] = True
    assert " would be queued for quota root/Department-a" in response(mutate(request, state, settings))["warnings"][0]


def _with_class(job: dict[str, Any], name: str) -> dict[str, Any]:
    job["spec"]["template"]["spec"]["priorityClassName"] = name
    return job


def test_a_job_naming_a_priority_class_that_does_not_exist_is_refused(settings: Settings) -> None:
    from tests.builders import seed_tree  # noqa: PLC0415

    state = AdmissionState(tree=seed_tree(), priority_classes={"priority-2": 2})
    refused = mutate(review(_with_class(batch_job(), "no-such-class")), state, settings)
    assert response(refused)["allowed"] is False
    assert message(refused).endswith(
        "spec.template.spec.priorityClassName: PriorityClass 'no-such-class' does not exist, so the job's pods "
        "would be refused and its place in the queue is unknown; name an existing class (kubectl get "
        "priorityclasses) or ask an operator to create it"
    )
    assert response(mutate(review(_with_class(batch_job(), "priority-2")), state, settings))["allowed"] is True


def test_forged_controller_records_are_dropped_at_creation(state: AdmissionState, settings: Settings) -> None:
    job = batch_job()
    job["metadata"]["annotations"] = {ADMISSION_ANNOTATION: '{"quota":"root/Department-a"}',
                                      BACKOFF_ANNOTATION: '{"attempts":1}', "mine": "kept"}
    created = patched(job, mutate(review(job), state, settings))
    assert created["metadata"]["annotations"]["mine"] == "kept"
    assert ADMISSION_ANNOTATION not in created["metadata"]["annotations"]
    assert BACKOFF_ANNOTATION not in created["metadata"]["annotations"]


def test_a_user_cannot_remove_a_backoff_note_to_skip_the_wait(state: AdmissionState, settings: Settings) -> None:
    held = patched(batch_job(), mutate(review(batch_job()), state, settings))
    held["metadata"]["annotations"][BACKOFF_ANNOTATION] = '{"attempts":1,"retryAt":"2030-01-01T00:00:00Z"}'
    skipped = copy.deepcopy(held)
    del skipped["metadata"]["annotations"][BACKOFF_ANNOTATION]
    refused = validate(review(skipped, operation="UPDATE", old=held), state, settings)
    assert response(refused)["allowed"] is False
    assert "metadata.annotations.kube-queue.x-k8s.io/backoff: written by kube-queue only" in (
        message(refused)
    )
