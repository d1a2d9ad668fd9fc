"""The controller's writes: releases, evictions, stale records, namespace labels, Queues and statuses.

Every write is guarded (a JSON patch that tests the version it was decided on, or a merge patch of what this
replica owns); what a write returns is remembered in the cache (:meth:`ClusterCache.assume`) so the next pass
sees it before the watch does. A refused write asks for another pass instead of failing the loop. Only the
Lease holder writes job patches and statuses.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from fractions import Fraction

from webhook.api.names import (
    ADMISSION_ANNOTATION,
    HANDOFF_STATUS,
    MANAGED_NAMESPACE_LABEL,
    PLACEMENT_NAMESPACE_LABEL,
    REASON_ADMITTED,
    REASON_EVICTED,
)
from webhook.api.namespace_labels import label_patch
from webhook.api.objects import Obj, meta, name_of
from webhook.controller import metrics
from webhook.controller.cache import NAMESPACES, ClusterCache
from webhook.controller.decide import (
    JobDecisions,
    JobReclaim,
    NamespaceAction,
    PassRecord,
    QueueAction,
    namespace_actions,
    queue_actions,
    queue_statuses,
    tree_status,
    with_published_estimates,
)
from webhook.controller.eta import EtaStatus
from webhook.controller.events import EventGate
from webhook.controller.evictions import PodEvictions, PodVictim
from webhook.controller.model import TrackedJob
from webhook.controller.records import AdmissionRecord, EvictionNote, admit_patch, clear_record_patch, evict_patch, kv
from webhook.controller.settings import ControllerSettings
from webhook.core.quota import QuotaTree, queue_name
from webhook.core.rate import format_rate
from webhook.kube.cache import WatchCache
from webhook.kube.client import KubeApiError, KubeClient, ResourceRef
from webhook.kube.events import EventRecorder
from webhook.workloads.base import JSONPatch

log = logging.getLogger("webhook.controller")


@dataclass(slots=True)
class Stats:
    """Counters for tests, logs and metrics."""

    passes: int = 0
    admitted: int = 0
    evicted: int = 0
    conflicts: int = 0
    errors: int = 0
    status_writes: int = 0
    backed_off: int = 0
    queue_writes: int = 0
    namespace_writes: int = 0
    last_pass_seconds: float = 0.0
    kinds: list[str] = field(default_factory=list)
    last_pass: PassRecord | None = None
    """This replica's last pass and its inputs (the read API serves its positions and why each job waits)."""


@dataclass(frozen=True, slots=True)
class WriterSettings:
    """What the writer reads of the controller's settings (:func:`writer_settings`)."""

    queue_namespace: str
    strict_priority: bool
    """Written into the Queues the writer creates and fixes."""
    oversell_rate: Fraction
    """Written into the Queues, and named in the Event of each admission."""
    queue_item_cap: int
    """The most jobs a Queue's ``status`` lists."""
    status_interval: float
    """Seconds between two writes of one object's ``status``."""
    write_concurrency: int
    """Job writes in flight at once."""


def writer_settings(settings: ControllerSettings) -> WriterSettings:
    return WriterSettings(settings.queue_namespace, settings.strict_priority, settings.oversell_rate,
                          settings.queue_item_cap, settings.status_interval, settings.write_concurrency)


@dataclass(slots=True)
class _StatusMemory:
    payload: object = None
    at: float = float("-inf")


@dataclass(eq=False)
class Writer:
    """Carries a pass's decisions out against the API (see the module). ``poke`` asks for another pass."""

    client: KubeClient
    settings: WriterSettings
    cache: ClusterCache
    _: KW_ONLY
    events: EventRecorder
    gate: EventGate
    stats: Stats
    is_leader: Callable[[], bool]
    poke: Callable[[], None]
    wall: Callable[[], float]
    clock: Callable[[], float]
    status_due: float | None = field(default=None, init=False)
    """When (monotonic) a status held back by ``status_interval`` may be written: a pass is due then."""
    evictions: PodEvictions = field(init=False)
    """Evicts the pods reclaim takes (:mod:`webhook.controller.evictions`)."""
    _rate_text: str = field(init=False)
    _statuses: dict[str, _StatusMemory] = field(default_factory=dict, init=False)
    _routed: set[str] = field(default_factory=set, init=False)
    """The namespaces seen with a valid ResourcePolicy since their placement label was set: when their policy
    goes, so does the label, at once (:func:`namespace_actions`)."""
    _listed: set[str] = field(default_factory=set, init=False)
    """The managed namespaces seen listed by the tree: when the tree drops one, its labels go at once."""
    _status_modes: dict[str, str | None] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self._rate_text = format_rate(self.settings.oversell_rate)
        self.evictions = PodEvictions(self.client, self.events, clock=self.clock)

    def forget(self) -> None:
        """Forget the statuses this replica remembers writing (another replica may have written since)."""
        self._statuses.clear()

    def failed(self, what: str, target: str, error: KubeApiError) -> None:
        """Log a write the API refused and ask for another pass."""
        self.stats.errors += 1
        log.warning(kv(component="controller", event="write_failed", action=what, target=target,
                       status=error.status, error=error.message[:300] or error.reason))
        self.poke()

    # Namespaces and Queues ---------------------------------------------------------------------------------
    async def sync_namespaces(self, tree: QuotaTree | None) -> None:
        """Label the tree's namespaces managed and the placement ones (:func:`namespace_actions`)."""
        cache = self.cache
        placement, namespaces = cache.placement_namespaces(), cache.by_name(cache.namespaces)
        self._routed = (self._routed | placement) & namespaces.keys()
        listed = tree.leaf_by_namespace.keys() if tree is not None else frozenset()
        self._listed = (self._listed | listed) & namespaces.keys()
        for action in namespace_actions(tree, namespaces, placement, self.wall(),
                                        routed_before=frozenset(self._routed), listed_before=frozenset(self._listed)):
            if action.label == PLACEMENT_NAMESPACE_LABEL and action.value is None:
                self._routed.discard(action.name)
            if action.label == MANAGED_NAMESPACE_LABEL and action.value is None:
                self._listed.discard(action.name)
            await self._label_namespace(action)

    async def _label_namespace(self, action: NamespaceAction) -> None:
        patch = label_patch(action.label, action.value, self.wall())
        try:
            updated = await self.client.merge_patch(NAMESPACES, action.name, patch)
        except KubeApiError as error:
            self.failed("label_namespace", action.name, error)
            return
        self.cache.assume(self.cache.namespaces, updated)
        self.stats.namespace_writes += 1
        log.info(kv(component="controller", decision="label-namespace" if action.value else "unlabel-namespace",
                    namespace=action.name, label=action.label))

    async def sync_queues(self, tree: QuotaTree | None) -> None:
        """Create, fix and delete Queues as the tree asks (:func:`queue_actions`)."""
        existing = self.cache.by_name(self.cache.queues)
        queue_namespace, strict = self.settings.queue_namespace, self.settings.strict_priority
        for action in queue_actions(tree, existing, queue_namespace, strict, self._rate_text):
            await self._queue_action(action)

    async def _queue_action(self, action: QueueAction) -> None:
        queues_ref = self.cache.queues_ref
        try:
            if action.verb == "create":
                updated: Obj | None = await self.client.create(queues_ref, action.body)
            elif action.verb == "patch":
                updated = await self.client.merge_patch(queues_ref, action.name, action.body)
            else:
                await self.client.request("DELETE", queues_ref.path(action.name))
                updated = None
        except KubeApiError as error:
            if (action.verb == "create" and error.conflict) or (action.verb == "delete" and error.not_found):
                return
            self.failed(f"{action.verb}_queue", action.name, error)
            return
        if updated is not None:
            self.cache.assume(self.cache.queues, updated)
        self.stats.queue_writes += 1
        log.info(kv(component="controller", decision=f"{action.verb}-queue", queue=action.name, reason=action.why))

    # Jobs --------------------------------------------------------------------------------------------------
    async def patch_job(self, job: TrackedJob, ops: list[JSONPatch], what: str) -> Obj | None:
        """Apply a guarded patch; ``None`` when it was refused (stale snapshot or API trouble)."""
        if not self.is_leader():
            metrics.FAILED.labels(what, "not_leader").inc()
            log.info(kv(component="controller", event="not_leader", skipped=what, job=str(job.workload.key)))
            return None
        ref, cache = self.cache.job_cache(job)
        key = job.workload.key
        try:
            updated = await self.client.json_patch(ref, key.name, ops, key.namespace)
        except KubeApiError as error:
            if error.status in (409, 422) or error.not_found:
                metrics.FAILED.labels(what, "stale").inc()
                self.stats.conflicts += 1
                log.info(kv(component="controller", event="stale", action=what, job=str(key), status=error.status,
                            error=error.message[:200]))
                self.poke()
                return None
            metrics.FAILED.labels(what, "api_error").inc()
            self.failed(what, str(key), error)
            return None
        self.cache.assume(cache, updated)
        return updated

    async def admit(self, job: TrackedJob, reason: str, reclaimed: str | None = None) -> bool:
        """Release the job with its admission record; whether the write went through."""
        workload = job.workload
        quota = job.leaf.full_name
        record = AdmissionRecord.new(quota, workload.request, self.wall())
        updated = await self.patch_job(job, admit_patch(job.adapter, job.obj, record), "admit")
        if updated is None:
            return False
        self.stats.admitted += 1
        self.gate.forget(workload.uid)
        metrics.ADMISSIONS.labels(quota).inc()
        metrics.WAIT.labels(quota).observe(max(0.0, record.admitted_at - workload.created))
        request = workload.request.describe()
        log.info(kv(component="controller", decision="admit", job=str(workload.key), quota=quota, request=request,
                    priority=workload.priority, reason=reason, admission=record.id))
        message = f"Admitted by quota {quota} (request {request}, oversell rate {self._rate_text})"
        if reclaimed:
            message += f" after reclaim: {reclaimed}"
        # Queued for the background sender: an Event never holds up the next write.
        self.events.emit(updated, "Normal", REASON_ADMITTED, "Admit", message)
        return True

    async def admit_all(self, jobs: Sequence[tuple[TrackedJob, str, str | None]]) -> None:
        """Admit ``(job, reason, reclaim reason)`` each, up to ``write_concurrency`` writes in flight (each
        admission is its own guarded patch, safe on its own; the apiserver, not this loop, is the bottleneck,
        so more writes in flight keep it busy)."""
        if not jobs:
            return
        limit = asyncio.Semaphore(max(1, self.settings.write_concurrency))

        async def one(job: TrackedJob, reason: str, reclaimed: str | None) -> None:
            async with limit:
                await self.admit(job, reason, reclaimed)

        await asyncio.gather(*(one(*entry) for entry in jobs))

    async def reclaim(self, plan: JobReclaim) -> bool:
        """Evict the plan's pods (they may be refused: first), then its jobs, then admit its preemptor;
        ``False`` (and no admission) when an eviction was refused."""
        preemptor = plan.preemptor
        for workload in plan.pods:
            if not self.is_leader():
                return False
            pod = PodVictim(workload.key, workload.uid, self._full_name(workload.quota),
                            f"{preemptor.workload.key} of quota {preemptor.leaf.full_name}", plan.reason)
            if not await self.evictions.evict(pod):
                log.info(kv(component="controller", decision="reclaim-aborted", job=str(preemptor.workload.key),
                            quota=preemptor.leaf.full_name, reason=f"could not evict {workload.key}"))
                self.poke()
                return False
            self.stats.evicted += 1
        for victim in plan.victims:
            note = EvictionNote(
                by=str(preemptor.workload.key), quota=preemptor.leaf.full_name, reason=plan.reason, at=self.wall()
            )
            updated = await self.patch_job(victim, evict_patch(victim.adapter, victim.obj, note), "evict")
            if updated is None:
                log.info(kv(component="controller", decision="reclaim-aborted", job=str(preemptor.workload.key),
                            quota=preemptor.leaf.full_name, reason=f"could not evict {victim.workload.key}"))
                return False
            self.stats.evicted += 1
            self.gate.forget(victim.workload.uid)
            metrics.EVICTIONS.labels(victim.leaf.full_name).inc()
            queue = queue_name(victim.leaf.name, victim.workload.key.namespace)
            log.info(kv(component="controller", decision="evict", job=str(victim.workload.key),
                        quota=victim.leaf.full_name, by=str(preemptor.workload.key), reason=plan.reason))
            self.events.emit(
                updated,
                "Warning",
                REASON_EVICTED,
                "Reclaim",
                f"Evicted back to queue {self.settings.queue_namespace}/{queue} at its original place: "
                f"{plan.reason}; reclaimed for {preemptor.workload.key} of quota {preemptor.leaf.full_name}",
            )
        return await self.admit(preemptor, "reclaim", plan.reason)

    def _full_name(self, quota: str) -> str:
        """A leaf's full name (``root/Department-a``) from its name, as the tree the last pass read has it."""
        tree = self.cache.tree_parsed[0]
        node = tree.nodes.get(quota.lower()) if tree is not None else None
        return node.full_name if node is not None else quota

    async def carry_out(self, decisions: JobDecisions) -> None:
        """Stale records, admissions and reclaims of a pass, in order.

        Plans in order: one with victims evicts them, then admits its preemptor; a run of plans without victims
        (they only held back jobs this pass does not admit) is a batch of admissions written concurrently, the
        first run together with the pass's own admissions. A plan may count on what the plans before it freed,
        never on what later ones free; the late admissions only once every plan went through."""
        for job in decisions.stale_records:
            await self.clear_record(job)
        batch: list[tuple[TrackedJob, str, str | None]] = [(job, "fits", None) for job in decisions.admissions]
        reclaim_ok = True
        for plan in decisions.reclaims:
            if not plan.victims and not plan.pods:
                batch.append((plan.preemptor, "reclaim", plan.reason))
                continue
            await self.admit_all(batch)
            batch = []
            reclaim_ok = await self.reclaim(plan) and reclaim_ok
        await self.admit_all(batch)
        if reclaim_ok:
            await self.admit_all([(job, "fits after the reclaims", None) for job in decisions.late_admissions])
        elif decisions.late_admissions:
            self.poke()

    async def clear_record(self, job: TrackedJob) -> None:
        """Drop the admission record a held job still carries."""
        ops = clear_record_patch(job.obj)
        if not ops:
            return
        if await self.patch_job(job, ops, "clear-record") is not None:
            log.info(kv(component="controller", decision="clear-record", job=str(job.workload.key),
                        quota=job.leaf.full_name, reason=f"held again, {ADMISSION_ANNOTATION} was stale"))

    # Status ------------------------------------------------------------------------------------------------
    @staticmethod
    def _keeping(wanted: Obj, obj: Obj, field: str) -> Obj:
        """``wanted`` with the ``field`` that ``obj``'s status holds, when ``wanted`` has none. The estimates' run-time
        history (a Queue's) and control plane's time (the tree's) live in the status across restarts (docs/eta.md):
        a pass made before the estimator read them back, or with estimates off, leaves them as they are."""
        current = obj.get("status")
        kept = current.get(field) if isinstance(current, Mapping) else None
        return {**wanted, field: kept} if kept and field not in wanted else wanted

    async def write_statuses(self, tree: QuotaTree, tree_obj: Obj, decisions: JobDecisions,
                             eta: EtaStatus | None = None) -> None:
        """Every Queue's ``status`` (with the start estimates ``eta`` has) and the tree's (each at most once per
        ``status_interval``)."""
        self.status_due = None
        cache = self.cache
        queues = cache.by_name(cache.queues)
        for name, wanted in queue_statuses(tree, decisions, self.settings.queue_item_cap, eta).items():
            obj = queues.get(name)
            if obj is not None:
                await self._write_status(cache.queues_ref, cache.queues, obj,
                                         self._keeping(wanted, obj, "runtimeHistory"), estimates=eta is not None)
        status = tree_status(tree, decisions)
        if eta is not None and eta.handoff:
            status[HANDOFF_STATUS] = eta.handoff
        await self._write_status(cache.trees_ref, cache.trees, tree_obj,
                                 self._keeping(status, tree_obj, HANDOFF_STATUS))
        live = {f"{plural}/{name_of(obj)}/{meta(obj).get('uid') or ''}" for plural, obj in (
            *((cache.queues_ref.plural, obj) for obj in queues.values()), (cache.trees_ref.plural, tree_obj))}
        for key in [key for key in self._statuses if key not in live]:
            del self._statuses[key]

    async def _write_status(
        self, ref: ResourceRef, cache: WatchCache, obj: Obj, status: Obj, *, estimates: bool = False
    ) -> None:
        """Write ``status`` unless it is what ``obj`` holds or this replica wrote last; with ``estimates`` (a
        Queue's), also when only start estimates moved, and too little to be worth a write
        (:func:`with_published_estimates`)."""
        name = name_of(obj)
        # Keyed by uid too: a Queue or tree deleted and re-created under the same name is a new object with no
        # status, whatever this replica last wrote on the old one.
        memory = self._statuses.setdefault(f"{ref.plural}/{name}/{meta(obj).get('uid') or ''}", _StatusMemory())
        if obj.get("status") == status or memory.payload == status:
            return
        if estimates and with_published_estimates(status, obj.get("status"), self.wall()) == obj.get("status"):
            return  # the cache holds what this replica wrote (assumed at once)
        now = self.clock()
        due = memory.at + self.settings.status_interval
        if now < due:
            self.status_due = due if self.status_due is None else min(self.status_due, due)
            return
        if not self.is_leader():
            return
        ops = [{"op": "add", "path": "/status", "value": dict(status)}]
        mode = self._status_modes.get(ref.plural, "status")
        try:
            updated = await self.client.json_patch(ref, name, ops, subresource=mode)
        except KubeApiError as error:
            if error.not_found and mode == "status":
                self._status_modes[ref.plural] = None
                try:
                    updated = await self.client.json_patch(ref, name, ops)
                except KubeApiError as second:
                    self.failed("write_status", f"{ref.plural}/{name}", second)
                    return
            else:
                self.failed("write_status", f"{ref.plural}/{name}", error)
                return
        memory.payload = status
        memory.at = now
        self.cache.assume(cache, updated)
        self.stats.status_writes += 1
        log.debug(kv(component="controller", event="status_written", object=f"{ref.plural}/{name}"))
