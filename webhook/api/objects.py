"""Typed, read-only views of raw Kubernetes objects (the ``dict`` JSON decoding gives).

Objects come from the wire, so every accessor tolerates absent fields and fields of the wrong shape: a missing
or malformed ``metadata`` reads as empty, never as ``KeyError``/``TypeError``. One set of accessors for every
module, so "the name of an object" means the same thing in the controller, the webhook, the extender and
``kq``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Never, TypedDict, cast

Obj = Mapping[str, object]
"""A raw object as decoded from JSON: read its fields through the views below, or narrow them (``isinstance``)."""

_EMPTY: Mapping[str, Never] = {}

Doc = dict[str, object]
"""A JSON object being built (a manifest, a patch, a status, a request's body): written, then sent. What reads
it back reads it as an :data:`Obj`."""


def mapping(value: object) -> Obj:
    """``value`` when it is an object, else an empty one: a field read from the wire that may be absent or
    malformed."""
    return value if isinstance(value, Mapping) else _EMPTY


def mappings(value: object) -> list[Obj]:
    """The objects of a list read from the wire (other entries skipped); empty when ``value`` is no list."""
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


def text(value: object) -> str:
    """``value`` when it is a string, else ``""``."""
    return value if isinstance(value, str) else ""


def plain(value: object) -> dict[str, object]:
    """``orjson``'s ``default``: a mapping that is not a ``dict`` (a job cache's packed object,
    :mod:`webhook.kube.packed`) written as the dict it reads as; anything else stays an error."""
    if isinstance(value, Mapping):
        return dict(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def readable(obj: Obj) -> Obj:
    """``obj`` to read many fields of: itself when a ``dict``, else a shallow ``dict`` of it (a packed object's
    fields are then looked up once, and every later step reads a plain dict)."""
    return obj if type(obj) is dict else dict(obj)


class OwnerReference(TypedDict, total=False):
    """``metadata.ownerReferences[*]`` as the API server writes it."""

    apiVersion: str
    kind: str
    name: str
    uid: str
    controller: bool
    blockOwnerDeletion: bool


class ObjectMeta(TypedDict, total=False):
    """The fields of ``metadata`` the system reads."""

    name: str
    namespace: str
    uid: str
    resourceVersion: str
    generation: int
    creationTimestamp: str
    deletionTimestamp: str
    labels: dict[str, str]
    annotations: dict[str, str]
    ownerReferences: list[OwnerReference]
    finalizers: list[str]


class Condition(TypedDict, total=False):
    """``status.conditions[*]`` of a Pod, Job or custom resource."""

    type: str
    status: str
    reason: str
    message: str
    lastTransitionTime: str


class Container(TypedDict, total=False):
    """``spec.containers[*]`` (and init containers) of a pod spec: the fields the system reads."""

    name: str
    image: str
    resources: dict[str, dict[str, object]]


class PodSpec(TypedDict, total=False):
    """A Pod's ``spec`` (or a pod template's): the fields the system reads."""

    nodeName: str
    nodeSelector: dict[str, str]
    containers: list[Container]
    initContainers: list[Container]
    tolerations: list[dict[str, object]]
    schedulingGates: list[dict[str, str]]
    priority: int
    priorityClassName: str
    schedulerName: str
    runtimeClassName: str
    overhead: dict[str, str]


class ContainerStatus(TypedDict, total=False):
    """``status.containerStatuses[*]`` of a Pod."""

    name: str
    state: dict[str, dict[str, object]]
    ready: bool
    restartCount: int


class PodStatus(TypedDict, total=False):
    """A Pod's ``status``."""

    phase: str
    conditions: list[Condition]
    containerStatuses: list[ContainerStatus]
    startTime: str


class JobSpec(TypedDict, total=False):
    """A batch/v1 Job's ``spec``: the fields the system reads."""

    suspend: bool
    parallelism: int
    completions: int
    completionMode: str
    template: dict[str, object]


class JobStatus(TypedDict, total=False):
    """A batch/v1 Job's ``status``."""

    active: int
    succeeded: int
    failed: int
    ready: int
    conditions: list[Condition]


class QueueItem(TypedDict, total=False):
    """One entry of a Queue's ``status.queueItemDetails.active`` (``kind`` only when not ``Job``)."""

    name: str
    namespace: str
    kind: str
    priority: int
    position: int
    estimatedStart: str
    estimatedStartLatest: str


class BackoffItem(TypedDict, total=False):
    """One entry of a Queue's ``status.queueItemDetails.backoff`` (``retryAt`` absent once the job gave up,
    ``kind`` only when not ``Job``)."""

    name: str
    namespace: str
    kind: str
    priority: int
    reason: str
    message: str
    attempts: int
    retryAt: str


class QueueItemDetails(TypedDict, total=False):
    """A Queue's ``status.queueItemDetails``: the waiting jobs by position (``activeOmitted`` counts those
    left out) and the jobs backing off."""

    active: list[QueueItem]
    activeOmitted: int
    backoff: list[BackoffItem]
    backoffOmitted: int


class QueueStatus(TypedDict, total=False):
    """A Queue's ``status`` as the controller writes it (``runtimeHistory``: docs/eta.md)."""

    queueItemDetails: QueueItemDetails
    runtimeHistory: list[dict[str, object]]


class ObjectReference(TypedDict, total=False):
    """An Event's ``involvedObject``."""

    apiVersion: str
    kind: str
    namespace: str
    name: str
    uid: str


class EventSource(TypedDict, total=False):
    """An Event's ``source``."""

    component: str
    host: str


def meta(obj: Obj) -> Mapping[str, object]:
    """``metadata``, or an empty mapping when it is absent or not an object."""
    metadata = obj.get("metadata")
    return metadata if isinstance(metadata, Mapping) else _EMPTY


def _section(obj: Obj, key: str) -> Mapping[str, object]:
    value = obj.get(key)
    return value if isinstance(value, Mapping) else _EMPTY


def spec_of(obj: Obj) -> Mapping[str, object]:
    """``spec``, or an empty mapping when it is absent or not an object."""
    return _section(obj, "spec")


def status_of(obj: Obj) -> Mapping[str, object]:
    """``status``, or an empty mapping when it is absent or not an object."""
    return _section(obj, "status")


def pod_spec(pod: Obj) -> PodSpec:
    """A Pod's ``spec`` (empty when absent or not an object)."""
    return cast(PodSpec, spec_of(pod))


def pod_status(pod: Obj) -> PodStatus:
    """A Pod's ``status`` (empty when absent or not an object)."""
    return cast(PodStatus, status_of(pod))


RAN_PHASES = ("Running", "Succeeded", "Failed")
"""The Pod phases of a pod that has run (its containers started)."""


def pod_phase(pod: Obj) -> str | None:
    """A Pod's ``status.phase``; ``None`` when it has none."""
    return pod_status(pod).get("phase")


def job_spec(job: Obj) -> JobSpec:
    """A batch/v1 Job's ``spec`` (empty when absent or not an object)."""
    return cast(JobSpec, spec_of(job))


def job_status(job: Obj) -> JobStatus:
    """A batch/v1 Job's ``status`` (empty when absent or not an object)."""
    return cast(JobStatus, status_of(job))


def conditions_of(obj: Obj) -> list[Condition]:
    """``status.conditions`` that are objects (malformed entries are skipped)."""
    return cast("list[Condition]", mappings(status_of(obj).get("conditions")))


def queue_details(queue: Obj) -> QueueItemDetails | None:
    """A Queue's ``status.queueItemDetails``; ``None`` when the controller has not written one."""
    details = status_of(queue).get("queueItemDetails")
    return cast(QueueItemDetails, details) if isinstance(details, Mapping) else None


def queue_active(details: QueueItemDetails) -> list[QueueItem]:
    """The ``active`` items that are objects (malformed entries are skipped)."""
    return cast("list[QueueItem]", mappings(details.get("active")))


def involved_object(event: Obj) -> ObjectReference:
    """An Event's ``involvedObject`` (empty when absent or not an object)."""
    return cast(ObjectReference, _section(event, "involvedObject"))


def events_about(name: str, uid: str) -> str:
    """The field selector of the Events about one object: by name, and by ``uid`` when known (a deleted and
    re-created object of the same name keeps none of the old one's)."""
    return f"involvedObject.name={name}" + (f",involvedObject.uid={uid}" if uid else "")


def event_source(event: Obj) -> EventSource:
    """An Event's ``source`` (empty when absent or not an object)."""
    return cast(EventSource, _section(event, "source"))


def _text(obj: Obj, key: str) -> str:
    value = meta(obj).get(key)
    return value if isinstance(value, str) else ""


def name_of(obj: Obj) -> str:
    return _text(obj, "name")


def namespace_of(obj: Obj) -> str:
    return _text(obj, "namespace")


def uid_of(obj: Obj) -> str:
    return _text(obj, "uid")


def resource_version_of(obj: Obj) -> str:
    return _text(obj, "resourceVersion")


def labels_of(obj: Obj) -> Mapping[str, str]:
    """``metadata.labels`` (empty when absent): the API server keeps labels a map of strings."""
    value = meta(obj).get("labels")
    return cast("Mapping[str, str]", value) if isinstance(value, Mapping) else _EMPTY


def annotations_of(obj: Obj) -> Mapping[str, str]:
    """``metadata.annotations`` (empty when absent): the API server keeps annotations a map of strings."""
    value = meta(obj).get("annotations")
    return cast("Mapping[str, str]", value) if isinstance(value, Mapping) else _EMPTY


def owner_references_of(obj: Obj) -> list[OwnerReference]:
    """The owner references that are objects (malformed entries are skipped)."""
    value = meta(obj).get("ownerReferences")
    if not isinstance(value, list):
        return []
    return [cast(OwnerReference, ref) for ref in value if isinstance(ref, dict)]


def controller_of(obj: Obj) -> OwnerReference | None:
    """The owner reference with ``controller: true``, if any."""
    return next((ref for ref in owner_references_of(obj) if ref.get("controller") is True), None)


def read_time(text: object) -> float:
    """Seconds since the epoch of an RFC 3339 time (``2024-05-01T12:00:00Z``; naive times are UTC).
    The one reader of times in kube-queue; ``ValueError`` saying what is wrong when it is not one."""
    if not isinstance(text, str):
        raise ValueError(f"expected an RFC 3339 timestamp string, got {type(text).__name__}")
    return _read_time_text(text)


@functools.lru_cache(maxsize=4096)
def _read_time_text(text: str) -> float:
    """:func:`read_time` of a string, the last 4,096 texts' values kept: jobs made in the same second share one
    (a listing of 50,000 jobs reads each job's times)."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"timestamp {text!r} is not RFC 3339 (like 2024-05-01T12:00:00Z)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def parse_time(text: object) -> float | None:
    """:func:`read_time`, or ``None`` when the time is absent or unreadable."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return read_time(text)
    except ValueError:
        return None


def rfc3339(seconds: float) -> str:
    """``2024-04-08T02:04:17.123456Z`` (UTC, microseconds): how kube-queue writes times on objects."""
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def rfc3339_seconds(seconds: float) -> str:
    """``2024-04-08T02:04:17Z`` (what Kubernetes' ``metav1.Time`` accepts everywhere)."""
    return datetime.fromtimestamp(int(seconds), tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def created_of(obj: Obj) -> float:
    """``creationTimestamp`` in epoch seconds; 0 when absent or unreadable."""
    return parse_time(meta(obj).get("creationTimestamp")) or 0.0


def event_time(event: Obj) -> float:
    """When an Event last happened: ``lastTimestamp``, ``eventTime`` or ``firstTimestamp`` (the first set), else
    its creation; 0 when none is readable."""
    for key in ("lastTimestamp", "eventTime", "firstTimestamp"):
        stamp = parse_time(event.get(key))
        if stamp:
            return stamp
    return created_of(event)


def deleting(obj: Obj) -> bool:
    """Whether the object has a ``deletionTimestamp`` (it is being deleted)."""
    return bool(meta(obj).get("deletionTimestamp"))


def priority_values(classes: Iterable[Obj]) -> dict[str, int]:
    """PriorityClass name -> value (a class without a whole-number value is left out)."""
    out: dict[str, int] = {}
    for obj in classes:
        name, value = meta(obj).get("name"), obj.get("value")
        if isinstance(name, str) and isinstance(value, int) and not isinstance(value, bool):
            out[name] = value
    return out
