"""``kq list -A`` reads the controller's job summaries when they are served, and every job from the API when they
are not (docs/queueing.md, "Reading every job"): silently when the API is not registered, with a note when it
is but cannot answer, and always with ``--direct``."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.clirun import NOW, run
from tests.fakeapi import FakeApi
from tests.serving_api import ServingApi
from webhook.api.objects import rfc3339_seconds
from webhook.readmodel.kubeapi import ApiError
from webhook.readmodel.listing import job_cells, table_columns
from webhook.readmodel.served import SERVED_TIMEOUT_SECONDS, summaries_path

SERVED_ONLY = {"name": "served-only", "namespace": "team-x", "kind": "Job", "apiVersion": "batch/v1",
               "status": "QUEUING", "quota": "root/Team-x", "queue": "root-team-x-team-x", "leaf": "Team-x",
               "position": 3, "priority": 0, "pods": {"running": 0, "expected": 2},
               "request": {"cpu": "2"}, "created": rfc3339_seconds(NOW - 60), "admittedAt": None,
               "estimatedStart": rfc3339_seconds(NOW + 720)}


def _serving(answer: dict[str, Any] | ApiError) -> ServingApi:
    """The seed's cluster, whose API server proxies the summaries of every namespace to ``answer``."""
    return ServingApi(answer, lambda path: path == summaries_path(None))


def _listed_jobs(api: FakeApi) -> bool:
    return any(path.endswith("/jobs") and "batch" in path for _, path, _ in api.requests)


def test_every_namespace_is_read_from_the_served_summaries() -> None:
    api = _serving({"kind": "JobSummaryList", "items": [{"kind": "JobSummary", "job": SERVED_ONLY}]})
    result = run(["list", "-A"], api)
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[1].split() == ["team-x", "served-only", "Job", "QUEUING", "Team-x", "3", "~12m", "60s"]
    assert len(lines) == 2 and result.err == ""
    assert not _listed_jobs(api)  # no Job was read through the API
    # Asked for a Table, answered with the summaries (as by a service that serves no Table).
    (asked,) = [query for _, path, query in api.requests if path == summaries_path(None)]
    assert asked == (("timeout", f"{SERVED_TIMEOUT_SECONDS}s"), ("includeObject", "Metadata"))
    assert api.tables_asked == 1
    as_json = json.loads(run(["list", "-A", "-o", "json"], api).out)
    assert as_json == {"items": [SERVED_ONLY]}


@pytest.mark.parametrize(("answer", "noted"), [
    (ApiError(404, "NotFound", "the server could not find the requested resource"), False),
    (ApiError(503, "ServiceUnavailable", "the queue controller is starting; ask again in a few seconds"), True),
    (ApiError(504, "Timeout", "the request timed out"), True),
    (ApiError(403, "Forbidden", 'User "dev" cannot list resource "jobsummaries" at the cluster scope'), True),
    ({"kind": "Status"}, True),
    ({"items": [{"job": {"name": "half"}}]}, True),
])
def test_without_served_summaries_every_job_is_read_from_the_api(answer: dict[str, Any] | ApiError,
                                                                  noted: bool) -> None:
    api = _serving(answer)
    result = run(["list", "-A"], api)
    assert result.code == 0, result.err
    assert "pi1" in result.out and "served-only" not in result.out and "half" not in result.out
    assert _listed_jobs(api)
    assert ("reading every job from the API server instead" in result.err) is noted, result.err


def test_direct_and_one_namespace_never_ask_for_the_summaries() -> None:
    api = _serving({"kind": "JobSummaryList", "items": [{"kind": "JobSummary", "job": SERVED_ONLY}]})
    for argv in (["list", "-A", "--direct"], ["list", "-n", "user-a"]):
        result = run(argv, api)
        assert result.code == 0 and "served-only" not in result.out and "pi1" in result.out, result
    assert all(path != summaries_path(None) for _, path, _ in api.requests)


def _table(rows: list[tuple[str, list[str]]], order: list[int] | None = None) -> dict[str, Any]:
    """A Table as the read API serves it, its columns in ``order`` (indexes of kq list's)."""
    columns = table_columns()
    order = order if order is not None else list(range(len(columns)))
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "columnDefinitions": [columns[at] for at in order],
            "rows": [{"cells": [cells[at] for at in order],
                      "object": {"kind": "PartialObjectMetadata", "metadata": {"namespace": namespace}}}
                     for namespace, cells in rows]}


SERVED_ROWS = [("team-x", job_cells(SERVED_ONLY, NOW)),
               ("team-y", job_cells({**SERVED_ONLY, "name": "runs", "status": "RUNNING", "position": None}, NOW))]
LISTED = {"kind": "JobSummaryList", "items": [{"kind": "JobSummary", "job": SERVED_ONLY},
                                              {"kind": "JobSummary", "job": {**SERVED_ONLY, "namespace": "team-y",
                                                                             "name": "runs", "status": "RUNNING",
                                                                             "position": None}}]}


@pytest.mark.parametrize("argv", [["list", "-A"], ["list", "-A", "-o", "wide"], ["list", "-A", "--status", "queuing"],
                                  ["list", "-A", "--status", "FAILED"]])
def test_the_table_the_controller_lays_out_is_printed_as_kq_lays_out_the_summaries(argv: list[str]) -> None:
    from_table = _serving_table(_table(SERVED_ROWS))
    printed = run(argv, from_table)
    assert printed.code == 0, printed.err
    assert from_table.tables_asked == 1 and not _listed_jobs(from_table)
    (asked,) = from_table.asked
    assert asked == (summaries_path(None), (("timeout", f"{SERVED_TIMEOUT_SECONDS}s"), ("includeObject", "Metadata")))
    from_summaries = _serving(LISTED)  # a service that serves no Table: the summaries, laid out by kq
    assert run(argv, from_summaries) == printed and from_summaries.tables_asked == 1
    if argv == ["list", "-A"]:
        assert printed.out.splitlines()[1].split() == ["team-x", "served-only", "Job", "QUEUING", "Team-x", "3",
                                                       "~12m", "60s"]
    if "wide" in argv:
        assert "PODS" in printed.out and "0/2" in printed.out and "cpu=2" in printed.out
    if "queuing" in argv:
        assert "served-only" in printed.out and "runs" not in printed.out
    if "FAILED" in argv:
        assert printed.out == "" and "No jobs in any namespace." in printed.err


def test_the_tables_columns_are_read_by_their_names() -> None:
    reordered = _serving_table(_table(SERVED_ROWS, order=list(reversed(range(len(table_columns()))))))
    assert run(["list", "-A"], reordered) == run(["list", "-A"], _serving_table(_table(SERVED_ROWS)))


def test_json_yaml_and_watch_ask_for_the_summaries_not_the_table() -> None:
    api = _serving_table(_table(SERVED_ROWS), LISTED)
    for argv in (["list", "-A", "-o", "json"], ["list", "-A", "-o", "yaml"],
                 ["list", "-A", "--watch", "--watch-rounds", "1"]):
        result = run(argv, api)
        assert result.code == 0 and "served-only" in result.out, result
    assert api.tables_asked == 0


def _broken(change: str) -> dict[str, Any]:
    table = _table(SERVED_ROWS)
    row = table["rows"][0]
    if change == "a column missing":
        table["columnDefinitions"] = table["columnDefinitions"][1:]
        for each in table["rows"]:
            each["cells"] = each["cells"][1:]
    elif change == "a row without its namespace":
        del row["object"]
    elif change == "a cell not a text":
        row["cells"][4] = 3
    elif change == "a cell short":
        row["cells"].pop()
    elif change == "no rows":
        del table["rows"]
    return table


@pytest.mark.parametrize("change", ["a column missing", "a row without its namespace", "a cell not a text",
                                    "a cell short", "no rows"])
def test_a_table_that_is_not_kq_lists_is_not_used(change: str) -> None:
    api = _serving_table(_broken(change))
    result = run(["list", "-A"], api)
    assert result.code == 0, result.err
    assert "pi1" in result.out and "served-only" not in result.out and _listed_jobs(api)
    assert "(its table is not kq list's); reading every job from the API server instead" in result.err


def _serving_table(table: dict[str, Any], listed: dict[str, Any] | None = None) -> ServingApi:
    return ServingApi(listed or {"kind": "Status"}, lambda path: path == summaries_path(None), table)
