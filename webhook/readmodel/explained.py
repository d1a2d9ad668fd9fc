"""``kq why`` as the controller answers it (docs/queueing.md, "Why a job waits, from the controller").

``kq why`` computed locally reads every job and pod of the cluster and runs the controller's pass over them,
some ten seconds at 50,000 jobs. The controller has both at hand: its caches hold every job, and its last pass
says where each waiting job stands and why. The read API's ``get`` of one job summary adds that answer, made
by the read model's own rules (:func:`webhook.readmodel.explain.answer_waiting`,
:func:`webhook.readmodel.waiting.report_from_pass`) over the last pass, with the start estimate the controller
keeps from its last refresh. The answer is the pass's and the refresh's, so a job that either has not seen yet,
or a replica that makes neither, gets no answer here, and ``kq`` computes it itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

from webhook.api.names import JOB_SUMMARY_KIND
from webhook.api.objects import Doc, Obj, meta, rfc3339_seconds
from webhook.api.statuses import JobStatus
from webhook.controller.decide import PassRecord
from webhook.controller.model import TrackedJob
from webhook.core.eta_pack import unpack_estimate
from webhook.core.handoff import NO_HANDOFF, Handoff
from webhook.core.workload import WorkloadKey
from webhook.readmodel.explain import AHEAD_SHOWN, WaitSources, answer_json, answer_waiting
from webhook.readmodel.jobs import job_summary
from webhook.readmodel.served import NOT_DECIDED, NOT_WAITING
from webhook.readmodel.summaries import API_VERSION
from webhook.readmodel.view import KindSource, ViewContext, job_view

if TYPE_CHECKING:
    from webhook.readmodel.eta import EtaReport
    from webhook.readmodel.waiting import WaitReport

ESTIMATES_OFF = "the controller makes no start estimates (--eta-interval 0); kq why --direct replays the queue"


@dataclass(frozen=True, slots=True)
class WhyInputs:
    """What the answer reads, taken on the controller's loop (references only)."""

    found: Sequence[tuple[KindSource, Obj, TrackedJob | str | None, int]]
    """Every cached job of the name in the namespace: its kind, object, sizing by the controller and running
    pods."""
    context: ViewContext
    record: PassRecord | None
    """The last pass this replica made (``None``: it makes none)."""
    rate: Fraction
    rate_source: str
    estimates: Mapping[WorkloadKey, Mapping[str, str]]
    """The start estimates the controller publishes (``estimatedStart``, ``estimatedStartLatest``)."""
    explained: Mapping[WorkloadKey, bytes] | None = None
    """Its last refresh's whole estimates, packed (empty on a replica that does not lead; ``None``: the controller
    makes none, ``--eta-interval 0``)."""
    turn: Handoff = NO_HANDOFF
    """The control plane's time per turn that refresh added."""


@dataclass(frozen=True, slots=True)
class Explained:
    """The read API's answer: an HTTP status and its body."""

    code: int
    body: Doc


class _Undecided(Exception):
    """The last pass, or the last refresh of the start estimates, did not see the job."""


def failure(code: int, reason: str, message: str) -> Explained:
    """A Kubernetes ``Status`` of failure, as the read API answers every refusal."""
    return Explained(code, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": message, "reason": reason, "code": code})


def _decided(record: PassRecord | None, key: WorkloadKey) -> bool:
    if record is None:
        return False
    decisions = record.decisions
    return key in decisions.positions or any(
        job.workload.key == key for job in (*decisions.admissions, *decisions.late_admissions)
    ) or any(plan.preemptor.workload.key == key for plan in decisions.reclaims)


def served_estimate(inputs: WhyInputs, key: WorkloadKey) -> EtaReport:
    """The job's estimate as the controller's last refresh made it (:func:`_Undecided` when that refresh did not
    see the job yet: ``kq`` replays the queue itself)."""
    from webhook.readmodel.eta import EtaReport, replay_report  # noqa: PLC0415

    if inputs.explained is None:
        return EtaReport("none", problem=ESTIMATES_OFF)
    blob = inputs.explained.get(key)
    if blob is None:
        raise _Undecided
    found, samples = unpack_estimate(blob)
    return replay_report(found, inputs.turn, samples)


def explain_served(inputs: WhyInputs, namespace: str, name: str, kind: str | None = None, *, width: int = 100,
                   ahead: int = AHEAD_SHOWN) -> Explained:
    """The summary of job ``name`` (of ``kind`` when given) with why it waits, or a ``Status``: 404 when there is
    no such job, 409 when the name is that of jobs of several kinds."""
    from webhook.readmodel.waiting import report_from_pass  # noqa: PLC0415

    found = [entry for entry in inputs.found if kind is None or entry[0].adapter.kind.lower() == kind.lower()]
    if not found:
        return failure(404, "NotFound", f"no job named {name} in namespace {namespace}")
    if len(found) > 1:
        kinds = " and ".join(f"a {entry[0].adapter.kind}" for entry in found)
        return failure(409, "Conflict", f"{name} is {kinds} in namespace {namespace}: give its kind")
    source, obj, sized, running = found[0]
    context, record = inputs.context, inputs.record
    view = job_view(source, obj, (), running, context, sized=sized)
    if record is not None and view.workload is not None and view.status == JobStatus.QUEUING:
        view = dataclasses.replace(view, position=record.decisions.positions.get(view.key), position_source="status")
    estimates = inputs.estimates.get(view.key)
    summary = {**job_summary(view), **(estimates or {})}
    body: Doc = {
        "apiVersion": API_VERSION,
        "kind": JOB_SUMMARY_KIND,
        "metadata": {"name": view.name, "namespace": view.namespace, "uid": str(meta(obj).get("uid") or "")},
        "job": summary,
    }
    if record is not None:
        body["decidedAt"] = rfc3339_seconds(record.now)

    def wait() -> WaitReport:
        if record is None or not _decided(record, view.key):
            raise _Undecided
        return report_from_pass(record, view, inputs.rate, inputs.rate_source)

    sources = WaitSources(
        classes=context.priority_classes,
        tree_known=context.tree is not None,
        wait=wait,
        eta=lambda: served_estimate(inputs, view.key),
        events=(),
    )
    try:
        answer = answer_waiting(view, context.now, width, sources, ahead)
    except _Undecided:
        body["unexplained"] = {"reason": NOT_DECIDED, "message": "the controller has not decided on this job yet "
                               "(it is new to its last pass or to its start estimates, or this replica does not "
                               "decide)"}
        return Explained(200, body)
    if answer is None:
        body["unexplained"] = {"reason": NOT_WAITING, "message": f"the job is {view.status.value}, not waiting "
                               "in a queue"}
        return Explained(200, body)
    body["why"] = answer_json(answer, view)
    return Explained(200, body)

