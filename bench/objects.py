"""The inputs the benchmarks build: quota trees, workloads, and the Node, Pod, ResourcePolicy and
ElasticQuotaTree JSON the extender reads.

The benchmarks are not tests and import no test module (issue 19): they build what they measure here, from
the package's public types and parsers. Trees go through :func:`webhook.core.quota.parse_tree`, so a bench
tree is exactly what an ElasticQuotaTree object would give; the seed's tree is read from
``examples/seed/01-elasticquotatree.yaml``, the file ``kq dev up --seed`` applies.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from webhook.api.kinds import ELASTIC_QUOTA_TREE, RESOURCE_POLICY
from webhook.api.names import TREE_NAMESPACE
from webhook.core.placement import VIRTUAL_NODE_TOLERATION
from webhook.core.quota import QuotaTree, parse_tree
from webhook.core.resources import Resources
from webhook.core.workload import Phase, PodSet, Workload, WorkloadKey

SEED_TREE_FILE = Path(__file__).resolve().parent.parent / "examples" / "seed" / "01-elasticquotatree.yaml"
"""The seed's ElasticQuotaTree (Department-a: user-a, user-b; Department-b: user-c)."""
_uids = itertools.count(1)


def seed_tree() -> QuotaTree:
    """The seed's quota tree, parsed from :data:`SEED_TREE_FILE`."""
    return parse_tree(yaml.safe_load(SEED_TREE_FILE.read_text())["spec"])


def workload(
    name: str,
    namespace: str,
    quota: str,
    *,
    cpu: int,
    memory: str,
    priority: int = 0,
    created: float = 0.0,
    phase: Phase = Phase.QUEUED,
    admitted_at: float | None = None,
) -> Workload:
    """A one-pod Job workload requesting ``cpu`` whole CPUs and ``memory``."""
    return Workload(
        key=WorkloadKey(kind="Job", namespace=namespace, name=name),
        quota=quota,
        pod_sets=(PodSet(name="main", count=1, per_pod=Resources.parse({"cpu": cpu, "memory": memory})),),
        priority=priority,
        created=created,
        phase=phase,
        admitted_at=admitted_at,
    )


def node(name: str, /, virtual: bool = False, **labels: str) -> dict[str, Any]:
    """A Node: ``type: ecs`` (or the virtual node's label and taint) plus ``labels``."""
    all_labels = {"kubernetes.io/hostname": name, "type": "virtual-kubelet" if virtual else "ecs", **labels}
    spec: dict[str, Any] = {}
    if virtual:
        spec["taints"] = [{"key": "virtual-kubelet.io/provider", "value": "alibabacloud", "effect": "NoSchedule"}]
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": all_labels}, "spec": spec}


def virtual_node(name: str = "virtual-kubelet") -> dict[str, Any]:
    """The virtual-kubelet node (ECI)."""
    return node(name, virtual=True)


def pod(name: str, /, cpu: str, *, namespace: str) -> dict[str, Any]:
    """A Pending Pod requesting ``cpu``, tolerating the virtual node."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}-{next(_uids)}",
            "labels": {},
            "annotations": {},
            "creationTimestamp": "2024-05-01T12:00:00Z",
        },
        "spec": {
            "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}],
            "tolerations": [dict(VIRTUAL_NODE_TOLERATION)],
        },
        "status": {"phase": "Pending"},
    }


def bound(obj: Mapping[str, Any], node_name: str) -> dict[str, Any]:
    """A copy of a pod built by :func:`pod`, bound to ``node_name`` and Running."""
    return {**obj, "spec": {**obj["spec"], "nodeName": node_name}, "status": {"phase": "Running"}}


def ecs(max: int | None = None, **node_selector: str) -> dict[str, Any]:
    """A ResourcePolicy unit of regular nodes matching ``node_selector``."""
    return _unit("ecs", max, node_selector)


def eci(max: int | None = None, **node_selector: str) -> dict[str, Any]:
    """A ResourcePolicy unit of the virtual node."""
    return _unit("eci", max, node_selector)


def _unit(resource: str, max: int | None, node_selector: Mapping[str, str]) -> dict[str, Any]:
    unit: dict[str, Any] = {"resource": resource, "nodeSelector": dict(node_selector)}
    if max is not None:
        unit["max"] = max
    return unit


def policy(name: str, units: Sequence[Mapping[str, Any]], *, namespace: str) -> dict[str, Any]:
    """A ResourcePolicy selecting every pod of ``namespace`` (strategy ``prefer``)."""
    return {
        "apiVersion": RESOURCE_POLICY.api_version,
        "kind": "ResourcePolicy",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"policy-{name}",
            "creationTimestamp": "2024-05-01T11:00:00Z",
        },
        "spec": {"selector": {}, "strategy": "prefer", "units": [dict(unit) for unit in units]},
    }


def quota_tree(root: Mapping[str, Any]) -> dict[str, Any]:
    """An ElasticQuotaTree object in kube-system with ``spec.root`` = ``root``."""
    return {
        "apiVersion": ELASTIC_QUOTA_TREE.api_version,
        "kind": "ElasticQuotaTree",
        "metadata": {
            "name": "elasticquotatree",
            "namespace": TREE_NAMESPACE,
            "creationTimestamp": "2024-05-01T00:00:00Z",
        },
        "spec": {"root": dict(root)},
    }
