"""A watch-fed cache of one resource: list, then watch with bookmarks; re-list on 410 Gone; back off on errors.

The loop (:meth:`WatchCache.run`) is the reflector of client-go in miniature:

1. list every page (a 410 on a continue token restarts the list), replace the store, notify listeners
   once with ``RELIST``, set :attr:`WatchCache.synced`;
2. watch from the list's resource version with ``allowWatchBookmarks``; apply ``ADDED``/``MODIFIED``/
   ``DELETED`` and notify; bookmarks only advance the resource version; when the server ends the watch
   (its ``timeoutSeconds``), watch again from the last version seen;
3. a 410 Gone (HTTP status or ``ERROR`` event) goes back to 1 at once; any other error backs off
   (exponential with jitter, capped at :data:`RECONNECT_CAP_SECONDS`) and re-watches from the last version
   (re-listing when there is none).

``synced`` stays set after the first list: what the cache holds may lag while it reconnects, as an
informer's does. Everything that touches the network sits behind :class:`ListWatch`, so tests drive the
loop with a scripted source and a fake ``sleep``.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Protocol

from webhook.api.objects import Doc, Obj
from webhook.kube.client import KubeApiError, KubeClient, ResourceRef
from webhook.kube.watch_metrics import WATCHES

log = logging.getLogger(__name__)

Key = tuple[str, str]
"""``(namespace, name)``; namespace ``""`` for cluster-scoped objects."""

RELIST = "RELIST"
"""Event type given to listeners after a (re-)list replaced the whole store."""


class ListWatch(Protocol):
    """The network half of a cache."""

    async def list_page(self, limit: int, continue_token: str | None) -> Doc:
        """One page: ``{"items": [...], "metadata": {"resourceVersion": ..., "continue": ...}}``."""

    def watch(self, resource_version: str, timeout_seconds: int) -> AbstractAsyncContextManager[AsyncIterator[Doc]]:
        """A watch from ``resource_version``; entering connects (raising :class:`KubeApiError`)."""


@dataclass(frozen=True, slots=True)
class ApiListWatch:
    """:class:`ListWatch` over a :class:`KubeClient` for one resource (optionally filtered)."""

    client: KubeClient
    ref: ResourceRef
    label_selector: str | None = None
    field_selector: str | None = None

    async def list_page(self, limit: int, continue_token: str | None) -> Doc:
        return await self.client.list_page(
            self.ref,
            limit=limit,
            continue_token=continue_token,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
        )

    def watch(self, resource_version: str, timeout_seconds: int) -> AbstractAsyncContextManager[AsyncIterator[Doc]]:
        return self.client.watch(
            self.ref,
            resource_version=resource_version,
            timeout_seconds=timeout_seconds,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
        )


@dataclass(frozen=True, slots=True)
class CacheEvent:
    """What changed: ``type`` is ``ADDED``, ``MODIFIED``, ``DELETED`` (with ``obj``; ``old`` is the
    previous version when the cache had one) or ``RELIST`` (the whole store was replaced)."""

    type: str
    obj: Obj | None = None
    old: Obj | None = None


Listener = Callable[["WatchCache", CacheEvent], None]


RECONNECT_CAP_SECONDS = 4.0
"""The longest wait between two attempts to reach the API server. After an outage a cache is back within this
of the API answering, however long the outage was (issue 17 hole 6: with a 30 s cap a 12 s outage kept the
job watch away 13 s more). A few list/watch attempts per cache every few seconds is nothing to the server."""


@dataclass(slots=True)
class Backoff:
    """Exponential backoff with jitter: a delay in ``[base/2, base]``, ``base = initial * factor**n`` capped at
    ``cap`` seconds (:data:`RECONNECT_CAP_SECONDS` by default)."""

    initial: float = 0.5
    factor: float = 2.0
    cap: float = RECONNECT_CAP_SECONDS
    rng: random.Random = field(default_factory=random.Random)
    _attempt: int = 0

    def next_delay(self) -> float:
        base = min(self.cap, self.initial * self.factor**self._attempt)
        self._attempt += 1
        return base / 2 + self.rng.uniform(0, base / 2)

    def reset(self) -> None:
        self._attempt = 0

    @property
    def attempts(self) -> int:
        return self._attempt


def object_key(obj: Obj) -> Key | None:
    """``(namespace, name)`` of an object; ``None`` when it has no name."""
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping):
        return None
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        return None
    namespace = metadata.get("namespace")
    return (namespace if isinstance(namespace, str) else "", name)


def _resource_version(obj: Obj) -> str | None:
    metadata = obj.get("metadata")
    if isinstance(metadata, Mapping):
        version = metadata.get("resourceVersion")
        if isinstance(version, str) and version:
            return version
    return None


class _Relist(Exception):
    """Internal: the watch must start over from a fresh list."""


class WatchCache:
    """The current objects of one resource, kept by list + watch. Run :meth:`run` as a task."""

    def __init__(
        self,
        name: str,
        source: ListWatch,
        *,
        page_size: int = 500,
        watch_timeout: tuple[int, int] = (300, 600),
        backoff: Backoff | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.name = name
        self.source = source
        self.page_size = page_size
        self.watch_timeout = watch_timeout
        self.backoff = backoff if backoff is not None else Backoff()
        self._sleep = sleep
        self._rng = rng if rng is not None else random.Random()
        self._store: dict[Key, Obj] = {}
        self._listeners: list[Listener] = []
        self.synced = asyncio.Event()
        """Set once the first list has been stored (and listeners told)."""
        self.resource_version: str | None = None
        """The last resource version seen (list, event or bookmark)."""
        self.lists = 0
        """How many complete lists were stored (1 + re-lists)."""
        self.errors = 0
        """How many list or watch attempts failed (other than 410)."""
        self.changes = 0
        """How many changes were stored (each event, each list): what reads this cache can tell whether it moved."""
        WATCHES.add(self)

    # Reading -----------------------------------------------------------------------------------------------
    def get(self, name: str, namespace: str = "") -> Obj | None:
        return self._store.get((namespace, name))

    def items(self) -> list[Obj]:
        """Every object, ordered by ``(namespace, name)``."""
        return [self._store[key] for key in sorted(self._store)]

    def __len__(self) -> int:
        return len(self._store)

    def __iter__(self) -> Iterator[Obj]:
        return iter(self.items())

    def add_listener(self, listener: Listener) -> None:
        """Call ``listener(cache, event)`` after every change (synchronously, in the cache's task)."""
        self._listeners.append(listener)

    # The loop ----------------------------------------------------------------------------------------------
    async def run(self) -> None:
        """List and watch until cancelled."""
        need_list = True
        while True:
            try:
                if need_list or self.resource_version is None:
                    await self._list()
                    need_list = False
                await self._watch_once()
            except asyncio.CancelledError:
                raise
            except _Relist:
                need_list = True
                log.info("cache=%s event=relist reason=gone resource_version=%s", self.name, self.resource_version)
            except Exception as error:
                self.errors += 1
                delay = self.backoff.next_delay()
                log.warning(
                    "cache=%s event=error error=%r retry_in=%.2fs attempt=%d",
                    self.name,
                    error,
                    delay,
                    self.backoff.attempts,
                )
                await self._sleep(delay)

    async def _list(self) -> None:
        items: list[Obj] = []
        continue_token: str | None = None
        version: str | None = None
        while True:
            try:
                page = await self.source.list_page(self.page_size, continue_token)
            except KubeApiError as error:
                if error.gone and continue_token is not None:
                    items, continue_token = [], None
                    continue
                raise
            raw_items = page.get("items") or []
            if not isinstance(raw_items, list):
                raise KubeApiError(0, "BadList", f"{self.name}: items is not a list")
            items.extend(item for item in raw_items if isinstance(item, Mapping))
            metadata = page.get("metadata") if isinstance(page.get("metadata"), Mapping) else {}
            assert isinstance(metadata, Mapping)
            version = str(metadata.get("resourceVersion") or "") or version
            next_token = metadata.get("continue")
            if not next_token:
                break
            continue_token = str(next_token)
        store: dict[Key, Obj] = {}
        for item in items:
            key = object_key(item)
            if key is not None:
                store[key] = item
        self._store = store
        self.resource_version = version
        self.lists += 1
        self.backoff.reset()
        log.info("cache=%s event=listed objects=%d resource_version=%s", self.name, len(store), version)
        self._notify(CacheEvent(RELIST))
        self.synced.set()

    async def _watch_once(self) -> None:
        assert self.resource_version is not None
        timeout = self._rng.randint(*self.watch_timeout)
        try:
            async with self.source.watch(self.resource_version, timeout) as events:
                async for event in events:
                    self._apply(event)
                    self.backoff.reset()
            self.backoff.reset()
        except KubeApiError as error:
            if error.gone:
                raise _Relist from error
            raise

    def _apply(self, event: Obj) -> None:
        kind = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, Mapping):
            return
        if kind == "ERROR":
            code = obj.get("code")
            if code == 410:
                raise _Relist
            raise KubeApiError(
                code if isinstance(code, int) else 0,
                str(obj.get("reason") or "Error"),
                str(obj.get("message") or ""),
                obj,
            )
        version = _resource_version(obj)
        if kind == "BOOKMARK":
            if version is not None:
                self.resource_version = version
            return
        key = object_key(obj)
        if key is None or kind not in ("ADDED", "MODIFIED", "DELETED"):
            return
        old = self._store.get(key)
        if kind == "DELETED":
            self._store.pop(key, None)
        else:
            self._store[key] = obj
        if version is not None:
            self.resource_version = version
        self._notify(CacheEvent(str(kind), obj, old))

    def _notify(self, event: CacheEvent) -> None:
        self.changes += 1
        for listener in self._listeners:
            try:
                listener(self, event)
            except Exception:
                log.exception("cache=%s event=listener_failed type=%s", self.name, event.type)


async def wait_synced(caches: Iterable[WatchCache]) -> None:
    """Until every cache has listed once."""
    await asyncio.gather(*(cache.synced.wait() for cache in caches))
