"""Why a job waits, as ``kq why`` prints it and the console's job page shows it, computed with the decision
core from a snapshot.

For a job in BACKOFF (it did not start in time): why, how many attempts, when it retries. For a QUEUING
job: the controller's admission pass is run on the snapshot (the tree, every job's admission
record, the Queues' policies, the oversell rate), which gives the job's position, every quota level and
resource that blocks it (request, used, limit and the shortfall), who is ahead of it, and whether reclaim
could make room. Other states get a plain answer: admitted but pods pending (with the scheduler's reason),
running, finished, held in a namespace kube-queue does not manage, or not found (with suggestions).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Required, TypedDict

from webhook.api.names import CONTROLLER_COMPONENT, QUEUE_NAMESPACE, REASON_QUEUED
from webhook.api.objects import Obj, conditions_of, event_time, involved_object, meta
from webhook.api.statuses import FINAL, STARTED, JobStatus
from webhook.core.startup import creation_refusal
from webhook.readmodel.pod_waits import (
    PendingReason,
    PodsWaiting,
    PodWait,
    newest_held,
    newest_refusals,
    pending_reasons,
    pods_waiting_json,
    refusal_line,
)

if TYPE_CHECKING:
    from webhook.readmodel.eta import EstimateBasis, EtaReport
    from webhook.readmodel.jobs import PodCounts
    from webhook.readmodel.view import JobView, Snapshot
    from webhook.readmodel.waiting import WaitReport


def _who(view: JobView) -> str:
    return f"{view.kind} {view.namespace}/{view.name}"


def blockers_table(report: WaitReport, width: int) -> str:
    """QUOTA, RESOURCE, REQUEST, USED, LIMIT, MAX, SHORT (``used + request - limit``) per blocker."""
    from webhook.core.fit import BlockerKind  # noqa: PLC0415
    from webhook.readmodel.output import Column, quantity, resource_name, table  # noqa: PLC0415

    columns = [
        Column("QUOTA", shrink=1, min_width=10),
        Column("RESOURCE", shrink=2),
        Column("REQUEST", right=True),
        Column("USED", right=True),
        Column("LIMIT", right=True),
        Column("MAX", right=True),
        Column("SHORT", right=True),
    ]
    rows = []
    for blocker in report.blockers:
        name = blocker.resource
        cap = blocker.max if blocker.max is not None else blocker.limit
        short = blocker.used + blocker.request - blocker.limit
        rows.append(
            [
                blocker.quota,
                resource_name(name),
                quantity(name, blocker.request),
                quantity(name, blocker.used),
                quantity(name, blocker.limit),
                quantity(name, cap) if blocker.kind == BlockerKind.MAX else "-",
                quantity(name, short),
            ]
        )
    return table(columns, rows, width)


AHEAD_SHOWN = 20
"""Jobs ahead listed by ``kq why`` unless ``--ahead`` says otherwise (a deep queue would print thousands)."""


def ahead_table(report: WaitReport, width: int, limit: int = 0) -> str:
    """POSITION, JOB, KIND, PRIORITY, REQUEST of the jobs ahead: the ``limit`` nearest the head (0: all)."""
    from webhook.readmodel.output import Column, describe, table  # noqa: PLC0415

    columns = [
        Column("POSITION", right=True),
        Column("JOB", shrink=1, min_width=12),
        Column("KIND"),
        Column("PRIORITY", right=True),
        Column("REQUEST", shrink=2, min_width=12),
    ]
    shown = report.ahead[:limit] if limit > 0 else report.ahead
    rows = [
        [str(position), f"{w.key.namespace}/{w.key.name}", w.key.kind, str(w.priority), describe(w.request)]
        for position, w in shown
    ]
    return table(columns, rows, width)


def _last_queued(view: JobView, events: Sequence[Obj]) -> Obj | None:
    from webhook.readmodel.waiting import controller_events  # noqa: PLC0415

    uid = meta(view.obj).get("uid")
    for event in controller_events(events):
        target = involved_object(event)
        if target.get("name") == view.name and (not uid or target.get("uid") in (None, uid)):
            if event.get("reason") == REASON_QUEUED:
                return event
            return None  # a newer Admitted/Evicted event: the Queued one is out of date
    return None


def _overhead_note(obj: Obj) -> str:
    """What the request holds besides the templates' containers: the pod overhead of the RuntimeClass its
    templates name, as the webhook recorded it (docs/queueing.md, "RuntimeClass overhead")."""
    from webhook.workloads.overhead import recorded  # noqa: PLC0415

    overheads = recorded(obj)
    if not overheads:
        return ""
    named = "; ".join(f"{name}: {', '.join(f'{resource} {amount}' for resource, amount in sorted(fixed.items()))}"
                      for name, fixed in sorted(overheads.items()))
    return f", with each pod's RuntimeClass overhead ({named})"


def explain_queuing(
    report: WaitReport, events: Sequence[Obj], now: float, width: int, ahead: int = AHEAD_SHOWN, *,
    eta: Sequence[str] = (),
) -> str:
    """The answer for a QUEUING job whose quota is known (at most ``ahead`` jobs ahead listed; 0: all), with the
    sentences ``eta`` says about when it should start (docs/eta.md)."""
    from webhook.core.rate import format_rate  # noqa: PLC0415
    from webhook.readmodel.output import age, describe, wrap  # noqa: PLC0415

    view = report.job
    rate = format_rate(report.rate)
    lines: list[str] = []
    place = (
        f"position {report.position} of {report.waiting} in quota {view.quota}"
        if report.position is not None
        else f"quota {view.quota}"
    )
    lines.append(wrap(f"{_who(view)} is QUEUING: {place} (queue {QUEUE_NAMESPACE}/{view.queue}, policy "
                      f"{report.policy.value}).", 2, width))
    if not (report.fits_now or report.by_reclaim):
        lines.extend(wrap(sentence, 2, width) for sentence in eta)
    if view.eviction:
        by = view.eviction.get("by")
        lines.append(wrap(f"It was evicted by reclaim{f' for {by}' if by else ''}: "
                          f"{view.eviction.get('reason', '')}", 2, width))
    request = describe(view.workload.request) if view.workload is not None else "?"
    lines.append(wrap(f"Request: {request}{_overhead_note(view.obj)}.", 2, width))
    lines.append(wrap(f"Oversell rate {rate} (from {report.rate_source}); usage from {report.usage_source}.", 2, width))
    lines.append("")
    if report.by_reclaim:
        lines.append(wrap(
            f"It is admitted at the controller's next pass by reclaim, which makes room for it: {report.reclaim}.",
            2, width))
        return "\n".join(lines)
    if report.fits_now:
        lines.append(wrap(
            "It fits its quota now: the controller admits it at its next pass, within seconds. If it stays "
            f"QUEUING, check that the kube-queue controller runs (kubectl -n {QUEUE_NAMESPACE} get lease "
            f"{CONTROLLER_COMPONENT}) and that the oversell rate above is the controller's.", 2, width))
        return "\n".join(lines)
    reason = report.reason
    if reason is not None and reason.blocked_behind is not None:
        lines.append(wrap(f"It waits behind {reason.blocked_behind}: the queue policy is Block, so the first "
                          "job that does not fit holds back every job after it.", 2, width))
        lines.append(wrap(reason.note, 2, width))
    elif report.blockers:
        lines.append(wrap(
            f"It does not fit: admission needs used + request <= max × {rate} at every quota level, and these "
            "levels are short:", 2, width))
        lines.append(blockers_table(report, width).rstrip("\n"))
        if any(blocker.never_fits for blocker in report.blockers):
            lines.append(wrap(
                "Its request alone is over a limit, so it can never be admitted under this tree: ask for less "
                "(fewer --workers or smaller pods) or ask an operator to raise the quota.", 2, width))
        else:
            levels = dict.fromkeys(blocker.quota for blocker in report.blockers)
            lines.append(wrap(
                f"It starts when jobs of {' and '.join(levels)} finish (or are evicted) and free the "
                "SHORT amounts.", 2, width))
    elif reason is not None:
        lines.append(wrap(reason.explain(), 2, width))
    lines.append("")
    if report.ahead:
        lines.append(f"Ahead of it in quota {view.quota}:")
        lines.append(ahead_table(report, width, ahead).rstrip("\n"))
        rest = len(report.ahead) - ahead if ahead > 0 else 0
        if rest > 0:
            lines.append(wrap(f"... and {rest} more ahead of it (kq why {view.name} -n {view.namespace} --ahead 0 "
                              "lists them all; kq list --status QUEUING shows the queue).", 2, width))
    else:
        lines.append(f"Nobody is ahead of it in quota {view.quota}.")
    if report.fairness:
        lines.append(wrap(report.fairness[0].upper() + report.fairness[1:] + ".", 2, width))
    lines.append("")
    verdict = "could help" if report.reclaim_possible else "cannot help"
    lines.append(wrap(f"Reclaim {verdict}: {report.reclaim}.", 2, width))
    queued = _last_queued(view, events)
    if queued is not None:
        lines.append("")
        stamp = event_time(queued)
        lines.append(wrap(f"The controller said {age(stamp, now)} ago: {queued.get('message', '')}", 2, width))
    return "\n".join(lines)


def explain_backoff(view: JobView, now: float, width: int) -> str:
    """The answer for a job in BACKOFF: it was released, its pods did not run in time, it was held again."""
    from webhook.api.objects import rfc3339_seconds  # noqa: PLC0415
    from webhook.readmodel.output import human_age, wrap  # noqa: PLC0415

    note = view.backoff
    assert note is not None
    lines = [wrap(f"{_who(view)} is in BACKOFF in quota {view.quota} (queue {QUEUE_NAMESPACE}/{view.queue}): it was "
                  f"released, but its pods did not run within the start timeout, so it was held again and its "
                  f"quota went to the jobs behind it.", 2, width)]
    lines.append(wrap(f"Why it did not start ({note.category}): {note.reason}", 2, width))
    tries = f"{note.attempts} failed start{'s' if note.attempts != 1 else ''}"
    if note.gave_up:
        lines.append(wrap(f"It gave up after {tries} (GaveUp): it stays held until you change it (fix what the "
                          "reason says, e.g. its nodeSelector, image or size) or delete and resubmit it.", 2, width))
    else:
        lines.append(wrap(f"{tries} so far; it queues again at its original place at "
                          f"{rfc3339_seconds(note.retry_at)} (in {human_age(max(0.0, note.retry_at - now))}). "
                          "Changing the job starts it afresh.", 2, width))
    return "\n".join(lines)


def explain_other(view: JobView, snapshot: Snapshot, now: float, width: int,
                  reasons: Sequence[PendingReason] = (), *, refusal: str | None = None) -> str:
    """The answer for a job that does not wait in a queue (or whose quota cannot be read); ``reasons``: why its
    pods that do not run wait (:func:`~webhook.readmodel.pod_waits.pending_reasons`); ``refusal``: what its
    operator was told when it could not create some (:func:`refused_pods`)."""
    from webhook.readmodel.output import age, describe, wrap  # noqa: PLC0415

    who = _who(view)
    admitted = ""
    if view.admitted_at:
        admitted = f"admitted by quota {view.quota} {age(view.admitted_at, now)} ago"
    elif view.quota:
        admitted = f"released in quota {view.quota}"
    request = f" (request {describe(view.workload.request)})" if view.workload is not None else ""
    if view.status in FINAL:
        text = f"{who} has finished: {view.status}."
        for condition in conditions_of(view.obj):
            if condition.get("status") == "True" and condition.get("type") in ("Failed", "Complete", "Succeeded"):
                message = condition.get("message") or condition.get("reason") or ""
                when = condition.get("lastTransitionTime")
                text += f" {condition.get('type')}" + (f" at {when}" if when else "")
                text += f": {message}" if message else ""
                text = text.rstrip(".") + "."
                break
        return wrap(text + " Nothing holds it any more; its quota is free again.", 2, width)
    if view.status == JobStatus.SUSPENDED:
        return wrap(
            f"{who} is suspended, and namespace {view.namespace} is not managed by kube-queue (no leaf of the "
            "ElasticQuotaTree lists it), so nothing will release it: set its suspend field to false, or ask an "
            "operator to add the namespace to a quota.", 2, width)
    unmanaged = (
        "" if view.queue else f" Namespace {view.namespace} is not managed by kube-queue: its jobs are not queued."
    )
    if view.status == JobStatus.RUNNING:
        running = wrap(f"{who} is RUNNING{': ' + admitted if admitted else ''}{request}; {view.running} of "
                       f"{view.expected} pods run. Nothing holds it.{unmanaged}", 2, width)
        held = [reason for reason in reasons if reason.kind is PodWait.HELD]
        return "\n".join([running, *(["More pods of it are held by the queue, past its admission:"] if held else []),
                          *(wrap(f"{', '.join(reason.names)}: {reason.text}", 4, width, lead="  ") for reason in held)])
    if view.status == JobStatus.PENDING:
        lines = [wrap(f"{who} is PENDING{': ' + admitted if admitted else ''}{request}; {view.running} of "
                      f"{view.expected} pods run.{unmanaged}", 2, width)]
        if refusal is not None:
            which = "them" if not view.pods else "the others"
            lines.append(wrap(f"Its operator could not create {which}: {refusal}. Unless that changes, the start "
                              "timeout holds it again and its quota goes to the jobs behind it.", 2, width))
        if not view.pods and refusal is None:
            lines.append(wrap("Its pods are being created.", 2, width))
        elif reasons:
            lines.append("The other pods wait:")
            for reason in reasons:
                count = reason.count
                lines.append(wrap(f"{count} pod{'s' if count != 1 else ''}: {reason.text}", 4, width, lead="  "))
                lines += filter(None, [refusal_line(reason, now, width)])
            if any(reason.kind == PodWait.POD_QUOTA for reason in reasons):
                lines.append(wrap(
                    "The queue admitted more than the quota's max (oversell rate above 1); the scheduler keeps "
                    "running pods within max, so these pods start as others finish.", 2, width))
        return "\n".join(lines)
    # QUEUING without a usable tree (or not sized).
    problem = snapshot.problem or (
        "no ElasticQuotaTree exists (deleted, or being re-created), so kube-queue holds the jobs of the namespaces "
        "it manages until a tree lists their namespace again"
    )
    if view.size_error:
        problem = f"kube-queue cannot size it: {view.size_error}"
    text = f"{who} is QUEUING"
    if view.position is not None:
        text += f" at position {view.position} in quota {view.quota}"
    lines = [wrap(f"{text}. The exact reason cannot be computed: {problem}.", 2, width)]
    queued = _last_queued(view, snapshot.events)
    if queued is not None:
        said = f"The controller said {age(event_time(queued), now)} ago: {queued.get('message', '')}"
        lines += ["", wrap(said, 2, width)]
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class Answer:
    """``kq why``'s answer: its text, and what it rests on (for ``-o json``)."""

    text: str
    wait: WaitReport | None = None
    eta: EtaReport | None = None
    pods_waiting: Sequence[PendingReason] | None = None
    """Why its pods that do not run wait, with the extender's refusals of their preemption (``None``: not read;
    ``-o json`` then groups the pods alone)."""
    pods_refused: str | None = None
    """What its operator was told the last time it could not create one of its pods (:func:`refused_pods`)."""


def answer_job(
    snapshot: Snapshot,
    views: Sequence[JobView],
    view: JobView,
    now: float,
    width: int,
    *,
    oversellrate: Fraction | None = None,
    ahead: int = AHEAD_SHOWN,
) -> Answer:
    """The whole answer of ``kq why`` for ``view`` (read with ``complete`` and ``with_events``), whatever its
    state, with when it should start when it waits (docs/eta.md). Its ``text`` is what the web console shows."""
    from webhook.readmodel.eta import estimate_job  # noqa: PLC0415
    from webhook.readmodel.waiting import explain_wait, oversell_rate, strict_priority  # noqa: PLC0415

    rate, source = oversell_rate(oversellrate, snapshot.tree_obj, snapshot.queues)
    waiting = answer_waiting(
        view, now, width, WaitSources(
            # An empty map means the classes could not be read (every cluster has the two system classes).
            classes=snapshot.priority_classes,
            tree_known=snapshot.tree is not None,
            wait=lambda: explain_wait(snapshot, views, view, rate, source),
            eta=lambda: estimate_job(snapshot, views, view, rate, strict_priority(snapshot.queues)),
            events=snapshot.events,
        ), ahead)
    if waiting is not None:
        return waiting
    reasons = pending_reasons(view.pods, newest_refusals(snapshot.pod_events), newest_held(snapshot.events))
    refusal = refused_pods(view, snapshot)
    return Answer(explain_other(view, snapshot, now, width, reasons, refusal=refusal), pods_waiting=reasons,
                  pods_refused=refusal)


def refused_pods(view: JobView, snapshot: Snapshot) -> str | None:
    """What a released job's operator was told the last time it could not create one of its pods since the
    admission, when some are not there (:attr:`Snapshot.job_events`; ``None``: none)."""
    if not view.short_of_pods:
        return None
    return creation_refusal(snapshot.job_events, str(meta(view.obj).get("uid") or ""), (view.admitted_at or 0.0) - 1)


@dataclass(frozen=True, slots=True)
class WaitSources:
    """Where the answer for a waiting job comes from: ``kq``'s own snapshot, or the controller's last pass."""

    classes: Mapping[str, int]
    """The PriorityClasses (empty: unknown, nothing is said of a missing one)."""
    tree_known: bool
    wait: Callable[[], WaitReport]
    """Where a QUEUING job stands and why."""
    eta: Callable[[], EtaReport]
    """When it should start."""
    events: Sequence[Obj]
    """The job's events (the controller's last word on it)."""


def answer_waiting(
    view: JobView, now: float, width: int, sources: WaitSources, ahead: int = AHEAD_SHOWN
) -> Answer | None:
    """The answer for a job that waits in a queue (in BACKOFF, held, or QUEUING under a known quota); ``None``
    for a job in another state."""
    from webhook.controller.model import held_reason, missing_priority_class  # noqa: PLC0415
    from webhook.readmodel.eta import eta_lines  # noqa: PLC0415

    classes = sources.classes
    missing = missing_priority_class(view.adapter, view.obj, classes) if view.queue and classes else None
    if view.status == JobStatus.BACKOFF and view.backoff is not None:
        text = explain_backoff(view, now, width)
        if view.backoff.gave_up or not sources.tree_known:
            return Answer(text)
        from webhook.readmodel.output import wrap  # noqa: PLC0415

        backoff_eta = sources.eta()
        return Answer("\n".join([text, *(wrap(line, 2, width) for line in eta_lines(backoff_eta, now))]),
                      eta=backoff_eta)
    if view.status == JobStatus.QUEUING and missing is not None:
        from webhook.readmodel.output import wrap  # noqa: PLC0415

        return Answer(wrap(f"{_who(view)} is QUEUING in quota {view.quota} but held: {held_reason(missing)}.", 2,
                           width))
    if view.status == JobStatus.QUEUING and sources.tree_known and view.workload is not None and view.leaf:
        report = sources.wait()
        eta: EtaReport | None = None
        if not (report.fits_now or report.by_reclaim):
            eta = sources.eta()
        lines = eta_lines(eta, now) if eta is not None else []
        return Answer(explain_queuing(report, sources.events, now, width, ahead, eta=lines), report, eta)
    return None


class WhyJson(TypedDict, total=False):
    """``kq why -o json`` (:func:`answer_json`)."""

    kind: Required[str]
    namespace: Required[str]
    name: Required[str]
    status: Required[str]
    quota: Required[str | None]
    queue: Required[str | None]
    position: int | None
    waiting: int
    policy: str
    oversellRate: str
    fitsNow: bool
    byReclaim: bool
    blockers: list[str]
    ahead: list[str]
    pods: PodCounts
    podsWaiting: list[PodsWaiting]
    podsNotCreated: str
    estimatedStart: str
    estimatedStartLatest: str
    estimatedFinish: str
    estimateBasis: EstimateBasis
    explanation: str


def answer_json(answer: Answer, view: JobView) -> WhyJson:
    """``kq why -o json``: the job, its status and place, the answer's text, and its start estimate
    (``estimatedStart`` and ``estimatedStartLatest`` in RFC 3339, absent when unknown, and ``estimateBasis``);
    for a released job, its pods and why those that do not run wait (``podsWaiting``: :class:`PodWait`)."""
    from webhook.core.rate import format_rate  # noqa: PLC0415
    from webhook.readmodel.eta import eta_fields  # noqa: PLC0415

    out: WhyJson = {
        "kind": view.kind,
        "namespace": view.namespace,
        "name": view.name,
        "status": view.status.value,
        "quota": view.quota,
        "queue": view.queue,
    }
    wait = answer.wait
    if wait is not None:
        out.update({
            "position": wait.position,
            "waiting": wait.waiting,
            "policy": wait.policy.value,
            "oversellRate": format_rate(wait.rate),
            "fitsNow": wait.fits_now,
            "byReclaim": wait.by_reclaim,
            "blockers": [blocker.explain() for blocker in wait.blockers],
            "ahead": [str(workload.key) for _, workload in wait.ahead],
        })
    elif view.position is not None:
        out["position"] = view.position
    if view.status in STARTED:
        out["pods"] = {"running": view.running, "expected": view.expected}
        reasons = answer.pods_waiting if answer.pods_waiting is not None else pending_reasons(view.pods)
        out["podsWaiting"] = pods_waiting_json(reasons)
        if answer.pods_refused is not None:
            out["podsNotCreated"] = answer.pods_refused
    if answer.eta is not None:
        out = {**out, **eta_fields(answer.eta)}
    out["explanation"] = answer.text
    return out
