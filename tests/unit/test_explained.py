"""What the controller answers for one job when its last pass or its start estimates cannot say (docs/queueing.md,
"Why a job waits, from the controller"): it leaves the answer to ``kq`` (``NotDecided``) rather than give a
wrong one, and says so when it makes no estimates at all."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from tests.clirun import NOW, seed_api
from webhook.api.names import BACKOFF_ANNOTATION
from webhook.api.objects import Obj, name_of, namespace_of
from webhook.controller import decide
from webhook.controller.decide import PassRecord
from webhook.controller.model import TrackedJob
from webhook.controller.records import encode_backoff, spec_fingerprint
from webhook.core.eta_pack import pack_estimate
from webhook.core.startup import BackoffNote
from webhook.core.workload import WorkloadKey
from webhook.readmodel.eta import estimate_snapshot
from webhook.readmodel.explained import ESTIMATES_OFF, WhyInputs, explain_served
from webhook.readmodel.fetch import load_snapshot
from webhook.readmodel.served import NOT_DECIDED
from webhook.readmodel.view import KindSource, Snapshot, ViewContext, job_views
from webhook.readmodel.waiting import pass_inputs
from webhook.workloads.base import value_at


def _backoff(obj: Obj) -> dict[str, Any]:
    noted: dict[str, Any] = copy.deepcopy(dict(obj))
    note = BackoffNote(attempts=1, reason="Unschedulable", category="unschedulable", retry_at=NOW + 60,
                       failed_at=NOW - 10, spec=spec_fingerprint(noted))
    noted["metadata"].setdefault("annotations", {})[BACKOFF_ANNOTATION] = encode_backoff(note)
    return noted


def _inputs(snapshot: Snapshot, name: str, explained: Mapping[WorkloadKey, bytes] | None,
            obj: Obj | None = None) -> WhyInputs:
    assert snapshot.tree is not None
    views = job_views(snapshot)
    tracked, loose, protected = pass_inputs(snapshot, views)
    decisions = decide.decide(snapshot.tree, tracked, snapshot.queues, oversell_rate=Fraction(1),
                              strict_priority=False, now=NOW, loose=loose, protected=protected)
    record = PassRecord(snapshot.tree, tracked, loose, protected, decisions, NOW)
    found: list[tuple[KindSource, Obj, TrackedJob | str | None, int]] = [
        (source, obj or job, None, 0) for source, job in snapshot.jobs
        if namespace_of(job) == "user-a" and name_of(job) == name]
    context = ViewContext(snapshot.tree, snapshot.priority_classes, snapshot.devices, NOW)
    return WhyInputs(found, context, record, Fraction(1), "--oversellrate", {}, explained)


def _snapshot() -> Snapshot:
    snapshot = load_snapshot(seed_api(), None, now=NOW, complete=True)
    assert snapshot.tree is not None and snapshot.tree_pods is not None
    return snapshot


def test_a_waiting_job_the_last_refresh_did_not_see_is_left_to_kq() -> None:
    snapshot = _snapshot()
    answer = explain_served(_inputs(snapshot, "pi2", {}), "user-a", "pi2")
    assert answer.code == 200 and value_at(answer.body, "unexplained", "reason") == NOT_DECIDED
    assert "why" not in answer.body


def test_a_waiting_job_gets_the_refreshs_estimate_and_what_it_rests_on() -> None:
    snapshot = _snapshot()
    views = job_views(snapshot)
    estimates = estimate_snapshot(snapshot, views, Fraction(1), False)
    packed = {key: pack_estimate(found) for key, found in estimates.by_key.items()}
    answer = explain_served(_inputs(snapshot, "pi2", packed), "user-a", "pi2")
    assert value_at(answer.body, "why", "estimateBasis", "source") == "replay", answer.body


def test_a_job_in_backoff_on_a_replica_that_does_not_estimate_is_left_to_kq() -> None:
    snapshot = _snapshot()
    pi2 = next(obj for _, obj in snapshot.jobs if name_of(obj) == "pi2")
    answer = explain_served(_inputs(snapshot, "pi2", {}, _backoff(pi2)), "user-a", "pi2")
    assert value_at(answer.body, "job", "status") == "BACKOFF"
    assert value_at(answer.body, "unexplained", "reason") == NOT_DECIDED


def test_with_the_estimates_off_the_answer_says_so() -> None:
    snapshot = _snapshot()
    pi2 = next(obj for _, obj in snapshot.jobs if name_of(obj) == "pi2")
    answer = explain_served(_inputs(snapshot, "pi2", None, _backoff(pi2)), "user-a", "pi2")
    assert value_at(answer.body, "why", "status") == "BACKOFF"
    assert ESTIMATES_OFF in " ".join(str(value_at(answer.body, "why", "explanation")).split())
