"""``kq why`` takes the controller's answer when it gives one (docs/queueing.md, "Why a job waits, from the
controller"): no job is read then. A job that does not wait is explained from its namespace alone; a job the
controller's last pass did not see, an answer that cannot be had, and ``--direct`` or ``--oversellrate`` make
``kq`` read every job and compute the answer itself, as before."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.clirun import run, seed_api
from tests.fakeapi import FakeApi
from tests.serving_api import ServingApi
from webhook.readmodel.kubeapi import ApiError
from webhook.readmodel.served import NOT_DECIDED, NOT_WAITING, SERVED_TIMEOUT_SECONDS, summaries_path

WHY: dict[str, Any] = {"kind": "Job", "namespace": "user-a", "name": "pi2", "status": "QUEUING", "position": 7,
       "explanation": "Job user-a/pi2 is QUEUING: position 7 of 9, as the controller says."}
SUMMARY = {"name": "pi2", "namespace": "user-a", "kind": "Job", "status": "QUEUING"}


def _serving(answer: dict[str, Any] | ApiError) -> ServingApi:
    """The seed's cluster, whose API server proxies user-a's job summaries to ``answer``."""
    return ServingApi(answer, lambda path: path.startswith(summaries_path("user-a") + "/"))


def _cluster_wide_reads(api: FakeApi) -> list[str]:
    """Job lists of every namespace (what a complete read makes)."""
    return [path for _, path, _ in api.requests if path.endswith("/jobs") and "/namespaces/" not in path]


def _direct(*args: str) -> str:
    return run(["why", *args, "--direct"], seed_api()).out


def test_the_controllers_answer_is_printed_and_no_job_is_read() -> None:
    api = _serving({"kind": "JobSummary", "job": SUMMARY, "why": WHY})
    result = run(["why", "pi2", "--ahead", "3"], api)
    assert result.code == 0 and result.err == "", result.err
    assert result.out.rstrip("\n") == WHY["explanation"]
    ((path, query),) = api.asked
    assert path == summaries_path("user-a") + "/pi2"
    assert dict(query)["ahead"] == "3" and dict(query)["timeout"] == f"{SERVED_TIMEOUT_SECONDS}s"
    assert "kind" not in dict(query)
    assert not any(path.endswith("/jobs") for _, path, _ in api.requests)
    assert json.loads(run(["why", "pi2", "-o", "json"], api).out) == WHY


def test_a_kind_in_the_reference_is_asked_for() -> None:
    api = _serving({"kind": "JobSummary", "job": SUMMARY, "why": WHY})
    assert run(["why", "job/pi2"], api).code == 0
    assert dict(api.asked[0][1])["kind"] == "Job"


def test_a_job_that_does_not_wait_is_explained_from_its_namespace() -> None:
    api = _serving({"kind": "JobSummary", "job": {**SUMMARY, "name": "pi1", "status": "RUNNING"},
                      "unexplained": {"reason": NOT_WAITING, "message": "the job is RUNNING"}})
    result = run(["why", "pi1"], api)
    assert result.code == 0 and result.err == ""
    assert result.out == _direct("pi1")
    assert _cluster_wide_reads(api) == []


def test_a_job_the_last_pass_did_not_see_is_computed_from_every_job_with_a_note() -> None:
    api = _serving({"kind": "JobSummary", "job": SUMMARY,
                      "unexplained": {"reason": NOT_DECIDED, "message": "the controller's last pass here did not "
                                      "see this job"}})
    result = run(["why", "pi2"], api)
    assert result.code == 0
    assert result.out == _direct("pi2")
    assert "did not see this job" in result.err and "reading every job" in result.err
    assert _cluster_wide_reads(api) != []


@pytest.mark.parametrize(("error", "noted"), [
    (ApiError(404, "NotFound", "the server could not find the requested resource"), False),
    (ApiError(409, "Conflict", "pi2 is a Job and a PyTorchJob"), False),
    (ApiError(503, "ServiceUnavailable", "service unavailable"), True),
    (ApiError(403, "Forbidden", "forbidden"), True),
])
def test_without_the_controllers_answer_kq_computes_it(error: ApiError, noted: bool) -> None:
    api = _serving(error)
    result = run(["why", "pi2"], api)
    assert result.code == 0
    assert result.out == _direct("pi2")
    assert ("the controller's answer is unavailable" in result.err) is noted, result.err


def test_a_job_that_is_nowhere_gets_kqs_own_suggestions() -> None:
    api = _serving(ApiError(404, "NotFound", "no job named pi3 in namespace user-a"))
    result = run(["why", "pi3"], api)
    assert result.code != 0 and "not found in namespace user-a; did you mean pi2 or pi1?" in result.err, result.err


@pytest.mark.parametrize("flags", [["--direct"], ["--oversellrate", "1"]])
def test_direct_and_another_oversell_rate_never_ask_the_controller(flags: list[str]) -> None:
    api = _serving({"kind": "JobSummary", "job": SUMMARY, "why": WHY})
    result = run(["why", "pi2", *flags], api)
    assert result.code == 0 and api.asked == []
    assert "QUEUING" in result.out and WHY["explanation"] not in result.out


@pytest.mark.parametrize("answer", [
    {"kind": "JobSummary", "job": SUMMARY},
    {"kind": "JobSummary", "job": SUMMARY, "unexplained": "NotDecided"},
    {"kind": "JobSummary", "job": SUMMARY, "why": {"explanation": 7}},
    {"kind": "JobSummary", "job": {"name": "pi2"}, "why": WHY},
])
def test_an_answer_that_is_not_one_is_not_used(answer: dict[str, Any]) -> None:
    result = run(["why", "pi2"], _serving(answer))
    assert result.code == 0 and result.out == _direct("pi2")
    assert "the controller's answer is unavailable" in result.err, result.err
