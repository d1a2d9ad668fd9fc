"""The controller's job summaries (docs/queueing.md, "Reading every job") say what ``kq list`` computes from the
API, and stay right as their inputs change while each job's summary is kept between reads."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
import pytest

from tests.clirun import NOW, seed_api
from webhook.api.names import BACKOFF_ANNOTATION
from webhook.api.objects import Obj, meta, name_of, namespace_of, rfc3339_seconds
from webhook.controller.records import encode_backoff, spec_fingerprint
from webhook.core.startup import BackoffNote
from webhook.core.workload import WorkloadKey
from webhook.readmodel import summaries
from webhook.readmodel.eta import published_estimates
from webhook.readmodel.fetch import load_snapshot
from webhook.readmodel.jobs import job_summary
from webhook.readmodel.summaries import OwnerKey, SummaryBook, SummaryInputs
from webhook.readmodel.view import KindSource, Snapshot, ViewContext, job_views
from webhook.workloads.base import value_at

ESTIMATE = {"estimatedStart": rfc3339_seconds(NOW + 600), "estimatedStartLatest": rfc3339_seconds(NOW + 1200)}


def _snapshot() -> Snapshot:
    return load_snapshot(seed_api(), None, now=NOW)


def _running(pods: Sequence[Obj]) -> dict[OwnerKey, int]:
    """Running pods by controller owner, as the controller's pod index counts them."""
    out: dict[OwnerKey, int] = {}
    for pod in pods:
        if value_at(pod, "status", "phase") != "Running":
            continue
        for ref in meta(pod).get("ownerReferences") or ():
            if ref.get("controller") is True:
                key = (namespace_of(pod), str(ref["kind"]), str(ref["name"]))
                out[key] = out.get(key, 0) + 1
    return out


def _inputs(snapshot: Snapshot, jobs: Sequence[tuple[KindSource, Obj]] | None = None, *,
            positions: Mapping[WorkloadKey, int] | None = None,
            estimates: Mapping[WorkloadKey, Mapping[str, str]] | None = None,
            running: Mapping[OwnerKey, int] | None = None) -> SummaryInputs:
    context = ViewContext(snapshot.tree, snapshot.priority_classes, snapshot.devices, snapshot.now)
    return SummaryInputs([(source, obj, None) for source, obj in (jobs if jobs is not None else snapshot.jobs)],
                         _running(snapshot.pods) if running is None else running, context, positions,
                         estimates or {})


def _served(book: SummaryBook, inputs: SummaryInputs, namespace: str | None = None) -> list[dict[str, Any]]:
    body, count = book.render(inputs, namespace)
    answer = orjson.loads(body)
    assert answer["kind"] == "JobSummaryList" and len(answer["items"]) == count
    assert answer["apiVersion"] == "visibility.kube-queue.x-k8s.io/v1alpha1"
    for item in answer["items"]:
        assert item["metadata"] == {"name": item["job"]["name"], "namespace": item["job"]["namespace"]}
    return sorted((item["job"] for item in answer["items"]), key=lambda job: (job["namespace"], job["name"]))


def _direct(snapshot: Snapshot) -> list[dict[str, Any]]:
    etas = published_estimates(snapshot.queues)
    summaries = [job_summary(view, etas) for view in job_views(snapshot)]
    return sorted(orjson.loads(orjson.dumps(summaries)), key=lambda job: (job["namespace"], job["name"]))


def test_the_served_summaries_are_what_kq_list_computes_from_the_api() -> None:
    snapshot = _snapshot()
    served = _served(SummaryBook(), _inputs(snapshot))
    assert served == _direct(snapshot)
    statuses = {job["name"]: job["status"] for job in served}
    # The cases the comparison covers: running with its pods, pending, waiting with positions, finished, a
    # Kubeflow job, a job outside the tree.
    assert statuses == {"big": "QUEUING", "broke": "FAILED", "done": "SUCCEEDED", "loose": "SUSPENDED",
                        "mnist": "RUNNING", "pend": "PENDING", "pi1": "RUNNING", "pi2": "QUEUING"}
    assert {job["name"]: job["position"] for job in served if job["status"] == "QUEUING"} == {"big": 1, "pi2": 2}


def test_a_kept_summary_follows_its_job_its_pods_and_the_estimates() -> None:
    snapshot = _snapshot()
    book = SummaryBook()
    _served(book, _inputs(snapshot))
    assert len(book) == len(snapshot.jobs)

    # The job changed (released): its new object is summarised again.
    jobs = list(snapshot.jobs)
    index = next(i for i, (_, obj) in enumerate(jobs) if name_of(obj) == "pi2")
    released: dict[str, Any] = copy.deepcopy(dict(jobs[index][1]))
    released["spec"]["suspend"] = False
    jobs[index] = (jobs[index][0], released)
    served = {job["name"]: job for job in _served(book, _inputs(snapshot, jobs))}
    assert served["pi2"]["status"] == "PENDING" and served["pi2"]["position"] is None
    assert served["big"]["position"] == 1
    assert book.rebuilt == 1  # the others were kept

    # Its pods run: the same object, new counts.
    running = _running(snapshot.pods)
    running[("user-a", "Job", "pi2")] = 6
    served = {job["name"]: job for job in _served(book, _inputs(snapshot, jobs, running=running))}
    assert served["pi2"]["status"] == "RUNNING" and served["pi2"]["pods"] == {"running": 6, "expected": 6}
    assert book.rebuilt == 1

    # A start estimate is added to the waiting job it is for, and only there.
    estimates = {WorkloadKey("Job", "user-b", "big"): ESTIMATE}
    served = {job["name"]: job for job in _served(book, _inputs(snapshot, jobs, running=running,
                                                                  estimates=estimates))}
    assert {key: served["big"][key] for key in ESTIMATE} == ESTIMATE
    assert book.rebuilt == 0  # an estimate is added at each read, no summary is built again
    assert all("estimatedStart" not in job for name, job in served.items() if name != "big")

    # A job that went is gone from the answer and from what is kept.
    served_names = {job["name"] for job in _served(book, _inputs(snapshot, [j for j in jobs if name_of(j[1]) != "done"],
                                                                   running=running))}
    assert "done" not in served_names and len(book) == len(jobs) - 1


def test_a_new_tree_or_priority_classes_summarise_every_job_again() -> None:
    snapshot = _snapshot()
    book = SummaryBook()
    before = _served(book, _inputs(snapshot))
    assert {job["name"]: job["priority"] for job in before}["pend"] == 2
    snapshot.priority_classes = {**snapshot.priority_classes, "priority-2": 5}
    after = {job["name"]: job for job in _served(book, _inputs(snapshot))}
    assert after["pend"]["priority"] == 5


def test_the_last_pass_positions_are_served_only_where_they_cover_the_whole_quota() -> None:
    snapshot = _snapshot()
    big, pi2 = WorkloadKey("Job", "user-b", "big"), WorkloadKey("Job", "user-a", "pi2")
    served = _served(SummaryBook(), _inputs(snapshot, positions={big: 2, pi2: 1}))
    assert {job["name"]: job["position"] for job in served if job["position"]} == {"big": 2, "pi2": 1}
    # The pass had not seen pi2 yet: the quota's waiting jobs are ordered here instead.
    served = _served(SummaryBook(), _inputs(snapshot, positions={big: 2}))
    assert {job["name"]: job["position"] for job in served if job["position"]} == {"big": 1, "pi2": 2}


@pytest.mark.parametrize("namespace", ["user-a", "user-c", "nowhere"])
def test_a_namespace_read_gives_that_namespaces_jobs_only(namespace: str) -> None:
    snapshot = _snapshot()
    everything = _served(SummaryBook(), _inputs(snapshot))
    assert _served(SummaryBook(), _inputs(snapshot), namespace) == [
        job for job in everything if job["namespace"] == namespace]


def test_a_job_in_backoff_is_summarised_on_every_read_as_its_retry_comes() -> None:
    snapshot = _snapshot()
    jobs = list(snapshot.jobs)
    index = next(i for i, (_, obj) in enumerate(jobs) if name_of(obj) == "pi2")
    noted: dict[str, Any] = copy.deepcopy(dict(jobs[index][1]))
    note = BackoffNote(attempts=1, reason="Unschedulable", category="unschedulable", retry_at=NOW + 60,
                       failed_at=NOW - 10, spec=spec_fingerprint(noted))
    noted["metadata"].setdefault("annotations", {})[BACKOFF_ANNOTATION] = encode_backoff(note)
    jobs[index] = (jobs[index][0], noted)
    book = SummaryBook()
    first = {job["name"]: job for job in _served(book, _inputs(snapshot, jobs))}
    assert first["pi2"]["status"] == "BACKOFF" and len(book) == len(jobs) - 1
    snapshot.now = NOW + 120  # past its retry: it waits in the queue again
    later = {job["name"]: job for job in _served(book, _inputs(snapshot, jobs))}
    assert later["pi2"]["status"] == "QUEUING"


@pytest.mark.parametrize("per_chunk", [1, 2, 3, 100])
def test_the_answer_in_pieces_is_the_whole_answer(per_chunk: int) -> None:
    snapshot = _snapshot()
    book = SummaryBook()
    whole, count = book.render(_inputs(snapshot))
    chunks, counted = book.render_chunks(_inputs(snapshot), None, per_chunk)
    assert b"".join(chunks) == whole and counted == count == len(snapshot.jobs)
    chunks, counted = book.render_chunks(_inputs(snapshot), "nowhere", per_chunk)
    assert orjson.loads(b"".join(chunks))["items"] == [] and counted == 0


def test_a_warm_book_builds_nothing_at_the_read_and_answers_the_same() -> None:
    snapshot = _snapshot()
    book, steps = SummaryBook(), list[int]()

    def between() -> bool:
        steps.append(1)
        return True

    assert book.warm(_inputs(snapshot), between) == len(snapshot.jobs)
    assert len(book) == len(snapshot.jobs) and steps == []  # fewer builds than a step: never asked
    assert _served(book, _inputs(snapshot)) == _direct(snapshot)
    assert book.rebuilt == 0
    # Nothing changed: a second warm-up builds nothing either.
    assert book.warm(_inputs(snapshot), lambda: True) == 0


@pytest.mark.parametrize("stop_after", [1, 2, 3])
def test_a_warm_up_stopped_midway_keeps_what_it_built_and_leaves_the_rest_to_the_read(
        monkeypatch: pytest.MonkeyPatch, stop_after: int) -> None:
    monkeypatch.setattr(summaries, "WARM_BUILDS", 2)
    snapshot = _snapshot()
    book, asked = SummaryBook(), list[int]()

    def between() -> bool:
        asked.append(len(asked) + 1)
        return len(asked) < stop_after

    built = book.warm(_inputs(snapshot), between)
    assert built == 2 * stop_after and len(book) == built and asked == list(range(1, stop_after + 1))
    assert _served(book, _inputs(snapshot)) == _direct(snapshot)
    assert book.rebuilt == len(snapshot.jobs) - built


def test_a_warm_up_builds_only_what_changed_since_the_read() -> None:
    snapshot = _snapshot()
    book = SummaryBook()
    _served(book, _inputs(snapshot))
    jobs = list(snapshot.jobs)
    index = next(i for i, (_, obj) in enumerate(jobs) if name_of(obj) == "pi2")
    released: dict[str, Any] = copy.deepcopy(dict(jobs[index][1]))
    released["spec"]["suspend"] = False
    jobs[index] = (jobs[index][0], released)
    assert book.warm(_inputs(snapshot, jobs), lambda: True) == 1
    served = {job["name"]: job for job in _served(book, _inputs(snapshot, jobs))}
    assert book.rebuilt == 0 and served["pi2"]["status"] == "PENDING"
