"""The pods the controller sees: indexed by owner, for the start check and for the quota's own accounting.

The controller watches every pod that has not finished, keeps a slim copy of each (:func:`pod_slim`: owner,
phase, node, request, what the scheduler and the kubelet say) and indexes them by namespace and controller
owner (:class:`PodIndex`). Each pass:

* :func:`check_starts` asks the core (:func:`webhook.core.startup.start_verdict`) about every released job
  that has not been seen started in its current admission: started, still waiting (until when), or failed
  (with the reason its pods give). The rules are in docs/start-timeout.md.
* :meth:`PodIndex.loose_pods` lists the pods bound in the tree's namespaces that no job of the queue accounts
  for (pods of Deployments, StatefulSets, a Pod owned by anything else): they use the quota all the same, so
  the queue counts them, and reclaim may evict them (:mod:`webhook.core.loose`, docs/reclaim.md).

What "seen started" means is remembered per admission id (the record's ``id``), in memory: after a restart
a released job whose pods all run is seen started again at once; one whose pods do not all run and whose
admission is older than the timeout fails its start then (a gang that lost a pod while the controller was
down is a broken gang all the same).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from webhook.api.objects import Doc, Obj, mapping, namespace_of, parse_time, resource_version_of
from webhook.controller.model import TrackedJob
from webhook.core.dra import pod_claim_refs
from webhook.core.loose import LoosePod
from webhook.core.quota import QuotaTree
from webhook.core.resources import EMPTY, Resources
from webhook.core.selectors import EMPTY_LABELS, FrozenLabels
from webhook.core.startup import PodState, StartStatus, StartVerdict, start_verdict
from webhook.core.workload import Phase, WorkloadError, running_pod_request
from webhook.kube.cache import RELIST, CacheEvent, WatchCache
from webhook.workloads.registry import job_owner_kinds

OwnerKey = tuple[str, str, str]
"""``(namespace, owner kind, owner name)``."""


def _items(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def pod_slim(pod: Obj) -> Doc:
    """What the start check and the loose pods read of a pod: identity, controller owner, phase, the scheduler's
    refusal and the first container waiting reason; its priority and creation time; and, for a pod no job kind
    owns, its labels (a PodDisruptionBudget selects it by them)."""
    metadata = mapping(pod.get("metadata"))
    status = mapping(pod.get("status"))
    owners = [
        {"kind": ref.get("kind"), "name": ref.get("name")}
        for ref in _items(metadata.get("ownerReferences"))
        if isinstance(ref, Mapping) and ref.get("controller") is True
    ]
    unschedulable = ""
    for condition in _items(status.get("conditions")):
        if isinstance(condition, Mapping) and condition.get("type") == "PodScheduled" and (
            condition.get("status") == "False"
        ):
            unschedulable = str(condition.get("message") or condition.get("reason") or "Unschedulable")
    reason = message = ""
    for key in ("initContainerStatuses", "containerStatuses"):
        for container in _items(status.get(key)):
            waiting = mapping(mapping(mapping(container).get("state")).get("waiting"))
            if waiting.get("reason") and not reason:
                reason, message = str(waiting.get("reason")), str(waiting.get("message") or "")
    spec = mapping(pod.get("spec"))
    try:
        request = running_pod_request(pod).to_spec()
    except WorkloadError:
        request = {}
    kept: Doc = {
        "name": metadata.get("name"),
        "namespace": metadata.get("namespace"),
        "resourceVersion": metadata.get("resourceVersion"),
        "ownerReferences": owners,
    }
    sized: Doc = {"nodeName": spec.get("nodeName") or "", "request": request}
    state: Doc = {"phase": status.get("phase") or "Pending"}
    for key in ("creationTimestamp", "uid"):
        if metadata.get(key):
            kept[key] = metadata[key]
    own, shared = pod_claim_refs(pod)
    if own or shared:
        sized["claims"] = {"own": list(own), "shared": list(shared)}
    priority = spec.get("priority")
    if isinstance(priority, int) and not isinstance(priority, bool) and priority:
        sized["priority"] = priority
    labels = metadata.get("labels")
    if isinstance(labels, Mapping) and labels and not any(owner["kind"] in job_owner_kinds() for owner in owners):
        kept["labels"] = {str(key): str(value) for key, value in labels.items()}
    if metadata.get("deletionTimestamp"):
        kept["deletionTimestamp"] = metadata["deletionTimestamp"]
    if status.get("startTime"):
        state["startTime"] = status["startTime"]
    if unschedulable:
        state["unschedulable"] = unschedulable[:500]
    if reason:
        state["waiting"] = {"reason": reason, "message": message[:500]}
    slim: Doc = {"metadata": kept, "spec": sized, "status": state}
    return slim


def pod_state(slim: Obj) -> PodState:
    metadata = mapping(slim.get("metadata"))
    status = mapping(slim.get("status"))
    waiting = mapping(status.get("waiting"))
    return PodState(
        name=str(metadata.get("name") or ""),
        phase=str(status.get("phase") or "Pending"),
        unschedulable=str(status.get("unschedulable") or ""),
        container_reason=str(waiting.get("reason") or ""),
        container_message=str(waiting.get("message") or ""),
        deleting=bool(metadata.get("deletionTimestamp")),
        started=parse_time(status.get("startTime")),
    )


def _owner_key(slim: Obj) -> OwnerKey | None:
    metadata = mapping(slim.get("metadata"))
    for ref in _items(metadata.get("ownerReferences")):
        if isinstance(ref, Mapping) and ref.get("kind") and ref.get("name"):
            return str(metadata.get("namespace") or ""), str(ref["kind"]), str(ref["name"])
    return None


@dataclass(frozen=True, slots=True)
class _Bound:
    """A pod bound to a node: its owner (``None``: it has no controller), and the pod as a loose pod (what it
    requests, its priority and creation time, its labels)."""

    owner: tuple[str, str] | None
    pod: LoosePod


Accounted = Callable[[str, str, str], bool]
"""Whether a job of the queue accounts for the pods naming an owner ``(namespace, kind, name)``."""


def _loose(bound: _Bound, accounted: Accounted) -> bool:
    """Whether no job accounts for a bound pod: it is not queued as a Pod itself, nor does a job's pods'
    owner name its owner."""
    pod = bound.pod
    if accounted(pod.namespace, "Pod", pod.name):
        return False
    return bound.owner is None or not accounted(pod.namespace, *bound.owner)


def accounted_by(jobs: Iterable[TrackedJob]) -> Accounted:
    """:data:`Accounted` over ``jobs``: each job accounts for the pods owned by itself and by the owners its
    adapter names (a RayJob's RayCluster). The controller asks its own index instead
    (``ClusterCache.accounts_for``); ``kq`` builds this from the jobs it read."""
    owners: set[tuple[str, str, str]] = set()
    for job in jobs:
        key = job.workload.key
        owners.add((key.namespace, key.kind, key.name))
        owners.update((key.namespace, *owner) for owner in job.adapter.pod_owners(job.obj))
    return lambda namespace, kind, name: (namespace, kind, name) in owners


def loose_pods_of(pods: Iterable[Obj], tree: QuotaTree, accounted: Accounted) -> list[LoosePod]:
    """The pods no job accounts for among raw ``pods`` (what :meth:`PodIndex.loose_pods` gives the controller,
    for ``kq``, which reads the pods itself): bound, unfinished, in a namespace of ``tree``."""
    out: list[LoosePod] = []
    for pod in pods:
        slim = pod_slim(pod)
        if not mapping(slim["spec"]).get("nodeName") or mapping(slim["status"]).get("phase") in ("Succeeded", "Failed"):
            continue
        if tree.leaf_for_namespace(namespace_of(slim)) is None:
            continue
        owner = _owner_key(slim)
        bound = _Bound(owner[1:] if owner else None, loose_pod(slim, owner[1:] if owner else None))
        if _loose(bound, accounted):
            out.append(bound.pod)
    return out


def loose_pod(slim: Obj, owner: tuple[str, str] | None) -> LoosePod:
    """A slim pod (:func:`pod_slim`) as :mod:`webhook.core.loose` reads it."""
    metadata = mapping(slim.get("metadata"))
    spec = mapping(slim.get("spec"))
    try:
        request = Resources.parse(mapping(spec.get("request")))
    except ValueError:
        request = EMPTY
    priority = spec.get("priority")
    labels = mapping(metadata.get("labels"))
    claims = mapping(spec.get("claims"))
    return LoosePod(
        namespace=str(metadata.get("namespace") or ""),
        name=str(metadata.get("name") or ""),
        request=request,
        priority=priority if isinstance(priority, int) else 0,
        created=parse_time(metadata.get("creationTimestamp")) or 0.0,
        owner_kind=owner[0] if owner else "",
        labels=FrozenLabels({str(key): str(value) for key, value in labels.items()}) if labels else EMPTY_LABELS,
        deleting=bool(metadata.get("deletionTimestamp")),
        uid=str(metadata.get("uid") or ""),
        claims=tuple(str(name) for name in _items(claims.get("own"))),
        shared_claims=tuple(str(name) for name in _items(claims.get("shared"))),
    )


class PodIndex:
    """The pods of the pod cache by their controller owner, kept up to date by the cache's listener."""

    def __init__(self) -> None:
        self._by_owner: dict[OwnerKey, dict[str, PodState]] = {}
        self._owner_of: dict[tuple[str, str], OwnerKey] = {}
        self._bound: dict[str, dict[str, _Bound]] = {}
        """Namespace -> pod name -> the pod, for bound pods that have not finished."""
        self.changed: set[OwnerKey] = set()
        """Owners whose pods changed since the controller last looked (it clears the set)."""
        self._versions: dict[OwnerKey, int] = {}
        self._tick = 0
        """Never reset, not even by a re-list: a version once read is never given to another state."""

    def version(self, owner: OwnerKey) -> int:
        """A number that changes whenever a pod of ``owner`` comes, changes or goes; 0 exactly when it has no
        pod (the same pods, none, whenever it reads 0)."""
        return self._versions.get(owner, 0)

    def _touched(self, owner: OwnerKey) -> None:
        if owner in self._by_owner:
            self._tick += 1
            self._versions[owner] = self._tick
        else:  # its last pod went: forget it, so owners of finished jobs do not pile up
            self._versions.pop(owner, None)
        self.changed.add(owner)

    def listener(self, cache: WatchCache, event: CacheEvent) -> None:
        """For :meth:`WatchCache.add_listener`."""
        if event.type == RELIST:
            self._by_owner.clear()
            self._owner_of.clear()
            self._bound.clear()
            self._versions.clear()
            for obj in cache.items():
                self._put(obj)
            self.changed.update(self._by_owner)
            return
        changed = event.obj
        if changed is None:
            return
        if event.type == "DELETED":
            self._drop(changed)
        else:
            self._put(changed)

    def _put(self, obj: Obj) -> None:
        self._drop(obj)
        owner = _owner_key(obj)
        state = pod_state(obj)
        spec = mapping(obj.get("spec"))
        if spec.get("nodeName") and state.phase not in ("Succeeded", "Failed"):
            namespace = str(mapping(obj.get("metadata")).get("namespace") or "")
            kind_name = owner[1:] if owner else None
            self._bound.setdefault(namespace, {})[state.name] = _Bound(kind_name, loose_pod(obj, kind_name))
        if owner is None:
            return
        self._by_owner.setdefault(owner, {})[state.name] = state
        self._owner_of[(owner[0], state.name)] = owner
        self._touched(owner)

    def _drop(self, obj: Obj) -> None:
        metadata = mapping(obj.get("metadata"))
        key = (str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))
        bound = self._bound.get(key[0])
        if bound is not None and bound.pop(key[1], None) is not None and not bound:
            del self._bound[key[0]]
        owner = self._owner_of.pop(key, None)
        if owner is None:
            return
        pods = self._by_owner.get(owner)
        if pods is not None:
            pods.pop(key[1], None)
            if not pods:
                del self._by_owner[owner]
        self._touched(owner)

    def loose_pods(self, tree: QuotaTree, accounted: Accounted) -> list[LoosePod]:
        """The bound, unfinished pods of the tree's namespaces that no job of the queue accounts for.
        ``accounted(namespace, kind, name)`` says whether a job does: kind ``Pod`` asks whether the pod itself
        is queued as a Pod (whatever owner it names), any other kind whether a job's pods name that owner. One
        lookup a pod: the pass does not walk its jobs for this."""
        out: list[LoosePod] = []
        for namespace, pods in self._bound.items():
            if tree.leaf_for_namespace(namespace) is None:
                continue
            out.extend(bound.pod for bound in pods.values() if _loose(bound, accounted))
        return out

    def pods_of(self, job: TrackedJob) -> list[PodState]:
        """The current pods of ``job`` (by the owners its adapter names)."""
        return self.pods_of_owners(owners_of(job))

    def running_by_owner(self, owners: Iterable[OwnerKey] | None = None) -> dict[OwnerKey, int]:
        """How many pods of each owner run (phase ``Running``), for owners with one: of every owner, or of
        ``owners`` only."""
        out = {}
        for owner in self._by_owner if owners is None else owners:
            running = sum(1 for pod in self._by_owner.get(owner, {}).values() if pod.phase == "Running")
            if running:
                out[owner] = running
        return out

    def pods_of_owners(self, owners: Iterable[OwnerKey]) -> list[PodState]:
        return [pod for owner in owners for pod in self._by_owner.get(owner, {}).values()]


def owners_of(job: TrackedJob) -> tuple[OwnerKey, ...]:
    """The pod owners of ``job`` (by the owners its adapter names), with its namespace."""
    namespace = job.workload.key.namespace
    return tuple((namespace, kind, name) for kind, name in job.adapter.pod_owners(job.obj))


@dataclass(frozen=True, slots=True)
class _Checked:
    """One job's last start verdict and what it was computed from."""

    version: str
    """The job's resourceVersion."""
    timeout: float
    owners: tuple[OwnerKey, ...]
    pods: tuple[int, ...]
    """:meth:`PodIndex.version` of each owner."""
    verdict: StartVerdict


class StartMemo:
    """The last start verdict of each released job, by admission id, so a pass re-checks only jobs whose
    verdict may have moved.

    :func:`~webhook.core.startup.start_verdict` reads the job (its expected pods, gang, admission time), its
    pods, the timeout and the clock; the clock only matters at the deadline. So a job still waiting keeps its
    verdict while its object (resourceVersion), its owners' pods (:meth:`PodIndex.version`) and the timeout
    are the same and its deadline has not come. Without this, every pass of a burst of admissions re-checked
    every released job that had not started yet (issue 23)."""

    def __init__(self) -> None:
        self._checked: dict[str, _Checked] = {}
        self.reused = 0
        """Verdicts reused (for tests)."""

    def verdict(self, job: TrackedJob, record_id: str, pods: PodIndex, *, now: float, timeout: float
                ) -> tuple[StartVerdict, tuple[OwnerKey, ...]]:
        """The job's start verdict now, and its pod owners."""
        version = resource_version_of(job.obj)
        last = self._checked.get(record_id) if record_id and version else None
        if (
            last is not None
            and last.version == version
            and last.timeout == timeout
            and last.verdict.status is StartStatus.WAITING
            and (last.verdict.deadline is None or now < last.verdict.deadline)
            and last.pods == tuple(pods.version(owner) for owner in last.owners)
        ):
            self.reused += 1
            return last.verdict, last.owners
        owners = owners_of(job)
        workload = job.workload
        record = job.record
        admitted_at = (record.admitted_at if record is not None else 0.0) or workload.admitted_at or workload.created
        verdict = start_verdict(
            sum(pod_set.count for pod_set in workload.pod_sets),
            pods.pods_of_owners(owners),
            gang=job.adapter.needs_all_pods(job.obj),
            admitted_at=admitted_at,
            now=now,
            timeout=timeout,
        )
        if record_id and version:
            self._checked[record_id] = _Checked(version, timeout, owners,
                                                tuple(pods.version(owner) for owner in owners), verdict)
        return verdict, owners

    def keep_only(self, record_ids: set[str]) -> None:
        """Forget the jobs no longer released under these admissions."""
        for gone in self._checked.keys() - record_ids:
            del self._checked[gone]


@dataclass(slots=True)
class StartChecks:
    """What one pass's start check found."""

    failed: list[tuple[TrackedJob, StartVerdict]] = field(default_factory=list)
    """Released jobs that failed to start: to back off."""
    started_with_note: list[TrackedJob] = field(default_factory=list)
    """Started jobs that still carry a backoff note: to clear."""
    next_deadline: float | None = None
    """The earliest time a waiting job fails its start (for the controller's timer)."""
    awaiting: set[OwnerKey] = field(default_factory=set)
    """The pod owners of the jobs still waiting to start (a change of their pods asks for a pass)."""


def check_starts(
    jobs: Iterable[TrackedJob], pods: PodIndex, started: set[str], *, now: float, timeout: float,
    memo: StartMemo | None = None,
) -> StartChecks:
    """Check every released job not yet seen started in its admission (ids in ``started``, which this adds
    to). Pods and Pod-kind jobs that cannot be held again are not checked (nothing can hold them back).
    ``memo`` carries the verdicts over from the last pass (:class:`StartMemo`)."""
    out = StartChecks()
    memo = memo if memo is not None else StartMemo()
    for job in jobs:
        record = job.record
        workload = job.workload
        if workload.phase is not Phase.ADMITTED or record is None or not job.evictable:
            continue
        if record.id and record.id in started:
            if job.backoff is not None:
                out.started_with_note.append(job)
            continue
        verdict, owners = memo.verdict(job, record.id, pods, now=now, timeout=timeout)
        if verdict.status is StartStatus.STARTED:
            if record.id:
                started.add(record.id)
            if job.backoff is not None:
                out.started_with_note.append(job)
        elif verdict.status is StartStatus.FAILED:
            out.failed.append((job, verdict))
        else:
            out.awaiting.update(owners)
            if verdict.deadline is not None:
                out.next_deadline = verdict.deadline if out.next_deadline is None else min(
                    out.next_deadline, verdict.deadline
                )
    return out
