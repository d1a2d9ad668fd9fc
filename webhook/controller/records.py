"""What the controller writes on objects: names, the admission record, the eviction note, and the patches.

The **admission record** is the annotation ``kube-queue.x-k8s.io/admission`` on an admitted job, JSON
``{"quota": "root/Department-a", "request": {"cpu": "60", ...}, "admittedAt": "...", "id": "..."}``. It is
written in the same JSON Patch that releases the job, so a job is admitted exactly when it is released and
carries a record; the ledger is rebuilt from these records after a restart.

Every patch starts with JSON Patch ``test`` operations, so the apiserver refuses it when the object changed
since the snapshot the decision was made on in a way that matters: admission and eviction test the whole
``spec`` (the hold, the pod counts and shapes, the priority class) and eviction also the admission record
(the same admission is ended, not a later one). Status updates (the Job controller writes them all the
time) do not get in the way. A stale snapshot therefore never admits or evicts twice.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from webhook.api.names import (
    ADMISSION_ANNOTATION,
    BACKOFF_ANNOTATION,
    EVICTION_ANNOTATION,
)
from webhook.api.objects import Obj, meta, parse_time, resource_version_of, rfc3339, rfc3339_seconds
from webhook.core.resources import Resources
from webhook.core.startup import BackoffNote
from webhook.workloads.base import Adapter, JSONPatch, pointer, value_at


def compact_json(value: Mapping[str, object]) -> str:
    """An annotation value: JSON without spaces, keys sorted (the same record always reads the same)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class AdmissionRecord:
    """The record of one admission, as written on the job."""

    quota: str
    """Full name of the leaf quota, ``root/Department-a``."""
    request: Mapping[str, str]
    """What was admitted (Kubernetes resource list)."""
    admitted_at: float
    id: str = ""
    """Unique per admission: a job admitted, evicted and admitted again carries a new id."""

    def encode(self) -> str:
        return compact_json(
            {"quota": self.quota, "request": dict(self.request), "admittedAt": rfc3339(self.admitted_at), "id": self.id}
        )

    @classmethod
    def new(cls, quota: str, request: Resources, now: float) -> AdmissionRecord:
        return cls(quota=quota, request=request.to_spec(), admitted_at=now, id=uuid.uuid4().hex[:12])


def read_record(obj: Obj) -> AdmissionRecord | None:
    """The admission record on ``obj``; ``None`` when absent. An unreadable record still counts as a record
    (the job was released by someone holding it): its time is unknown (0)."""
    raw = value_at(obj, "metadata", "annotations", ADMISSION_ANNOTATION) if isinstance(obj, Mapping) else None
    if raw is None:
        return None
    try:
        decoded = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        decoded = None
    if not isinstance(decoded, Mapping):
        return AdmissionRecord(quota="", request={}, admitted_at=0.0)
    request = decoded.get("request")
    return AdmissionRecord(
        quota=str(decoded.get("quota") or ""),
        request={str(k): str(v) for k, v in request.items()} if isinstance(request, Mapping) else {},
        admitted_at=parse_time(decoded.get("admittedAt")) or 0.0,
        id=str(decoded.get("id") or ""),
    )


@dataclass(frozen=True, slots=True)
class EvictionNote:
    """Why a job was evicted: written on the victim (annotation) and told in its Event."""

    by: str
    """The job that reclaimed, ``Job/user-c/pi-x``."""
    quota: str
    """The reclaiming quota, ``root/Department-b``."""
    reason: str
    at: float

    def encode(self) -> str:
        return compact_json({"by": self.by, "quota": self.quota, "reason": self.reason, "at": rfc3339(self.at)})


def encode_backoff(note: BackoffNote) -> str:
    """The :data:`BACKOFF_ANNOTATION` value of ``note``."""
    return compact_json(
        {
            "attempts": note.attempts,
            "reason": note.reason,
            "category": note.category,
            "retryAt": rfc3339(note.retry_at),
            "failedAt": rfc3339(note.failed_at),
            "spec": note.spec,
            **({"gaveUp": True} if note.gave_up else {}),
        }
    )


def read_backoff(obj: Obj) -> BackoffNote | None:
    """The backoff note on ``obj``; ``None`` when absent or unreadable (an unreadable note holds nothing)."""
    raw = value_at(obj, "metadata", "annotations", BACKOFF_ANNOTATION) if isinstance(obj, Mapping) else None
    if not isinstance(raw, str):
        return None
    try:
        decoded = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(decoded, Mapping):
        return None
    attempts = decoded.get("attempts")
    retry_at = parse_time(decoded.get("retryAt"))
    if not isinstance(attempts, int) or isinstance(attempts, bool) or attempts < 1 or retry_at is None:
        return None
    return BackoffNote(
        attempts=attempts,
        reason=str(decoded.get("reason") or ""),
        category=str(decoded.get("category") or ""),
        retry_at=retry_at,
        failed_at=parse_time(decoded.get("failedAt")) or 0.0,
        spec=str(decoded.get("spec") or ""),
        gave_up=decoded.get("gaveUp") is True,
    )


_SUSPEND_KEYS = (("suspend",), ("runPolicy", "suspend"))


def spec_fingerprint(obj: Obj) -> str:
    """A short hash of the job's spec without its hold switch: the same while it is held and released, new
    when the user edits what it runs (a job that gave up starts afresh then)."""
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return ""
    copy = json.loads(json.dumps(spec))
    for path in _SUSPEND_KEYS:
        holder = copy
        for part in path[:-1]:
            holder = holder.get(part) if isinstance(holder, dict) else None
        if isinstance(holder, dict):
            holder.pop(path[-1], None)
    text = compact_json(copy)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _precondition(obj: Obj) -> list[JSONPatch]:
    """``test`` the resourceVersion: any change at all refuses the patch."""
    version = resource_version_of(obj)
    return [{"op": "test", "path": "/metadata/resourceVersion", "value": version}] if version else []


def _spec_precondition(obj: Obj, record: bool = False) -> list[JSONPatch]:
    """``test`` the spec (and, with ``record``, the admission record when there is one):
    changes of status or other metadata do not refuse the patch. Falls back to the resourceVersion for an
    object without a spec."""
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return _precondition(obj)
    ops: list[JSONPatch] = [{"op": "test", "path": "/spec", "value": spec}]
    if record:
        current = _annotations(obj)
        raw = current.get(ADMISSION_ANNOTATION) if current is not None else None
        if isinstance(raw, str):
            ops.append({"op": "test", "path": pointer("metadata", "annotations", ADMISSION_ANNOTATION), "value": raw})
    return ops


def _annotations(obj: Obj) -> Obj | None:
    annotations = meta(obj).get("annotations")
    return annotations if isinstance(annotations, Mapping) else None


def annotation_ops(obj: Obj, set_: Mapping[str, str], remove: tuple[str, ...] = ()) -> list[JSONPatch]:
    """Set and remove annotations of ``obj`` (JSON Patch), tolerating an absent ``metadata.annotations``."""
    current = _annotations(obj)
    ops: list[JSONPatch] = []
    if current is None:
        if set_:
            ops.append({"op": "add", "path": "/metadata/annotations", "value": dict(set_)})
        return ops
    for key in remove:
        if key in current and key not in set_:
            ops.append({"op": "remove", "path": pointer("metadata", "annotations", key)})
    for key, value in set_.items():
        if current.get(key) != value:
            ops.append({"op": "add", "path": pointer("metadata", "annotations", key), "value": value})
    return ops


def admit_patch(adapter: Adapter, obj: Obj, record: AdmissionRecord) -> list[JSONPatch]:
    """Release the job and write its admission record, in one patch guarded by its spec (still held, same
    shape)."""
    return [
        *_spec_precondition(obj),
        *adapter.resume_patch(obj),
        *annotation_ops(obj, {ADMISSION_ANNOTATION: record.encode()}, remove=(EVICTION_ANNOTATION,)),
    ]


def evict_patch(adapter: Adapter, obj: Obj, note: EvictionNote) -> list[JSONPatch]:
    """Hold the job again, drop its admission record and say who reclaimed it, in one patch guarded by its
    spec (still released, same shape) and its admission record (the same admission)."""
    return [
        *_spec_precondition(obj, record=True),
        *adapter.suspend_patch(obj),
        *annotation_ops(obj, {EVICTION_ANNOTATION: note.encode()}, remove=(ADMISSION_ANNOTATION,)),
    ]


def backoff_patch(adapter: Adapter, obj: Obj, note: BackoffNote) -> list[JSONPatch]:
    """Hold a job that failed to start again, drop its admission record and write its backoff note, in one
    patch guarded like an eviction (still released, same shape, the same admission)."""
    return [
        *_spec_precondition(obj, record=True),
        *adapter.suspend_patch(obj),
        *annotation_ops(obj, {BACKOFF_ANNOTATION: encode_backoff(note)}, remove=(ADMISSION_ANNOTATION,)),
    ]


def clear_backoff_patch(obj: Obj) -> list[JSONPatch]:
    """Drop the backoff note of a job that started (or whose note no longer applies)."""
    ops = annotation_ops(obj, {}, remove=(BACKOFF_ANNOTATION,))
    return [*_precondition(obj), *ops] if ops else []


def clear_record_patch(obj: Obj) -> list[JSONPatch]:
    """Drop a stale admission record from a job that is held again (someone suspended it by hand)."""
    ops = annotation_ops(obj, {}, remove=(ADMISSION_ANNOTATION,))
    return [*_precondition(obj), *ops] if ops else []


def kv(**fields: object) -> str:
    """One structured log line: ``job=Job/user-a/pi quota=root/Department-a reason="does not fit"``.

    Values with spaces, quotes or ``=`` are JSON-quoted; ``None`` values are left out.
    """
    parts = []
    for key, value in fields.items():
        if value is None:
            continue
        text = value if isinstance(value, str) else str(value)
        if not text or any(ch in text for ch in ' "=\n\t'):
            text = json.dumps(text, ensure_ascii=False)
        parts.append(f"{key}={text}")
    return " ".join(parts)


__all__ = [
    "AdmissionRecord",
    "EvictionNote",
    "admit_patch",
    "annotation_ops",
    "backoff_patch",
    "clear_backoff_patch",
    "clear_record_patch",
    "compact_json",
    "encode_backoff",
    "evict_patch",
    "kv",
    "read_backoff",
    "read_record",
    "rfc3339_seconds",
    "spec_fingerprint",
]
