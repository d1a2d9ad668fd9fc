"""Start timeout and backoff (docs/start-timeout.md): the pure rules, the note on the wire, and the pass."""

from __future__ import annotations

import dataclasses
import functools
from fractions import Fraction
from typing import Any

import pytest

from tests import builders
from tests.builders import batch_job_object, seed_tree
from webhook.api.names import BACKOFF_ANNOTATION
from webhook.controller.decide import decide, queue_statuses
from webhook.controller.model import track
from webhook.controller.records import backoff_patch, encode_backoff, read_backoff, spec_fingerprint
from webhook.controller.starts import PodIndex, check_starts, pod_slim
from webhook.core.podquota import QuotaBlocker
from webhook.core.quantity import parse_quantity
from webhook.core.startup import (
    CATEGORIES,
    GAVE_UP,
    BackoffNote,
    BackoffPolicy,
    BackoffState,
    PodState,
    StartStatus,
    StartVerdict,
    after_failed_start,
    backoff_state,
    creation_refusal,
    failure_reason,
    start_verdict,
    with_creation_refusal,
)
from webhook.kube.cache import RELIST, CacheEvent, WatchCache
from webhook.workloads.job import JobAdapter
from webhook.workloads.kubeflow import PyTorchJobAdapter
from webhook.workloads.mpijob import MPIJobAdapter
from webhook.workloads.sparkapplication import SparkApplicationAdapter

JOB = JobAdapter()
T0 = 1_712_541_600.0  # 2024-04-08T02:00:00Z


def running(name: str) -> PodState:
    return PodState(name, "Running")


def pending(name: str, unschedulable: str = "", container: str = "") -> PodState:
    return PodState(name, "Pending", unschedulable=unschedulable, container_reason=container)


QUOTA_REFUSAL = QuotaBlocker("root/Department-a", "cpu", 10 * 10**9, 50 * 10**9, 50 * 10**9).explain()


# The rules -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expected", "pods", "gang", "now", "status"),
    [
        (3, [running("a"), running("b"), running("c")], True, T0 + 1, StartStatus.STARTED),
        (3, [running("a"), running("b"), pending("c")], True, T0 + 1, StartStatus.WAITING),
        (3, [running("a"), running("b"), pending("c")], True, T0 + 300, StartStatus.FAILED),
        (3, [running("a"), pending("b"), pending("c")], False, T0 + 300, StartStatus.STARTED),
        (3, [PodState("a", "Succeeded"), pending("b")], False, T0 + 300, StartStatus.STARTED),
        (2, [PodState("a", "Succeeded"), running("b")], True, T0 + 300, StartStatus.STARTED),
        (2, [], True, T0 + 299, StartStatus.WAITING),
        (2, [], False, T0 + 300, StartStatus.FAILED),
        (1, [PodState("a", "Running", deleting=True)], False, T0 + 300, StartStatus.FAILED),
    ],
    ids=["gang-all-run", "gang-partial-before-deadline", "gang-partial-after-deadline", "serial-one-runs",
         "serial-one-finished", "gang-finished-counts", "no-pods-before-deadline", "no-pods-after-deadline",
         "deleting-pod-does-not-count"],
)
def test_start_verdict(expected: int, pods: list[PodState], gang: bool, now: float, status: StartStatus) -> None:
    verdict = start_verdict(expected, pods, gang=gang, admitted_at=T0, now=now, timeout=300)
    assert verdict.status is status
    if status is StartStatus.WAITING:
        assert verdict.deadline == T0 + 300
    if status is StartStatus.FAILED:
        assert verdict.category in CATEGORIES
        assert verdict.reason


def test_pods_held_back_only_by_pod_level_quota_wait_without_a_deadline() -> None:
    # The queue oversold on purpose: those pods start when the quota's running pods finish.
    pods = [pending("a", unschedulable=f"0/5 nodes are available: 5 {QUOTA_REFUSAL}.")] * 2
    verdict = start_verdict(2, pods, gang=True, admitted_at=T0, now=T0 + 10_000, timeout=300)
    assert verdict == StartVerdict(StartStatus.WAITING, deadline=None)


def test_a_half_started_gang_fails_even_when_the_rest_waits_for_pod_level_quota() -> None:
    pods = [running("a"), pending("b", unschedulable=QUOTA_REFUSAL)]
    verdict = start_verdict(2, pods, gang=True, admitted_at=T0, now=T0 + 300, timeout=300)
    assert verdict.status is StartStatus.FAILED
    assert verdict.category == "PartialStart"
    assert verdict.reason.startswith("only 1 of 2 pods run and it needs all at once")


def test_the_extenders_pod_quota_refusal_is_recognised_and_nothing_else() -> None:
    assert pending("a", unschedulable=QUOTA_REFUSAL).quota_refused
    assert not pending("a", unschedulable="0/4 nodes are available: 4 Insufficient cpu.").quota_refused
    assert not pending("a").quota_refused


def test_the_reason_prefers_a_container_that_cannot_start_then_the_scheduler() -> None:
    pods = [
        pending("a", unschedulable="0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector."),
        PodState("b", "Pending", container_reason="ErrImagePull", container_message="pull access denied"),
    ]
    assert failure_reason(2, pods, gang=False) == ("ErrImagePull", "pod b: ErrImagePull: pull access denied")
    category, text = failure_reason(2, pods[:1], gang=False)
    assert category == "Unschedulable"
    assert "didn't match Pod's node affinity/selector" in text
    assert failure_reason(3, [], gang=True) == ("NotCreated", "none of its 3 pod(s) was created")
    assert failure_reason(1, [pending("x")], gang=False)[0] == "NotRunning"


def _event(reason: str, message: str, at: float, uid: str = "job-uid", kind: str = "Warning") -> dict[str, Any]:
    from webhook.api.objects import rfc3339_seconds  # noqa: PLC0415

    return {"type": kind, "reason": reason, "message": message, "lastTimestamp": rfc3339_seconds(at),
            "involvedObject": {"kind": "Job", "name": "j", "uid": uid}}


def test_a_job_whose_operator_could_not_create_its_pods_is_backed_off_with_what_it_said() -> None:
    """The start timeout names what the job's operator said when the API server refused its pods (a namespace's
    ResourceQuota, kube-queue's pod guard...): the newest creation failure since the admission, about this
    job only; a verdict whose pods are all there keeps its reason."""
    quota = 'pods "j-x" is forbidden: exceeded quota: pods, requested: pods=1, used: pods=0, limited: pods=0'
    events = [
        _event("FailedCreate", "an older admission's refusal", T0 - 60),
        _event("FailedCreate", "another job's refusal", T0 + 5, uid="other"),
        _event("SuccessfulCreate", "Created pod: j-y", T0 + 6, kind="Normal"),
        _event("FailedCreatePod", "the training operator's words", T0 + 3),
        _event("FailedCreate", quota, T0 + 4),
    ]
    assert creation_refusal(events, "job-uid", T0) == quota
    assert creation_refusal(events[:3], "job-uid", T0) is None
    assert creation_refusal([_event("FailedToCreateWorkerPod", "kuberay's", T0)], "job-uid", T0) == "kuberay's"
    verdict = start_verdict(2, [], gang=True, admitted_at=T0, now=T0 + 61, timeout=60)
    assert verdict.status == StartStatus.FAILED and verdict.missing == 2
    assert with_creation_refusal(verdict, quota).reason == (
        f"none of its 2 pod(s) was created; its operator could not create them: {quota}")
    assert with_creation_refusal(verdict, None) == verdict
    assert with_creation_refusal(verdict, "x" * 1000).reason.endswith("x" * 297 + "...")
    placed = start_verdict(1, [pending("a")], gang=False, admitted_at=T0, now=T0 + 61, timeout=60)
    assert placed.missing == 0 and with_creation_refusal(placed, quota) == placed


def test_backoff_doubles_up_to_the_cap_and_gives_up_after_the_limit() -> None:
    policy = BackoffPolicy(base_delay=60, max_delay=600, limit=3)
    assert [policy.delay(n) for n in range(1, 7)] == [60, 120, 240, 480, 600, 600]
    failed = StartVerdict(StartStatus.FAILED, reason="pod a cannot be scheduled", category="Unschedulable")
    first = after_failed_start(None, "spec-1", failed, now=T0, policy=policy)
    second = after_failed_start(first, "spec-1", failed, now=T0 + 100, policy=policy)
    third = after_failed_start(second, "spec-1", failed, now=T0 + 300, policy=policy)
    assert (first.attempts, first.retry_at, first.gave_up) == (1, T0 + 60, False)
    assert (second.attempts, second.retry_at) == (2, T0 + 220)
    assert (third.attempts, third.gave_up) == (3, True)
    # A new spec (the user fixed the job) starts counting afresh.
    assert after_failed_start(third, "spec-2", failed, now=T0, policy=policy).attempts == 1
    assert BackoffPolicy(limit=0).delay(10_000) == 1800


def test_backoff_state_follows_the_clock_and_the_spec() -> None:
    note = BackoffNote(attempts=1, reason="r", category="NotCreated", retry_at=T0 + 60, failed_at=T0, spec="s")
    assert backoff_state(None, "s", T0) is BackoffState.NONE
    assert backoff_state(note, "s", T0 + 59) is BackoffState.WAITING
    assert backoff_state(note, "s", T0 + 60) is BackoffState.RETRYING
    assert backoff_state(note, "other", T0) is BackoffState.NONE
    gave_up = BackoffNote(attempts=3, reason="r", category="NotCreated", retry_at=T0, failed_at=T0, spec="s",
                          gave_up=True)
    assert backoff_state(gave_up, "s", T0 + 10**6) is BackoffState.GAVE_UP


# On the wire -----------------------------------------------------------------------------------------------


def test_the_note_round_trips_and_a_broken_note_holds_nothing() -> None:
    note = BackoffNote(attempts=2, reason="pod a: ErrImagePull", category="ErrImagePull", retry_at=T0 + 120,
                       failed_at=T0, spec="abc", gave_up=False)
    obj = {"metadata": {"annotations": {BACKOFF_ANNOTATION: encode_backoff(note)}}}
    assert read_backoff(obj) == note
    for broken in ("{", "[]", '{"attempts": 0, "retryAt": "2024-04-08T02:00:00Z"}', '{"attempts": 1}'):
        assert read_backoff({"metadata": {"annotations": {BACKOFF_ANNOTATION: broken}}}) is None


def test_the_fingerprint_ignores_the_hold_but_not_what_the_job_runs() -> None:
    held = batch_job_object("a")
    released = batch_job_object("a", admitted_at="2024-04-08T02:00:00Z")
    assert spec_fingerprint(held) == spec_fingerprint(released)
    edited = batch_job_object("a", cpu=4)
    assert spec_fingerprint(edited) != spec_fingerprint(held)


def test_the_backoff_patch_holds_drops_the_record_and_is_guarded_by_spec_and_record() -> None:
    obj = batch_job_object("a", admitted_at="2024-04-08T02:00:00Z")
    note = BackoffNote(attempts=1, reason="r", category="NotCreated", retry_at=T0 + 60, failed_at=T0, spec="s")
    ops = backoff_patch(JOB, obj, note)
    tests = [op["path"] for op in ops if op["op"] == "test"]
    assert tests == ["/spec", "/metadata/annotations/kube-queue.x-k8s.io~1admission"]
    assert {"op": "replace", "path": "/spec/suspend", "value": True} in ops or any(
        op["path"] == "/spec/suspend" and op.get("value") is True for op in ops
    )
    assert {"op": "remove", "path": "/metadata/annotations/kube-queue.x-k8s.io~1admission"} in ops
    assert any(op["path"].endswith("kube-queue.x-k8s.io~1backoff") for op in ops if op["op"] == "add")


def test_gangs_by_kind() -> None:
    assert JOB.needs_all_pods(batch_job_object("a", pods=3))
    assert not JOB.needs_all_pods(batch_job_object("a", pods=3, completions=10))
    assert PyTorchJobAdapter().needs_all_pods({})
    assert not SparkApplicationAdapter().needs_all_pods({})  # its driver takes executors as they come
    assert MPIJobAdapter().pod_owners({"metadata": {"name": "m"}}) == (("MPIJob", "m"), ("Job", "m-launcher"))


# The controller's pass -------------------------------------------------------------------------------------


_pod = functools.partial(builders.pod, resource_version="1", phase="Pending")


def _owning(name: str) -> dict[str, Any]:
    """The Job (kind and name) a pod built with ``_pod(..., owner=_owning(name))`` belongs to."""
    return {"kind": "Job", "metadata": {"name": name, "uid": "u"}}


class _Cache(WatchCache):
    def __init__(self, items: list[dict[str, object]]) -> None:
        self._items = items

    def items(self) -> list[object]:  # type: ignore[override]
        return list(self._items)


def _index(*pods: dict[str, object]) -> PodIndex:
    index = PodIndex()
    index.listener(_Cache([pod_slim(pod) for pod in pods]), CacheEvent(RELIST))
    return index


def test_slim_pods_keep_what_the_check_reads() -> None:
    pod = _pod("p", owner=_owning("a"), status={
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                        "message": "0/4 nodes are available"}],
        "containerStatuses": [{"state": {"waiting": {"reason": "ErrImagePull", "message": "denied"}}}],
    })
    slim = pod_slim(pod)
    assert slim["status"] == {"phase": "Pending", "unschedulable": "0/4 nodes are available",
                              "waiting": {"reason": "ErrImagePull", "message": "denied"}}


def test_a_released_job_whose_pods_do_not_run_fails_its_start_after_the_timeout() -> None:
    t = seed_tree()
    leaf = t.leaf_for_namespace("user-a")
    assert leaf is not None
    stuck = track(JOB, batch_job_object("stuck", pods=2, admitted_at="2024-04-08T02:00:00Z"), leaf, {})
    fine = track(JOB, batch_job_object("fine", pods=1, admitted_at="2024-04-08T02:00:00Z"), leaf, {})
    index = _index(
        _pod("stuck-1", owner=_owning("stuck"), phase="Running"),
        _pod("stuck-2", owner=_owning("stuck")),
        _pod("fine-1", owner=_owning("fine"), phase="Running"),
    )
    started: set[str] = set()
    early = check_starts([stuck, fine], index, started, now=T0 + 10, timeout=300)
    assert early.failed == [] and early.next_deadline == T0 + 300
    assert started == {"fine"}
    assert early.awaiting == {("user-a", "Job", "stuck")}
    late = check_starts([stuck, fine], index, started, now=T0 + 300, timeout=300)
    assert [(job.workload.key.name, verdict.category) for job, verdict in late.failed] == [("stuck", "PartialStart")]


def test_a_job_in_backoff_does_not_queue_until_its_retry_and_is_listed_in_its_queue() -> None:
    t = seed_tree()
    note = BackoffNote(attempts=1, reason="pod x cannot be scheduled", category="Unschedulable",
                       retry_at=T0 + 600, failed_at=T0, spec="")
    backing = batch_job_object("backing", created="2024-04-08T01:00:00Z")
    backing["metadata"]["annotations"][BACKOFF_ANNOTATION] = encode_backoff(
        dataclasses.replace(note, spec=spec_fingerprint(backing))
    )
    behind = batch_job_object("behind", pods=6)
    leaf = t.leaf_for_namespace("user-a")
    assert leaf is not None
    jobs = [track(JOB, backing, leaf, {}), track(JOB, behind, leaf, {})]
    before = decide(t, jobs, {}, oversell_rate=Fraction(1), now=T0 + 599)
    assert [job.workload.key.name for job in before.admissions] == ["behind"]
    assert [job.workload.key.name for job in before.backoff] == ["backing"]
    status = queue_statuses(t, before, cap=10)["root-department-a-user-a"]["queueItemDetails"]
    assert status["backoff"] == [{
        "name": "backing", "namespace": "user-a", "priority": 0, "reason": "Unschedulable",
        "message": "pod x cannot be scheduled", "attempts": 1, "retryAt": "2024-04-08T02:10:00Z",
    }]
    # Requested all the same (the tree's status shows it waits).
    request = before.ledger.snapshot()["department-a"].request
    assert request.get_or_zero("cpu") == parse_quantity("70")
    # At its retry time it queues again, at its original place: ahead of a later job.
    later = batch_job_object("later", created="2024-04-08T01:30:00Z")
    jobs = [track(JOB, backing, leaf, {}), track(JOB, later, leaf, {})]
    after = decide(t, jobs, {}, oversell_rate=Fraction(1), now=T0 + 600)
    assert after.backoff == ()
    assert [job.workload.key.name for job in after.admissions] == ["backing", "later"]


def test_a_job_that_gave_up_stays_until_its_spec_changes() -> None:
    t = seed_tree()
    leaf = t.leaf_for_namespace("user-a")
    assert leaf is not None
    obj = batch_job_object("quitter")
    note = BackoffNote(attempts=3, reason="r", category="NotCreated", retry_at=T0, failed_at=T0,
                       spec=spec_fingerprint(obj), gave_up=True)
    obj["metadata"]["annotations"][BACKOFF_ANNOTATION] = encode_backoff(note)
    held = decide(t, [track(JOB, obj, leaf, {})], {}, oversell_rate=Fraction(1), now=T0 + 10**7)
    assert held.admissions == ()
    entry = queue_statuses(t, held, cap=10)["root-department-a-user-a"]["queueItemDetails"]["backoff"][0]
    assert entry["reason"] == GAVE_UP and "retryAt" not in entry
    obj["spec"]["template"]["spec"]["containers"][0]["image"] = "fixed:2"
    fixed = decide(t, [track(JOB, obj, leaf, {})], {}, oversell_rate=Fraction(1), now=T0)
    assert [job.workload.key.name for job in fixed.admissions] == ["quitter"]


