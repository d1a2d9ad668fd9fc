"""The one in-memory store of API objects behind the tests' fakes of kube-apiserver (test-only).

:class:`ObjectStore` keeps objects per kind ``(group, version, plural)`` with a global resourceVersion, a
``metadata.generation`` that moves when anything but ``metadata``/``status`` changes, and a log of every change
(``ADDED``/``MODIFIED``/``DELETED``) that watches read from. It lists with label selectors (``a=b``, ``a!=b``,
``a``, ``!a``) and field selectors (``path=value``), gets, creates (``generateName``, 409 on a duplicate),
replaces (409 on a stale resourceVersion), applies JSON Patch (with ``test``) and merge patch (with the
``status`` subresource) and deletes. Errors are raised through ``error(status, reason, message)`` so that each
adapter raises its client's own error type: ``tests/service/kubeclient_fake.py`` (the shells'
``KubeClient``), ``tests/fakeapi.py`` (the developer commands' ``KubeApi``) and
``tests/service/apiserver_http.py`` (over real HTTP, for a shell started from a kubeconfig).
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import itertools
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, MutableMapping, Sequence
from functools import partial
from typing import Any

from webhook.workloads.base import PatchError, apply_patch

Kind = tuple[str, str, str]
"""``(group, version, plural)``."""
JSON = dict[str, Any]
ErrorFactory = Callable[[int, str, str], Exception]

STATUS_SUBRESOURCE = ("queues", "elasticquotatrees")
"""Kinds whose CRD enables the status subresource (as manifests/crds does)."""
FIELD_ALIASES = {"source": ("source.component", "reportingComponent")}
"""Event field selectors the API server answers from either field."""


def stamp(seconds: float) -> str:
    """RFC 3339 (seconds) as the API writes ``creationTimestamp``."""
    return datetime.datetime.fromtimestamp(int(seconds), tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge(target: Any, patch: Any) -> Any:
    """RFC 7386 merge patch."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge(out.get(key), value)
    return out


def parse_path(path: str) -> tuple[Kind, str | None, str | None, str | None]:
    """``(kind, namespace, name, subresource)`` of an API path (``/api/v1/...`` or ``/apis/group/version/...``)."""
    parts = path.strip("/").split("/")
    if parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    else:
        group, version, rest = parts[1], parts[2], parts[3:]
    namespace = None
    if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) > 2:
        namespace, rest = rest[1], rest[2:]
    plural = rest[0]
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    return (group, version, plural), namespace, name, sub


def _lookup(obj: Mapping[str, Any], dotted: str) -> Any:
    current: Any = obj
    for step in dotted.split("."):
        if not isinstance(current, Mapping):
            return None
        current = current.get(step)
    return current


def labels_match(obj: Mapping[str, Any], selector: str | None) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in filter(None, (t.strip() for t in (selector or "").split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.split("=", 1)
            if labels.get(key.rstrip("=")) != value:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def fields_match(obj: Mapping[str, Any], selector: str | None) -> bool:
    for term in filter(None, (t.strip() for t in (selector or "").split(","))):
        negated = "!=" in term
        key, _, value = term.replace("!=", "=", 1).replace("==", "=", 1).partition("=")
        paths = FIELD_ALIASES.get(key, (key,))
        if any(str(_lookup(obj, path) or "") == value for path in paths) is negated:
            return False
    return True


def _spec_part(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


class ObjectStore:
    """See the module notes. ``items[kind][(namespace, name)]`` holds the live objects (cluster-scoped ones
    under the namespace ``""``); ``log`` holds ``(resourceVersion, kind, type, object)`` of every change."""

    def __init__(
        self, error: ErrorFactory, *, version: int = 100, clock: float = 1712541600.0, generations: bool = True
    ) -> None:
        self.error = error
        self.generations = generations
        """Give new objects ``metadata.generation`` 1; when off, only objects created with one keep one up."""
        self.items: dict[Kind, dict[tuple[str, str], JSON]] = {}
        self.log: list[tuple[int, Kind, str, JSON]] = []
        self.version = version
        self.clock = clock
        self.deliver_until: int | None = None
        """When set, watches hold back events after this resourceVersion (a lagging watch)."""
        self._names = itertools.count()
        self._changed: asyncio.Condition | None = None

    # Reading ----------------------------------------------------------------------------------------------------
    def objects(self, kind: Kind, namespace: str | None = None) -> list[JSON]:
        items = self.items.get(kind, {})
        return [copy.deepcopy(obj) for (ns, _), obj in sorted(items.items()) if namespace in (None, ns)]

    def obj(self, kind: Kind, name: str, namespace: str = "") -> JSON:
        return copy.deepcopy(self.items[kind][(namespace, name)])

    def get(self, kind: Kind, name: str, namespace: str | None = None) -> JSON:
        return self._get(kind, name, namespace)

    def _get(self, kind: Kind, name: str, namespace: str | None = None) -> JSON:
        obj = self.items.get(kind, {}).get((namespace or "", name))
        if obj is None:
            raise self.error(404, "NotFound", f'{kind[2]}.{kind[0] or "core"} "{name}" not found')
        return copy.deepcopy(obj)

    def select(
        self, kind: Kind, namespace: str | None = None, label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[JSON]:
        return [
            obj for obj in self.objects(kind, namespace)
            if labels_match(obj, label_selector) and fields_match(obj, field_selector)
        ]

    # Writing ----------------------------------------------------------------------------------------------------
    def put(self, kind: Kind, obj: JSON, *, uid: str | None = None) -> JSON:
        """Create (with ``uid``, see :meth:`create`) or overwrite directly (as another client would)."""
        metadata = obj.setdefault("metadata", {})
        key = (metadata.get("namespace") or "", metadata["name"])
        if key not in self.items.setdefault(kind, {}):
            return self._insert(kind, obj, uid)
        return self._commit(kind, "MODIFIED", obj)

    def create(self, kind: Kind, obj: Mapping[str, Any], *, uid: str | None = None) -> JSON:
        """Store a new object with ``uid`` (``uid-N`` when ``None``)."""
        return self._insert(kind, obj, uid)

    def _insert(self, kind: Kind, obj: Mapping[str, Any], uid: str | None = None) -> JSON:
        new = copy.deepcopy(dict(obj))
        metadata = new.setdefault("metadata", {})
        if not metadata.get("name") and metadata.get("generateName"):
            metadata["name"] = f"{metadata['generateName']}{next(self._names):05d}"
        key = (metadata.get("namespace") or "", metadata["name"])
        items = self.items.setdefault(kind, {})
        if key in items:
            raise self.error(409, "AlreadyExists", f'{kind[2]}.{kind[0] or "core"} "{key[1]}" already exists')
        metadata["uid"] = uid if uid is not None else f"uid-{next(self._names)}"
        self.clock += 1
        metadata.setdefault("creationTimestamp", stamp(self.clock))
        if self.generations:
            metadata.setdefault("generation", 1)
        items[key] = new
        return self._bump(kind, "ADDED", new)

    def replace(self, kind: Kind, name: str, namespace: str | None, body: Mapping[str, Any]) -> JSON:
        current = self._get(kind, name, namespace)
        wanted = str(body.get("metadata", {}).get("resourceVersion") or "")
        if wanted and wanted != current["metadata"]["resourceVersion"]:
            raise self.error(409, "Conflict", "the object has been modified")
        obj = copy.deepcopy(dict(body))
        obj["metadata"] = {**current["metadata"], **{k: v for k, v in obj.get("metadata", {}).items()
                                                      if k not in ("uid", "creationTimestamp", "generation")}}
        return self._commit(kind, "MODIFIED", obj)

    def json_patch(
        self, kind: Kind, name: str, namespace: str | None, ops: Sequence[Mapping[str, Any]],
        subresource: str | None = None,
    ) -> JSON:
        current = self._get(kind, name, namespace)
        try:
            new = apply_patch(current, ops)
        except PatchError as error:
            raise self.error(422, "Invalid", f"the server rejected our request: {error}") from None
        return self._patched(kind, current, new, subresource)

    def merge_patch(
        self, kind: Kind, name: str, namespace: str | None, patch: Mapping[str, Any], subresource: str | None = None
    ) -> JSON:
        current = self._get(kind, name, namespace)
        return self._patched(kind, current, merge(current, patch), subresource)

    def delete(self, kind: Kind, name: str, namespace: str | None = None) -> JSON:
        obj = self._get(kind, name, namespace)
        self.remove(kind, name, namespace or "")
        return obj

    def remove(self, kind: Kind, name: str, namespace: str = "") -> None:
        obj = self.items.get(kind, {}).pop((namespace, name), None)
        if obj is not None:
            self._bump(kind, "DELETED", obj)

    def _patched(self, kind: Kind, current: JSON, new: JSON, subresource: str | None) -> JSON:
        if subresource == "status":
            result = copy.deepcopy(current)
            result["status"] = new.get("status")
        else:
            result = new
            if kind[2] in STATUS_SUBRESOURCE:  # with a status subresource the main resource ignores status
                result.pop("status", None)
                if "status" in current:
                    result["status"] = current["status"]
        result["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        return self._commit(kind, "MODIFIED", result)

    def _commit(self, kind: Kind, event: str, obj: JSON) -> JSON:
        key = (obj["metadata"].get("namespace") or "", obj["metadata"]["name"])
        before = self.items[kind].get(key)
        if before is not None and "generation" in before.get("metadata", {}):
            generation = int(before["metadata"]["generation"])
            obj["metadata"]["generation"] = generation + (_spec_part(before) != _spec_part(obj))
        self.items[kind][key] = obj
        return self._bump(kind, event, obj)

    def _bump(self, kind: Kind, event: str, obj: JSON) -> JSON:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        self.log.append((self.version, kind, event, copy.deepcopy(obj)))
        self._notify()
        return copy.deepcopy(obj)

    # Watching ---------------------------------------------------------------------------------------------------
    def _notify(self) -> None:
        condition = self._changed
        if condition is None:  # nobody has watched yet: a later watch reads the log from its start
            return

        async def notify() -> None:
            async with condition:
                condition.notify_all()

        asyncio.get_running_loop().create_task(notify())

    def release(self) -> None:
        """Let held-back watch events through."""
        self.deliver_until = None
        self._notify()

    def _ready_at(self, position: int) -> bool:
        return position < len(self.log) and (
            self.deliver_until is None or self.log[position][0] <= self.deliver_until
        )

    async def events(self, kind: Kind, since: int, selected: Callable[[JSON], bool]) -> AsyncIterator[JSON]:
        """Watch events of ``kind`` after resourceVersion ``since`` whose object ``selected`` accepts."""
        if self._changed is None:
            self._changed = asyncio.Condition()
        condition = self._changed
        position = 0
        while True:
            while position < len(self.log):
                version, changed, event, obj = self.log[position]
                if self.deliver_until is not None and version > self.deliver_until:
                    break
                position += 1
                if version > since and changed == kind and selected(obj):
                    yield {"type": event, "object": copy.deepcopy(obj)}
            async with condition:
                await condition.wait_for(partial(self._ready_at, position))


class ByGroupPlural(MutableMapping[tuple[str, str, str, str], JSON]):
    """The store's live objects keyed ``(group, plural, namespace, name)``, whatever the version (the
    developer commands' tests read and edit objects this way)."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    def _find(self, key: tuple[str, str, str, str]) -> tuple[Kind, tuple[str, str]] | None:
        group, plural, namespace, name = key
        for kind, items in self.store.items.items():
            if kind[0] == group and kind[2] == plural and (namespace, name) in items:
                return kind, (namespace, name)
        return None

    def __getitem__(self, key: tuple[str, str, str, str]) -> JSON:
        found = self._find(key)
        if found is None:
            raise KeyError(key)
        return self.store.items[found[0]][found[1]]

    def __setitem__(self, key: tuple[str, str, str, str], value: JSON) -> None:
        found = self._find(key)
        if found is None:
            raise KeyError(f"{key}: add new objects through the store")
        self.store.items[found[0]][found[1]] = value

    def __delitem__(self, key: tuple[str, str, str, str]) -> None:
        found = self._find(key)
        if found is None:
            raise KeyError(key)
        self.store.remove(found[0], found[1][1], found[1][0])

    def __iter__(self) -> Iterator[tuple[str, str, str, str]]:
        for (group, _, plural), items in self.store.items.items():
            for namespace, name in items:
                yield group, plural, namespace, name

    def __len__(self) -> int:
        return sum(len(items) for items in self.store.items.values())
