"""The service shells' fake of kube-apiserver: :class:`tests.kubefake.ObjectStore` behind the
:class:`KubeClient` interface, for the controller's and the extender's service tests.

It serves paginated lists and watches (events after a version, namespace and label-selector filters; field
selectors are not applied, so that :func:`FakeApi._selected` says what a watch delivers), JSON Patch, merge
patch, create, replace, delete, the ``status`` subresource and discovery of the installed kinds; failures
can be injected per call and watches held back (``deliver_until``).
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from tests.kubefake import Kind, ObjectStore, labels_match, parse_path
from webhook.api.objects import namespace_of
from webhook.kube.client import JSON, KubeApiError, KubeClient, ResourceRef

__all__ = ["CORE", "JOBS", "FakeApi", "Injected", "Kind"]

CORE: tuple[Kind, ...] = (
    ("", "v1", "namespaces"),
    ("", "v1", "pods"),
    ("", "v1", "limitranges"),
    ("policy", "v1", "poddisruptionbudgets"),
    ("", "v1", "configmaps"),
    ("resource.k8s.io", "v1", "deviceclasses"),
    ("resource.k8s.io", "v1", "resourceclaims"),
    ("resource.k8s.io", "v1", "resourceclaimtemplates"),
    ("node.k8s.io", "v1", "runtimeclasses"),
    ("", "v1", "events"),
    ("batch", "v1", "jobs"),
    ("scheduling.k8s.io", "v1", "priorityclasses"),
    ("coordination.k8s.io", "v1", "leases"),
    ("scheduling.sigs.k8s.io", "v1beta1", "elasticquotatrees"),
    ("scheduling.x-k8s.io", "v1alpha1", "queues"),
    ("scheduling.alibabacloud.com", "v1alpha1", "resourcepolicies"),
)


@dataclass
class Injected:
    """A failure to raise on matching calls: ``remaining`` times (``-1`` = always) with ``probability``."""

    status: int
    match: Callable[[str, str], bool]
    remaining: int = 1
    probability: float = 1.0


class FakeApi(ObjectStore, KubeClient):
    """The fake; pass it wherever a :class:`KubeClient` goes. The store's helpers (``put``, ``obj``,
    ``objects``, ``remove``, ``log``, ``release``) act as another client would."""

    def __init__(self, kinds: set[Kind] | None = None) -> None:
        # No ApiClient: every KubeClient method is overridden below.
        # The controller's tests give a generation to the objects whose status-only changes they exercise.
        ObjectStore.__init__(self, KubeApiError, generations=False)
        self.kinds: set[Kind] = set(CORE) if kinds is None else kinds
        self.calls: list[tuple[str, str]] = []
        """``(method, path)`` of every call."""
        self.injected: list[Injected] = []
        self.rng = random.Random(7)
        self.before_write: Callable[[str, str], None] | None = None
        """Called with ``(method, path)`` before every write is applied (to interleave other clients' writes)."""

    # Test helpers -----------------------------------------------------------------------------------------
    def fail(self, status: int, match: Callable[[str, str], bool], times: int = 1, probability: float = 1.0) -> None:
        self.injected.append(Injected(status, match, times, probability))

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

    def _before_write(self, method: str, path: str) -> None:
        if self.before_write is not None:
            self.before_write(method, path)

    def _installed(self, kind: Kind) -> Kind:
        if kind not in self.kinds:
            raise KubeApiError(404, "NotFound", f"the server could not find the requested resource {kind}")
        return kind

    def _selected(self, ref: ResourceRef, obj: JSON, label_selector: str | None) -> bool:
        if ref.namespace and namespace_of(obj) != ref.namespace:
            return False
        return labels_match(obj, label_selector)

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
        kind, namespace, name, sub = parse_path(path)
        if method == "DELETE" and name is not None:
            ObjectStore.delete(self, self._installed(kind), name, namespace)
            return {}
        if method == "POST" and kind == ("", "v1", "pods") and name is not None and sub == "eviction":
            self._evict(name, namespace or "", body if isinstance(body, Mapping) else {})
            return {"kind": "Status", "status": "Success"}
        raise KubeApiError(405, "MethodNotAllowed", f"{method} {path} is not faked")

    def _evict(self, name: str, namespace: str, body: Mapping[str, Any]) -> None:
        """The Eviction API as the API server answers it: 404 for a pod that is gone, 409 when the uid
        precondition names another pod, 429 while a PodDisruptionBudget selecting the pod allows no
        disruption (its ``status.disruptionsAllowed``), else the pod is deleted."""
        pods: Kind = ("", "v1", "pods")
        pod = ObjectStore.get(self, pods, name, namespace)
        options = body.get("deleteOptions") or {}
        uid = (options.get("preconditions") or {}).get("uid")
        if uid and pod.get("metadata", {}).get("uid") != uid:
            raise KubeApiError(409, "Conflict", f"Precondition failed: UID in precondition: {uid}")
        labels = pod.get("metadata", {}).get("labels") or {}
        for budget in self.objects(("policy", "v1", "poddisruptionbudgets")):
            if budget.get("metadata", {}).get("namespace") != namespace:
                continue
            wanted = (budget.get("spec", {}).get("selector") or {}).get("matchLabels") or {}
            allowed = (budget.get("status") or {}).get("disruptionsAllowed", 0)
            if all(labels.get(key) == value for key, value in wanted.items()) and allowed < 1:
                raise KubeApiError(429, "TooManyRequests",
                                   "Cannot evict pod as it would violate the pod's disruption budget.")
        ObjectStore.delete(self, pods, name, namespace)

    async def get(self, ref: ResourceRef, name: str, namespace: str | None = None) -> JSON:  # type: ignore[override]
        self._check("GET", ref.path(name, namespace))
        return ObjectStore.get(self, self._installed(self._kind(ref)), name, namespace or ref.namespace)

    async def create(self, ref: ResourceRef, body: Mapping[str, Any], namespace: str | None = None) -> JSON:  # type: ignore[override]
        self._check("POST", ref.path(None, namespace))
        self._before_write("POST", ref.path(None, namespace))
        obj = dict(body)
        ns = namespace or ref.namespace
        if ns:
            obj["metadata"] = {**obj.get("metadata", {}), "namespace": ns}
        return ObjectStore.create(self, self._kind(ref), obj)

    async def replace(self, ref: ResourceRef, name: str, body: Mapping[str, Any], namespace: str | None = None) -> JSON:  # type: ignore[override]
        self._check("PUT", ref.path(name, namespace))
        self._before_write("PUT", ref.path(name, namespace))
        return ObjectStore.replace(self, self._installed(self._kind(ref)), name, namespace or ref.namespace, body)

    async def json_patch(  # type: ignore[override]
        self,
        ref: ResourceRef,
        name: str,
        ops: Sequence[Mapping[str, Any]],
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> JSON:
        self._check("PATCH", ref.path(name, namespace, subresource))
        self._before_write("PATCH", ref.path(name, namespace, subresource))
        kind = self._installed(self._kind(ref))
        return ObjectStore.json_patch(self, kind, name, namespace or ref.namespace, ops, subresource)

    async def merge_patch(  # type: ignore[override]
        self,
        ref: ResourceRef,
        name: str,
        patch: Mapping[str, Any],
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> JSON:
        self._check("PATCH", ref.path(name, namespace, subresource))
        self._before_write("PATCH", ref.path(name, namespace, subresource))
        kind = self._installed(self._kind(ref))
        return ObjectStore.merge_patch(self, kind, name, namespace or ref.namespace, patch, subresource)

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

        def selected(obj: JSON) -> bool:
            return self._selected(ref, obj, label_selector)

        yield self.events(self._kind(ref), int(resource_version), selected)


JOBS: Kind = ("batch", "v1", "jobs")
