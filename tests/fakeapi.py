"""The developer commands' fake of kube-apiserver, with object builders (test-only: not shipped).

:class:`FakeApi` is :class:`tests.kubefake.ObjectStore` behind the CLI's :class:`KubeApi` interface: it answers
the requests the commands make (discovery, lists with label and field selectors, get, create, delete, pod
logs) the way kube-apiserver would, and records every request. The builders make the objects a kube-queue
cluster holds (the tree, Queues, jobs as the webhook and the controller leave them, pods, Events), with fixed
times so that rendered output is stable.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import unquote

from tests.kubefake import ByGroupPlural, Kind, ObjectStore, stamp
from webhook.api.names import OVERSELL_RATE_ANNOTATION
from webhook.readmodel.kubeapi import ApiError, KubeApi

CLUSTER_SCOPED = {"Node", "Namespace", "PriorityClass", "RuntimeClass", "DeviceClass"}
IRREGULAR_PLURALS = {"PriorityClass": "priorityclasses", "RuntimeClass": "runtimeclasses",
                     "DeviceClass": "deviceclasses"}
BUILTIN_GROUPS = {
    "batch": ["v1"],
    "policy": ["v1"],
    "scheduling.k8s.io": ["v1"],
    "scheduling.sigs.k8s.io": ["v1beta1"],
    "scheduling.x-k8s.io": ["v1alpha1"],
}


def plural_of(kind: str) -> str:
    return IRREGULAR_PLURALS.get(kind, kind.lower() + "s")


def _group_version(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


def _path_parts(path: str) -> tuple[str, str, str | None, str | None, str | None, str | None]:
    """``(group, version, namespace, plural, name, subresource)`` of an API path (plural ``None`` for a
    discovery path)."""
    parts = [unquote(p) for p in path.strip("/").split("/")]
    if parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    else:
        group, version, rest = parts[1], parts[2] if len(parts) > 2 else "", parts[3:]
    namespace = None
    if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) != 2:
        namespace, rest = rest[1], rest[2:]
    plural = rest[0] if rest else None
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    return group, version, namespace, plural, name, sub


class FakeApi(KubeApi):
    """See the module notes. ``logs`` maps ``(namespace, pod)`` to its lines, or to an :class:`ApiError` the log
    endpoint answers with; ``served`` adds API groups (``{"kubeflow.org": ["v1"]}``)."""

    def __init__(
        self,
        objects: Iterable[Mapping[str, Any]] = (),
        *,
        namespace: str = "default",
        now: float = 0.0,
        served: Mapping[str, Sequence[str]] | None = None,
        logs: Mapping[tuple[str, str], Sequence[str] | ApiError] | None = None,
        forbidden: Iterable[tuple[str, str | None]] = (),
        webhook: bool = True,
    ) -> None:
        self.namespace = namespace
        self.now = now
        self.store = ObjectStore(ApiError, version=0, clock=now)
        self.objects = ByGroupPlural(self.store)
        """The live objects by ``(group, plural, namespace, name)``; edit or delete them as another client would."""
        self.groups: dict[str, list[str]] = {k: list(v) for k, v in BUILTIN_GROUPS.items()}
        for group, versions in (served or {}).items():
            self.groups.setdefault(group, []).extend(v for v in versions if v not in self.groups.get(group, []))
        self.logs = dict(logs or {})
        self.forbidden = set(forbidden)
        """``(plural, namespace)`` pairs (namespace ``None`` = cluster-wide lists) answered with 403."""
        self.webhook = webhook
        """Hold and tag created jobs of the tree's namespaces, as kube-queue's mutating webhook does."""
        self.requests: list[tuple[str, str, tuple[tuple[str, str], ...]]] = []
        self.bodies: list[tuple[str, str, Any]] = []
        """``(method, path, body)`` of every request that sent a body, as sent."""
        self.created: list[dict[str, Any]] = []
        self._uid = 0
        for obj in objects:
            self.add(obj)

    # Objects ----------------------------------------------------------------------------------------------------
    def add(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        stored = copy.deepcopy(dict(obj))
        group, version = _group_version(str(stored.get("apiVersion") or "v1"))
        if group and version not in self.groups.setdefault(group, []):
            self.groups[group].append(version)
        metadata = stored.setdefault("metadata", {})
        self._uid += 1
        uid = str(metadata.get("uid") or f"uid-{metadata.get('name', 'x')}-{self._uid}")
        metadata.setdefault("creationTimestamp", stamp(self.now))
        kind = str(stored.get("kind"))
        namespace = "" if kind in CLUSTER_SCOPED else str(metadata.get("namespace") or "default")
        if namespace:
            metadata["namespace"] = namespace
        self.store.put((group, version, plural_of(kind)), stored, uid=uid)
        return self.objects[(group, plural_of(kind), namespace, str(metadata["name"]))]

    def _kinds(self, group: str, plural: str) -> list[Kind]:
        """The stored kinds of ``group``/``plural``, whatever the version (objects are found by either)."""
        return sorted(kind for kind in self.store.items if kind[0] == group and kind[2] == plural)

    def _check(self, plural: str, namespace: str | None) -> None:
        if (plural, namespace) in self.forbidden:
            where = f"in the namespace {namespace!r}" if namespace else "at the cluster scope"
            message = f'{plural} is forbidden: User "dev" cannot list resource "{plural}" {where}'
            raise ApiError(403, "Forbidden", message)

    # KubeApi --------------------------------------------------------------------------------------------------
    def request(
        self,
        method: str,
        path: str,
        query: Sequence[tuple[str, str]] = (),
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        self.requests.append((method, path, tuple(query)))
        if body is not None:
            self.bodies.append((method, path, copy.deepcopy(body)))
        if path == "/apis":
            return {
                "kind": "APIGroupList",
                "groups": [
                    {"name": name, "versions": [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]}
                    for name, versions in sorted(self.groups.items())
                ],
            }
        group, version, namespace, plural, name, _ = _path_parts(path)
        if plural is None:
            if version not in self.groups.get(group, []):
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            plurals = sorted({p for (g, p, _, _) in self.objects if g == group} | self._known(group))
            return {"kind": "APIResourceList", "resources": [{"name": p} for p in plurals]}
        if group and version not in self.groups.get(group, []):
            raise ApiError(404, "Not Found", "404 page not found")  # what kube-apiserver answers, as plain text
        params = dict(query)
        if method == "GET" and name is None:
            self._check(plural, namespace)
            items = [
                obj
                for kind in self._kinds(group, plural)
                for obj in self.store.select(kind, namespace, params.get("labelSelector"), params.get("fieldSelector"))
            ]
            items.sort(key=lambda obj: (obj["metadata"].get("namespace") or "", obj["metadata"]["name"]))
            return {"kind": "List", "metadata": {"resourceVersion": str(self.store.version)}, "items": items}
        key = (group, plural, namespace or "", name or "")
        if method == "GET":
            if key not in self.objects:
                raise ApiError(404, "NotFound", f'{plural}.{group or "core"} "{name}" not found')
            return copy.deepcopy(self.objects[key])
        if method == "DELETE":
            if key not in self.objects:
                raise ApiError(404, "NotFound", f'{plural}.{group or "core"} "{name}" not found')
            found = copy.deepcopy(self.objects[key])
            del self.objects[key]
            return found
        if method == "POST":
            obj = copy.deepcopy(dict(body))
            metadata = obj.setdefault("metadata", {})
            if not metadata.get("name"):
                self._uid += 1
                metadata["name"] = f"{metadata.get('generateName', 'x-')}{self._uid:05d}"
            metadata["namespace"] = namespace or metadata.get("namespace")
            if (group, plural, namespace or "", metadata["name"]) in self.objects:
                raise ApiError(409, "AlreadyExists", f'{plural}.{group or "core"} "{metadata["name"]}" already exists')
            if self.webhook:
                obj = self._mutate(group, obj)
            stored = self.add(obj)
            self.created.append(stored)
            return copy.deepcopy(stored)
        raise ApiError(405, "MethodNotAllowed", f"{method} {path} is not supported by the fake")

    def _mutate(self, group: str, obj: dict[str, Any]) -> dict[str, Any]:
        """What kube-queue's webhook does to a job created in a namespace of the tree: hold it, tag it."""
        from webhook.core.quota import QuotaTreeError, parse_tree  # noqa: PLC0415
        from webhook.workloads.base import apply_patch  # noqa: PLC0415
        from webhook.workloads.registry import adapter_for  # noqa: PLC0415

        adapter = adapter_for(group, str(obj.get("kind")))
        trees = [o for (g, p, _, _), o in self.objects.items() if p == "elasticquotatrees"]
        if adapter is None or not trees:
            return obj
        try:
            leaf = parse_tree(trees[0].get("spec") or {}).leaf_for_namespace(str(obj["metadata"]["namespace"]))
        except QuotaTreeError:
            return obj
        if leaf is None:
            return obj
        held = apply_patch(obj, adapter.suspend_patch(obj))
        return apply_patch(held, adapter.tag_patch(held, leaf.name, leaf.full_name))

    def _known(self, group: str) -> set[str]:
        if group == "kubeflow.org":
            return {"pytorchjobs", "tfjobs", "mpijobs"}
        if group == "ray.io":
            return {"rayjobs"}
        return set()

    def stream_lines(self, path: str, query: Sequence[tuple[str, str]] = ()) -> Iterator[str]:
        self.requests.append(("GET", path, tuple(query)))
        _, _, namespace, _, name, sub = _path_parts(path)
        if sub != "log":
            raise ApiError(404, "NotFound", "only pod logs stream in the fake")
        found = self.logs.get((namespace or "", name or ""))
        if isinstance(found, ApiError):
            raise found
        if found is None:
            message = f'container "main" in pod "{name}" is waiting to start: ContainerCreating'
            raise ApiError(400, "BadRequest", message)
        lines = list(found)
        tail = dict(query).get("tailLines")
        if tail is not None:
            lines = lines[-int(tail) :] if int(tail) else []
        yield from lines


# Builders ----------------------------------------------------------------------------------------------------------

QUOTA_LABEL = "quota.scheduling.alibabacloud.com/name"
QUOTA_FULLNAME = "kube-queue/quota-fullname"
ADMISSION = "kube-queue.x-k8s.io/admission"


def tree(spec: Mapping[str, Any], status: Mapping[str, Any] | None = None, created: float = 0.0) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "scheduling.sigs.k8s.io/v1beta1",
        "kind": "ElasticQuotaTree",
        "metadata": {"name": "elasticquotatree", "namespace": "kube-system", "creationTimestamp": stamp(created)},
        "spec": dict(spec),
    }
    if status is not None:
        obj["status"] = dict(status)
    return obj


def queue(
    name: str,
    quota: str,
    active: Sequence[Mapping[str, Any]] = (),
    policy: str = "Round",
    created: float = 0.0,
    rate: str | None = None,
) -> dict[str, Any]:
    """A Queue as the controller keeps it (``rate``: the oversell rate it states on the Queue)."""
    annotations = {QUOTA_FULLNAME: quota} | ({OVERSELL_RATE_ANNOTATION: rate} if rate is not None else {})
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "Queue",
        "metadata": {
            "name": name,
            "namespace": "kube-queue",
            "labels": {"create-by-kubequeue": "true"},
            "annotations": annotations,
            "creationTimestamp": stamp(created),
        },
        "spec": {"queuePolicy": policy},
        "status": {"queueItemDetails": {"active": [dict(item) for item in active], "backoff": []}},
    }


def batch_job(
    name: str,
    namespace: str,
    *,
    workers: int = 1,
    cpu: str = "1",
    memory: str = "1Gi",
    created: float = 0.0,
    leaf: str | None = None,
    quota: str | None = None,
    suspended: bool = False,
    admitted_at: float | None = None,
    priority_class: str | None = None,
    conditions: Sequence[Mapping[str, Any]] = (),
    succeeded: int = 0,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A batch/v1 Job as kq submits it and the webhook (``leaf``/``quota`` tags, ``suspended``) and the
    controller (``admitted_at``: released with an admission record) leave it."""
    resources = {"cpu": cpu, "memory": memory}
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox:1.36", "resources": {
        "requests": dict(resources), "limits": dict(resources)}}], "restartPolicy": "Never"}
    if priority_class:
        spec["priorityClassName"] = priority_class
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "creationTimestamp": stamp(created),
                                "uid": f"uid-{namespace}-{name}"}
    notes: dict[str, str] = dict(annotations or {})
    if leaf:
        metadata["labels"] = {QUOTA_LABEL: leaf}
        notes[QUOTA_FULLNAME] = quota or f"root/{leaf}"
    if admitted_at is not None:
        from webhook.core.resources import Resources  # noqa: PLC0415

        request = (Resources.parse(resources) * workers).to_spec()
        notes[ADMISSION] = json.dumps(
            {"quota": quota or f"root/{leaf}", "request": request, "admittedAt": stamp(admitted_at), "id": "x"},
            sort_keys=True,
        )
    if notes:
        metadata["annotations"] = notes
    obj: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {"parallelism": workers, "completions": workers, "suspend": suspended, "template": {"spec": spec}},
        "status": {},
    }
    if conditions:
        obj["status"]["conditions"] = [dict(c) for c in conditions]
    if succeeded:
        obj["status"]["succeeded"] = succeeded
    return obj


def event(
    target: Mapping[str, Any], reason: str, message: str, at: float, *, kind: str = "Normal",
    component: str = "kube-queue-controller", index: int = 0,
) -> dict[str, Any]:
    metadata = target["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{metadata['name']}.{reason.lower()}{index}", "namespace": metadata["namespace"],
                     "creationTimestamp": stamp(at)},
        "involvedObject": {"apiVersion": target.get("apiVersion"), "kind": target.get("kind"),
                           "name": metadata["name"], "namespace": metadata["namespace"], "uid": metadata.get("uid")},
        "reason": reason,
        "message": message,
        "type": kind,
        "source": {"component": component},
        "reportingComponent": component,
        "lastTimestamp": stamp(at),
        "firstTimestamp": stamp(at),
        "count": 1,
    }


def node(name: str, kwok: bool = True) -> dict[str, Any]:
    annotations = {"kwok.x-k8s.io/node": "fake"} if kwok else {}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": annotations}}


def priority_class(name: str, value: int) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value}
