"""The controller's watch-fed state: every object a pass reads, and the views a pass builds from them.

Watch caches (list + watch, re-list on 410, see :mod:`webhook.kube.cache`) keep the ElasticQuotaTree, Queues,
Namespaces, PriorityClasses, ResourcePolicies, PodDisruptionBudgets, LimitRanges, RuntimeClasses, unfinished
pods and every installed job kind in memory; any change calls the owner's ``on_change`` (the controller marks
itself dirty). Objects this replica patched are remembered (:meth:`ClusterCache.assume`) until the watch
delivers that version or a newer one, so a pass that runs before the watch caught up never decides on a stale
view of its own writes. The parsed tree, the PriorityClass map and each job's view
(:func:`webhook.controller.model.track`) are rebuilt only when what they are read from changed.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TypeVar

from webhook.api import kinds
from webhook.api.names import QUOTA_LABEL, TREE_NAMESPACE, UNFINISHED_PODS
from webhook.api.objects import Obj, meta, name_of, priority_values, resource_version_of, status_of
from webhook.controller.devices import DeviceWatch
from webhook.controller.jobindex import JobIndex, ObjKey, Unsized, rv
from webhook.controller.jobslim import job_slim
from webhook.controller.model import TrackedJob
from webhook.controller.records import kv
from webhook.controller.starts import PodIndex, pod_slim
from webhook.core.limitrange import ContainerDefaults, defaults_by_namespace
from webhook.core.loose import DisruptionBudget, read_budget
from webhook.core.placement import policy_set
from webhook.core.quota import QuotaTree
from webhook.core.treechoice import honoured_in, honoured_tree, oldest_tree_object
from webhook.kube.cache import RELIST, ApiListWatch, CacheEvent, ListWatch, WatchCache
from webhook.kube.client import KubeApiError, KubeClient, ResourceRef
from webhook.kube.shared import HONOURED_TREE, POLICY_SET, PRIORITY_VALUES, Derived, Make, SharedWatches, remade
from webhook.kube.slim import SlimListWatch
from webhook.workloads.base import Adapter
from webhook.workloads.overhead import Overheads, class_overheads
from webhook.workloads.registry import all_adapters

T = TypeVar("T")

log = logging.getLogger("webhook.controller")

NAMESPACES = ResourceRef.of(kinds.NAMESPACE)
PRIORITY_CLASSES = ResourceRef.of(kinds.PRIORITY_CLASS)
PODS = ResourceRef.of(kinds.POD)
POLICIES = ResourceRef.of(kinds.RESOURCE_POLICY)
BUDGETS = ResourceRef.of(kinds.POD_DISRUPTION_BUDGET)
LIMIT_RANGES = ResourceRef.of(kinds.LIMIT_RANGE)
RUNTIME_CLASSES = ResourceRef.of(kinds.RUNTIME_CLASS)
LIMIT_DEFAULTS = "limit-defaults"
"""The name the LimitRange defaults per namespace are shared by (:mod:`webhook.kube.shared`)."""
RUNTIME_OVERHEADS = "runtime-overheads"
"""The name each RuntimeClass's pod overhead is shared by."""


class Wake(enum.Enum):
    """What a change of a watched object asks of the loop (:meth:`ClusterCache.wake_for`)."""

    NOW = "now"
    """A pass soon (after the loop's ``debounce``)."""
    STATUS = "status"
    """A pass within the loop's ``status_debounce``: a change of status only."""
    NO = "no"
    """No pass: nothing a pass reads changed."""


STATUS_ONLY_SAME = ("generation", "labels", "annotations", "ownerReferences", "finalizers", "deletionTimestamp")
"""The metadata a status-only change leaves as it was (``generation`` moves with every spec change)."""


def status_only(event: CacheEvent) -> bool:
    """Whether a ``MODIFIED`` event changed the object's status only: same ``generation`` (the API server bumps
    it on every change of ``spec``; an object without one never counts as status-only) and the same
    :data:`STATUS_ONLY_SAME` metadata."""
    if event.old is None or event.obj is None:
        return False
    old, new = meta(event.old), meta(event.obj)
    if old.get("generation") is None:
        return False
    return all(old.get(name) == new.get(name) for name in STATUS_ONLY_SAME)


def _group_path(group: str, version: str) -> str:
    """The discovery path of an API group version."""
    return f"/apis/{group}/{version}" if group else f"/api/{version}"


def _lists(listing: Obj, plural: str) -> bool:
    """Whether a discovery ``APIResourceList`` names the resource ``plural``."""
    resources = listing.get("resources")
    return isinstance(resources, list) and any(
        isinstance(item, Mapping) and item.get("name") == plural for item in resources
    )


def choose_tree(objects: Sequence[Obj]) -> tuple[Obj | None, QuotaTree | None, str | None]:
    """The honoured ElasticQuotaTree among the objects of the tree namespace (:mod:`webhook.core.treechoice`):
    ``(object, parsed tree, problem)``; the tree is ``None`` when there is no object or it is invalid."""
    honoured = honoured_tree(objects, _namespace_of(objects))
    return honoured.obj, honoured.tree, honoured.problem


def _namespace_of(objects: Sequence[Obj]) -> str:
    """The namespace the tree cache watches (all its objects are in it)."""
    return next((str(meta(obj).get("namespace")) for obj in objects if meta(obj).get("namespace")), TREE_NAMESPACE)


def kind_key(adapter: Adapter) -> str:
    """``Kind.group`` (``core`` for the core group): how :attr:`ClusterCache.job_caches` names a kind."""
    return f"{adapter.kind}.{adapter.group or 'core'}"


class ClusterCache:
    """The objects one controller replica watches, and what a pass reads of them.

    ``on_change`` is called on a change of a watched object a pass must see soon (:func:`wake_for` says which);
    ``on_status`` (default ``on_change``) on a change of status only, which a pass may see a little later;
    ``start`` runs a coroutine as one of the owner's tasks (the caches of job kinds found by :meth:`discover`);
    ``on_unsized`` is told about every job :meth:`tracked_jobs` cannot size.
    """

    def __init__(
        self,
        client: KubeClient,
        *,
        tree_namespace: str,
        queue_namespace: str,
        on_change: Callable[[], None],
        start: Callable[[Awaitable[None], str], asyncio.Task[None]],
        on_unsized: Unsized,
        on_status: Callable[[], None] | None = None,
        shared: SharedWatches | None = None,
    ) -> None:
        self.client = client
        self._shared = shared
        self._borrowed: list[WatchCache] = []
        """The caches another part of the process runs (:mod:`webhook.kube.shared`); this one only reads them."""
        self._on_change = on_change
        self._on_status = on_status or on_change
        self._start = start
        self._on_unsized = on_unsized
        self.trees_ref = ResourceRef.of(kinds.ELASTIC_QUOTA_TREE, tree_namespace)
        self.queues_ref = ResourceRef.of(kinds.QUEUE, queue_namespace)
        self.trees = self._cache("elasticquotatrees", self.trees_ref)
        self.queues = self._cache("queues", self.queues_ref)
        self.namespaces = self._cache("namespaces", NAMESPACES)
        self.priority_classes = self._cache("priorityclasses", PRIORITY_CLASSES)
        self.policies = self._cache("resourcepolicies", POLICIES)
        """ResourcePolicies: namespaces outside the tree with a valid one get the placement label."""
        self.budgets = self._cache("poddisruptionbudgets", BUDGETS)
        """PodDisruptionBudgets: reclaim leaves the pods alone that one protects now (docs/reclaim.md)."""
        self.limit_ranges = self._cache("limitranges", LIMIT_RANGES)
        self.runtime_classes = self._cache("runtimeclasses", RUNTIME_CLASSES)
        """LimitRanges and RuntimeClasses: a job written before its namespace's defaults, or before the class it
        names declared its overhead, is sized with them (docs/queueing.md)."""
        self._budgets: dict[tuple[str, str], tuple[str, DisruptionBudget | None]] = {}
        """Per budget: ``(resourceVersion, parsed)``."""
        self.devices = DeviceWatch(client, on_change)
        """DeviceClasses, claim templates and claims, once the API serves them (:mod:`webhook.controller.devices`)."""
        self.pod_index = PodIndex()
        self.pods = WatchCache(
            "pods", SlimListWatch(ApiListWatch(client, PODS, field_selector=UNFINISHED_PODS), pod_slim)
        )
        """Every unfinished pod, slim: the start check, and the usage of pods no job accounts for (the owner
        adds the listener)."""
        self.job_caches: dict[str, tuple[Adapter, ResourceRef, WatchCache]] = {}
        """Per :func:`kind_key`: the adapter, the served version and the cache of every installed job kind."""
        self.job_cache_tasks: dict[str, asyncio.Task[None]] = {}
        self._job_adapters: dict[str, Adapter] = {}
        """Per job kind's cache name: its adapter."""
        self.kinds: list[str] = []
        """The kinds watched, in the order they were found."""
        self._assumed: dict[ObjKey, Obj] = {}
        self.jobs = JobIndex(self._assumed)
        """The tracked jobs, re-read where they changed (:mod:`webhook.controller.jobindex`)."""
        self._honoured = self._derived(self.trees, HONOURED_TREE, honoured_in(tree_namespace))
        """The honoured tree, the webhook's own in ``kq serve`` (:mod:`webhook.kube.shared`)."""
        self._priority_values = self._derived(self.priority_classes, PRIORITY_VALUES, remade(priority_values))
        self._policy_set = self._derived(self.policies, POLICY_SET, remade(policy_set))
        self._limit_defaults = self._derived(self.limit_ranges, LIMIT_DEFAULTS, remade(defaults_by_namespace))
        self._overheads = self._derived(self.runtime_classes, RUNTIME_OVERHEADS, remade(class_overheads))
        self._tree_namespace = tree_namespace
        self._tree_epoch = 0
        self._tree_seen_epoch = -1
        self._tree_version = 0
        self.tree_parsed: tuple[QuotaTree | None, str | None] = (None, None)
        """The honoured tree (``None`` without one) and the problem with it, as the last pass read them."""
        self._tree_obj: Obj | None = None
        self._priority_epoch = 0
        self._limits_epoch = 0

    # Wiring ------------------------------------------------------------------------------------------------
    def _derived(self, cache: WatchCache, name: str, make: Make[T]) -> Derived[T]:
        """What is made of ``cache``: shared with the part the cache is borrowed from, else this replica's."""
        if self._shared is not None and cache in self._borrowed:
            return self._shared.derived(cache, name, make)
        return Derived(cache, make)

    def _cache(self, name: str, ref: ResourceRef, label_selector: str | None = None,
               adapter: Adapter | None = None) -> WatchCache:
        borrowed = self._shared.find(ref, label_selector) if self._shared is not None and adapter is None else None
        if borrowed is not None:
            borrowed.add_listener(self._changed)
            self._borrowed.append(borrowed)
            return borrowed
        source: ListWatch = ApiListWatch(self.client, ref, label_selector=label_selector)
        if adapter is not None:  # every job is kept packed (issue 38)
            source = SlimListWatch(source, job_slim(adapter))
        cache = WatchCache(name, source)
        cache.add_listener(self._changed)
        return cache

    def _changed(self, cache: WatchCache, event: CacheEvent) -> None:
        if cache is self.priority_classes:
            self._priority_epoch += 1
        elif cache is self.limit_ranges or cache is self.runtime_classes:
            self._limits_epoch += 1
        elif cache is self.trees:
            self._tree_epoch += 1
        wake = self.wake_for(cache, event)
        if wake is Wake.NOW:
            self._on_change()
        elif wake is Wake.STATUS:
            self._on_status()

    def wake_for(self, cache: WatchCache, event: CacheEvent) -> Wake:
        """Whether a change asks for a pass (issue 23: during a burst of admissions most changes are the echoes
        of this replica's own writes and the progress of jobs it released; a pass for each of them cost more
        CPU than the admissions):

        * the watch delivering this replica's own write (the version :meth:`assume` holds): no, the last pass
          already counted it;
        * a job outside every namespace of the tree (as the last pass read it; a change of the tree asks for a
          pass of its own, which reads every job): no, nothing is decided about it;
        * an object of a job kind's cache that its adapter does not manage, before or after the change (a Job's
          pods, in the cache of plain Pods because the webhook tags them too): no, it is no job; the pods'
          own listener asks for the passes they need (a bound pod no job accounts for, a pod of a job waiting
          to start). Each new pod of a burst of releases used to ask for a pass at once;
        * a change of ``status`` only (same ``generation``, labels, annotations, owners, finalizers, deletion)
          of a job, a Queue or the tree: :attr:`Wake.STATUS`;
        * anything else (a new or deleted object, a spec or record change, a re-list): :attr:`Wake.NOW`."""
        obj = event.obj
        if event.type == RELIST or obj is None:
            return Wake.NOW
        adapter = self._job_adapters.get(cache.name)
        is_job = adapter is not None
        if is_job and self._outside_tree(obj) and (event.old is None or self._outside_tree(event.old)):
            return Wake.NO
        if adapter is not None and not adapter.manages(obj) and (event.old is None or not adapter.manages(event.old)):
            return Wake.NO
        if event.type != "MODIFIED":
            return Wake.NOW
        key = (cache.name, str(meta(obj).get("namespace") or ""), name_of(obj))
        assumed = self._assumed.get(key)
        if assumed is not None and rv(assumed) == rv(obj) >= 0:
            return Wake.NO
        if (is_job or cache is self.queues or cache is self.trees) and status_only(event):
            return Wake.STATUS
        return Wake.NOW

    def _outside_tree(self, obj: Obj) -> bool:
        tree = self.tree_parsed[0]
        return tree is None or tree.leaf_for_namespace(str(meta(obj).get("namespace") or "")) is None

    def base_caches(self) -> list[WatchCache]:
        """The caches of everything but the job kinds."""
        return [self.trees, self.queues, self.namespaces, self.priority_classes, self.policies, self.budgets,
                self.limit_ranges, self.runtime_classes, self.pods]

    def own_caches(self) -> list[WatchCache]:
        """The caches of everything but the job kinds that this controller runs (not those it borrowed)."""
        return [cache for cache in self.base_caches() if not any(cache is other for other in self._borrowed)]

    def all_caches(self) -> list[WatchCache]:
        """Every cache, the job kinds' last."""
        return [*self.base_caches(), *self.devices.caches, *(cache for _, _, cache in self.job_caches.values())]

    def synced(self) -> bool:
        """Whether every cache has listed."""
        return all(cache.synced.is_set() for cache in self.all_caches())

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

    async def _serves(self, group: str, version: str, plural: str) -> bool:
        """Whether the API serves ``plural`` in ``group/version`` (any failure: not known to)."""
        try:
            listing = await self.client.request("GET", _group_path(group, version))
        except KubeApiError:
            return False
        return _lists(listing, plural)

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
        await self.devices.discover(self._serves, self._start)
        for adapter in all_adapters():
            key = kind_key(adapter)
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
            cache = self._cache(f"{adapter.plural}.{adapter.group or 'core'}", ref, selector, adapter)
            self._job_adapters[cache.name] = adapter
            self.jobs.add(adapter, cache)
            self.job_caches[key] = (adapter, ref, cache)
            self.kinds.append(key)
            self.job_cache_tasks[key] = self._start(cache.run(), f"cache-{cache.name}")
            log.info(kv(component="controller", event="watching", kind=adapter.kind, apiVersion=ref.api_version))

    def _stop_job_cache(self, key: str, cache: WatchCache) -> None:
        task = self.job_cache_tasks.pop(key, None)
        if task is not None:
            task.cancel()
        del self.job_caches[key]
        self.jobs.remove(cache.name)
        self.kinds.remove(key)
        self._on_change()
        log.info(kv(component="controller", event="unwatching", kind=key, reason="no longer served",
                    objects=len(cache)))

    def job_cache(self, job: TrackedJob) -> tuple[ResourceRef, WatchCache]:
        """The served resource and the cache of the job's kind."""
        _, ref, cache = self.job_caches[kind_key(job.adapter)]
        return ref, cache

    # Views -------------------------------------------------------------------------------------------------
    def view(self, cache: WatchCache) -> list[Obj]:
        """The cache's objects, each replaced by this replica's newer write when the watch lags behind."""
        if not any(key[0] == cache.name for key in self._assumed):
            return cache.items()  # nothing written lags: the common case, 50,000 jobs in a few tens of ms
        out = []
        seen: set[ObjKey] = set()
        for cached in cache.items():
            metadata = meta(cached)
            key = (cache.name, str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))
            seen.add(key)
            assumed = self._assumed.get(key)
            if assumed is not None and rv(cached) < rv(assumed):
                out.append(assumed)
                continue
            if assumed is not None:
                del self._assumed[key]
            out.append(cached)
        for key in [key for key in self._assumed if key[0] == cache.name and key not in seen]:
            del self._assumed[key]
        return out

    def current(self, cache: WatchCache, namespace: str, name: str) -> Obj | None:
        """One object as :meth:`view` gives it: this replica's newer write when the watch lags behind."""
        cached = cache.get(name, namespace)
        assumed = self._assumed.get((cache.name, namespace, name))
        if assumed is not None and (cached is None or rv(cached) < rv(assumed)):
            return assumed
        return cached

    def by_name(self, cache: WatchCache) -> dict[str, Obj]:
        """:meth:`view` by object name (for cluster-scoped or one-namespace caches)."""
        return {name_of(obj): obj for obj in self.view(cache)}

    def assume(self, cache: WatchCache, obj: Obj) -> None:
        """Remember ``obj`` as this replica wrote it, until the watch delivers it (or a newer version)."""
        metadata = meta(obj)
        namespace, name = str(metadata.get("namespace") or ""), str(metadata.get("name") or "")
        self._assumed[(cache.name, namespace, name)] = obj
        self.jobs.touch(cache.name, (namespace, name))

    def tree(self) -> tuple[Obj | None, QuotaTree | None, str | None]:
        """The honoured tree object (with this replica's newest writes) and its parsed tree; the parsed tree (and
        the version that keys the job memo) only changes when the object's name or spec does, not on status
        writes (:func:`~webhook.core.treechoice.honoured_again`)."""
        if self._tree_seen_epoch != self._tree_epoch:
            self._tree_seen_epoch = self._tree_epoch
            honoured = self._honoured.value
            parsed = (honoured.tree, honoured.problem)
            if parsed[0] is not self.tree_parsed[0] or parsed[1] != self.tree_parsed[1] or self._tree_version == 0:
                self.tree_parsed = parsed
                self._tree_version += 1
            objects = self.view(self.trees)
            self._tree_obj = oldest_tree_object(objects, self._tree_namespace) if objects else None
        tree, problem = self.tree_parsed
        return self._tree_obj, tree, problem

    def priorities(self) -> Mapping[str, int]:
        """PriorityClass name -> value."""
        return self._priority_values.value

    def admission(self) -> tuple[Mapping[str, ContainerDefaults], Overheads]:
        """What the API server's admission gives a job's pods now: LimitRange defaults, RuntimeClass overheads."""
        return self._limit_defaults.value, self._overheads.value

    def epoch(self) -> tuple[int, ...]:
        """``(tree version, PriorityClass epoch, devices epoch, LimitRange and RuntimeClass epoch)``: what a
        job's sizing reads besides the job."""
        return (self._tree_version, self._priority_epoch, self.devices.epoch, self._limits_epoch)

    def tracked_jobs(self, tree: QuotaTree) -> list[TrackedJob]:
        """Every job of a managed namespace, sized (each job that cannot be sized goes to ``on_unsized``)."""
        priorities = self.priorities()
        devices = self.devices.quota()
        defaults, overheads = self.admission()
        return self.jobs.tracked(tree, self.epoch(), priorities, self._on_unsized, devices, defaults=defaults,
                                 overheads=overheads)

    def accounts_for(self, jobs: Sequence[TrackedJob]) -> Callable[[str, str, str], bool]:
        """Whether a job of this pass accounts for the pods that name an owner ``(namespace, kind, name)``
        (kind ``Pod``: the pod queued as itself, or a pod a job's pods belong to, a SparkApplication's driver).
        Looked up in the pass's own memo of tracked jobs; only the jobs whose pods name another owner (a RayJob's
        RayCluster, an MPIJob's launcher Job) are walked, once, and only when a pod's owner is not a tracked job
        itself."""
        index = self.jobs
        caches = {adapter.kind: cache.name for adapter, _, cache in self.job_caches.values()}
        indirect = {adapter for adapter, _, _ in self.job_caches.values()
                    if type(adapter).pod_owners is not Adapter.pod_owners}
        others: set[tuple[str, str, str]] | None = None

        def accounted(namespace: str, kind: str, name: str) -> bool:
            nonlocal others
            cache = caches.get(kind)
            if cache is not None and index.get(cache, namespace, name) is not None:
                return True
            if not indirect:
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

    def disruption_budgets(self) -> dict[str, list[DisruptionBudget]]:
        """The PodDisruptionBudgets by namespace, each parsed once per version (:func:`parse_budget`)."""
        out: dict[str, list[DisruptionBudget]] = {}
        seen: set[tuple[str, str]] = set()
        for obj in self.view(self.budgets):
            key = (str(meta(obj).get("namespace") or ""), name_of(obj))
            seen.add(key)
            version = resource_version_of(obj)
            known = self._budgets.get(key)
            if known is None or known[0] != version:
                known = self._budgets[key] = (version, read_budget(obj))
            if known[1] is not None:
                out.setdefault(key[0], []).append(known[1])
        if len(self._budgets) > len(seen):
            for gone in self._budgets.keys() - seen:
                del self._budgets[gone]
        return out

    def closing_namespaces(self) -> frozenset[str]:
        """Namespaces being deleted (nothing is released into them)."""
        return frozenset(
            name_of(obj) for obj in self.view(self.namespaces)
            if meta(obj).get("deletionTimestamp") or status_of(obj).get("phase") == "Terminating"
        )

    def placement_namespaces(self) -> frozenset[str]:
        """Namespaces with a valid ResourcePolicy (the policies parsed once per change of their cache)."""
        return frozenset(namespace for namespace, found in self._policy_set.value.by_namespace.items() if found)
