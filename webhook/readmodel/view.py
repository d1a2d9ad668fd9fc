"""What the developer commands and the console show, computed purely from a snapshot of API objects.

A :class:`Snapshot` holds raw objects (the tree, Queues, jobs of every served kind, their pods, events,
PriorityClasses); :func:`job_views` turns it into one :class:`JobView` per job with its status
(QUEUING / BACKOFF / PENDING / RUNNING / SUCCEEDED / FAILED), quota, queue and position;
:mod:`webhook.readmodel.waiting` explains why a job waits and :mod:`webhook.readmodel.usage` gives each quota
node's usage.

The controller's own records, job model and queue policies (:mod:`webhook.controller.records`,
:mod:`webhook.controller.model`, :mod:`webhook.controller.decide`, all light to import) are used as they are,
so what ``kq`` shows is what the controller decides on.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from webhook.api.names import (
    EVICTION_ANNOTATION,
    QUOTA_FULLNAME_ANNOTATION,
    QUOTA_LABEL,
)
from webhook.api.objects import (
    Obj,
    QueueItem,
    annotations_of,
    conditions_of,
    created_of,
    labels_of,
    meta,
    name_of,
    namespace_of,
    queue_active,
    queue_details,
    spec_of,
)
from webhook.api.statuses import JobStatus
from webhook.controller.model import TrackedJob, remaining_job_pods, track
from webhook.controller.records import (
    AdmissionRecord,
    read_backoff,
    read_record,
    spec_fingerprint,
)
from webhook.core.dra import DeviceQuota
from webhook.core.limitrange import NO_DEFAULTS, ContainerDefaults, defaults_by_namespace
from webhook.core.queueing import positions_only
from webhook.core.quota import QuotaNode, QuotaTree, QuotaTreeError, parse_tree, queue_name
from webhook.core.resources import Resources
from webhook.core.startup import BackoffNote, BackoffState, backoff_state
from webhook.core.workload import Workload, WorkloadError, WorkloadKey
from webhook.workloads.base import Adapter, value_at
from webhook.workloads.children import queued_with_parent
from webhook.workloads.overhead import Overheads, class_overheads
from webhook.workloads.registry import all_adapters

# Records written by the controller ---------------------------------------------------------------------------


def read_eviction(obj: Obj) -> Obj | None:
    """The eviction note (``by``, ``quota``, ``reason``, ``at``) of a job evicted by reclaim."""
    raw = annotations_of(obj).get(EVICTION_ANNOTATION)
    if not isinstance(raw, str):
        return None
    try:
        decoded = json.loads(raw)
    except ValueError:
        return {"reason": raw}
    return decoded if isinstance(decoded, Mapping) else {"reason": raw}


def is_batch_job(adapter: Adapter) -> bool:
    return adapter.group == "batch" and adapter.kind == "Job"


# Kinds ------------------------------------------------------------------------------------------------------


def kind_aliases() -> dict[str, Adapter]:
    """What a user may type for a kind: ``job``, ``jobs``, ``job.batch``, ``pytorchjob``, ``pytorchjobs``..."""
    out: dict[str, Adapter] = {}
    for adapter in all_adapters():
        kind = adapter.kind.lower()
        for alias in (kind, adapter.plural, f"{kind}.{adapter.group}" if adapter.group else kind):
            out.setdefault(alias, adapter)
    return out


def find_adapter(text: str) -> Adapter | None:
    return kind_aliases().get(text.lower())


# Snapshot and job views ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KindSource:
    """A job kind the API serves: its adapter and the version to use."""

    adapter: Adapter
    version: str

    @property
    def api_version(self) -> str:
        return f"{self.adapter.group}/{self.version}" if self.adapter.group else self.version


@dataclass(slots=True)
class Snapshot:
    """Raw objects read from the API at ``now`` (any of them may be missing)."""

    now: float
    tree_obj: Obj | None = None
    tree_problem: str | None = None
    """Why there is no usable tree (unreadable, invalid); ``None`` when there is a tree or simply none."""
    queues: dict[str, Obj] = field(default_factory=dict)
    jobs: list[tuple[KindSource, Obj]] = field(default_factory=list)
    pods: list[Obj] = field(default_factory=list)
    priority_classes: dict[str, int] = field(default_factory=dict)
    events: list[Obj] = field(default_factory=list)
    pod_events: list[Obj] = field(default_factory=list)
    """The extender's Events on pods (``PreemptionRefused``), read with :attr:`events`."""
    job_events: list[Obj] = field(default_factory=list)
    """The Events about the one job asked for when it is PENDING short of pods (its operator's refusals to
    create them), read with :attr:`events` (:func:`webhook.readmodel.jobs.find_job`)."""
    complete: bool = False
    """``jobs`` holds every job of every managed namespace (the ledger can be rebuilt from them)."""
    tree_pods: list[Obj] | None = None
    """Every unfinished pod of the cluster (read with ``complete`` when allowed), for the pods no job accounts
    for; ``None`` when not read."""
    budgets: list[Obj] = field(default_factory=list)
    """Every PodDisruptionBudget (read with :attr:`tree_pods`)."""
    devices: DeviceQuota = field(default_factory=DeviceQuota)
    """The DRA devices jobs and pods claim (read with :attr:`tree_pods`; empty otherwise)."""
    limit_ranges: list[Obj] = field(default_factory=list)
    """The LimitRanges of the namespaces read (of every one when allowed)."""
    runtime_classes: list[Obj] = field(default_factory=list)
    """Every RuntimeClass, when this user may list them."""
    spawned: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    """``(namespace, pod)`` -> ``(kind, name)`` of the job whose own pod created that Pod (a SparkApplication's
    executor): shown as that job's pod, not in :attr:`jobs`."""
    _tree: tuple[QuotaTree | None, str | None] | None = None

    @property
    def tree(self) -> QuotaTree | None:
        return self._parsed()[0]

    @property
    def problem(self) -> str | None:
        """Why the tree cannot be used, if it cannot."""
        return self.tree_problem or self._parsed()[1]

    def _parsed(self) -> tuple[QuotaTree | None, str | None]:
        if self._tree is None:
            if self.tree_obj is None:
                self._tree = (None, None)
            else:
                try:
                    self._tree = (parse_tree(spec_of(self.tree_obj)), None)
                except QuotaTreeError as error:
                    self._tree = (None, f"the ElasticQuotaTree is invalid: {error}")
        return self._tree


@dataclass(frozen=True, slots=True)
class JobView:
    """One job as the developer commands show it."""

    source: KindSource
    obj: Obj
    name: str
    namespace: str
    created: float
    status: JobStatus
    leaf: QuotaNode | None
    quota: str | None
    """Full name of its leaf quota (``root/Department-a``), from the tree or the job's annotation."""
    queue: str | None
    """Its Queue object's name (``root-department-a-user-a``), in namespace ``kube-queue``."""
    workload: Workload | None
    size_error: str | None
    record: AdmissionRecord | None
    eviction: Obj | None
    pods: tuple[Obj, ...]
    running: int
    expected: int
    priority: int
    position: int | None = None
    position_source: str = ""
    """``status`` (the Queue's status) or ``computed`` (core queue order over the waiting jobs)."""
    backoff: BackoffNote | None = None
    """Its backoff note when it failed to start in time and the note still applies (same spec)."""
    tracked: TrackedJob | None = None
    """The job as the controller tracks it (``None`` outside the tree or when it cannot be sized)."""

    @property
    def adapter(self) -> Adapter:
        return self.source.adapter

    @property
    def kind(self) -> str:
        return self.source.adapter.kind

    @property
    def key(self) -> WorkloadKey:
        return WorkloadKey(self.kind, self.namespace, self.name)

    @property
    def leaf_name(self) -> str | None:
        if self.leaf is not None:
            return self.leaf.name
        label = labels_of(self.obj).get(QUOTA_LABEL)
        return str(label) if label else None

    @property
    def request(self) -> Resources | None:
        return self.workload.request if self.workload is not None else None

    @property
    def admitted_at(self) -> float | None:
        if self.record is not None and self.record.admitted_at:
            return self.record.admitted_at
        return None

    @property
    def short_of_pods(self) -> bool:
        """Released, and some of its pods are not there (its operator may not have been able to create them)."""
        return self.status == JobStatus.PENDING and len(self.pods) < self.expected


def listed_job(source: KindSource, obj: Obj) -> bool:
    """Whether ``kq list`` shows an object of a job kind: a plain Pod the queue manages (with its quota label),
    and of the other kinds every object but a child its parent is queued as (a RayJob's RayCluster)."""
    if source.adapter.kind == "Pod":
        return QUOTA_LABEL in labels_of(obj) and source.adapter.manages(obj)
    return not queued_with_parent(obj, source.adapter.kind)


def _owner_uids(pod: Obj) -> set[str]:
    owners = meta(pod).get("ownerReferences")
    if not isinstance(owners, list):
        return set()
    return {str(owner.get("uid")) for owner in owners if isinstance(owner, Mapping) and owner.get("uid")}


def _priority(adapter: Adapter, obj: Obj, priorities: Mapping[str, int]) -> int:
    try:
        return adapter.priority(obj, priorities)
    except WorkloadError:
        return 0


def _expected_pods(adapter: Adapter, obj: Obj) -> int:
    if is_batch_job(adapter):
        try:
            return remaining_job_pods(obj) or 0
        except WorkloadError:
            return 0
    try:
        return sum(pod_set.count for pod_set in adapter.pod_sets(obj))
    except WorkloadError:
        return 0


def finished_status(adapter: Adapter, obj: Obj) -> JobStatus:
    """SUCCEEDED or FAILED for a finished job."""
    if adapter.kind == "Pod":
        return JobStatus.FAILED if value_at(obj, "status", "phase") == "Failed" else JobStatus.SUCCEEDED
    if adapter.kind == "RayJob":
        failed = value_at(obj, "status", "jobDeploymentStatus") == "Failed"
        return JobStatus.FAILED if failed or value_at(obj, "status", "jobStatus") == "FAILED" else JobStatus.SUCCEEDED
    if any(c.get("type") == "Failed" and c.get("status") == "True" for c in conditions_of(obj)):
        return JobStatus.FAILED
    return JobStatus.SUCCEEDED


def job_status(adapter: Adapter, obj: Obj, managed: bool, running: int, expected: int) -> JobStatus:
    """QUEUING (held by the queue), PENDING (released, not every pod running), RUNNING, SUCCEEDED, FAILED;
    SUSPENDED for a job held in a namespace kube-queue does not manage."""
    try:
        if adapter.is_finished(obj):
            return finished_status(adapter, obj)
        if adapter.is_suspended(obj):
            return JobStatus.QUEUING if managed else JobStatus.SUSPENDED
    except WorkloadError:
        return JobStatus.PENDING
    if expected > 0 and running >= expected:
        return JobStatus.RUNNING
    return JobStatus.PENDING


def pods_of(source: KindSource, obj: Obj, pods: Sequence[Obj], by_owner: Mapping[str, list[Obj]]) -> list[Obj]:
    """The job's pods: owned by it (Jobs, Kubeflow jobs), by the objects its operator made for it (a RayJob's
    RayCluster and submitter Job: its adapter's ``pod_owners``), or itself (Pod)."""
    adapter = source.adapter
    if adapter.kind == "Pod":
        return [obj]
    uid = str(meta(obj).get("uid") or "")
    found = list(by_owner.get(uid, ())) if uid else []
    try:
        owners = set(adapter.pod_owners(obj)) - {(adapter.kind, name_of(obj))}
    except WorkloadError:
        owners = set()
    if owners:
        namespace = namespace_of(obj)
        seen = {id(pod) for pod in found}
        found += [
            pod for pod in pods
            if id(pod) not in seen and namespace_of(pod) == namespace and _controller_of(pod) in owners
        ]
    return found


def _controller_of(pod: Obj) -> tuple[str, str] | None:
    refs = meta(pod).get("ownerReferences")
    for ref in refs if isinstance(refs, list) else ():
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            return str(ref.get("kind")), str(ref.get("name"))
    return None


@dataclass(frozen=True, slots=True)
class ViewContext:
    """What a job's view reads besides the job and its pods: the parsed tree, the PriorityClasses, the DRA
    devices, the time, and what the API server's admission will give its pods (LimitRange defaults, RuntimeClass
    overheads)."""

    tree: QuotaTree | None
    priority_classes: Mapping[str, int]
    devices: DeviceQuota
    now: float
    defaults: Mapping[str, ContainerDefaults] = field(default_factory=dict)
    """Per namespace, the LimitRange defaults a container without requests will get."""
    overheads: Overheads = field(default_factory=dict)
    """Each RuntimeClass's pod overhead as it is now (empty: the overhead the webhook recorded on the job)."""


def job_view(source: KindSource, obj: Obj, pods: Sequence[Obj], running: int, context: ViewContext, *,
             sized: TrackedJob | str | None = None) -> JobView:
    """One job with its status, quota and queue (no position: :func:`with_positions`). ``running`` counts its
    pods in phase Running. ``sized`` is the job as the controller already sized it under the same tree,
    PriorityClasses and devices, or why it could not be (``None``: size it here)."""
    adapter = source.adapter
    tree = context.tree
    namespace, name = namespace_of(obj), name_of(obj)
    leaf = tree.leaf_for_namespace(namespace) if tree is not None else None
    label = labels_of(obj).get(QUOTA_LABEL)
    # Without a usable tree the webhook holds the jobs of managed namespaces untagged (docs/accounting.md):
    # a held job then waits for the tree, whatever its labels say.
    managed = leaf is not None or tree is None
    expected = _expected_pods(adapter, obj)
    workload: Workload | None = None
    tracked: TrackedJob | None = None
    size_error: str | None = None
    if leaf is not None and sized is None:
        try:
            tracked = track(adapter, obj, leaf, context.priority_classes, context.devices,
                            defaults=context.defaults.get(namespace, NO_DEFAULTS), overheads=context.overheads)
        except WorkloadError as error:
            size_error = str(error)
    elif leaf is not None:
        tracked, size_error = (sized, None) if isinstance(sized, TrackedJob) else (None, sized)
    if tracked is not None:
        workload = tracked.workload
    quota = leaf.full_name if leaf is not None else annotations_of(obj).get(QUOTA_FULLNAME_ANNOTATION)
    leaf_name = leaf.name if leaf is not None else (str(label) if label else None)
    status = job_status(adapter, obj, managed, running, expected)
    note = read_backoff(obj)
    if note is not None and note.spec != spec_fingerprint(obj):
        note = None
    if status == JobStatus.QUEUING and backoff_state(note, note.spec if note else "", context.now) in (
        BackoffState.WAITING, BackoffState.GAVE_UP
    ):
        status = JobStatus.BACKOFF
    return JobView(
        source=source,
        obj=obj,
        name=name,
        namespace=namespace,
        created=created_of(obj),
        status=status,
        leaf=leaf,
        quota=str(quota) if quota else None,
        queue=queue_name(leaf_name, namespace) if leaf_name and managed else None,
        workload=workload,
        size_error=size_error,
        record=read_record(obj),
        eviction=read_eviction(obj),
        backoff=note,
        tracked=tracked,
        pods=tuple(pods),
        running=running,
        expected=expected,
        priority=workload.priority if workload is not None else _priority(adapter, obj, context.priority_classes),
    )


def job_views(snapshot: Snapshot) -> list[JobView]:
    """Every job of the snapshot with its status, quota, queue and position (sorted by namespace, name)."""
    by_owner: dict[str, list[Obj]] = {}
    for pod in snapshot.pods:
        for uid in _owner_uids(pod):
            by_owner.setdefault(uid, []).append(pod)
    context = ViewContext(snapshot.tree, snapshot.priority_classes, snapshot.devices, snapshot.now,
                          defaults_by_namespace(snapshot.limit_ranges), class_overheads(snapshot.runtime_classes))
    views: list[JobView] = []
    for source, obj in snapshot.jobs:
        pods = pods_of(source, obj, snapshot.pods, by_owner)
        running = sum(1 for pod in pods if value_at(pod, "status", "phase") == "Running")
        views.append(job_view(source, obj, pods, running, context))
    views = with_positions(views, snapshot.queues)
    views.sort(key=lambda view: (view.namespace, view.name, view.kind))
    return views


def _status_items(queue: Obj) -> tuple[list[QueueItem], bool]:
    """The Queue's ``status.queueItemDetails.active`` items and whether the list is complete."""
    details = queue_details(queue)
    if details is None:
        return [], False
    return queue_active(details), not details.get("activeOmitted")


def with_positions(views: Sequence[JobView], queues: Mapping[str, Obj]) -> list[JobView]:
    """Set the position of every QUEUING job: from its Queue's ``status.queueItemDetails`` when that lists
    exactly the queue's waiting jobs (the status is written every few seconds, so it can lag), else from the
    core's queue order over the waiting jobs of its quota that the snapshot holds."""
    waiting = [view for view in views
               if view.status == JobStatus.QUEUING and view.workload is not None and view.leaf]
    by_leaf: dict[str, list[Workload]] = {}
    for view in waiting:
        assert view.workload is not None and view.leaf is not None
        by_leaf.setdefault(view.leaf.key, []).append(view.workload)
    computed: dict[WorkloadKey, int] = {}
    for workloads in by_leaf.values():
        computed.update(positions_only(workloads))
    waiting_by_queue: dict[str, set[tuple[str, str, str]]] = {}
    for view in views:
        if view.status == JobStatus.QUEUING and view.queue:
            waiting_by_queue.setdefault(view.queue, set()).add((view.kind, view.namespace, view.name))
    from_status: dict[tuple[str, str, str], int] = {}
    trusted: set[str] = set()
    for name, queue in queues.items():
        items, whole = _status_items(queue)
        listed = set()
        for item in items:
            key = (str(item.get("kind") or "Job"), str(item.get("namespace") or ""), str(item.get("name") or ""))
            listed.add(key)
            position = item.get("position")
            if isinstance(position, int) and not isinstance(position, bool):
                from_status[key] = position
        if whole and listed == waiting_by_queue.get(name, set()):
            trusted.add(name)
    out = []
    for view in views:
        if view.status != JobStatus.QUEUING:
            out.append(view)
            continue
        key3 = (view.kind, view.namespace, view.name)
        if view.queue in trusted and key3 in from_status:
            out.append(dataclasses.replace(view, position=from_status[key3], position_source="status"))
        elif view.key in computed:
            out.append(dataclasses.replace(view, position=computed[view.key], position_source="computed"))
        elif key3 in from_status:
            out.append(dataclasses.replace(view, position=from_status[key3], position_source="status"))
        else:
            out.append(view)
    return out
