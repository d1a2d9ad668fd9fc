"""Jobs as ``kq`` and the console show them: finding one by ``[KIND/]NAME`` (with suggestions when it is not
there), a job as ``-o json`` gives it (its row: :mod:`webhook.readmodel.listing`), and the text of ``kq get``.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import TYPE_CHECKING, NotRequired, TypedDict

from webhook.api.names import QUEUE_NAMESPACE
from webhook.api.objects import (
    Obj,
    created_of,
    event_time,
    meta,
    name_of,
    namespace_of,
    pod_phase,
    pod_spec,
    rfc3339_seconds,
)
from webhook.api.statuses import JobStatus

if TYPE_CHECKING:
    from webhook.readmodel.context import Ctx
    from webhook.readmodel.eta import Published
    from webhook.readmodel.view import JobView, Snapshot

class PodCounts(TypedDict):
    """A job's running pods of those it expects."""

    running: int
    expected: int


class JobSummary(TypedDict):
    """One job of ``kq list -o json|yaml``, as ``kq`` computes it and ``kq serve`` serves it (``position`` is
    left out of what ``kq serve`` keeps: each read adds it; the estimates are absent when unknown)."""

    name: str
    namespace: str
    kind: str
    apiVersion: str
    status: str
    quota: str | None
    queue: str | None
    leaf: str | None
    position: NotRequired[int | None]
    priority: int
    pods: PodCounts
    request: dict[str, str] | None
    created: str | None
    admittedAt: str | None
    estimatedStart: NotRequired[str]
    estimatedStartLatest: NotRequired[str]


def iso(seconds: float | None) -> str | None:
    if not seconds:
        return None
    return rfc3339_seconds(seconds)


# Finding jobs ----------------------------------------------------------------------------------------------------


def split_ref(text: str) -> tuple[str | None, str]:
    """``pytorchjob/mnist`` -> (``pytorchjob``, ``mnist``); ``mnist`` -> (None, ``mnist``)."""
    kind, sep, name = text.rpartition("/")
    return (kind, name) if sep and kind else (None, text)


def find_job(
    ctx: Ctx, ref: str, *, complete: bool = False, with_events: bool = False
) -> tuple[Snapshot, list[JobView], JobView]:
    """The snapshot of the job's namespace, every view in it, and the job named ``ref`` (``[KIND/]NAME``);
    :class:`CliError` with suggestions when there is no such job or the name is ambiguous."""
    from webhook.readmodel.fetch import CliError, JobNotFound, load_snapshot  # noqa: PLC0415
    from webhook.readmodel.view import find_adapter, job_views  # noqa: PLC0415

    kind_text, name = split_ref(ref)
    adapter = None
    if kind_text is not None:
        adapter = find_adapter(kind_text)
        if adapter is None:
            raise CliError(f"unknown kind {kind_text!r}: use job, pytorchjob, tfjob, mpijob, rayjob or pod")
    namespace = ctx.namespace
    snapshot = load_snapshot(ctx.api, [namespace], now=ctx.now(), complete=complete, with_events=with_events)
    views = job_views(snapshot)
    local = [view for view in views if view.namespace == namespace]
    matches = [v for v in local if v.name == name and (adapter is None or v.kind == adapter.kind)]
    if len(matches) == 1:
        found = matches[0]
        if with_events and found.short_of_pods:
            from webhook.readmodel.fetch import job_events  # noqa: PLC0415

            uid = str(meta(found.obj).get("uid") or "")
            snapshot.job_events = job_events(ctx.api, found.namespace, found.name, uid)
        return snapshot, views, found
    if len(matches) > 1:
        kinds = " and ".join(f"a {view.kind}" for view in matches)
        example = f"{matches[0].kind.lower()}/{name}"
        raise CliError(f"{name} is {kinds} in namespace {namespace}: say which, e.g. `kq why {example}`")
    spawner = snapshot.spawned.get((namespace, name))
    owner = [view for view in local if (view.kind, view.name) == spawner] if spawner is not None else []
    if owner and (adapter is None or adapter.kind == "Pod"):  # docs/job-kinds.md, "Spark"
        ctx.note(f"pod {name} belongs to {owner[0].kind} {owner[0].name}, whose driver created it: the queue "
                 f"releases it within that job's admission (its Events say why it is held); showing that job")
        return snapshot, views, owner[0]
    raise JobNotFound(not_found_message(ctx, name, namespace, [v.name for v in local], snapshot))


def not_found_message(ctx: Ctx, name: str, namespace: str, names: Sequence[str], snapshot: Snapshot) -> str:
    """``job pi3 not found in namespace user-a; did you mean pi2? ...`` (or where the job is)."""
    from webhook.readmodel.fetch import ref_of, served_kinds  # noqa: PLC0415
    from webhook.readmodel.kubeapi import ApiError  # noqa: PLC0415

    elsewhere: list[str] = []
    for source in served_kinds(ctx.api):
        if source.adapter.kind == "Pod":
            continue
        try:
            found = ctx.api.list(ref_of(source), None, field_selector=f"metadata.name={name}")
        except ApiError:
            continue
        elsewhere += [namespace_of(o) for o in found if namespace_of(o) != namespace]
    elsewhere.sort()
    message = f"job {name!r} not found in namespace {namespace}"
    if elsewhere:
        return f"{message}; it is in namespace {elsewhere[0]}: add -n {elsewhere[0]}"
    close = difflib.get_close_matches(name, sorted(set(names)), n=3, cutoff=0.5)
    if close:
        return f"{message}; did you mean {' or '.join(close)}? (kq list -n {namespace})"
    if names:
        return f"{message}; its jobs: kq list -n {namespace}"
    return f"{message}, which has no jobs (kq list -A lists every namespace)"


# kq list ------------------------------------------------------------------------------------------------------------


def job_summary(view: JobView, etas: Published | None = None) -> JobSummary:
    """One job of ``kq list -o json|yaml`` (with the controller's start estimate of a waiting job)."""
    start, latest = (etas or {}).get((view.kind, view.namespace, view.name), (None, None))
    start_text, latest_text = iso(start), iso(latest)
    summary: JobSummary = {
        "name": view.name,
        "namespace": view.namespace,
        "kind": view.kind,
        "apiVersion": view.source.api_version,
        "status": view.status.value,
        "quota": view.quota,
        "queue": view.queue,
        "leaf": view.leaf_name,
        "position": view.position,
        "priority": view.priority,
        "pods": {"running": view.running, "expected": view.expected},
        "request": view.request.to_spec() if view.request is not None else None,
        "created": iso(view.created),
        "admittedAt": iso(view.admitted_at),
    }
    if start_text is not None:
        summary["estimatedStart"] = start_text
    if latest_text is not None:
        summary["estimatedStartLatest"] = latest_text
    return summary


# kq get ---------------------------------------------------------------------------------------------------------------


def _status_line(view: JobView) -> str:
    if view.status == JobStatus.QUEUING and view.position is not None:
        return f"QUEUING, position {view.position} in quota {view.quota}"
    if view.status == JobStatus.QUEUING and view.eviction:
        return "QUEUING (evicted by reclaim, back in its queue)"
    if view.status == JobStatus.BACKOFF and view.backoff is not None:
        note = view.backoff
        return f"BACKOFF ({'gave up' if note.gave_up else 'retrying'} after {note.attempts} failed start(s))"
    return view.status.value


def describe_job(view: JobView, snapshot: Snapshot, events: Sequence[Obj], now: float,
                 width: int = 80) -> str:
    """The text of ``kq get JOB``."""
    from webhook.readmodel.output import age, describe, table, wrap  # noqa: PLC0415
    from webhook.readmodel.waiting import leaf_policies  # noqa: PLC0415

    lines: list[str] = []

    def field(label: str, value: str) -> None:
        lines.append(wrap(value, 13, width, lead=f"{label + ':':<13}"))

    field("Name", view.name)
    field("Namespace", view.namespace)
    field("Kind", f"{view.kind} ({view.source.api_version})")
    field("Status", _status_line(view))
    if view.queue:
        policy = ""
        tree = snapshot.tree
        if tree is not None and view.leaf is not None:
            policy = f" (policy {leaf_policies(tree, snapshot.queues)[view.leaf.key].value})"
        field("Queue", f"{QUEUE_NAMESPACE}/{view.queue}{policy}")
    else:
        field("Queue", "- (namespace not managed by kube-queue)")
    field("Quota", view.quota or "-")
    field("Priority", str(view.priority))
    if view.workload is not None:
        pod_sets = [p for p in view.workload.pod_sets if p.count]
        named = len(pod_sets) > 1
        sets = "; ".join(f"{p.name + ': ' if named else ''}{p.count} × {describe(p.per_pod)}" for p in pod_sets)
        field("Request", f"{describe(view.workload.request)}" + (f" ({sets})" if sets else ""))
    elif view.size_error:
        field("Request", f"cannot be sized: {view.size_error}")
    field("Pods", f"{view.running} of {view.expected} running")
    field("Created", f"{iso(view.created)} ({age(view.created, now)} ago)")
    if view.admitted_at:
        field("Admitted", f"{iso(view.admitted_at)} ({age(view.admitted_at, now)} ago)")
    if view.eviction:
        by = view.eviction.get("by")
        field("Evicted", f"{view.eviction.get('reason', '')}" + (f" (for {by})" if by else ""))
    if view.backoff is not None:
        field("Backoff", f"{view.backoff.category}: {view.backoff.reason} (attempt {view.backoff.attempts})")
    if view.pods:
        from webhook.readmodel.output import Column  # noqa: PLC0415

        rows = []
        for pod in sorted(view.pods, key=name_of):
            node = pod_spec(pod).get("nodeName") or "-"
            rows.append([name_of(pod), str(pod_phase(pod) or "-"), str(node), age(created_of(pod), now)])
        cols = [
            Column("POD", shrink=1, min_width=12),
            Column("PHASE"),
            Column("NODE", shrink=2),
            Column("AGE", right=True),
        ]
        lines.append("")
        lines.append(table(cols, rows, width).rstrip("\n"))
    lines.append("")
    if not events:
        lines.append("Events:      <none>")
    else:
        lines.append("Events:")
        reason_width = min(18, max(len(str(event.get("reason") or "")) for event in events)) + 2
        for event in events:
            stamp = event_time(event)
            kind, reason = str(event.get("type") or ""), str(event.get("reason") or "")
            head = f"  {age(stamp, now):>6}  {kind:<8}{reason:<{reason_width}}"
            lines.append(wrap(str(event.get("message") or ""), len(head), width, lead=head))
    return "\n".join(lines)


def sorted_events(events: Sequence[Obj]) -> list[Obj]:
    return sorted(events, key=event_time)
