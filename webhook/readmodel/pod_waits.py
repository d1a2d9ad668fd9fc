"""Why pods that do not run wait, for ``kq why`` of a job's pods and of a Deployment's (docs/pod-quota.md).

The words are kube-scheduler's (the pod's ``PodScheduled`` condition, which carries the extender's refusal for
pod-level quota) or the kubelet's (a container that waits). When kube-scheduler tried to preempt for a pod and
the extender refused, the extender's ``PreemptionRefused`` Event on the pod says why; the newest one of a group
of pods is shown beside the group.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import NotRequired, TypedDict

from webhook.api.kinds import POD
from webhook.api.names import ADMISSION_GATE, EXTENDER_COMPONENT, REASON_HELD, REASON_PREEMPTION_REFUSED
from webhook.api.objects import Obj, event_time, involved_object, name_of, pod_spec, pod_status


class PodWait(StrEnum):
    """Why a pod does not run yet: kube-scheduler has not placed it (``SCHEDULER``, its ``PodScheduled``
    condition says why), the extender refused it for pod-level quota (``POD_QUOTA``, docs/pod-quota.md), it is
    placed and a container waits (``CONTAINER``) or it starts (``STARTING``), or the scheduler has not looked at
    it yet (``UNSEEN``); or the queue holds it (``HELD``: a SparkApplication's executor past its admission)."""

    SCHEDULER, POD_QUOTA, CONTAINER = "scheduler", "pod-quota", "container"
    STARTING, UNSEEN, HELD = "starting", "unseen", "held"


HELD_BY_QUEUE = "held by kube-queue"


@dataclass(frozen=True, slots=True)
class PendingReason:
    """``count`` pods wait for the same ``text``, of kind ``kind``."""

    kind: PodWait
    text: str
    count: int
    names: tuple[str, ...] = ()
    """The pods, by name."""
    refusal: Obj | None = None
    """The newest ``PreemptionRefused`` Event on one of them: why the extender refused their preemption."""


def pod_wait(pod: Obj) -> tuple[PodWait, str]:
    """Why ``pod`` does not run, and the words that say it."""
    from webhook.core.podquota import refused_by_pod_quota  # noqa: PLC0415

    if any(gate.get("name") == ADMISSION_GATE for gate in pod_spec(pod).get("schedulingGates") or ()):
        return PodWait.HELD, HELD_BY_QUEUE
    status = pod_status(pod)
    why = ""
    for condition in status.get("conditions") or ():
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            why = str(condition.get("message") or condition.get("reason") or "")
    if why:
        return (PodWait.POD_QUOTA if refused_by_pod_quota(why) else PodWait.SCHEDULER), why
    for container in status.get("containerStatuses") or ():
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting:
            why = f"{waiting.get('reason', '')}: {waiting.get('message', '')}".strip(": ")
    if why:
        return PodWait.CONTAINER, why
    if pod_spec(pod).get("nodeName"):
        return PodWait.STARTING, "scheduled, starting"
    return PodWait.UNSEEN, "waiting for the scheduler"


def pending_reasons(pods: Iterable[Obj], refusals: Mapping[str, Obj] | None = None,
                    held: Mapping[str, str] | None = None) -> list[PendingReason]:
    """Why the pods that do not run (neither Running nor Succeeded) wait, grouped by their words, most common
    first; ``refusals``: pod name -> its newest ``PreemptionRefused`` Event (:func:`newest_refusals`); ``held``:
    pod name -> why the controller holds it (:func:`newest_held`)."""
    groups: dict[tuple[PodWait, str], list[str]] = {}
    for pod in pods:
        if pod_status(pod).get("phase") in ("Running", "Succeeded"):
            continue
        kind, text = pod_wait(pod)
        if kind is PodWait.HELD and held:
            text = held.get(name_of(pod), text)
        groups.setdefault((kind, text), []).append(name_of(pod))
    reasons = []
    for (kind, text), names in groups.items():
        told = [refusals[name] for name in names if name in refusals] if refusals else []
        reasons.append(PendingReason(kind, text, len(names), tuple(sorted(names)),
                                     max(told, key=event_time) if told else None))
    return sorted(reasons, key=lambda reason: -reason.count)


def _newest_on_pods(events: Iterable[Obj], reason: str) -> dict[str, Obj]:
    """Pod name -> the newest Event of ``reason`` about it, of ``events`` (one namespace's)."""
    newest: dict[str, Obj] = {}
    for event in events:
        target = involved_object(event)
        if event.get("reason") != reason or target.get("kind") != POD.kind:
            continue
        pod = str(target.get("name") or "")
        if pod not in newest or event_time(event) >= event_time(newest[pod]):
            newest[pod] = event
    return newest


def newest_refusals(events: Iterable[Obj]) -> dict[str, Obj]:
    """Pod name -> the extender's newest ``PreemptionRefused`` Event on it, of ``events`` (one namespace's)."""
    return _newest_on_pods(events, REASON_PREEMPTION_REFUSED)


def newest_held(events: Iterable[Obj]) -> dict[str, str]:
    """Pod name -> why the controller holds it, from its newest ``Held`` Event of ``events`` (one namespace's)."""
    newest = _newest_on_pods(events, REASON_HELD)
    return {pod: str(event.get("message") or HELD_BY_QUEUE) for pod, event in newest.items()}


EXTENDER_EVENTS = f"source={EXTENDER_COMPONENT}"
"""The field selector of the extender's Events."""


class PodsWaiting(TypedDict):
    """``kq why -o json``'s ``podsWaiting[*]``: how many pods wait for one reason (:class:`PodWait`)."""

    reason: str
    pods: int
    message: str
    names: NotRequired[list[str]]
    preemptionRefused: NotRequired[str]
    """Why the extender refused their preemption (its newest ``PreemptionRefused`` Event on them)."""


def pods_waiting_json(reasons: Sequence[PendingReason], *, names: bool = False) -> list[PodsWaiting]:
    """The ``podsWaiting`` of ``kq why -o json`` (with the pods' ``names`` when asked)."""
    out: list[PodsWaiting] = []
    for reason in reasons:
        entry: PodsWaiting = {"reason": reason.kind.value, "pods": reason.count, "message": reason.text}
        if names:
            entry["names"] = list(reason.names)
        if reason.refusal is not None:
            entry["preemptionRefused"] = str(reason.refusal.get("message") or "")
        out.append(entry)
    return out


def refusal_line(reason: PendingReason, now: float, width: int) -> str | None:
    """``Its preemption, 10s ago: kube-queue refused ...``, under the group's line; ``None`` when not told."""
    from webhook.readmodel.output import age, wrap  # noqa: PLC0415

    event = reason.refusal
    if event is None:
        return None
    them = "Its" if reason.count == 1 else "Their"
    return wrap(f"{them} preemption, {age(event_time(event), now)} ago: {event.get('message', '')}", 6, width,
                lead="    ")
