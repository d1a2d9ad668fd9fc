"""The controller's job summaries (docs/queueing.md, "Reading every job") say what ``kq list`` computes from the
API, and stay right as their inputs change while each job's summary is kept between reads; served as a Table, each
row is what ``kq list`` lays out from the same summary."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
import pytest

from tests.clirun import NOW, seed_api
from webhook.api.names import BACKOFF_ANNOTATION
from webhook.api.objects import Obj, name_of, namespace_of, owner_references_of, rfc3339_seconds
from webhook.cli.readapi import wants_table
from webhook.controller.records import encode_backoff, spec_fingerprint
from webhook.core.startup import BackoffNote
from webhook.core.workload import WorkloadKey
from webhook.readmodel import summaries
from webhook.readmodel.eta import published_estimates
from webhook.readmodel.fetch import load_snapshot
from webhook.readmodel.jobs import job_summary
from webhook.readmodel.listing import COLUMNS, job_cells, list_rows
from webhook.readmodel.summaries import OwnerKey, SummaryBook, SummaryInputs, one_row_table
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
        for ref in owner_references_of(pod):
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


# As a table (docs/queueing.md, "As a table"): each row is what kq list lays out from the same job's summary, by
# the one rule of webhook.readmodel.listing; the rows in namespace, name and kind order, with what includeObject
# asks; a kept row moves with the clock, a pass and the estimates.

BIG, PI2 = WorkloadKey("Job", "user-b", "big"), WorkloadKey("Job", "user-a", "pi2")


def _table(book: SummaryBook, inputs: SummaryInputs, now: float, include: str = "Metadata",
           namespace: str | None = None, per_chunk: int = 3) -> dict[str, Any]:
    chunks, count = book.table_chunks(inputs, namespace, now, include, per_chunk)
    table: dict[str, Any] = orjson.loads(b"".join(chunks))
    assert table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1" and len(table["rows"]) == count
    return table


def test_each_row_is_what_kq_list_lays_out_from_the_jobs_summary() -> None:
    snapshot = _snapshot()
    inputs = _inputs(snapshot, positions={BIG: 2, PI2: 1}, estimates={BIG: ESTIMATE})
    book = SummaryBook()
    jobs = _served(book, inputs)
    for now in (NOW, NOW + 3600):  # the same kept rows, an hour later: the ages and the ETA move
        table = _table(book, inputs, now)
        assert book.rebuilt == 0
        served = [(row["object"]["metadata"]["namespace"], row["cells"]) for row in table["rows"]]
        ordered = sorted(jobs, key=lambda job: (job["namespace"], job["name"], job["kind"]))
        assert served == [(job["namespace"], job_cells(job, now)) for job in ordered]
        cells = {row[0]: row for _, row in served}
        # big is second with its estimate (ten minutes ahead, then an hour later long due), pi2 first without one.
        assert cells["big"][4:6] == ["2", "~10m" if now == NOW else "~0s"]
        assert cells["big"][9] == ("14m" if now == NOW else "74m")
        assert cells["pi2"][4:6] == ["1", "?"] and cells["pi1"][4:6] == ["-", "-"]
    # The layout kq makes of the rows is the one it makes of the summaries.
    columns, rows = list_rows(ordered, NOW, wide=True, all_namespaces=True)
    assert [column.header for column in columns][1:] == [column.column.header for column in COLUMNS]
    table = _table(book, inputs, NOW)
    assert [(row["object"]["metadata"]["namespace"], *row["cells"]) for row in table["rows"]] == rows


def test_the_columns_say_which_only_wide_shows() -> None:
    table = _table(SummaryBook(), _inputs(_snapshot()), NOW)
    definitions = table["columnDefinitions"]
    assert [column["name"] for column in definitions] == [column.name for column in COLUMNS]
    assert [column["name"] for column in definitions if column["priority"]] == ["Priority", "Pods", "Request"]
    assert [column["name"] for column in definitions if column["format"] == "name"] == ["Name"]
    assert all(column["description"] and column["type"] == "string" for column in definitions)


def test_include_object_none_metadata_or_the_whole_summary() -> None:
    snapshot = _snapshot()
    inputs = _inputs(snapshot, estimates={BIG: ESTIMATE})
    book = SummaryBook()
    items = {(job["namespace"], job["name"]): job for job in _served(book, inputs)}
    bare = _table(book, inputs, NOW, "None")
    assert all(row.keys() == {"cells"} for row in bare["rows"])
    meta = _table(book, inputs, NOW, "Metadata")
    for row in meta["rows"]:
        assert row["object"]["kind"] == "PartialObjectMetadata" and row["object"]["apiVersion"] == "meta.k8s.io/v1"
        assert row["object"]["metadata"]["name"] == row["cells"][0]
    whole = _table(book, inputs, NOW, "Object")
    for row in whole["rows"]:
        obj = row["object"]
        assert obj["kind"] == "JobSummary" and obj["apiVersion"] == "visibility.kube-queue.x-k8s.io/v1alpha1"
        assert obj["job"] == items[(obj["metadata"]["namespace"], obj["metadata"]["name"])]
    assert [row["cells"] for row in bare["rows"]] == [row["cells"] for row in whole["rows"]]


def test_one_namespace_and_no_rows() -> None:
    snapshot = _snapshot()
    book = SummaryBook()
    table = _table(book, _inputs(snapshot), NOW, namespace="user-a", per_chunk=1)
    assert {row["object"]["metadata"]["namespace"] for row in table["rows"]} == {"user-a"}
    assert _table(book, _inputs(snapshot), NOW, namespace="nowhere")["rows"] == []


def test_a_job_that_changes_moves_its_row() -> None:
    snapshot = _snapshot()
    book = SummaryBook()
    inputs = _inputs(snapshot)
    _table(book, inputs, NOW)
    running = dict(inputs.running)
    running[("user-a", "Job", "pi2")] = 6
    table = _table(book, _inputs(snapshot, running=running), NOW)
    (row,) = [row["cells"] for row in table["rows"] if row["cells"][0] == "pi2"]
    assert row[7] == "6/6" and book.rebuilt == 1


def test_one_jobs_answer_as_a_table_of_one_row() -> None:
    job = {"name": "j", "namespace": "n", "kind": "Job", "status": "QUEUING", "leaf": "team", "position": 4,
           "priority": 1, "pods": {"running": 0, "expected": 2}, "request": {"cpu": "2"},
           "created": rfc3339_seconds(NOW - 120), "estimatedStartLatest": rfc3339_seconds(NOW + 1200)}
    answer = {"kind": "JobSummary", "job": job, "why": {"explanation": "waits"}}
    table = one_row_table(answer, NOW, "Metadata")
    (row,) = table["rows"]
    assert row["cells"] == ["j", "Job", "QUEUING", "team", "4", "<20m", "1", "0/2", "cpu=2", "2m"]
    assert row["object"]["metadata"] == {"name": "j", "namespace": "n"}
    assert one_row_table(answer, NOW, "Object")["rows"][0]["object"] is answer
    assert "object" not in one_row_table(answer, NOW, "None")["rows"][0]


@pytest.mark.parametrize(("accept", "wanted"), [
    ("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,"
     "application/json", True),
    ("application/json; as=Table; g=meta.k8s.io; v=v1", True),
    ("application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json", False),
    ("application/json", False),
    ("", False),
    ("application/yaml;as=Table;v=v1;g=meta.k8s.io", False),
    ("application/json;as=Table;v=v1;g=other.io", False),
])
def test_a_table_is_served_only_to_who_accepts_one_of_meta_v1(accept: str, wanted: bool) -> None:
    assert wants_table(accept) is wanted
