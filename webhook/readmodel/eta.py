"""When a waiting job should start, as ``kq why``, ``kq list`` and the console say it (docs/eta.md).

``kq why`` computes the estimate itself when it can read every job and pod of the tree (the snapshot its answer
already rests on, :func:`webhook.readmodel.waiting.pass_inputs`): the core's estimator
(:func:`webhook.core.eta.estimate`) over it, with the run-time history the controller keeps in the Queues'
status. Otherwise, and in ``kq list``, it shows what the controller published on the job's Queue
(``estimatedStart``, ``estimatedStartLatest``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Required, TypedDict

from webhook.api.names import EXPECTED_RUNTIME_ANNOTATION
from webhook.api.objects import (
    RAN_PHASES,
    Obj,
    parse_time,
    pod_phase,
    pod_status,
    queue_active,
    queue_details,
    rfc3339_seconds,
)
from webhook.core.decide import RECLAIM_TRIES_PER_QUOTA, leaf_policies
from webhook.core.eta import Estimate, Estimates, Why, estimate
from webhook.core.eta_replay import Basis, ReplayInput
from webhook.core.handoff import NO_HANDOFF, Handoff, HandoffHistory
from webhook.core.quota import queue_name
from webhook.core.runtimes import Runtime, RuntimeHistory, Source, restore_items, running_since
from webhook.core.workload import Phase, WorkloadKey
from webhook.readmodel.view import JobView, Snapshot
from webhook.workloads.runtime import job_runtime

__all__ = ["EstimateBasis", "EtaFields", "EtaReport", "about", "estimate_job", "estimate_snapshot", "eta_fields",
           "eta_lines", "published_estimates", "published_report", "replay_report"]

Published = dict[tuple[str, str, str], tuple[float | None, float | None]]
"""``(kind, namespace, name)`` -> the controller's ``(estimatedStart, estimatedStartLatest)``."""


@dataclass(frozen=True, slots=True)
class EtaReport:
    """A waiting job's estimate and where it came from: ``replay`` (computed here), ``queue-status`` (the
    controller's), or ``none`` (with ``problem``)."""

    source: str
    estimate: Estimate | None = None
    start: float | None = None
    latest: float | None = None
    problem: str = ""
    waits_for: tuple[str, ...] = field(default=())
    handoff: Handoff = NO_HANDOFF
    """The control plane's time per turn the replay added."""
    own_samples: int | None = None
    """How many completed jobs its own run time rests on, when its run time carries no samples (an estimate the
    controller kept packed); ``None``: count them."""

    @property
    def samples(self) -> int:
        """How many completed jobs its own run time rests on."""
        if self.own_samples is not None:
            return self.own_samples
        return len(self.estimate.runtime.samples) if self.estimate is not None else 0


class RuntimeBasis(TypedDict, total=False):
    """``estimateBasis.ownRuntime``: where the job's own run time comes from (the figures when known)."""

    source: Required[str]
    p50Seconds: int
    p90Seconds: int
    samples: int
    problem: str


class ControlPlaneSeconds(TypedDict):
    """``estimateBasis.controlPlaneSeconds``: the control plane's time the replay adds to each turn."""

    start: float
    end: float


class EstimateBasis(TypedDict, total=False):
    """``kq why -o json``'s ``estimateBasis``: what the estimate rests on, or why there is none."""

    source: Required[str]
    finishedBefore: int
    completedJobs: int
    historyRuntimes: int
    declaredRuntimes: int
    deadlines: int
    summary: str
    controlPlaneSeconds: ControlPlaneSeconds
    ownRuntime: RuntimeBasis
    unknown: str
    why: str
    waitsFor: list[str]


class EtaFields(TypedDict, total=False):
    """The start estimate's fields of ``kq why -o json`` (the times absent when unknown)."""

    estimatedStart: str
    estimatedStartLatest: str
    estimatedFinish: str
    estimateBasis: EstimateBasis


def published_estimates(queues: Mapping[str, Obj]) -> Published:
    """What the controller wrote on its Queues' ``status.queueItemDetails.active`` items."""
    out: Published = {}
    for queue in queues.values():
        details = queue_details(queue)
        for item in queue_active(details) if details is not None else ():
            key = (str(item.get("kind") or "Job"), str(item.get("namespace") or ""), str(item.get("name") or ""))
            start, latest = parse_time(item.get("estimatedStart")), parse_time(item.get("estimatedStartLatest"))
            if start is not None or latest is not None:
                out[key] = (start, latest)
    return out


def about(seconds: float) -> str:
    """``40 s``, ``12 min``, ``3 h 20 min``, ``2 d 4 h``: a rounded span of time."""
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{round(seconds)} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, rest = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {rest} min" if rest and hours < 10 else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours and days < 10 else f"{days} d"


def _history(snapshot: Snapshot) -> RuntimeHistory:
    """The run-time history the controller keeps on its Queues (``status.runtimeHistory``)."""
    history = RuntimeHistory()
    tree = snapshot.tree
    if tree is None:
        return history
    for namespace, leaf_key in tree.leaf_by_namespace.items():
        queue = snapshot.queues.get(queue_name(tree.nodes[leaf_key].name, namespace))
        status = queue.get("status") if queue is not None else None
        if isinstance(status, Mapping):
            restore_items(history, namespace, status.get("runtimeHistory"))
    return history


def _running_since(view: JobView) -> float | None:
    """When the job's pods run since (:func:`~webhook.core.runtimes.running_since`), ``None`` when none runs."""
    if not any(pod_phase(pod) == "Running" for pod in view.pods):
        return (view.admitted_at or view.created) if view.running else None
    times = [parse_time(pod_status(pod).get("startTime")) for pod in view.pods
             if pod_phase(pod) in RAN_PHASES]
    since = running_since((moment for moment in times if moment is not None), view.admitted_at)
    return since if since is not None else (view.admitted_at or view.created)


def estimate_snapshot(snapshot: Snapshot, views: Sequence[JobView], rate: Fraction, strict: bool) -> Estimates:
    """Every waiting job's estimate, from a snapshot of every job and pod of the tree (``complete`` and
    ``tree_pods``), with the run-time history the controller keeps on its Queues and the control plane's time per
    turn it keeps on the tree."""
    from webhook.readmodel.waiting import pass_inputs  # noqa: PLC0415

    tree = snapshot.tree
    assert tree is not None
    tracked, loose, protected = pass_inputs(snapshot, views)
    history = _history(snapshot)
    handoff = HandoffHistory()
    handoff.restore_status(snapshot.tree_obj.get("status") if snapshot.tree_obj is not None else None)
    runtimes: dict[WorkloadKey, Runtime] = {}
    running: dict[WorkloadKey, float] = {}
    for other in views:
        job = other.tracked
        if job is None or job.workload.phase is Phase.FINISHED:
            continue
        runtimes[job.workload.key] = job_runtime(job.obj, job.workload.key.kind, history, job.leaf.namespaces,
                                                 job.adapter)
        since = _running_since(other) if job.workload.phase is Phase.ADMITTED else None
        if since is not None:
            running[job.workload.key] = since
    policies = leaf_policies(tree, snapshot.queues, strict)
    given = ReplayInput(tree, tracked, policies, rate, snapshot.now, runtimes, running, loose, protected,
                        frozenset(), RECLAIM_TRIES_PER_QUOTA, handoff.figure())
    return estimate(given)


def estimate_job(snapshot: Snapshot, views: Sequence[JobView], view: JobView, rate: Fraction,
                 strict: bool) -> EtaReport:
    """The estimate of a waiting job: replayed here from the whole snapshot when there is one, else the
    controller's from its Queue's status."""
    tree = snapshot.tree
    if tree is None or view.workload is None:
        return EtaReport("none", problem="there is no usable quota tree")
    if not (snapshot.complete and snapshot.tree_pods is not None):
        return published_report(
            published_estimates(snapshot.queues).get((view.kind, view.namespace, view.name), (None, None)),
            "kq cannot read every job and pod of the tree to replay the queue, and the controller has published "
            "no estimate for it on its Queue")
    estimates = estimate_snapshot(snapshot, views, rate, strict)
    found = estimates.by_key.get(view.key)
    if found is None:
        return EtaReport("none", problem="the replay does not hold this job")
    return replay_report(found, estimates.handoff)


def replay_report(found: Estimate, handoff: Handoff, own_samples: int | None = None) -> EtaReport:
    """The report of an estimate the replay made (here, or by the controller and kept packed: ``own_samples``
    then counts its run time's samples)."""
    return EtaReport("replay", found, found.start, found.latest,
                     waits_for=tuple(str(key) for key in found.unknown_jobs), handoff=handoff, own_samples=own_samples)


def published_report(times: tuple[float | None, float | None], problem: str) -> EtaReport:
    """The controller's published ``(estimatedStart, estimatedStartLatest)`` of a job as a report; ``problem``
    says why there is none when neither is known."""
    start, latest = times
    if start is None and latest is None:
        return EtaReport("none", problem=problem)
    return EtaReport("queue-status", start=start, latest=latest)


def _basis_text(basis: Basis) -> str:
    """``from the run times of 14 completed jobs like the 5 that end before it and the declared run times of 2
    more``: what the jobs that end before it in the replay rested on."""
    parts = []
    if basis.samples:
        parts.append(f"the run times of {basis.samples} completed job{'s' if basis.samples != 1 else ''} like the "
                     f"{basis.history} that end{'s' if basis.history == 1 else ''} before it")
    if basis.declared:
        more = " more" if parts else ""
        parts.append(f"the declared run time{'s' if basis.declared != 1 else ''} of {basis.declared}{more}")
    if basis.deadline:
        parts.append(f"the deadline{'s' if basis.deadline != 1 else ''} of {basis.deadline}")
    if not parts:
        return "no job needs to end first"
    return "from " + " and ".join(parts)


def _handoff_text(handoff: Handoff, basis: Basis) -> str:
    """``, with 1.2 s of the control plane's time per turn``: what the replay added to each turn before it."""
    turn = handoff.start + handoff.end
    return f", with {turn:.1f} s of the control plane's time per turn" if basis.finished and turn >= 0.05 else ""


def _own(runtime: Runtime, samples: int) -> str:
    if runtime.source is Source.DECLARED:
        return f"it declares a run time of {about(runtime.p50 or 0)}"
    if runtime.source in (Source.NAMESPACE, Source.QUEUE):
        where = "its namespace" if runtime.source is Source.NAMESPACE else "its queue"
        return f"jobs like it in {where} ran {about(runtime.p50 or 0)} ({samples} completed)"
    if runtime.source is Source.DEADLINE:
        return f"its deadline stops it within {about(runtime.p90 or 0)}"
    return ""


_WHY = {
    Why.UNKNOWN_RUNTIMES: "it waits for jobs whose run time nobody knows yet",
    Why.BEYOND: "it is not started within the replay's horizon (30 days, or its budget of passes)",
    Why.NEVER_FITS: "its request alone is over a limit of its quota",
    Why.GAVE_UP: "it gave up after its failed starts",
    Why.HELD: "it is held: its PriorityClass does not exist",
    Why.CLOSING: "its namespace is being deleted",
    Why.NO_QUOTA: "its namespace is in no quota",
    Why.NOT_STARTED: "the replay never starts it (its pods could never run within its quota's max)",
}


def eta_lines(report: EtaReport, now: float) -> list[str]:
    """The sentences ``kq why`` prints about when the job should start."""
    start, latest = report.start, report.latest
    found = report.estimate
    lines = []
    if start is not None:
        early, late = about(start - now), about(latest - now) if latest is not None else ""
        around = f" ({early} to {late})" if late and late != early else ""
        basis = f", {_basis_text(found.basis)}{_handoff_text(report.handoff, found.basis)}" if found is not None \
            else " (the controller's estimate)"
        when = "at the controller's next pass" if start - now < 1 else f"in about {early}{around}, at about " \
            f"{rfc3339_seconds(start)}"
        lines.append(f"Expected to start {when}{basis}.")
        if found is not None and found.finish is not None:
            own = _own(found.runtime, report.samples)
            lines.append(f"Expected to finish about {about(found.finish - now)} from now: {own}.")
        elif found is not None and found.runtime.problem:
            lines.append(f"Its own run time is unknown: {found.runtime.problem}.")
        return lines
    if report.source == "none":
        return [f"No estimate of when it starts: {report.problem}."]
    why = _WHY.get(found.why, "") if found is not None else "the controller has only a latest time"
    text = f"No estimate of when it starts: {why}"
    if report.waits_for:
        text += f" ({', '.join(report.waits_for)}); declare {EXPECTED_RUNTIME_ANNOTATION} on such jobs, or wait " \
                "until jobs like them have finished"
    lines.append(text + ".")
    if latest is not None:
        lines.append(f"It should start within about {about(latest - now)} (by {rfc3339_seconds(latest)}), counting "
                     "every run time at its p90 and unknown ones as never ending.")
    return lines


def eta_fields(report: EtaReport) -> EtaFields:
    """``kq why -o json``'s ``estimatedStart``, ``estimatedStartLatest`` (absent when unknown) and
    ``estimateBasis``."""
    out: EtaFields = {}
    if report.start is not None:
        out["estimatedStart"] = rfc3339_seconds(report.start)
    if report.latest is not None:
        out["estimatedStartLatest"] = rfc3339_seconds(report.latest)
    basis: EstimateBasis = {"source": report.source}
    found = report.estimate
    if found is not None:
        if found.finish is not None:
            out["estimatedFinish"] = rfc3339_seconds(found.finish)
        runtime = found.runtime
        own: RuntimeBasis = {"source": runtime.source.value}
        if runtime.p50 is not None:
            own["p50Seconds"] = round(runtime.p50)
        if runtime.p90 is not None:
            own["p90Seconds"] = round(runtime.p90)
        if report.samples:
            own["samples"] = report.samples
        if runtime.problem:
            own["problem"] = runtime.problem
        basis.update({
            "finishedBefore": found.basis.finished,
            "completedJobs": found.basis.samples,
            "historyRuntimes": found.basis.history,
            "declaredRuntimes": found.basis.declared,
            "deadlines": found.basis.deadline,
            "summary": _basis_text(found.basis),
            "controlPlaneSeconds": {"start": round(report.handoff.start, 3), "end": round(report.handoff.end, 3)},
            "ownRuntime": own,
        })
        if found.why is not Why.NONE:
            basis["unknown"] = found.why.value
            basis["why"] = _WHY.get(found.why, "")
    if report.problem:
        basis["unknown"] = "not-computed"
        basis["why"] = report.problem
    if report.waits_for:
        basis["waitsFor"] = list(report.waits_for)
    out["estimateBasis"] = basis
    return out
