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
    (asked,) = [query for _, path, query in api.requests if path == summaries_path(None)]
    assert asked == (("timeout", f"{SERVED_TIMEOUT_SECONDS}s"),)
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
