"""The queue controller: informers feed a snapshot, one debounced loop decides, writers carry it out.

Design (as Kueue's): watch caches (list + watch, re-list on 410, see :mod:`webhook.kube.cache`) keep the
ElasticQuotaTree, Queues, Namespaces, PriorityClasses and every installed job kind in memory; any change
marks the state dirty; a single loop waits for that (or a periodic tick), builds immutable values, calls the
pure :func:`webhook.controller.decide.decide` (the core's pass) and carries out its decisions with guarded API
writes. Only the Lease holder writes (followers keep their caches warm). Everything is rebuilt from the API
after a restart: the admission records on the jobs are the ledger.

Objects this replica patched are remembered until the watch delivers that version (or a newer one), so a
pass that runs before the watch caught up never decides on a stale view of its own writes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from webhook.controller import metrics
from webhook.controller.decide import (
    JobDecisions,
    JobReclaim,
    NamespaceAction,
    QueueAction,
    decide,
    namespace_actions,
    queue_actions,
    queue_statuses,
    reason_key,
    tree_status,
)
from webhook.controller.events import EVENTS, QUEUED_KEY_ANNOTATION, EventGate, EventRecorder, queued_memory
from webhook.controller.leader import LeaderElector
from webhook.controller.lifecycle import JobLifecycle
from webhook.controller.model import TrackedJob, track
from webhook.controller.records import (
    ADMISSION_ANNOTATION,
    COMPONENT,
    AdmissionRecord,
    EvictionNote,
    admit_patch,
    clear_record_patch,
    evict_patch,
    kv,
    resource_version,
)
from webhook.controller.settings import ControllerSettings, settings_from_args
from webhook.controller.starts import PodIndex, check_starts, pod_slim
from webhook.core.fit import format_rate
from webhook.core.placement import PolicyError, parse_policy
from webhook.core.queueing import Policy
from webhook.core.quota import QuotaTree, queue_name
from webhook.core.treechoice import honoured_tree
from webhook.core.workload import WorkloadError
from webhook.kube.cache import ApiListWatch, CacheEvent, WatchCache
from webhook.kube.client import KubeApiError, KubeClient, ResourceRef
from webhook.kube.slim import SlimListWatch
from webhook.workloads.base import QUOTA_LABEL, Adapter, JSONPatch
from webhook.workloads.registry import all_adapters

log = logging.getLogger("webhook.controller")

TREE_GROUP, TREE_VERSION, TREE_PLURAL = "scheduling.sigs.k8s.io", "v1beta1", "elasticquotatrees"
QUEUE_GROUP, QUEUE_VERSION, QUEUE_PLURAL = "scheduling.x-k8s.io", "v1alpha1", "queues"
NAMESPACES = ResourceRef("", "v1", "namespaces")
PRIORITY_CLASSES = ResourceRef("scheduling.k8s.io", "v1", "priorityclasses")
PODS = ResourceRef("", "v1", "pods")
POLICIES = ResourceRef("scheduling.alibabacloud.com", "v1alpha1", "resourcepolicies")
UNFINISHED_PODS = "status.phase!=Succeeded,status.phase!=Failed"

ObjKey = tuple[str, str, str]
"""``(cache name, namespace, name)``."""


def _rv(obj: Mapping[str, Any]) -> int:
    try:
        return int(resource_version(obj))
    except ValueError:
        return -1


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = obj.get("metadata")
    return metadata if isinstance(metadata, Mapping) else {}


def _name(obj: Mapping[str, Any]) -> str:
    return str(_meta(obj).get("name") or "")


def _group_path(group: str, version: str) -> str:
    """The discovery path of an API group version."""
    return f"/apis/{group}/{version}" if group else f"/api/{version}"


def _lists(listing: Mapping[str, Any], plural: str) -> bool:
    """Whether a discovery ``APIResourceList`` names the resource ``plural``."""
    resources = listing.get("resources")
    return isinstance(resources, list) and any(
        isinstance(item, Mapping) and item.get("name") == plural for item in resources
    )


def _has_eci_unit(obj: Mapping[str, Any]) -> bool:
    """Whether a ResourcePolicy is valid and has an ``eci`` unit (its pods need the virtual node's toleration)."""
    try:
        return parse_policy(obj).has_eci_unit
    except PolicyError:
        return False


def choose_tree(objects: Sequence[Mapping[str, Any]]) -> tuple[Mapping[str, Any] | None, QuotaTree | None, str | None]:
    """The honoured ElasticQuotaTree among the objects of the tree namespace (:mod:`webhook.core.treechoice`):
    ``(object, parsed tree, problem)``; the tree is ``None`` when there is no object or it is invalid."""
    honoured = honoured_tree(objects, _namespace_of(objects))
    return honoured.obj, honoured.tree, honoured.problem


def _namespace_of(objects: Sequence[Mapping[str, Any]]) -> str:
    """The namespace the tree cache watches (all its objects are in it)."""
    return next((str(_meta(obj).get("namespace")) for obj in objects if _meta(obj).get("namespace")), "kube-system")


@dataclass(slots=True)
class _StatusMemory:
    payload: Any = None
    at: float = float("-inf")


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


class Controller(JobLifecycle):
    """One replica of the queue controller. ``await controller.run(stop)``."""

    def __init__(
        self,
        client: KubeClient,
        settings: ControllerSettings,
        *,
        wall: Callable[[], float] = time.time,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.settings = settings
        metrics.OVERSELL.set(float(settings.oversell_rate))
        self._rate_text = format_rate(settings.oversell_rate)
        self._wall = wall
        self._clock = clock
        self.trees_ref = ResourceRef(TREE_GROUP, TREE_VERSION, TREE_PLURAL, settings.tree_namespace)
        self.queues_ref = ResourceRef(QUEUE_GROUP, QUEUE_VERSION, QUEUE_PLURAL, settings.queue_namespace)
        self.trees = self._cache("elasticquotatrees", self.trees_ref)
        self.queues = self._cache("queues", self.queues_ref)
        self.namespaces = self._cache("namespaces", NAMESPACES)
        self.priority_classes = self._cache("priorityclasses", PRIORITY_CLASSES)
        self.policies = self._cache("resourcepolicies", POLICIES)
        """ResourcePolicies: namespaces outside the tree with an eci unit get the placement label."""
        self._eci_policies: dict[tuple[str, str], tuple[str, bool]] = {}
        """Per policy: ``(resourceVersion, has a valid eci unit)``."""
        self.pod_index = PodIndex()
        self.pods = WatchCache(
            "pods", SlimListWatch(ApiListWatch(client, PODS, field_selector=UNFINISHED_PODS), pod_slim)
        )
        """Every unfinished pod, slim: the start check, and the usage of pods no job accounts for."""
        self.pods.add_listener(self._pod_changed)
        self._started: set[str] = set()
        """Admission ids of released jobs seen started (docs/start-timeout.md)."""
        self._awaiting: set[tuple[str, str, str]] = set()
        self._timer_due: float | None = None
        """When (monotonic) a start deadline or a retry time comes: a pass is due then."""
        self.job_caches: dict[str, tuple[Adapter, ResourceRef, WatchCache]] = {}
        self._job_cache_tasks: dict[str, asyncio.Task[None]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._dirty = asyncio.Event()
        self._assumed: dict[ObjKey, Mapping[str, Any]] = {}
        self._memo: dict[ObjKey, tuple[int, int, int, TrackedJob | str]] = {}
        self._tree_epoch = 0
        self._tree_seen_epoch = -1
        self._tree_version = 0
        self._tree_spec_key: str | None = None
        self._tree_parsed: tuple[QuotaTree | None, str | None] = (None, None)
        self._tree_obj: Mapping[str, Any] | None = None
        self._priority_epoch = 0
        self._priority_map: dict[str, int] = {}
        self._priority_map_epoch = -1
        self._statuses: dict[str, _StatusMemory] = {}
        self._status_due: float | None = None
        self._gate = EventGate(settings.event_interval, clock)
        self._gate_ready = True
        """False while a new leader reads back the Queued events the previous one sent (none is sent then)."""
        self._size_warned: dict[str, str] = {}
        self._held_told: dict[str, str] = {}
        """Uid -> missing PriorityClass of the held jobs told why (Event ``Held``)."""
        self._outside_told: set[str] = set()
        """Uids of jobs told they run without having been admitted (Event ``RunsOutsideQueue``)."""
        self._reported_problem: str | None = None
        self._status_modes: dict[str, str | None] = {}
        self.events = EventRecorder(client, settings.identity, wall=wall)
        self.elector: LeaderElector | None = None
        if settings.leader_elect:
            self.elector = LeaderElector(
                client,
                namespace=settings.lease_namespace,
                name=settings.lease_name,
                identity=settings.identity,
                lease_duration=settings.lease_duration,
                renew_deadline=settings.renew_deadline,
                retry_period=settings.retry_period,
                on_change=self._leadership_changed,
                clock=clock,
                wall=wall,
            )
        self.stats = Stats()
        self.ready = asyncio.Event()
        """Set once every cache listed and discovery ran (the first pass can happen)."""

    # Wiring ------------------------------------------------------------------------------------------------
    def _cache(self, name: str, ref: ResourceRef, label_selector: str | None = None) -> WatchCache:
        cache = WatchCache(name, ApiListWatch(self.client, ref, label_selector=label_selector))
        cache.add_listener(self._changed)
        return cache

    def _changed(self, cache: WatchCache, event: CacheEvent) -> None:
        if cache is self.priority_classes:
            self._priority_epoch += 1
        elif cache is self.trees:
            self._tree_epoch += 1
        self._dirty.set()

    def _base_caches(self) -> list[WatchCache]:
        return [self.trees, self.queues, self.namespaces, self.priority_classes, self.policies, self.pods]

    def _leadership_changed(self, leading: bool) -> None:
        # Another replica may have written in between: forget what this one remembers having written.
        self._statuses.clear()
        self._gate.reset()
        if leading:
            self._read_back_queued_events()
        metrics.LEADER.set(1 if leading else 0)
        if not leading:
            metrics.clear_quota_gauges()
        self._dirty.set()

    def _read_back_queued_events(self) -> None:
        """Hold Queued events until :meth:`_seed_gate` has read back the ones already sent."""
        self._gate_ready = False
        self._start(self._seed_gate(), "seed-queued-events")

    async def _seed_gate(self) -> None:
        """Read back the Queued events already sent (by the previous leader, or this replica before a restart)
        so waiting jobs are not told their unchanged place again; bounded, and on failure the events are
        simply sent again."""
        seen: list[Mapping[str, Any]] = []
        selector = f"source={COMPONENT},reason=Queued"
        try:
            token: str | None = None
            for _ in range(self.settings.event_readback_pages):
                page = await self.client.list_page(EVENTS, limit=500, continue_token=token, field_selector=selector)
                seen.extend(item for item in page.get("items") or () if isinstance(item, Mapping))
                token = (page.get("metadata") or {}).get("continue") or None
                if token is None:
                    break
        except KubeApiError as error:
            log.warning(kv(component="controller", event="queued_events_unread", status=error.status,
                           error=error.message[:300] or error.reason))
        finally:
            for uid, (key, age) in queued_memory(seen, self._wall()).items():
                self._gate.seed(uid, key, age)
            self._gate_ready = True
            self._dirty.set()

    def is_leader(self) -> bool:
        return self.elector is None or self.elector.is_leader()

    def poke(self) -> None:
        """Ask for a pass soon."""
        self._dirty.set()

    def _start(self, coroutine: Awaitable[None], name: str) -> None:
        self._tasks.append(asyncio.ensure_future(coroutine))
        self._tasks[-1].set_name(name)

    async def run(self, stop: asyncio.Event) -> None:
        """Run until ``stop`` is set (then release the Lease) or the task is cancelled (a crash: the Lease
        is left to expire)."""
        clean = False
        if self.elector is None:
            metrics.LEADER.set(1)
        try:
            for cache in self._base_caches():
                self._start(cache.run(), f"cache-{cache.name}")
            self._start(self.events.run(), "events")
            if self.elector is not None:
                self._start(self.elector.run(), "leader-election")
            else:
                self._read_back_queued_events()
            self._start(self._discovery_loop(), "discovery")
            loop = asyncio.ensure_future(self._loop())
            self._tasks.append(loop)
            stopper = asyncio.ensure_future(stop.wait())
            try:
                await asyncio.wait([loop, stopper], return_when=asyncio.FIRST_COMPLETED)
            finally:
                stopper.cancel()
            if loop.done() and not loop.cancelled():
                failure = loop.exception()
                if failure is not None:
                    raise failure
            clean = True
            await self.events.flush(2.0)
        finally:
            tasks, self._tasks = self._tasks, []
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if clean and self.elector is not None and self.settings.release_on_stop:
                await self.elector.release()
            metrics.LEADER.set(0)

    # Discovery ---------------------------------------------------------------------------------------------
    async def _served(self, adapter: Adapter) -> str | None:
        """The first version of the adapter's kind the API serves, ``None`` when not installed."""
        for version in adapter.versions:
            try:
                listing = await self.client.request("GET", _group_path(adapter.group, version))
            except KubeApiError as error:
                if error.status in (404, 503):
                    continue
                raise
            if _lists(listing, adapter.plural):
                return version
        return None

    async def _gone(self, ref: ResourceRef) -> bool:
        """Whether the API says for sure that ``ref`` is no longer served (its CRD was removed): its group
        version is unknown (404) or lists no such resource. Any other failure is not proof."""
        try:
            listing = await self.client.request("GET", _group_path(ref.group, ref.version))
        except KubeApiError as error:
            return error.status == 404
        return isinstance(listing.get("resources"), list) and not _lists(listing, ref.plural)

    async def discover(self) -> None:
        """Start a cache for every supported job kind that the API serves and has none yet; stop the cache
        of a kind the API no longer serves (its CRD was uninstalled), so it does not retry forever."""
        for adapter in all_adapters():
            key = f"{adapter.kind}.{adapter.group or 'core'}"
            if key in self.job_caches:
                _, ref, cache = self.job_caches[key]
                if await self._gone(ref):
                    self._stop_job_cache(key, cache)
                continue
            version = await self._served(adapter)
            if version is None:
                continue
            ref = ResourceRef(adapter.group, version, adapter.plural)
            # Plain Pods: only the ones the webhook tagged (a Job's pods are tagged too; adapter.manages
            # leaves them out).
            selector = QUOTA_LABEL if adapter.gates_at_creation_only else None
            cache = self._cache(f"{adapter.plural}.{adapter.group or 'core'}", ref, selector)
            self.job_caches[key] = (adapter, ref, cache)
            self.stats.kinds.append(key)
            self._start(cache.run(), f"cache-{cache.name}")
            self._job_cache_tasks[key] = self._tasks[-1]
            log.info(kv(component="controller", event="watching", kind=adapter.kind, apiVersion=ref.api_version))

    def _stop_job_cache(self, key: str, cache: WatchCache) -> None:
        task = self._job_cache_tasks.pop(key, None)
        if task is not None:
            task.cancel()
        del self.job_caches[key]
        self.stats.kinds.remove(key)
        self._dirty.set()
        log.info(kv(component="controller", event="unwatching", kind=key, reason="no longer served",
                    objects=len(cache)))

    async def _discovery_loop(self) -> None:
        while True:
            try:
                await self.discover()
                if not self.ready.is_set():
                    caches = self._base_caches()
                    caches += [cache for _, _, cache in self.job_caches.values()]
                    await asyncio.gather(*(cache.synced.wait() for cache in caches))
                    self.ready.set()
                    self._dirty.set()
                    log.info(kv(component="controller", event="ready", kinds=",".join(self.stats.kinds),
                                identity=self.settings.identity))
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log.warning(kv(component="controller", event="discovery_failed", error=repr(error)))
                await asyncio.sleep(min(5.0, self.settings.discovery_interval))
                continue
            await asyncio.sleep(self.settings.discovery_interval)

    def _synced(self) -> bool:
        caches = self._base_caches()
        caches += [cache for _, _, cache in self.job_caches.values()]
        return self.ready.is_set() and all(cache.synced.is_set() for cache in caches)

    # The loop ----------------------------------------------------------------------------------------------
    async def _loop(self) -> None:
        failures = 0
        while True:
            timeout = self.settings.resync_period
            for due in (self._status_due, self._timer_due):
                if due is not None:
                    timeout = max(0.05, min(timeout, due - self._clock()))
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancellation that arrives
            # as the event is set, and the controller would never stop.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._dirty.wait()
            await asyncio.sleep(self.settings.debounce)
            self._dirty.clear()
            if not self._synced() or not self.is_leader():
                continue
            try:
                await self.reconcile()
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as error:
                failures += 1
                self.stats.errors += 1
                delay = min(30.0, 0.5 * 2**failures)
                log.exception(kv(component="controller", event="pass_failed", error=repr(error), retry_in=delay))
                await asyncio.sleep(delay)
                self._dirty.set()

    # Snapshot ----------------------------------------------------------------------------------------------
    def _view(self, cache: WatchCache) -> list[Mapping[str, Any]]:
        """The cache's objects, each replaced by this replica's newer write when the watch lags behind."""
        out = []
        seen: set[ObjKey] = set()
        for cached in cache.items():
            metadata = _meta(cached)
            key = (cache.name, str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))
            seen.add(key)
            assumed = self._assumed.get(key)
            if assumed is not None and _rv(cached) < _rv(assumed):
                out.append(assumed)
                continue
            if assumed is not None:
                del self._assumed[key]
            out.append(cached)
        for key in [key for key in self._assumed if key[0] == cache.name and key not in seen]:
            del self._assumed[key]
        return out

    def _assume(self, cache: WatchCache, obj: Mapping[str, Any]) -> None:
        metadata = _meta(obj)
        self._assumed[(cache.name, str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))] = obj

    def _tree(self) -> tuple[Mapping[str, Any] | None, QuotaTree | None, str | None]:
        """The honoured tree object and its parsed tree; the parsed tree (and :attr:`_tree_version`, which keys
        the job memo) only changes when the object's name or spec does, not on status writes."""
        if self._tree_seen_epoch != self._tree_epoch:
            self._tree_seen_epoch = self._tree_epoch
            objects = self._view(self.trees)
            chosen, _, _ = choose_tree(objects) if objects else (None, None, None)
            spec_key = None if chosen is None else json.dumps([_name(chosen), chosen.get("spec")], sort_keys=True)
            if spec_key != self._tree_spec_key or self._tree_version == 0:
                _, tree, problem = choose_tree(objects)
                self._tree_spec_key = spec_key
                self._tree_parsed = (tree, problem)
                self._tree_version += 1
            self._tree_obj = chosen
        tree, problem = self._tree_parsed
        return self._tree_obj, tree, problem

    def _priorities(self) -> dict[str, int]:
        if self._priority_map_epoch != self._priority_epoch:
            out: dict[str, int] = {}
            for obj in self.priority_classes.items():
                value = obj.get("value")
                if isinstance(value, int) and not isinstance(value, bool):
                    out[_name(obj)] = value
            self._priority_map = out
            self._priority_map_epoch = self._priority_epoch
        return self._priority_map

    def tracked_jobs(self, tree: QuotaTree) -> list[TrackedJob]:
        """Every job of a managed namespace, sized (jobs that cannot be sized get a Warning event once)."""
        priorities = self._priorities()
        out: list[TrackedJob] = []
        live: set[ObjKey] = set()
        unsized: set[str] = set()
        for adapter, _, cache in self.job_caches.values():
            for obj in self._view(cache):
                metadata = _meta(obj)
                namespace = str(metadata.get("namespace") or "")
                leaf = tree.leaf_for_namespace(namespace)
                if leaf is None or not adapter.manages(obj):
                    continue
                key = (cache.name, namespace, str(metadata.get("name") or ""))
                live.add(key)
                version = _rv(obj)
                memo = self._memo.get(key)
                if memo is not None and memo[:3] == (version, self._tree_version, self._priority_epoch):
                    job: TrackedJob | str = memo[3]
                else:
                    try:
                        job = track(adapter, obj, leaf, priorities)
                    except WorkloadError as error:
                        job = str(error)
                    self._memo[key] = (version, self._tree_version, self._priority_epoch, job)
                if isinstance(job, str):
                    unsized.add(str(metadata.get("uid") or ""))
                    self._warn_unsized(obj, adapter, job)
                    continue
                out.append(job)
        for key in [key for key in self._memo if key not in live]:
            del self._memo[key]
        for uid in [uid for uid in self._size_warned if uid not in unsized]:
            del self._size_warned[uid]
        return out

    def _accounts_for(self, jobs: Sequence[TrackedJob]) -> Callable[[str, str, str], bool]:
        """Whether a job of this pass accounts for the pods that name an owner ``(namespace, kind, name)``
        (kind ``Pod``: the pod queued as itself). Looked up in the pass's own memo of tracked jobs; only the jobs
        whose pods name another owner (a RayJob's RayCluster, an MPIJob's launcher Job) are walked, once, and
        only when a pod's owner is not a tracked job itself."""
        memo = self._memo
        caches = {adapter.kind: cache.name for adapter, _, cache in self.job_caches.values()}
        indirect = {adapter for adapter, _, _ in self.job_caches.values()
                    if type(adapter).pod_owners is not Adapter.pod_owners}
        others: set[tuple[str, str, str]] | None = None

        def accounted(namespace: str, kind: str, name: str) -> bool:
            nonlocal others
            cache = caches.get(kind)
            if cache is not None:
                entry = memo.get((cache, namespace, name))
                if entry is not None and isinstance(entry[3], TrackedJob):
                    return True
            if kind == "Pod" or not indirect:
                return False
            if others is None:
                others = {
                    (job.workload.key.namespace, *owner)
                    for job in jobs
                    if job.adapter in indirect
                    for owner in job.adapter.pod_owners(job.obj)
                }
            return (namespace, kind, name) in others

        return accounted

    def _warn_unsized(self, obj: Mapping[str, Any], adapter: Adapter, problem: str) -> None:
        uid = str(_meta(obj).get("uid") or "")
        if self._size_warned.get(uid) == problem:
            return
        self._size_warned[uid] = problem
        log.warning(kv(component="controller", decision="skip", job=f"{adapter.kind}/{_meta(obj).get('namespace')}/"
                       f"{_name(obj)}", reason=f"cannot size: {problem}"))
        if self.is_leader():
            self.events.emit(obj, "Warning", "CannotSize", "Queue",
                             f"kube-queue cannot size this job for its quota, so it is not queued: {problem}")

    # One pass ----------------------------------------------------------------------------------------------
    async def reconcile(self) -> JobDecisions | None:
        """One pass: namespaces, Queues, admissions, reclaims, events, statuses."""
        started = self._clock()
        self.stats.passes += 1
        tree_obj, tree, problem = self._tree()
        if problem is not None:
            if problem != self._reported_problem:
                log.warning(kv(component="controller", event="tree_invalid", reason=problem))
                self._reported_problem = problem
            return None
        self._reported_problem = None
        await self._sync_namespaces(tree)
        await self._sync_queues(tree)
        if tree is None or tree_obj is None:
            return None
        jobs = self.tracked_jobs(tree)
        foreign = self.pod_index.foreign_usage(tree, self._accounts_for(jobs))
        now = self._wall()
        checks = None
        if self.settings.start_timeout > 0:
            checks = check_starts(jobs, self.pod_index, self._started, now=now, timeout=self.settings.start_timeout)
            self._started &= {job.record.id for job in jobs if job.record is not None}
            self._awaiting = checks.awaiting
            if checks.failed:
                held = await self._back_off_all(jobs, checks, now)
                if held is None:
                    return None  # a failed start could not be held: decide on what is written, next pass
                jobs = held
            for job in checks.started_with_note:
                await self._clear_backoff(job)
        queues = {_name(obj): obj for obj in self._view(self.queues)}
        decisions = decide(
            tree,
            jobs,
            queues,
            oversell_rate=self.settings.oversell_rate,
            strict_priority=self.settings.strict_priority,
            reclaim_tries_per_quota=self.settings.reclaim_tries_per_quota,
            now=now,
            foreign=foreign,
            closing=frozenset(
                _name(obj) for obj in self._view(self.namespaces)
                if _meta(obj).get("deletionTimestamp") or (obj.get("status") or {}).get("phase") == "Terminating"
            ),
        )
        self._set_timer(checks, decisions, now)
        self._tell_outside(jobs)
        self._tell_held(decisions)
        for job in decisions.stale_records:
            await self._clear_record(job)
        # Plans in order: one with victims evicts them, then admits its preemptor; a run of plans without
        # victims (they only held back jobs this pass does not admit) is a batch of admissions written
        # concurrently, the first run together with the pass's own admissions. A plan may count on what the
        # plans before it freed, never on what later ones free.
        batch: list[tuple[TrackedJob, str, str | None]] = [(job, "fits", None) for job in decisions.admissions]
        reclaim_ok = True
        for plan in decisions.reclaims:
            if not plan.victims:
                batch.append((plan.preemptor, "reclaim", plan.reason))
                continue
            await self._admit_all(batch)
            batch = []
            reclaim_ok = await self._reclaim(plan) and reclaim_ok
        await self._admit_all(batch)
        if reclaim_ok:
            await self._admit_all([(job, "fits after the reclaims", None) for job in decisions.late_admissions])
        elif decisions.late_admissions:
            self._dirty.set()
        self._queued_events(decisions)
        await self._write_statuses(tree, tree_obj, decisions)
        self.stats.last_pass_seconds = self._clock() - started
        metrics.observe_pass(tree, decisions, self.stats.last_pass_seconds, self._wall())
        return decisions

    # Namespaces and Queues ---------------------------------------------------------------------------------
    async def _sync_namespaces(self, tree: QuotaTree | None) -> None:
        namespaces = {_name(obj): obj for obj in self._view(self.namespaces)}
        policies = self._view(self.policies)
        placement = frozenset(str(_meta(obj).get("namespace") or "") for obj in policies if self._eci_policy(obj))
        if len(self._eci_policies) > len(policies):  # some were deleted: forget them
            live = {(str(_meta(obj).get("namespace") or ""), _name(obj)) for obj in policies}
            self._eci_policies = {key: value for key, value in self._eci_policies.items() if key in live}
        for action in namespace_actions(tree, namespaces, placement):
            await self._label_namespace(action)

    def _eci_policy(self, obj: Mapping[str, Any]) -> bool:
        """:func:`_has_eci_unit`, parsed once per version of the policy (not on every pass)."""
        key = (str(_meta(obj).get("namespace") or ""), _name(obj))
        version = resource_version(obj)
        known = self._eci_policies.get(key)
        if known is None or known[0] != version or not version:
            known = self._eci_policies[key] = (version, _has_eci_unit(obj))
        return known[1]

    async def _label_namespace(self, action: NamespaceAction) -> None:
        patch = {"metadata": {"labels": {action.label: action.value}}}
        try:
            updated = await self.client.merge_patch(NAMESPACES, action.name, patch)
        except KubeApiError as error:
            self._write_failed("label_namespace", action.name, error)
            return
        self._assume(self.namespaces, updated)
        self.stats.namespace_writes += 1
        log.info(kv(component="controller", decision="label-namespace" if action.value else "unlabel-namespace",
                    namespace=action.name, label=action.label))

    async def _sync_queues(self, tree: QuotaTree | None) -> None:
        existing = {_name(obj): obj for obj in self._view(self.queues)}
        for action in queue_actions(tree, existing, self.settings.queue_namespace, self.settings.strict_priority):
            await self._queue_action(action)

    async def _queue_action(self, action: QueueAction) -> None:
        try:
            if action.verb == "create":
                updated: Mapping[str, Any] | None = await self.client.create(self.queues_ref, action.body)
            elif action.verb == "patch":
                updated = await self.client.merge_patch(self.queues_ref, action.name, action.body)
            else:
                await self.client.request("DELETE", self.queues_ref.path(action.name))
                updated = None
        except KubeApiError as error:
            if (action.verb == "create" and error.is_conflict) or (action.verb == "delete" and error.is_not_found):
                return
            self._write_failed(f"{action.verb}_queue", action.name, error)
            return
        if updated is not None:
            self._assume(self.queues, updated)
        self.stats.queue_writes += 1
        log.info(kv(component="controller", decision=f"{action.verb}-queue", queue=action.name, reason=action.why))

    # Jobs --------------------------------------------------------------------------------------------------
    def _job_cache(self, job: TrackedJob) -> tuple[ResourceRef, WatchCache]:
        adapter = job.adapter
        _, ref, cache = self.job_caches[f"{adapter.kind}.{adapter.group or 'core'}"]
        return ref, cache

    async def _patch_job(self, job: TrackedJob, ops: list[JSONPatch], what: str) -> Mapping[str, Any] | None:
        """Apply a guarded patch; ``None`` when it was refused (stale snapshot or API trouble)."""
        if not self.is_leader():
            metrics.FAILED.labels(what, "not_leader").inc()
            log.info(kv(component="controller", event="not_leader", skipped=what, job=str(job.workload.key)))
            return None
        ref, cache = self._job_cache(job)
        key = job.workload.key
        try:
            updated = await self.client.json_patch(ref, key.name, ops, key.namespace)
        except KubeApiError as error:
            if error.status in (409, 422) or error.is_not_found:
                metrics.FAILED.labels(what, "stale").inc()
                self.stats.conflicts += 1
                log.info(kv(component="controller", event="stale", action=what, job=str(key), status=error.status,
                            error=error.message[:200]))
                self._dirty.set()
                return None
            metrics.FAILED.labels(what, "api_error").inc()
            self._write_failed(what, str(key), error)
            return None
        self._assume(cache, updated)
        return updated

    async def _admit(self, job: TrackedJob, reason: str, reclaimed: str | None = None) -> bool:
        workload = job.workload
        quota = job.leaf.full_name
        record = AdmissionRecord.new(quota, workload.request, self._wall())
        updated = await self._patch_job(job, admit_patch(job.adapter, job.obj, record), "admit")
        if updated is None:
            return False
        self.stats.admitted += 1
        self._gate.forget(workload.uid)
        metrics.ADMISSIONS.labels(quota).inc()
        metrics.WAIT.labels(quota).observe(max(0.0, record.admitted_at - workload.created))
        request = workload.request.describe()
        log.info(kv(component="controller", decision="admit", job=str(workload.key), quota=quota, request=request,
                    priority=workload.priority, reason=reason, admission=record.id))
        message = f"Admitted by quota {quota} (request {request}, oversell rate {self._rate_text})"
        if reclaimed:
            message += f" after reclaim: {reclaimed}"
        # Queued for the background sender: an Event never holds up the next write.
        self.events.emit(updated, "Normal", "Admitted", "Admit", message)
        return True

    async def _admit_all(self, jobs: Sequence[tuple[TrackedJob, str, str | None]]) -> None:
        """Admit ``(job, reason, reclaim reason)`` each, up to ``write_concurrency`` writes in flight (each
        admission is its own guarded patch, safe on its own; the apiserver, not this loop, is the bottleneck,
        so more writes in flight keep it busy)."""
        if not jobs:
            return
        limit = asyncio.Semaphore(max(1, self.settings.write_concurrency))

        async def one(job: TrackedJob, reason: str, reclaimed: str | None) -> None:
            async with limit:
                await self._admit(job, reason, reclaimed)

        await asyncio.gather(*(one(*entry) for entry in jobs))

    async def _reclaim(self, plan: JobReclaim) -> bool:
        preemptor = plan.preemptor
        for victim in plan.victims:
            note = EvictionNote(
                by=str(preemptor.workload.key), quota=preemptor.leaf.full_name, reason=plan.reason, at=self._wall()
            )
            updated = await self._patch_job(victim, evict_patch(victim.adapter, victim.obj, note), "evict")
            if updated is None:
                log.info(kv(component="controller", decision="reclaim-aborted", job=str(preemptor.workload.key),
                            quota=preemptor.leaf.full_name, reason=f"could not evict {victim.workload.key}"))
                return False
            self.stats.evicted += 1
            self._gate.forget(victim.workload.uid)
            metrics.EVICTIONS.labels(victim.leaf.full_name).inc()
            queue = queue_name(victim.leaf.name, victim.workload.key.namespace)
            log.info(kv(component="controller", decision="evict", job=str(victim.workload.key),
                        quota=victim.leaf.full_name, by=str(preemptor.workload.key), reason=plan.reason))
            self.events.emit(
                updated,
                "Warning",
                "Evicted",
                "Reclaim",
                f"Evicted back to queue {self.settings.queue_namespace}/{queue} at its original place: "
                f"{plan.reason}; reclaimed for {preemptor.workload.key} of quota {preemptor.leaf.full_name}",
            )
        return await self._admit(preemptor, "reclaim", plan.reason)

    def _backed_off(self) -> None:
        self.stats.backed_off += 1

    async def _clear_record(self, job: TrackedJob) -> None:
        ops = clear_record_patch(job.obj)
        if not ops:
            return
        if await self._patch_job(job, ops, "clear-record") is not None:
            log.info(kv(component="controller", decision="clear-record", job=str(job.workload.key),
                        quota=job.leaf.full_name, reason=f"held again, {ADMISSION_ANNOTATION} was stale"))

    def _write_failed(self, what: str, target: str, error: KubeApiError) -> None:
        self.stats.errors += 1
        log.warning(kv(component="controller", event="write_failed", action=what, target=target,
                       status=error.status, error=error.message[:300] or error.reason))
        self._dirty.set()

    # Events ------------------------------------------------------------------------------------------------
    def _queued_events(self, decisions: JobDecisions) -> None:
        if not self._gate_ready:
            return
        live: set[str] = set()
        for job in decisions.waiting:
            workload = job.workload
            live.add(workload.uid)
            reason = decisions.reasons.get(workload.key)
            key = reason_key(reason)
            if not self._gate.due(workload.uid, key):
                continue
            self._gate.mark(workload.uid, key)
            position = decisions.positions.get(workload.key, 0)
            policy = decisions.policies.get(job.leaf.key, Policy.ROUND).value
            queue = queue_name(job.leaf.name, workload.key.namespace)
            why = reason.explain() if reason is not None else "waiting for its turn"
            hopeless = reason is not None and any(blocker.never_fits for blocker in reason.blockers)
            log.info(kv(component="controller", decision="queue", job=str(workload.key), quota=job.leaf.full_name,
                        position=position, reason=why))
            self.events.emit(
                job.obj,
                "Warning" if hopeless else "Normal",
                "Queued",
                "Queue",
                f"Queued at position {position} in quota {job.leaf.full_name} (queue "
                f"{self.settings.queue_namespace}/{queue}, policy {policy}): {why}",
                annotations={QUEUED_KEY_ANNOTATION: key},
            )
        self._gate.keep_only(live)

    # Status ------------------------------------------------------------------------------------------------
    async def _write_statuses(self, tree: QuotaTree, tree_obj: Mapping[str, Any], decisions: JobDecisions) -> None:
        self._status_due = None
        queues = {_name(obj): obj for obj in self._view(self.queues)}
        for name, status in queue_statuses(tree, decisions, self.settings.queue_item_cap).items():
            obj = queues.get(name)
            if obj is not None:
                await self._write_status(self.queues_ref, self.queues, obj, status)
        await self._write_status(self.trees_ref, self.trees, tree_obj, tree_status(tree, decisions))
        live = {f"{plural}/{_name(obj)}/{_meta(obj).get('uid') or ''}" for plural, obj in (
            *((self.queues_ref.plural, obj) for obj in queues.values()), (self.trees_ref.plural, tree_obj))}
        for key in [key for key in self._statuses if key not in live]:
            del self._statuses[key]

    async def _write_status(
        self, ref: ResourceRef, cache: WatchCache, obj: Mapping[str, Any], status: Mapping[str, Any]
    ) -> None:
        name = _name(obj)
        # Keyed by uid too: a Queue or tree deleted and re-created under the same name is a new object with no
        # status, whatever this replica last wrote on the old one.
        memory = self._statuses.setdefault(f"{ref.plural}/{name}/{_meta(obj).get('uid') or ''}", _StatusMemory())
        if obj.get("status") == status or memory.payload == status:
            return
        now = self._clock()
        due = memory.at + self.settings.status_interval
        if now < due:
            self._status_due = due if self._status_due is None else min(self._status_due, due)
            return
        if not self.is_leader():
            return
        ops = [{"op": "add", "path": "/status", "value": dict(status)}]
        mode = self._status_modes.get(ref.plural, "status")
        try:
            updated = await self.client.json_patch(ref, name, ops, subresource=mode)
        except KubeApiError as error:
            if error.is_not_found and mode == "status":
                self._status_modes[ref.plural] = None
                try:
                    updated = await self.client.json_patch(ref, name, ops)
                except KubeApiError as second:
                    self._write_failed("write_status", f"{ref.plural}/{name}", second)
                    return
            else:
                self._write_failed("write_status", f"{ref.plural}/{name}", error)
                return
        memory.payload = status
        memory.at = now
        self._assume(cache, updated)
        self.stats.status_writes += 1
        log.debug(kv(component="controller", event="status_written", object=f"{ref.plural}/{name}"))


# Entry points --------------------------------------------------------------------------------------------------


async def run_controller(args: argparse.Namespace, api_client: KubeClient, stop: asyncio.Event) -> None:
    """Run the controller with the flags of :func:`add_controller_args` until ``stop`` is set. Returns at once
    when ``--no-controller`` was given."""
    settings = settings_from_args(args)
    if not settings.enabled:
        log.info(kv(component="controller", event="disabled", reason="--no-controller"))
        return
    log.info(
        kv(
            component="controller",
            event="starting",
            oversellrate=format_rate(settings.oversell_rate),
            strict_priority=str(settings.strict_priority).lower(),
            leader_elect=str(settings.leader_elect).lower(),
            identity=settings.identity,
        )
    )
    await Controller(api_client, settings).run(stop)


def controller_context(
    args: argparse.Namespace, client: KubeClient | Callable[[], KubeClient]
) -> Callable[[web.Application], contextlib.AbstractAsyncContextManager[None]]:
    """An aiohttp ``cleanup_ctx`` entry that runs the controller for the application's lifetime (nothing when
    ``--no-controller``). ``client`` may be a function, for a client made after the entry is registered."""

    @contextlib.asynccontextmanager
    async def context(app: web.Application) -> AsyncIterator[None]:
        stop = asyncio.Event()
        api = client() if callable(client) else client
        task = asyncio.ensure_future(run_controller(args, api, stop))
        try:
            yield
        finally:
            stop.set()
            try:
                async with asyncio.timeout(15):
                    await task
            except TimeoutError:
                log.warning(kv(component="controller", event="stop_timeout"))
            except Exception:
                log.exception(kv(component="controller", event="stopped_with_error"))

    return context

