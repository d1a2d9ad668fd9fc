"""The jobs a pass reads, kept from the watch events instead of rebuilt from every cached object on every pass.

A pass needs every job of the tree's namespaces as a :class:`TrackedJob` (sized, with its leaf). Walking every
cached object to find them cost more CPU than the decision itself during a burst of admissions (issue 23: the
"prepare" phase took most of the controller's time, re-reading a thousand unchanged Jobs on each of the passes
that the burst's own status changes ask for). So each job kind's cache tells the index which keys changed
(:meth:`JobIndex.touch`, a listener on the cache, and :meth:`ClusterCache.assume`), and a pass re-reads only
those; a change of the PriorityClasses (what sizing reads besides the object) re-reads them all, and so does
a change of the tree, except that a job whose leaf kept its name only takes the new leaf (sizing reads the
leaf's name alone).

The result is the same list a full walk gives, in the same order: per kind in the order the kinds were found,
by ``(namespace, name)``, each object replaced by this replica's newer write while the watch lags behind
(the assumed objects, shared with :class:`webhook.controller.cache.ClusterCache`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from webhook.api.objects import Obj, resource_version_of
from webhook.controller.model import TrackedJob, track
from webhook.core.dra import DeviceQuota
from webhook.core.limitrange import NO_DEFAULTS, ContainerDefaults
from webhook.core.quota import QuotaTree
from webhook.core.workload import WorkloadError
from webhook.kube.cache import RELIST, CacheEvent, Key, WatchCache, object_key
from webhook.workloads.base import Adapter
from webhook.workloads.overhead import Overheads

ObjKey = tuple[str, str, str]
"""``(cache name, namespace, name)``."""

Unsized = Callable[[Obj, Adapter, str], None]
"""Told about a job that cannot be sized: ``(object, adapter, problem)``."""


def rv(obj: Obj) -> int:
    """The object's ``resourceVersion`` as a number (-1 when it is not one)."""
    try:
        return int(resource_version_of(obj))
    except ValueError:
        return -1


@dataclass(slots=True)
class _Entry:
    """One job of the tree as the last pass read it."""

    version: int
    epoch: tuple[int, ...]
    """``(tree version, PriorityClass epoch, devices epoch)`` it was sized under."""
    obj: Obj
    job: TrackedJob | str
    """The tracked job, or why it cannot be sized."""


@dataclass(slots=True)
class _Kind:
    """The index of one job kind's cache."""

    adapter: Adapter
    cache: WatchCache
    entries: dict[Key, _Entry] = field(default_factory=dict)
    dirty: set[Key] | None = None
    """Keys changed since the last pass; ``None``: every key (a new kind, or a re-list)."""
    order: list[Key] | None = None
    """``entries``' keys sorted, ``None`` when a job came or went."""


class JobIndex:
    """Every job kind's tracked jobs, re-read only where a watch event or a write changed them."""

    def __init__(self, assumed: dict[ObjKey, Obj]) -> None:
        self._assumed = assumed
        self._kinds: dict[str, _Kind] = {}
        self._epoch: tuple[int, ...] | None = None
        self._devices: DeviceQuota | None = None
        self._defaults: Mapping[str, ContainerDefaults] = {}
        self._overheads: Overheads | None = None

    def add(self, adapter: Adapter, cache: WatchCache) -> None:
        """Index a job kind's cache (every key is read on the next pass)."""
        self._kinds[cache.name] = _Kind(adapter, cache)
        cache.add_listener(self._event)

    def remove(self, cache_name: str) -> None:
        self._kinds.pop(cache_name, None)

    def _event(self, cache: WatchCache, event: CacheEvent) -> None:
        kind = self._kinds.get(cache.name)
        if kind is None or kind.cache is not cache:
            return
        if event.type == RELIST or event.obj is None:
            kind.dirty = None
            return
        key = object_key(event.obj)
        if key is not None:
            self.touch(cache.name, key)

    def touch(self, cache_name: str, key: Key) -> None:
        """The object at ``key`` of this cache changed (an event, or this replica's own write)."""
        kind = self._kinds.get(cache_name)
        if kind is not None and kind.dirty is not None:
            kind.dirty.add(key)

    def get(self, cache_name: str, namespace: str, name: str) -> TrackedJob | None:
        """The job the last pass tracked at this key (``None``: none, or not sized)."""
        kind = self._kinds.get(cache_name)
        entry = kind.entries.get((namespace, name)) if kind is not None else None
        return entry.job if entry is not None and isinstance(entry.job, TrackedJob) else None

    def sized(self, cache_name: str, obj: Obj, epoch: tuple[int, ...]) -> TrackedJob | str | None:
        """How the last pass sized exactly ``obj`` under ``epoch``: the tracked job or why it cannot be sized;
        ``None`` when it did not (another version of the object, another epoch, outside the tree)."""
        kind = self._kinds.get(cache_name)
        key = object_key(obj)
        entry = kind.entries.get(key) if kind is not None and key is not None else None
        if entry is None or entry.version != rv(obj) or entry.epoch != epoch:
            return None
        return entry.job

    def tracked(self, tree: QuotaTree, epoch: tuple[int, ...], priorities: Mapping[str, int],
                on_unsized: Unsized, devices: DeviceQuota | None = None, *,
                defaults: Mapping[str, ContainerDefaults] | None = None,
                overheads: Overheads | None = None) -> list[TrackedJob]:
        """Every job of a tree namespace, sized; ``epoch`` is ``(tree version, PriorityClass epoch[, devices
        epoch, LimitRange and RuntimeClass epoch])``: when it moved every job is read again. Each job that cannot be
        sized goes to ``on_unsized`` (on every pass). ``devices`` sizes the devices the jobs' pods claim
        (:mod:`webhook.core.dra`); ``defaults``, per namespace, the requests its LimitRanges give a container
        that has none (:mod:`webhook.core.limitrange`); ``overheads`` each RuntimeClass's pod overhead."""
        self._devices = devices
        self._defaults = defaults or {}
        self._overheads = overheads
        if epoch != self._epoch:
            self._epoch = epoch
            for kind in self._kinds.values():
                kind.dirty = None
        out: list[TrackedJob] = []
        for kind in self._kinds.values():
            self._refresh(kind, tree, epoch, priorities)
            if kind.order is None:
                kind.order = sorted(kind.entries)
            entries = kind.entries
            for key in kind.order:
                entry = entries[key]
                if isinstance(entry.job, TrackedJob):
                    out.append(entry.job)
                else:
                    on_unsized(entry.obj, kind.adapter, entry.job)
        return out

    def _refresh(self, kind: _Kind, tree: QuotaTree, epoch: tuple[int, ...], priorities: Mapping[str, int]) -> None:
        if kind.dirty is None:
            keys: set[Key] = {*kind.entries, *(key for key in (object_key(obj) for obj in kind.cache.items())
                                               if key is not None)}
            stale = [written for written in self._assumed
                     if written[0] == kind.cache.name and (written[1], written[2]) not in keys]
            for written in stale:  # a write whose object is gone from the cache
                del self._assumed[written]
        else:
            keys = kind.dirty
        kind.dirty = set()
        for key in keys:
            self._read(kind, key, tree, epoch, priorities)

    def _read(self, kind: _Kind, key: Key, tree: QuotaTree, epoch: tuple[int, ...],
              priorities: Mapping[str, int]) -> None:
        namespace, name = key
        cache_key = (kind.cache.name, namespace, name)
        cached = kind.cache.get(name, namespace)
        obj = cached
        assumed = self._assumed.get(cache_key)
        if cached is not None and assumed is not None:
            if rv(cached) < rv(assumed):
                obj = assumed
            else:
                del self._assumed[cache_key]
        elif assumed is not None:
            del self._assumed[cache_key]
        leaf = tree.leaf_for_namespace(namespace) if obj is not None else None
        if obj is None or leaf is None or not kind.adapter.manages(obj):
            if kind.entries.pop(key, None) is not None:
                kind.order = None
            return
        version = rv(obj)
        entry = kind.entries.get(key)
        if entry is not None and entry.version == version:
            if entry.epoch == epoch:
                entry.obj = obj
                return
            kept = entry.job
            if entry.epoch[1:] == epoch[1:] and isinstance(kept, TrackedJob) and kept.leaf.name == leaf.name:
                # Only the tree moved and the job's leaf kept its name: sizing reads the leaf's name alone, so
                # the job keeps its size and takes the new leaf. A tree edit (a quota's max lifted) then
                # does not size every job of the cluster again before the next release.
                kind.entries[key] = _Entry(version, epoch, obj, dataclasses.replace(kept, leaf=leaf))
                return
        try:
            job: TrackedJob | str = track(kind.adapter, obj, leaf, priorities, self._devices,
                                          defaults=self._defaults.get(namespace, NO_DEFAULTS),
                                          overheads=self._overheads)
        except WorkloadError as error:
            job = str(error)
        if entry is None:
            kind.order = None
        kind.entries[key] = _Entry(version, epoch, obj, job)
