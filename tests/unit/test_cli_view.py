"""The read model of jobs (``webhook.readmodel.view``): statuses, positions, the oversell rate, and that what it
shows is what the controller decides on (it uses the controller's own job model and queue policies)."""

from __future__ import annotations

import json
from fractions import Fraction
from typing import Any

import pytest

from tests.fakeapi import batch_job, queue
from tests.kubefake import stamp
from webhook.api.names import BACKOFF_ANNOTATION, EVICTION_ANNOTATION
from webhook.api.statuses import JobStatus
from webhook.controller import decide, model, records
from webhook.core.queueing import Policy
from webhook.core.quota import parse_tree
from webhook.readmodel import waiting
from webhook.readmodel.view import (
    JobView,
    KindSource,
    Snapshot,
    job_status,
    job_views,
)
from webhook.readmodel.waiting import oversell_rate
from webhook.workloads.registry import adapter_for

QUEUING, BACKOFF, PENDING, RUNNING = JobStatus.QUEUING, JobStatus.BACKOFF, JobStatus.PENDING, JobStatus.RUNNING
SUCCEEDED, FAILED, SUSPENDED = JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.SUSPENDED

JOB = adapter_for("batch", "Job")
assert JOB is not None
SOURCE = KindSource(JOB, "v1")
TREE_SPEC: dict[str, Any] = {
    "root": {
        "name": "root",
        "min": {"cpu": 100},
        "max": {"cpu": 100},
        "children": [
            {"name": "A", "min": {"cpu": 60}, "max": {"cpu": 100}, "namespaces": ["a1", "a2"]},
            {"name": "B", "min": {"cpu": 40}, "max": {"cpu": 100}, "namespaces": ["b"]},
        ],
    }
}
TREE = parse_tree(TREE_SPEC)


@pytest.mark.parametrize(
    "job",
    [
        batch_job("queued", "a1", workers=3, cpu="2", leaf="A", suspended=True),
        batch_job("admitted", "a1", workers=3, cpu="2", leaf="A", admitted_at=50.0, created=10.0),
        batch_job("released-without-record", "a1", workers=2, leaf="A", created=10.0),
        batch_job("half-done", "a1", workers=4, leaf="A", admitted_at=60.0, succeeded=3),
        batch_job("finished", "a1", workers=2, leaf="A", conditions=[{"type": "Complete", "status": "True"}]),
        batch_job("stale-record", "a1", leaf="A", suspended=True, admitted_at=70.0),
    ],
    ids=lambda job: job["metadata"]["name"],
)
def test_workloads_are_the_ones_the_controller_decides_on(job: dict[str, Any]) -> None:
    snapshot = _snapshot([job])
    snapshot.priority_classes = {"high": 5}
    (shown,) = job_views(snapshot)
    assert JOB is not None
    tracked = model.track(JOB, job, TREE.node("A"), snapshot.priority_classes)
    assert shown.workload == tracked.workload
    assert shown.record == records.read_record(job)


def test_leaf_policies_match_the_controllers() -> None:
    queues = {
        "root-a-a1": queue("root-a-a1", "root/A", policy="Round"),
        "root-a-a2": queue("root-a-a2", "root/A", policy="Block"),
        "root-b-b": queue("root-b-b", "root/B", policy="Priority"),
    }
    assert waiting.leaf_policies(TREE, queues) == decide.leaf_policies(TREE, queues, strict=False)
    assert waiting.leaf_policies(TREE, queues) == {"a": Policy.BLOCK, "b": Policy.ROUND}


@pytest.mark.parametrize(
    ("job", "managed", "running", "expected", "status"),
    [
        (batch_job("j", "a1", suspended=True), True, 0, 1, QUEUING),
        (batch_job("j", "x", suspended=True), False, 0, 1, SUSPENDED),
        (batch_job("j", "a1"), True, 0, 2, PENDING),
        (batch_job("j", "a1"), True, 1, 2, PENDING),
        (batch_job("j", "a1"), True, 2, 2, RUNNING),
        (batch_job("j", "a1", conditions=[{"type": "Complete", "status": "True"}]), True, 0, 0, SUCCEEDED),
        (batch_job("j", "a1", conditions=[{"type": "Failed", "status": "True"}]), True, 0, 0, FAILED),
        (batch_job("j", "a1", suspended=True, conditions=[{"type": "Failed", "status": "True"}]), True, 0, 0, FAILED),
    ],
)
def test_job_status(job: dict[str, Any], managed: bool, running: int, expected: int, status: str) -> None:
    assert JOB is not None
    assert job_status(JOB, job, managed, running, expected) == status


def _snapshot(jobs: list[dict[str, Any]], queues: dict[str, Any] | None = None) -> Snapshot:
    tree_obj = {"metadata": {"name": "t", "namespace": "kube-system"}, "spec": TREE_SPEC}
    return Snapshot(now=1000.0, tree_obj=tree_obj, queues=queues or {}, jobs=[(SOURCE, job) for job in jobs])


def _positions(views: list[JobView]) -> dict[str, tuple[int | None, str]]:
    return {v.name: (v.position, v.position_source) for v in views if v.status == QUEUING}


def test_positions_come_from_the_queue_status_when_it_lists_exactly_the_waiting_jobs() -> None:
    jobs = [
        batch_job("x", "a1", leaf="A", suspended=True, created=10.0),
        batch_job("y", "a2", leaf="A", suspended=True, created=20.0),
    ]
    queues = {
        "root-a-a1": queue("root-a-a1", "root/A", [{"name": "x", "namespace": "a1", "priority": 0, "position": 7}]),
        "root-a-a2": queue("root-a-a2", "root/A", []),
    }
    views = job_views(_snapshot(jobs, queues))
    # a1's status agrees with the jobs (it is trusted, even with a surprising position); a2's lags behind.
    assert _positions(views) == {"x": (7, "status"), "y": (2, "computed")}


def test_positions_follow_priority_then_creation_across_the_namespaces_of_a_leaf() -> None:
    jobs = [
        batch_job("old", "a1", leaf="A", suspended=True, created=10.0),
        batch_job("new", "a2", leaf="A", suspended=True, created=20.0, priority_class="high"),
        batch_job("mid", "a1", leaf="A", suspended=True, created=15.0),
        batch_job("other-quota", "b", leaf="B", suspended=True, created=1.0),
    ]
    snapshot = _snapshot(jobs)
    snapshot.priority_classes = {"high": 10}
    assert _positions(job_views(snapshot)) == {
        "new": (1, "computed"), "old": (2, "computed"), "mid": (3, "computed"), "other-quota": (1, "computed"),
    }


def test_the_oversell_rate_is_read_from_the_flag_the_controllers_queues_the_tree_or_the_default() -> None:
    # Structured, never parsed back from Event text: the controller states its rate on every Queue it keeps.
    queues = {"q-b": queue("q-b", "root/B", rate="3/2"), "q-a": queue("q-a", "root/A")}
    tree_obj = {"metadata": {"name": "t", "annotations": {"kube-queue/oversell-rate": "4"}}}
    assert oversell_rate(Fraction(1), tree_obj, queues) == (Fraction(1), "--oversellrate")
    assert oversell_rate(None, tree_obj, queues) == (
        Fraction(3, 2), "annotation kube-queue.x-k8s.io/oversell-rate on Queue q-b")
    assert oversell_rate(None, tree_obj, {"q-a": queue("q-a", "root/A")}) == (
        Fraction(4), "annotation kube-queue/oversell-rate on the ElasticQuotaTree")
    broken = {"q": queue("q", "root/A", rate="lots"), "r": queue("r", "root/A", rate="0")}
    assert oversell_rate(None, None, broken)[0] == Fraction(2), "an unreadable or invalid rate is not used"
    assert oversell_rate(None, None, {})[0] == Fraction(2)


def test_an_evicted_job_is_queuing_with_its_note() -> None:
    note = {"by": "Job/b/x", "quota": "root/B", "reason": "root/B reclaims cpu=10 from root/A", "at": stamp(5)}
    notes = {EVICTION_ANNOTATION: json.dumps(note)}
    job = batch_job("victim", "a1", leaf="A", suspended=True, annotations=notes)
    (only,) = job_views(_snapshot([job]))
    assert only.status == QUEUING
    assert only.eviction is not None and only.eviction["by"] == "Job/b/x"


def _backoff_job(gave_up: bool, retry_at: float, edited: bool = False) -> dict[str, Any]:
    from webhook.core.startup import BackoffNote  # noqa: PLC0415

    job = batch_job("stuck", "a1", leaf="A", suspended=True)
    note = BackoffNote(attempts=2, reason="pod stuck-x cannot be scheduled: 0/4 nodes are available",
                       category="Unschedulable", retry_at=retry_at, failed_at=900.0,
                       spec=records.spec_fingerprint(job), gave_up=gave_up)
    job["metadata"]["annotations"][BACKOFF_ANNOTATION] = records.encode_backoff(note)
    if edited:
        job["spec"]["template"]["spec"]["containers"][0]["image"] = "busybox:1.37"
    return job


def test_a_job_that_did_not_start_is_in_backoff_until_its_retry_and_why_says_why() -> None:
    from webhook.readmodel.explain import explain_backoff  # noqa: PLC0415

    (waiting,) = job_views(_snapshot([_backoff_job(False, retry_at=1120.0)]))
    assert waiting.status == BACKOFF
    text = explain_backoff(waiting, 1000.0, 200)
    assert "Why it did not start (Unschedulable): pod stuck-x cannot be scheduled" in text
    assert "2 failed starts so far; it queues again at its original place at 1970-01-01T00:18:40Z (in 2m)" in text
    (due,) = job_views(_snapshot([_backoff_job(False, retry_at=999.0)]))
    assert due.status == QUEUING
    (quit_,) = job_views(_snapshot([_backoff_job(True, retry_at=0.0)]))
    assert quit_.status == BACKOFF
    assert "gave up after 2 failed starts (GaveUp)" in explain_backoff(quit_, 1000.0, 200)
    (edited,) = job_views(_snapshot([_backoff_job(True, retry_at=0.0, edited=True)]))
    assert edited.status == QUEUING and edited.backoff is None
