"""An in-memory apiserver behind the :class:`KubeClient` interface, for the controller's service tests.

It keeps objects per resource with a global resourceVersion, serves paginated lists and watches (events
after a version, namespace and label-existence filters), applies JSON Patch (with ``test``), merge patch,
create (``generateName``, 409 on a duplicate), replace (409 on a stale resourceVersion), delete, the
``status`` subresource, and discovery of the installed kinds. Failures can be injected per call.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import random
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from webhook.kube.client import JSON, KubeApiError, KubeClient, ResourceRef
from webhook.workloads.base import PatchError, apply_patch

Kind = tuple[str, str, str]
"""``(group, version, plural)``."""

CORE: tuple[Kind, ...] = (
    ("", "v1", "namespaces"),
    ("", "v1", "pods"),
    ("", "v1", "events"),
    ("batch", "v1", "jobs"),
    ("scheduling.k8s.io", "v1", "priorityclasses"),
    ("coordination.k8s.io", "v1", "leases"),
    ("scheduling.sigs.k8s.io", "v1beta1", "elasticquotatrees"),
    ("scheduling.x-k8s.io", "v1alpha1", "queues"),
    ("scheduling.alibabacloud.com", "v1alpha1", "resourcepolicies"),
)


STATUS_SUBRESOURCE = ("queues", "elasticquotatrees")
"""Kinds whose CRD enables the status subresource (as manifests/crds does)."""


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


def _parse_path(path: str) -> tuple[Kind, str | None, str | None, str | None]:
    """``(kind, namespace, name, subresource)`` of an API path."""
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


@dataclass
class Injected:
    """A failure to raise on matching calls: ``remaining`` times (``-1`` = always) with ``probability``."""

    status: int
    match: Callable[[str, str], bool]
    remaining: int = 1
    probability: float = 1.0


@dataclass
class FakeApi(KubeClient):
    """The fake; pass it wherever a :class:`KubeClient` goes."""

    kinds: set[Kind] = field(default_factory=lambda: set(CORE))
    store: dict[Kind, dict[tuple[str, str], JSON]] = field(default_factory=dict)
    log: list[tuple[int, Kind, str, JSON]] = field(default_factory=list)
    """``(resourceVersion, kind, type, object)`` of every change."""
    calls: list[tuple[str, str]] = field(default_factory=list)
    """``(method, path)`` of every call."""
    injected: list[Injected] = field(default_factory=list)
    rng: random.Random = field(default_factory=lambda: random.Random(7))
    version: int = 100
    clock: float = 1712541600.0
    deliver_until: int | None = None
    """When set, watches hold back events after this resourceVersion (a lagging watch)."""
    before_write: Callable[[str, str], None] | None = None
    """Called with ``(method, path)`` before every write is applied (to interleave other clients' writes)."""
    _uids: itertools.count[int] = field(default_factory=itertools.count)
    _changed: asyncio.Condition | None = None

    def __post_init__(self) -> None:
        # No ApiClient: every method below is overridden.
        pass

    # Test helpers -----------------------------------------------------------------------------------------
    def fail(self, status: int, match: Callable[[str, str], bool], times: int = 1, probability: float = 1.0) -> None:
        self.injected.append(Injected(status, match, times, probability))

    def objects(self, kind: Kind, namespace: str | None = None) -> list[JSON]:
        items = self.store.get(kind, {})
        return [copy.deepcopy(obj) for (ns, _), obj in sorted(items.items()) if namespace in (None, ns)]

    def obj(self, kind: Kind, name: str, namespace: str = "") -> JSON:
        return copy.deepcopy(self.store[kind][(namespace, name)])

    def put(self, kind: Kind, obj: JSON) -> JSON:
        """Create or overwrite directly (as another client would)."""
        metadata = obj.setdefault("metadata", {})
        key = (metadata.get("namespace") or "", metadata["name"])
        if key not in self.store.setdefault(kind, {}):
            return self._create(kind, obj)
        return self._commit(kind, "MODIFIED", obj)

    def remove(self, kind: Kind, name: str, namespace: str = "") -> None:
        obj = self.store.get(kind, {}).pop((namespace, name), None)
        if obj is not None:
            self._bump(kind, "DELETED", obj)

    # Internals --------------------------------------------------------------------------------------------
    def _condition(self) -> asyncio.Condition:
        if self._changed is None:
            self._changed = asyncio.Condition()
        return self._changed

    def _check(self, method: str, path: str) -> None:
        self.calls.append((method, path))
        for rule in list(self.injected):
            if rule.remaining == 0 or not rule.match(method, path):
                continue
            if self.rng.random() >= rule.probability:
                continue
            if rule.remaining > 0:
                rule.remaining -= 1
            if rule.status == 0:
                raise KubeApiError(0, "ConnectionError", f"{method} {path}: injected")
            raise KubeApiError(rule.status, "Injected", f"{method} {path}: injected")

    def _bump(self, kind: Kind, event: str, obj: JSON) -> JSON:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        self.log.append((self.version, kind, event, copy.deepcopy(obj)))
        condition = self._condition()

        async def notify() -> None:
            async with condition:
                condition.notify_all()

        asyncio.get_event_loop().create_task(notify())
        return copy.deepcopy(obj)

    def _create(self, kind: Kind, obj: JSON) -> JSON:
        obj = copy.deepcopy(obj)
        metadata = obj.setdefault("metadata", {})
        if not metadata.get("name") and metadata.get("generateName"):
            metadata["name"] = f"{metadata['generateName']}{next(self._uids):05d}"
        key = (metadata.get("namespace") or "", metadata["name"])
        items = self.store.setdefault(kind, {})
        if key in items:
            raise KubeApiError(409, "AlreadyExists", f"{kind[2]} {key} already exists")
        metadata["uid"] = f"uid-{next(self._uids)}"
        self.clock += 1
        metadata.setdefault("creationTimestamp", _stamp(self.clock))
        items[key] = obj
        return self._bump(kind, "ADDED", obj)

    def _commit(self, kind: Kind, event: str, obj: JSON) -> JSON:
        key = (obj["metadata"].get("namespace") or "", obj["metadata"]["name"])
        self.store[kind][key] = obj
        return self._bump(kind, event, obj)

    def _existing(self, kind: Kind, namespace: str | None, name: str) -> JSON:
        if kind not in self.kinds:
            raise KubeApiError(404, "NotFound", f"the server could not find the requested resource {kind}")
        obj = self.store.get(kind, {}).get((namespace or "", name))
        if obj is None:
            raise KubeApiError(404, "NotFound", f"{kind[2]} {name!r} not found")
        return copy.deepcopy(obj)

    def _ready_at(self, position: int) -> bool:
        return position < len(self.log) and self._deliverable(position)

    def _deliverable(self, position: int) -> bool:
        return self.deliver_until is None or self.log[position][0] <= self.deliver_until

    def release(self) -> None:
        """Let held-back watch events through."""
        self.deliver_until = None
        condition = self._condition()

        async def notify() -> None:
            async with condition:
                condition.notify_all()

        asyncio.get_event_loop().create_task(notify())

    @staticmethod
    def _kind(ref: ResourceRef) -> Kind:
        return (ref.group, ref.version, ref.plural)

    # The KubeClient interface -------------------------------------------------------------------------------
    async def close(self) -> None:
        return None

    async def request(
        self,
        method: str,
        path: str,
        query: Sequence[tuple[str, str]] = (),
        *,
        body: Any = None,
        content_type: str = "application/json",
    ) -> JSON:
        self._check(method, path)
        parts = path.strip("/").split("/")
        discovery = (parts[0] == "api" and len(parts) == 2) or (parts[0] == "apis" and len(parts) == 3)
        if method == "GET" and discovery:
            group, version = ("", parts[1]) if parts[0] == "api" else (parts[1], parts[2])
            served = [{"name": plural} for g, v, plural in sorted(self.kinds) if (g, v) == (group, version)]
            if not served:
                raise KubeApiError(404, "NotFound", f"{path} not found")
            return {"kind": "APIResourceList", "resources": served}
        kind, namespace, name, _ = _parse_path(path)
        if method == "DELETE" and name is not None:
            self._existing(kind, namespace, name)
            self.remove(kind, name, namespace or "")
            return {}
        raise KubeApiError(405, "MethodNotAllowed", f"{method} {path} is not faked")

    async def get(self, ref: ResourceRef, name: str, namespace: str | None = None) -> JSON:
        self._check("GET", ref.path(name, namespace))
        return self._existing(self._kind(ref), namespace or ref.namespace, name)

    async def create(self, ref: ResourceRef, body: Mapping[str, Any], namespace: str | None = None) -> JSON:
        self._check("POST", ref.path(None, namespace))
        obj = copy.deepcopy(dict(body))
        ns = namespace or ref.namespace
        if ns:
            obj.setdefault("metadata", {})["namespace"] = ns
        return self._create(self._kind(ref), obj)

    async def replace(self, ref: ResourceRef, name: str, body: Mapping[str, Any], namespace: str | None = None) -> JSON:
        self._check("PUT", ref.path(name, namespace))
        kind = self._kind(ref)
        current = self._existing(kind, namespace or ref.namespace, name)
        wanted = str(body.get("metadata", {}).get("resourceVersion") or "")
        if wanted and wanted != current["metadata"]["resourceVersion"]:
            raise KubeApiError(409, "Conflict", "the object has been modified")
        obj = copy.deepcopy(dict(body))
        obj["metadata"] = {**current["metadata"], **{k: v for k, v in obj.get("metadata", {}).items()
                                                      if k not in ("uid", "creationTimestamp")}}
        return self._commit(kind, "MODIFIED", obj)

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

    async def json_patch(
        self,
        ref: ResourceRef,
        name: str,
        ops: Sequence[Mapping[str, Any]],
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> JSON:
        self._check("PATCH", ref.path(name, namespace, subresource))
        if self.before_write is not None:
            self.before_write("PATCH", ref.path(name, namespace, subresource))
        kind = self._kind(ref)
        current = self._existing(kind, namespace or ref.namespace, name)
        try:
            new = apply_patch(current, ops)
        except PatchError as error:
            raise KubeApiError(422, "Invalid", f"the server rejected our request: {error}") from None
        return self._patched(kind, current, new, subresource)

    async def merge_patch(
        self,
        ref: ResourceRef,
        name: str,
        patch: Mapping[str, Any],
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> JSON:
        self._check("PATCH", ref.path(name, namespace, subresource))
        kind = self._kind(ref)
        current = self._existing(kind, namespace or ref.namespace, name)
        return self._patched(kind, current, merge(current, patch), subresource)

    def _selected(self, ref: ResourceRef, obj: JSON, label_selector: str | None) -> bool:
        metadata = obj.get("metadata", {})
        if ref.namespace and metadata.get("namespace") != ref.namespace:
            return False
        return not label_selector or label_selector in (metadata.get("labels") or {})

    async def list_page(
        self,
        ref: ResourceRef,
        *,
        limit: int = 500,
        continue_token: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> JSON:
        self._check("GET", ref.path())
        kind = self._kind(ref)
        if kind not in self.kinds:
            raise KubeApiError(404, "NotFound", f"{kind} not installed")
        items = [obj for obj in self.objects(kind) if self._selected(ref, obj, label_selector)]
        return {"items": items, "metadata": {"resourceVersion": str(self.version)}}

    @asynccontextmanager
    async def watch(
        self,
        ref: ResourceRef,
        *,
        resource_version: str,
        timeout_seconds: int,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> AsyncIterator[AsyncIterator[JSON]]:
        self._check("WATCH", ref.path())
        kind = self._kind(ref)
        since = int(resource_version)

        async def events() -> AsyncIterator[JSON]:
            position = 0
            condition = self._condition()
            while True:
                while position < len(self.log):
                    version, changed, event, obj = self.log[position]
                    if self.deliver_until is not None and version > self.deliver_until:
                        break
                    position += 1
                    if version > since and changed == kind and self._selected(ref, obj, label_selector):
                        yield {"type": event, "object": copy.deepcopy(obj)}
                async with condition:
                    await condition.wait_for(partial(self._ready_at, position))

        yield events()


def _stamp(seconds: float) -> str:
    import datetime  # noqa: PLC0415

    return datetime.datetime.fromtimestamp(seconds, tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


JOBS: Kind = ("batch", "v1", "jobs")
