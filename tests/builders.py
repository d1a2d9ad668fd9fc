"""Builders for test objects: resource lists, quota nodes and trees, and workloads.

Shared by every test suite; keep this API stable (add parameters only with defaults).

    res(cpu=10, memory="10Gi", gpu=1)
    tree(node("root", min=res(cpu=10), max=res(cpu=10), children=(
        node("Department-a", max=res(cpu=10), namespaces=("user-a",)),
    )))
    seed_tree()
    job("pi-1", pods=6, cpu=10, memory="10Gi", priority=2, phase=Phase.ADMITTED, admitted_at=5.0)
    pod("p1", "10", namespace="team", labels={"app": "web"}, node_name="ecs-0", phase="Pending")
    resource_claim("pair", "user-c", device_request(2)), with_claims(pod(...), made={"gpu": "p1-gpu-x7"})
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import itertools
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

from webhook.api.kinds import ELASTIC_QUOTA_TREE
from webhook.api.names import QUOTA_RESOURCE_ANNOTATION, TREE_NAMESPACE
from webhook.core.quota import QuotaNode, QuotaTree, build_tree
from webhook.core.resources import EMPTY, Resources
from webhook.core.workload import Phase, PodSet, Workload, WorkloadKey

__all__ = [
    "BROKEN_TREES",
    "SEED_TREE_SPEC",
    "UNLABELLABLE_NAMES",
    "Spec",
    "batch_job_object",
    "claim_template",
    "cluster_pod",
    "device_class",
    "device_request",
    "job",
    "job_manifest",
    "node",
    "pod",
    "res",
    "resource_claim",
    "seed_tree",
    "tree",
    "tree_child",
    "tree_object",
    "tree_root",
    "with_claims",
]

ResourcesLike = Resources | Mapping[str, int | str] | None
"""A :class:`Resources`, a plain ``{"cpu": 10, "nvidia.com/gpu": 1}`` mapping of whole units, or ``None``."""


def res(**whole_units: int | str) -> Resources:
    """``res(cpu=10, memory="10Gi", gpu=1, max_jobs=2)``: alias of :meth:`Resources.of`
    (``gpu`` means ``nvidia.com/gpu``, ``max_jobs`` means ``kube-queue/max-jobs``)."""
    return Resources.of(**whole_units)


def _resources(value: ResourcesLike) -> Resources:
    if value is None:
        return EMPTY
    if isinstance(value, Resources):
        return value
    return Resources.parse(value)


def _rebase(node: QuotaNode, prefix: tuple[str, ...]) -> QuotaNode:
    """``node`` and its subtree with ``prefix`` put in front of every path."""
    return dataclasses.replace(
        node,
        path=prefix + node.path,
        children=tuple(_rebase(child, prefix) for child in node.children),
    )


def node(
    name: str,
    min: ResourcesLike = None,
    max: ResourcesLike = None,
    *,
    namespaces: Iterable[str] = (),
    children: Iterable[QuotaNode] = (),
    attributes: Mapping[str, str] | None = None,
) -> QuotaNode:
    """A quota node whose ``path`` (and every descendant's) is correct relative to this node.

    Build bottom-up: each call nests its children's paths under ``name``, so the outermost call (the
    root) ends with full paths such as ``("root", "Department-a")``.
    """
    return QuotaNode(
        name=name,
        path=(name,),
        min=_resources(min),
        max=_resources(max),
        namespaces=tuple(namespaces),
        children=tuple(_rebase(child, (name,)) for child in children),
        attributes=MappingProxyType(dict(attributes or {})),
    )


def tree(root: QuotaNode) -> QuotaTree:
    """Validate and index a tree built with :func:`node` (raises ``QuotaTreeError`` if it breaks a rule)."""
    return build_tree(root)


SEED_TREE_SPEC: dict[str, Any] = {
    "root": {
        "name": "root",
        "max": {"cpu": 100, "memory": "100Gi", "nvidia.com/gpu": 4},
        "min": {"cpu": 100, "memory": "100Gi", "nvidia.com/gpu": 4},
        "children": [
            {
                "name": "Department-a",
                "max": {"cpu": 100, "memory": "100Gi", "nvidia.com/gpu": 4},
                "min": {"cpu": 60, "memory": "60Gi", "nvidia.com/gpu": 3},
                "namespaces": ["user-a", "user-b"],
            },
            {
                "name": "Department-b",
                "max": {"cpu": 100, "memory": "100Gi", "nvidia.com/gpu": 4},
                "min": {"cpu": 40, "memory": "40Gi", "nvidia.com/gpu": 1},
                "namespaces": ["user-c"],
            },
        ],
    }
}
"""The seed's ElasticQuotaTree ``spec``, as YAML parses it (bare numbers are ints)."""


def seed_root() -> QuotaNode:
    """The root node of the seed's tree (see :data:`SEED_TREE_SPEC`)."""
    total = res(cpu=100, memory="100Gi", gpu=4)
    return node(
        "root",
        min=total,
        max=total,
        children=(
            node(
                "Department-a",
                min=res(cpu=60, memory="60Gi", gpu=3),
                max=total,
                namespaces=("user-a", "user-b"),
            ),
            node(
                "Department-b",
                min=res(cpu=40, memory="40Gi", gpu=1),
                max=total,
                namespaces=("user-c",),
            ),
        ),
    )


def seed_tree() -> QuotaTree:
    """The seed's tree: root 100 CPU / 100Gi / 4 GPU; Department-a (user-a, user-b) min 60/60Gi/3;
    Department-b (user-c) min 40/40Gi/1; both max 100/100Gi/4."""
    return tree(seed_root())


def job(
    name: str,
    namespace: str = "user-a",
    quota: str = "department-a",
    *,
    pods: int = 1,
    cpu: int | str | None = 1,
    memory: int | str | None = None,
    gpu: int | str | None = None,
    priority: int = 0,
    created: float = 0.0,
    phase: Phase = Phase.QUEUED,
    admitted_at: float | None = None,
    kind: str = "Job",
    extra: Mapping[str, int | str] | None = None,
    uid: str = "",
) -> Workload:
    """A one-pod-set workload of ``pods`` pods, each requesting ``cpu``/``memory``/``gpu`` (whole units or
    quantity strings; ``None`` leaves the resource out) plus any ``extra`` resources by full name."""
    per_pod: dict[str, int | str] = {}
    if cpu is not None:
        per_pod["cpu"] = cpu
    if memory is not None:
        per_pod["memory"] = memory
    if gpu is not None:
        per_pod["nvidia.com/gpu"] = gpu
    per_pod.update(extra or {})
    return Workload(
        key=WorkloadKey(kind=kind, namespace=namespace, name=name),
        quota=quota,
        pod_sets=(PodSet(name="main", count=pods, per_pod=Resources.parse(per_pod)),),
        priority=priority,
        created=created,
        uid=uid,
        phase=phase,
        admitted_at=admitted_at,
    )


def batch_job_object(
    name: str,
    namespace: str = "user-a",
    *,
    pods: int = 1,
    completions: int | None = None,
    cpu: int = 10,
    memory: str | None = None,
    created: str = "2024-04-08T02:00:00Z",
    admitted_at: str | None = None,
    annotations: Mapping[str, str] | None = None,
    priority: int | None = None,
    suspend: bool | None = None,
    status: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A batch/v1 Job as the API returns it: held, or released with an admission record (id ``name``) when
    ``admitted_at`` is given (``suspend`` overrides the hold). ``completions`` defaults to ``pods`` (a Job that
    runs all its pods at once); ``priority`` writes a literal priority into its pod template."""
    notes = dict(annotations or {})
    if admitted_at is not None:
        notes["kube-queue.x-k8s.io/admission"] = (
            f'{{"quota":"root/x","request":{{}},"admittedAt":"{admitted_at}","id":"{name}"}}'
        )
    requests = {"cpu": str(cpu), **({"memory": memory} if memory is not None else {})}
    template_spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": requests}}]}
    if priority is not None:
        template_spec["priority"] = priority
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "resourceVersion": "7",
            "creationTimestamp": created,
            "annotations": notes,
        },
        "spec": {
            "suspend": (admitted_at is None) if suspend is None else suspend,
            "parallelism": pods,
            "completions": pods if completions is None else completions,
            "template": {"spec": template_spec},
        },
        "status": dict(status or {}),
    }


def job_manifest(
    name: str,
    *,
    pods: int | None,
    cpu: int | str,
    memory: str | None = None,
    namespace: str | None = None,
    completions: int | None = None,
    suspend: bool | None = None,
    container: str = "main",
    grace_seconds: int | None = 0,
    template_annotations: Mapping[str, str] | None = None,
    **template_spec: Any,
) -> dict[str, Any]:
    """A batch/v1 Job as a user writes it for ``kubectl create``: ``pods`` pods at once (parallelism, and
    completions unless ``completions`` is given; ``None`` leaves both to the API's default of 1), each requesting
    ``cpu`` (and ``memory``) in one container ``container``; ``namespace`` (else ``kubectl -n``), ``suspend``,
    ``terminationGracePeriodSeconds`` ``grace_seconds`` (``None``: the default) and the pod template's
    ``template_annotations`` when given; ``template_spec`` adds to the pod template's spec
    (``nodeSelector=...``, ``priorityClassName=...``)."""
    requests = {"cpu": str(cpu), **({"memory": memory} if memory is not None else {})}
    spec: dict[str, Any] = {
        "containers": [{"name": container, "image": "busybox", "resources": {"requests": requests}}],
        "restartPolicy": "Never",
        **({"terminationGracePeriodSeconds": grace_seconds} if grace_seconds is not None else {}),
        **template_spec,
    }
    template: dict[str, Any] = {"spec": spec}
    if template_annotations is not None:
        template["metadata"] = {"annotations": dict(template_annotations)}
    job_spec: dict[str, Any] = {"template": template}
    if suspend is not None:
        job_spec["suspend"] = suspend
    if pods is not None:
        job_spec["parallelism"] = pods
        job_spec["completions"] = pods if completions is None else completions
    metadata = {"name": name, **({"namespace": namespace} if namespace is not None else {})}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": job_spec}


_pod_uids = itertools.count(1)


def pod(
    name: str = "p",
    /,
    cpu: str | None = "1",
    *,
    namespace: str | None = "user-a",
    memory: str | None = None,
    gpu: int = 0,
    container: str = "main",
    image: str = "busybox",
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    uid: str | None = None,
    numbered_uid: bool = False,
    resource_version: str | None = None,
    created: str | None = None,
    deleting: bool = False,
    owner: Mapping[str, Any] | None = None,
    node_name: str | None = None,
    phase: str | None = None,
    unschedulable: str | None = None,
    status: Mapping[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A v1 Pod of one container ``container`` (``image``) requesting ``cpu``/``memory``/``gpu`` (all ``None``/0:
    no ``resources``); ``spec`` adds to the pod's spec (``restartPolicy="Never"``, ``tolerations=[...]``).

    Metadata: ``namespace`` (``None`` leaves it out, as in a manifest for ``kubectl -n``), ``labels`` and
    ``annotations`` when given, ``uid`` (or ``uid-<name>-<n>``, unique, with ``numbered_uid``),
    ``creationTimestamp`` ``created``, a ``deletionTimestamp`` when ``deleting``, and a controller reference to
    ``owner`` (an object with ``apiVersion``, ``kind`` and ``metadata.name``/``uid``).

    Status: none unless ``phase``, ``unschedulable`` or ``status`` is given. A pod on ``node_name`` left
    ``Pending`` is ``Running``; an ``unschedulable`` one (the scheduler's message) is on no node and carries the
    ``PodScheduled=False`` condition; ``status`` adds fields (``startTime``...).
    """
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    if uid is None and numbered_uid:
        uid = f"uid-{name}-{next(_pod_uids)}"
    if uid is not None:
        metadata["uid"] = uid
    if resource_version is not None:
        metadata["resourceVersion"] = resource_version
    if labels is not None:
        metadata["labels"] = dict(labels)
    if annotations is not None:
        metadata["annotations"] = dict(annotations)
    if created is not None:
        metadata["creationTimestamp"] = created
    if deleting:
        metadata["deletionTimestamp"] = "2024-05-01T13:00:00Z"
    if owner is not None:
        owner_meta = owner.get("metadata", {})
        metadata["ownerReferences"] = [{
            "apiVersion": owner.get("apiVersion"), "kind": owner.get("kind"), "name": owner_meta.get("name"),
            "uid": owner_meta.get("uid"), "controller": True,
        }]
    requests: dict[str, str] = {}
    if cpu is not None:
        requests["cpu"] = cpu
    if memory is not None:
        requests["memory"] = memory
    if gpu:
        requests["nvidia.com/gpu"] = str(gpu)
    main: dict[str, Any] = {"name": container, "image": image}
    if requests:
        main["resources"] = {"requests": requests}
    pod_spec: dict[str, Any] = {"containers": [main], **copy.deepcopy(spec)}
    if node_name is not None and not unschedulable:
        pod_spec["nodeName"] = node_name
        phase = "Running" if phase == "Pending" else phase
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}
    if phase is not None or unschedulable or status:
        obj["status"] = {**({"phase": phase} if phase is not None else {}), **copy.deepcopy(dict(status or {}))}
    if unschedulable:
        obj["status"]["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": unschedulable}
        ]
    return obj


cluster_pod = functools.partial(
    pod, cpu=None, image="busybox:1.36", node_name="ecs-0", phase="Running", created="1970-01-01T00:00:00Z"
)
"""``cluster_pod(name, namespace=..., owner=job, created=...)``: a job's pod as the CLI reads it from the cluster,
Running on ``ecs-0`` unless told otherwise."""


# Broken input shared by the tiers (the webhook refuses each, naming the node and the rule) ------------------

Spec = dict[str, Any]


def tree_object(
    spec: Spec | None = None, namespace: str = TREE_NAMESPACE, name: str = "elasticquotatree"
) -> dict[str, Any]:
    return {
        "apiVersion": ELASTIC_QUOTA_TREE.api_version,
        "kind": "ElasticQuotaTree",
        "metadata": {"name": name, "namespace": namespace},
        "spec": copy.deepcopy(spec if spec is not None else SEED_TREE_SPEC),
    }


def tree_root(spec: Spec) -> Spec:
    root = spec["root"]
    assert isinstance(root, dict)
    return root


def tree_child(spec: Spec, index: int) -> Spec:
    child = tree_root(spec)["children"][index]
    assert isinstance(child, dict)
    return child


BROKEN_TREES: list[tuple[str, Callable[[Spec], None], str, str]] = [
    ("min above max", lambda s: tree_child(s, 1)["min"].__setitem__("cpu", 200), "min-le-max", "root/Department-b"),
    ("root min != max", lambda s: tree_root(s)["min"].__setitem__("cpu", 90), "root-min-eq-max", "root"),
    (
        "children min above parent min",
        lambda s: tree_child(s, 0)["min"].__setitem__("cpu", 70),
        "children-min-le-parent-min",
        "root",
    ),
    (
        "child max above parent max",
        lambda s: tree_child(s, 1)["max"].__setitem__("cpu", 101),
        "child-max-le-parent-max",
        "root/Department-b",
    ),
    (
        "namespaces on an inner node",
        lambda s: tree_root(s).__setitem__("namespaces", ["ops"]),
        "namespaces-only-on-leaves",
        "root",
    ),
    (
        "namespace in two leaves",
        lambda s: tree_child(s, 1)["namespaces"].append("user-a"),
        "namespace-in-one-leaf",
        "root/Department-b",
    ),
    (
        "duplicate names ignoring case",
        lambda s: tree_child(s, 1).__setitem__("name", "DEPARTMENT-A"),
        "unique-names",
        "DEPARTMENT-A",
    ),
    ("bad quantity", lambda s: tree_child(s, 0)["max"].__setitem__("memory", "lots"), "quantity", "Department-a"),
    ("negative quantity", lambda s: tree_child(s, 0)["min"].__setitem__("cpu", "-1"), "quantity", "Department-a"),
    ("no root", lambda s: s.pop("root"), "type", "spec.root"),
    ("bad namespace name", lambda s: tree_child(s, 0)["namespaces"].append("User_A"), "namespace-name", "Department-a"),
]


UNLABELLABLE_NAMES = ["Département-ä", "team b", "\N{ROCKET}-team", "d" * 64, "-team"]
"""Issue 17 hole 4: node names that cannot be label values (a leaf's name is its jobs' quota label)."""


# Dynamic Resource Allocation (resource.k8s.io/v1) -----------------------------------------------------------

GPU_CLASS = "gpu.example.com"
"""The DeviceClass the tests count as ``nvidia.com/gpu``."""


def device_class(name: str = GPU_CLASS, quota_resource: str | None = "nvidia.com/gpu") -> dict[str, Any]:
    """A DeviceClass, annotated to count as ``quota_resource`` (``None``: not counted)."""
    metadata: dict[str, Any] = {"name": name}
    if quota_resource is not None:
        metadata["annotations"] = {QUOTA_RESOURCE_ANNOTATION: quota_resource}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": metadata,
            "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{name}'"}}]}}


def device_request(count: int | None = 1, *, device_class: str = GPU_CLASS, name: str = "gpu",
                   mode: str | None = None) -> dict[str, Any]:
    """One ``spec.devices.requests[]`` entry asking ``exactly`` ``count`` devices (``None``: no count given)
    of ``device_class``; ``mode`` sets ``allocationMode`` (``"All"``)."""
    exactly: dict[str, Any] = {"deviceClassName": device_class}
    if mode is not None:
        exactly["allocationMode"] = mode
    if count is not None:
        exactly["count"] = count
    return {"name": name, "exactly": exactly}


def resource_claim(name: str, namespace: str = "user-c", *requests: Mapping[str, Any],
                   resource_version: str = "1") -> dict[str, Any]:
    """A ResourceClaim asking for ``requests`` (default: one device of :data:`GPU_CLASS`)."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace, "uid": f"claim-{namespace}-{name}",
                         "resourceVersion": resource_version},
            "spec": {"devices": {"requests": [dict(r) for r in requests or (device_request(),)]}}}


def claim_template(name: str, namespace: str = "user-c", *requests: Mapping[str, Any]) -> dict[str, Any]:
    """A ResourceClaimTemplate whose claims ask for ``requests`` (default: one device of :data:`GPU_CLASS`)."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"spec": {"devices": {"requests": [dict(r) for r in requests or (device_request(),)]}}}}


def with_claims(pod_obj: Mapping[str, Any], *, templates: Mapping[str, str] | None = None,
                made: Mapping[str, str] | None = None, shared: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A copy of ``pod_obj`` naming DRA claims in ``spec.resourceClaims``: ``templates`` (entry -> template
    name), ``shared`` (entry -> claim name); ``made`` (entry -> claim name) puts the claims the control plane
    made from templates in ``status.resourceClaimStatuses`` (an entry of ``made`` alone names template
    ``<entry>-template``)."""
    out = copy.deepcopy(dict(pod_obj))
    entries = [{"name": entry, "resourceClaimTemplateName": template}
               for entry, template in {**{e: f"{e}-template" for e in made or {}}, **(templates or {})}.items()]
    entries += [{"name": entry, "resourceClaimName": claim} for entry, claim in (shared or {}).items()]
    out["spec"]["resourceClaims"] = entries
    for container in out["spec"].get("containers", []):
        container.setdefault("resources", {})["claims"] = [{"name": entry["name"]} for entry in entries]
    if made:
        status = out.setdefault("status", {})
        status["resourceClaimStatuses"] = [{"name": entry, "resourceClaimName": claim}
                                           for entry, claim in made.items()]
    return out
