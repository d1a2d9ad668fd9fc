"""Jobs as the controller sees them: the raw object, its adapter, its admission record and its Workload.

The phase comes from the object alone (never from memory), so a restarted controller rebuilds the same
ledger:

* finished (the adapter says so)                    -> ``FINISHED`` (counts nowhere);
* released and carrying an admission record          -> ``ADMITTED``;
* released without a record (it started before its namespace joined the tree, or while the webhook was
  down)                                              -> ``ADMITTED`` (it uses the quota all the same);
* held                                               -> ``QUEUED`` (a record left on a held job is stale and
  is removed).

A batch/v1 Job counts only the pods it still needs: ``min(parallelism, completions - succeeded)`` (for a
Job without ``completions``, ``parallelism`` until a pod succeeded, then its active pods), so its quota is
released as its pods finish.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from webhook.api.objects import Obj, readable, resource_version_of
from webhook.controller.records import AdmissionRecord, read_backoff, read_record, spec_fingerprint
from webhook.core.dra import DeviceQuota, pod_devices
from webhook.core.limitrange import NO_DEFAULTS, ContainerDefaults
from webhook.core.quota import QuotaNode
from webhook.core.resources import EMPTY
from webhook.core.startup import BackoffNote, BackoffState, backoff_state
from webhook.core.workload import Phase, Workload, WorkloadError
from webhook.workloads.base import Adapter, int_at
from webhook.workloads.limits import as_admitted
from webhook.workloads.overhead import Overheads


@dataclass(frozen=True, slots=True)
class TrackedJob:
    """One job of a managed namespace."""

    adapter: Adapter
    obj: Obj
    workload: Workload
    leaf: QuotaNode
    record: AdmissionRecord | None
    backoff: BackoffNote | None = None
    """The note of a job that failed to start in time (docs/start-timeout.md)."""
    spec: str = ""
    """The spec's fingerprint (:func:`spec_fingerprint`), read only for a job with a backoff note."""
    missing_class: str | None = None
    """The PriorityClass the job names when no such class exists: a held job is not released then (its pods
    would be refused), and its priority is unknown."""

    def backoff_state(self, now: float) -> BackoffState:
        """Where the job stands with its backoff note at ``now``."""
        return backoff_state(self.backoff, self.spec, now)

    def with_workload(self, workload: Workload) -> TrackedJob:
        """The same job with ``workload`` (the decision pass holds evicted jobs again this way)."""
        return dataclasses.replace(self, workload=workload)

    @property
    def resource_version_of(self) -> str:
        return resource_version_of(self.obj)

    @property
    def stale_record(self) -> bool:
        """Held again but still carrying an admission record."""
        return self.record is not None and self.workload.phase is Phase.QUEUED

    @property
    def evictable(self) -> bool:
        """Whether the job can be held again (a Pod's scheduling gate can only be set at creation)."""
        return not self.adapter.gates_at_creation_only


def remaining_job_pods(obj: Obj) -> int | None:
    """Pods a batch/v1 Job still needs, from its spec and status (``None`` when the status says nothing)."""
    succeeded = int_at(obj, 0, "status", "succeeded") or 0
    parallelism = int_at(obj, 1, "spec", "parallelism")
    parallelism = 1 if parallelism is None else parallelism
    completions = int_at(obj, None, "spec", "completions")
    if completions is None:
        if succeeded == 0:
            return parallelism
        return min(parallelism, int_at(obj, 0, "status", "active") or 0)
    return max(0, min(parallelism, completions - succeeded))


def _shrink_to_remaining(adapter: Adapter, obj: Obj, workload: Workload) -> Workload:
    if adapter.group != "batch" or adapter.kind != "Job" or len(workload.pod_sets) != 1:
        return workload
    remaining = remaining_job_pods(obj)
    pod_set = workload.pod_sets[0]
    if remaining is None or remaining >= pod_set.count:
        return workload
    shrunk = dataclasses.replace(pod_set, count=remaining)
    return dataclasses.replace(workload, pod_sets=(shrunk,), request=EMPTY)


def with_devices(adapter: Adapter, obj: Obj, workload: Workload, devices: DeviceQuota) -> Workload:
    """``workload`` with the devices its pods claim: each pod set's pods their template claims, and the shared
    claims the job names once (:func:`webhook.core.dra.pod_devices`)."""
    templates = adapter.pod_templates(obj)
    if len(templates) != len(workload.pod_sets):
        return workload
    per_set, shared, problem = pod_devices(workload.key.namespace,
                                           [(template.count, template.spec) for template in templates], devices)
    if problem:
        raise WorkloadError(f"the devices its pods claim cannot be counted: {problem}")
    if not shared and not any(per_set):
        return workload
    pod_sets = tuple(dataclasses.replace(pod_set, per_pod=pod_set.per_pod + extra)
                     for pod_set, extra in zip(workload.pod_sets, per_set, strict=True))
    request = EMPTY
    for pod_set in pod_sets:
        request = request + pod_set.total
    return dataclasses.replace(workload, pod_sets=pod_sets, request=request + shared)


def track(
    adapter: Adapter, obj: Obj, leaf: QuotaNode, priority_classes: Mapping[str, int],
    devices: DeviceQuota | None = None, *, defaults: ContainerDefaults = NO_DEFAULTS,
    overheads: Overheads | None = None,
) -> TrackedJob:
    """The job's view; raises :class:`WorkloadError` when its pod sets cannot be read, or the devices its pods
    claim cannot be counted (``devices``: :mod:`webhook.core.dra`). ``defaults`` (the namespace's LimitRange
    default requests) and ``overheads`` (each RuntimeClass's pod overhead) size it as its pods will be made,
    though it was written before them (:func:`~webhook.workloads.limits.as_admitted`)."""
    view = readable(obj)  # the job is kept as it came (packed in the controller's cache), read through a dict
    sized = as_admitted(adapter, view, defaults, overheads or {}) if defaults.requests or overheads else view
    workload = adapter.to_workload(sized, leaf.name, priority_classes)
    record = read_record(view)
    if workload.phase is Phase.ADMITTED:
        admitted_at = record.admitted_at if record is not None and record.admitted_at else workload.created
        workload = dataclasses.replace(workload, admitted_at=admitted_at)
    if workload.phase is not Phase.FINISHED:
        workload = _shrink_to_remaining(adapter, sized, workload)
        if devices is not None and devices.classes:
            workload = with_devices(adapter, sized, workload, devices)
    backoff = read_backoff(view)
    spec = spec_fingerprint(view) if backoff is not None else ""
    return TrackedJob(adapter=adapter, obj=obj, workload=workload, leaf=leaf, record=record, backoff=backoff, spec=spec,
                      missing_class=missing_priority_class(adapter, view, priority_classes))


def missing_priority_class(adapter: Adapter, obj: Obj, priority_classes: Mapping[str, int]) -> str | None:
    """The PriorityClass ``obj`` names when it does not exist (``None``: it names none, or it exists)."""
    try:
        name = adapter.priority_class_name(obj)
    except WorkloadError:
        return None
    return name if name is not None and name not in priority_classes else None


def held_reason(missing_class: str) -> str:
    """Why a job naming a missing PriorityClass is held (Events, ``kq why``)."""
    return (
        f"its PriorityClass {missing_class!r} does not exist, so its pods would be refused and its place in the "
        "queue is unknown: it stays held until an operator creates the class or the job names an existing one"
    )


__all__ = ["TrackedJob", "WorkloadError", "held_reason", "missing_priority_class", "remaining_job_pods", "track"]
