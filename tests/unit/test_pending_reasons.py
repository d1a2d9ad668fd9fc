"""Why an admitted job's pods wait, as typed values ``kq why`` renders (webhook/readmodel/pod_waits.py).

A refusal for pod-level quota reaches ``kq why`` only through kube-scheduler's ``PodScheduled`` message, so every
writer of such a refusal starts with the one marker :data:`webhook.core.podquota.POD_QUOTA_REFUSAL`, and ``kq why``
recognises it by that marker alone."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from webhook.core.dra import PodDevices
from webhook.core.placement_views import pod_view
from webhook.core.podquota import POD_QUOTA_REFUSAL, QuotaBlocker, explain_blockers, refused_by_pod_quota
from webhook.extender.decide import _uncounted
from webhook.extender.reserved import explain_held
from webhook.readmodel.pod_waits import PendingReason, PodWait, newest_refusals, pending_reasons, pods_waiting_json
from webhook.readmodel.view import JobView

BLOCKER = QuotaBlocker("root/Department-a", "cpu", 2 * 10**9, 9 * 10**9, 10 * 10**9)
POD = {"metadata": {"name": "p", "namespace": "team", "uid": "u"}, "spec": {}, "status": {}}


def _refusals() -> list[str]:
    """Every text the extender refuses a pod with for pod-level quota."""
    texts = [explain_blockers((BLOCKER,)), explain_held((BLOCKER,))]
    for devices in (PodDevices(problem="claim c is shared"), PodDevices(unknown="claim c is not made yet")):
        decision = _uncounted("filter", pod_view(POD), ["n1"], devices, tree=None, quota=None)
        texts += list(decision.unresolvable.values())
    return texts


def test_every_refusal_for_pod_quota_starts_with_the_marker() -> None:
    for text in _refusals():
        assert text.startswith(POD_QUOTA_REFUSAL), text


def _pod(phase: str = "Pending", *, scheduled: str | None = None, waiting: dict[str, str] | None = None,
         node: str | None = None, name: str = "p") -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase}
    if scheduled is not None:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                 "message": scheduled}]
    if waiting is not None:
        status["containerStatuses"] = [{"name": "main", "state": {"waiting": waiting}}]
    return {"metadata": {"name": name}, "spec": {"nodeName": node} if node else {}, "status": status}


def _reasons(*pods: dict[str, Any]) -> list[PendingReason]:
    return pending_reasons(pods)


@pytest.mark.parametrize("refusal", _refusals())
def test_a_pod_the_scheduler_reports_refused_by_the_extender_waits_for_pod_quota(refusal: str) -> None:
    """kube-scheduler puts the extender's reason after its own count of nodes."""
    message = f"0/3 nodes are available: 3 {refusal}. preemption: not eligible."
    assert refused_by_pod_quota(message)
    assert _reasons(_pod(scheduled=message)) == [PendingReason(PodWait.POD_QUOTA, message, 1, ("p",))]


def test_each_other_wait_has_its_kind_and_the_most_common_comes_first() -> None:
    full = "0/3 nodes are available: 3 Insufficient cpu."
    reasons = _reasons(
        _pod(scheduled=full, name="b"), _pod(scheduled=full, name="a"),
        _pod(waiting={"reason": "ErrImagePull", "message": "no such image"}, node="n1", name="c"),
        _pod(node="n1", name="d"), _pod(name="e"), _pod("Running"), _pod("Succeeded"),
    )
    assert reasons == [
        PendingReason(PodWait.SCHEDULER, full, 2, ("a", "b")),
        PendingReason(PodWait.CONTAINER, "ErrImagePull: no such image", 1, ("c",)),
        PendingReason(PodWait.STARTING, "scheduled, starting", 1, ("d",)),
        PendingReason(PodWait.UNSEEN, "waiting for the scheduler", 1, ("e",)),
    ]
    assert not any(reason.kind == PodWait.POD_QUOTA for reason in reasons)


def test_kq_why_json_gives_a_released_jobs_pods_and_why_they_wait() -> None:
    """``kq why -o json`` for a PENDING job: ``pods`` and ``podsWaiting`` from the typed reasons; a waiting
    job has neither."""
    from webhook.api.statuses import JobStatus  # noqa: PLC0415
    from webhook.readmodel.explain import Answer, answer_json  # noqa: PLC0415

    refusal = f"0/3 nodes are available: 3 {explain_blockers((BLOCKER,))}."
    pods = (_pod("Running"), _pod(scheduled=refusal), _pod(scheduled=refusal))
    view = SimpleNamespace(kind="Job", namespace="team", name="j", status=JobStatus.PENDING, quota="root/a",
                           queue="q", position=None, running=1, expected=3, pods=pods)
    out = answer_json(Answer("text"), cast(JobView, view))
    assert out["pods"] == {"running": 1, "expected": 3}
    assert out["podsWaiting"] == [{"reason": "pod-quota", "pods": 2, "message": refusal}]
    waiting = SimpleNamespace(**{**vars(view), "status": JobStatus.QUEUING, "pods": ()})
    assert "podsWaiting" not in answer_json(Answer("text"), cast(JobView, waiting))


def _refused(pod: str, message: str, at: str) -> dict[str, Any]:
    return {"reason": "PreemptionRefused", "message": message, "lastTimestamp": at,
            "involvedObject": {"kind": "Pod", "name": pod}}


def test_a_group_carries_the_newest_refusal_of_its_pods_preemption() -> None:
    """The extender's ``PreemptionRefused`` Event on a pod (docs/pod-quota.md, "Preemption") goes with the
    pod's group, the newest of the group's pods; another reason or another kind of object does not."""
    full = "0/3 nodes are available: 3 Insufficient cpu."
    events = [
        _refused("a", "older", "2026-12-07T09:00:00Z"), _refused("b", "newer", "2026-12-07T09:01:00Z"),
        _refused("a", "oldest", "2026-12-07T08:00:00Z"), _refused("c", "another group", "2026-12-07T09:02:00Z"),
        {**_refused("a", "not a pod", "2026-12-07T10:00:00Z"), "involvedObject": {"kind": "Job", "name": "a"}},
        {**_refused("a", "not a refusal", "2026-12-07T10:00:00Z"), "reason": "Scheduled"},
    ]
    pods = [_pod(scheduled=full, name="a"), _pod(scheduled=full, name="b"), _pod(node="n1", name="d")]
    (scheduler, starting) = pending_reasons(pods, newest_refusals(events))
    assert scheduler.refusal is not None and scheduler.refusal["message"] == "newer"
    assert starting.refusal is None
    assert pods_waiting_json([scheduler, starting], names=True) == [
        {"reason": "scheduler", "pods": 2, "message": full, "names": ["a", "b"], "preemptionRefused": "newer"},
        {"reason": "starting", "pods": 1, "message": "scheduled, starting", "names": ["d"]},
    ]
