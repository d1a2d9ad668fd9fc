"""Jobs created in the same second keep their submission order.

``creationTimestamp`` has whole seconds, so before the webhook stamped ``kube-queue.x-k8s.io/submitted-at``
two jobs submitted back to back were ordered by name (the seed's scenario 1 admitted the second ``pi`` job
about half the time). The stamp is set at creation, protected against later edits, and only orders jobs
within their creation second.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.service.helpers import CONTROLLER, JOB_BUILDERS, OWNING_JOB, batch_job, message, patched, pod, review
from webhook.admission.mutate import mutate, mutate_request
from webhook.admission.review import parse_request
from webhook.admission.state import AdmissionState, Settings
from webhook.admission.validate import validate
from webhook.api.names import SUBMITTED_ANNOTATION
from webhook.api.objects import rfc3339
from webhook.core.queueing import order
from webhook.workloads.base import creation_seconds
from webhook.workloads.registry import adapter_for

T0 = 1_790_000_000.0
"""A whole second (2026-09-21T14:13:20Z)."""
CREATED = "2026-09-21T14:13:20Z"


def held_at(obj: dict[str, Any], now: float, state: AdmissionState, settings: Settings) -> dict[str, Any]:
    return patched(obj, mutate_request(parse_request(review(obj)), state, settings, now=now))


def stamped(name: str, created: str, submitted: str | None) -> dict[str, Any]:
    job = batch_job(name=name)
    job["metadata"]["creationTimestamp"] = created
    if submitted is not None:
        job["metadata"].setdefault("annotations", {})[SUBMITTED_ANNOTATION] = submitted
    return job


def test_the_stamp_is_rfc3339_utc_with_microseconds() -> None:
    assert rfc3339(T0 + 0.123456) == "2026-09-21T14:13:20.123456Z"


@pytest.mark.parametrize("kind", sorted(JOB_BUILDERS))
def test_every_held_kind_is_stamped_at_creation(kind: str, state: AdmissionState, settings: Settings) -> None:
    obj = JOB_BUILDERS[kind]()
    result = held_at(obj, T0 + 0.25, state, settings)
    assert result["metadata"]["annotations"][SUBMITTED_ANNOTATION] == "2026-09-21T14:13:20.250000Z"


def test_a_stamp_written_by_the_submitter_is_overwritten(state: AdmissionState, settings: Settings) -> None:
    job = batch_job()
    job["metadata"]["annotations"] = {SUBMITTED_ANNOTATION: "2000-01-01T00:00:00.000000Z", "keep": "me"}
    result = held_at(job, T0 + 0.5, state, settings)
    assert result["metadata"]["annotations"] == {
        SUBMITTED_ANNOTATION: "2026-09-21T14:13:20.500000Z",
        "keep": "me",
        "kube-queue/quota-fullname": "root/Department-a",
    }


@pytest.mark.parametrize(
    ("existing", "kept"),
    [(T0 - 5.0, True), (T0, True), (T0 - 31.0, False), (T0 + 2.0, False)],
)
def test_the_webhook_called_again_keeps_its_own_recent_stamp(
    existing: float, kept: bool, state: AdmissionState, settings: Settings
) -> None:
    job = batch_job()
    job["metadata"]["annotations"] = {SUBMITTED_ANNOTATION: rfc3339(existing)}
    result = held_at(job, T0, state, settings)
    assert result["metadata"]["annotations"][SUBMITTED_ANNOTATION] == rfc3339(existing if kept else T0)


def test_pods_of_a_job_and_jobs_outside_the_tree_are_not_stamped(state: AdmissionState, settings: Settings) -> None:
    obj = pod(owner=OWNING_JOB)
    request = parse_request(review(obj, user="system:serviceaccount:kube-system:job-controller"))
    owned = patched(obj, mutate_request(request, state, settings, now=T0))
    assert SUBMITTED_ANNOTATION not in owned["metadata"].get("annotations", {})
    outside = batch_job(namespace="default")
    assert patched(outside, mutate(review(outside), state, settings)) == outside


def test_the_stamp_orders_jobs_within_their_creation_second() -> None:
    assert creation_seconds(stamped("a", CREATED, None)) == T0
    assert creation_seconds(stamped("a", CREATED, "2026-09-21T14:13:20.731000Z")) == pytest.approx(T0 + 0.731)
    # Stamped a little before the API server set the creation time (the webhook runs first): the start of
    # the second. Stamped in a later second (a wrong clock, a hand-written value): the end of it.
    assert creation_seconds(stamped("a", CREATED, "2026-09-21T14:13:19.990000Z")) == T0
    assert creation_seconds(stamped("a", CREATED, "2030-01-01T00:00:00Z")) == pytest.approx(T0 + 0.999999)
    assert creation_seconds(stamped("a", CREATED, "not a time")) == T0


def test_two_jobs_created_in_the_same_second_are_admitted_in_submission_order() -> None:
    adapter = adapter_for("batch", "Job")
    assert adapter is not None
    # "a-late" sorts first by name but was submitted 0.3 s after "z-early".
    late = adapter.to_workload(stamped("a-late", CREATED, "2026-09-21T14:13:20.400000Z"), "Department-a", {})
    early = adapter.to_workload(stamped("z-early", CREATED, "2026-09-21T14:13:20.100000Z"), "Department-a", {})
    assert [w.key.name for w in order([late, early])] == ["z-early", "a-late"]
    unstamped = [adapter.to_workload(stamped(n, CREATED, None), "Department-a", {}) for n in ("b", "a")]
    assert [w.key.name for w in order(unstamped)] == ["a", "b"]


@pytest.mark.parametrize("change", ["remove", "change", "add"])
def test_a_user_cannot_move_a_job_in_the_queue(change: str, state: AdmissionState, settings: Settings) -> None:
    old = held_at(batch_job(), T0 + 0.5, state, settings)
    new = copy.deepcopy(old)
    if change == "remove":
        del new["metadata"]["annotations"][SUBMITTED_ANNOTATION]
    elif change == "change":
        new["metadata"]["annotations"][SUBMITTED_ANNOTATION] = "2026-09-21T14:13:20.000001Z"
    else:
        del old["metadata"]["annotations"][SUBMITTED_ANNOTATION]
    out = validate(review(new, operation="UPDATE", old=old), state, settings)
    assert message(out).count(SUBMITTED_ANNOTATION) == 1
    assert "is set by kube-queue only" in message(out)
    assert allowed_for(CONTROLLER, new, old, state)


def allowed_for(user: str, new: dict[str, Any], old: dict[str, Any], state: AdmissionState) -> bool:
    settings = Settings(controller_users=frozenset({user}))
    out = validate(review(new, operation="UPDATE", old=old, user=user), state, settings)
    return bool(out["response"]["allowed"])
