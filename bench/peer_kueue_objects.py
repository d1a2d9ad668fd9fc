"""What the peer benchmark installs for Kueue, rendered from our own objects (pure: no I/O, no clock).

* :func:`manager_config` - Kueue's ``Configuration`` for a manager that runs out of cluster on loopback;
* :func:`webhook_configs` - its shipped webhook manifests, rewritten to ``url: https://127.0.0.1:<port>/<path>``
  and narrowed to the groups the ``batch/job`` integration serves;
* :func:`cluster_queues` - our quota tree's departments as ClusterQueues in one cohort (nominal quota = our
  ``min``, borrowing limit = ``max - min``, reclaim within the cohort from any borrower, as ours does);
* :func:`held_queue` / :func:`local_queue` - a plain ClusterQueue (optionally stopped with ``stopPolicy:
  Hold``) and the LocalQueue a namespace submits to;
* :func:`job` - the same small Job as :func:`bench.e2e_shapes.job`, addressed to a LocalQueue.

``tests/unit/test_peer_kueue_objects.py`` pins the mapping.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.api.names import MAX_JOBS
from webhook.core.resources import Resources

VERSION = "v0.17.0"
"""The Kueue release the benchmark builds (``webhook/devcluster/gomod-kueue/go.mod`` pins the same)."""
GROUP = "kueue.x-k8s.io"
API_VERSION = f"{GROUP}/v1beta2"
CONFIG_API_VERSION = "config.kueue.x-k8s.io/v1beta2"
NAMESPACE = "kueue-system"
QUEUE_NAME_LABEL = f"{GROUP}/queue-name"
FLAVOR = "default-flavor"
LOCAL_QUEUE = "peer"
"""The name of the LocalQueue in every namespace (one per namespace, so one name is enough)."""
SERVED_GROUPS = frozenset({GROUP, "batch"})
"""The API groups whose webhooks the ``batch/job`` integration (and Kueue's own objects) serve; the others
(pods, deployments, Ray, Kubeflow...) would point at paths this manager does not serve."""
SHIPPED_QPS, SHIPPED_BURST = 50.0, 100
"""The client rate limits Kueue ships (``config/components/manager/controller_manager_config.yaml``)."""
SHIPPED_CONCURRENCY = {"Job.batch": 5, "Pod": 5, "Workload.kueue.x-k8s.io": 5, "LocalQueue.kueue.x-k8s.io": 1,
                       "Cohort.kueue.x-k8s.io": 1, "ClusterQueue.kueue.x-k8s.io": 1,
                       "ResourceFlavor.kueue.x-k8s.io": 1}
"""The workers per kind Kueue ships in the same file (without it, one worker a kind)."""


@dataclass(frozen=True, slots=True)
class ManagerPorts:
    """The loopback ports of one out-of-cluster Kueue manager."""

    webhook: int
    metrics: int
    health: int


def manager_config(ports: ManagerPorts, cert_dir: str, *, unlimited: bool,
                   leader_elect: bool = False) -> dict[str, Any]:
    """Kueue's configuration: as shipped (qps 50, burst 100) or with the client rate limiter off (a negative
    qps: Kueue's main then installs none), everything else the same.

    The reconcilers' workers per kind as shipped. Leader election off (one manager) unless ``leader_elect``
    (replicas share a Lease in :data:`NAMESPACE`, with Kueue's default timings: 15 s lease, released on a clean
    stop), internal certificate management off (the webhook serves the dev cluster's 127.0.0.1 certificate from
    ``cert_dir``), only the ``batch/job`` integration, and the on-demand visibility server off (it would want
    certificates of its own)."""
    return {
        "apiVersion": CONFIG_API_VERSION,
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{ports.health}"},
        "metrics": {"bindAddress": f"127.0.0.1:{ports.metrics}"},
        "webhook": {"port": ports.webhook, "host": "127.0.0.1", "certDir": cert_dir},
        "leaderElection": ({"leaderElect": True, "resourceNamespace": NAMESPACE} if leader_elect
                           else {"leaderElect": False}),
        "internalCertManagement": {"enable": False},
        "clientConnection": {"qps": -1.0 if unlimited else SHIPPED_QPS, "burst": SHIPPED_BURST},
        "controller": {"groupKindConcurrency": dict(SHIPPED_CONCURRENCY)},
        "integrations": {"frameworks": ["batch/job"]},
        "featureGates": {"VisibilityOnDemand": False},
    }


def _served(webhook: Mapping[str, Any]) -> bool:
    groups = {group for rule in webhook.get("rules") or () for group in rule.get("apiGroups") or ()}
    return bool(groups) and groups <= SERVED_GROUPS


def webhook_configs(manifests: Iterable[Mapping[str, Any] | None], base_url: str,
                    ca_pem: bytes) -> list[dict[str, Any]]:
    """Kueue's webhook configurations (the documents of ``config/components/webhook/manifests.yaml``) pointed
    at ``base_url`` + each webhook's service path, with ``ca_pem`` as the CA bundle; only the webhooks of
    :data:`SERVED_GROUPS`. Configurations are renamed ``kueue-<name>`` so nobody mistakes them for ours."""
    bundle = base64.b64encode(ca_pem).decode()
    out: list[dict[str, Any]] = []
    for document in manifests:
        if not document or document.get("kind") not in ("MutatingWebhookConfiguration",
                                                           "ValidatingWebhookConfiguration"):
            continue
        hooks = []
        for webhook in document.get("webhooks") or ():
            if not _served(webhook):
                continue
            path = str(((webhook.get("clientConfig") or {}).get("service") or {}).get("path") or "")
            if not path.startswith("/"):
                raise ValueError(f"Kueue webhook {webhook.get('name')!r} has no service path to point at "
                                 f"{base_url}; the manifest's layout changed, check its clientConfig")
            hooks.append({**webhook, "clientConfig": {"url": base_url.rstrip("/") + path, "caBundle": bundle}})
        if hooks:
            name = str((document.get("metadata") or {}).get("name") or "webhook-configuration")
            out.append({"apiVersion": document.get("apiVersion", "admissionregistration.k8s.io/v1"),
                        "kind": document["kind"], "metadata": {"name": f"kueue-{name}"}, "webhooks": hooks})
    return out


def dns_name(name: str) -> str:
    """A quota name as a Kubernetes object name (``Department-a`` -> ``department-a``)."""
    out = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
    if not out:
        raise ValueError(f"quota name {name!r} has no letter or digit to name a ClusterQueue after")
    return out


def _namespace_selector(namespaces: Sequence[str]) -> dict[str, Any]:
    return {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In",
                                  "values": list(namespaces)}]}


def _quota_resources(nodes: Iterable[Mapping[str, Any]]) -> list[str]:
    names: set[str] = set()
    for node in nodes:
        names |= set(Resources.parse(node.get("min") or {})) | set(Resources.parse(node.get("max") or {}))
    names.discard(MAX_JOBS)  # a cap on the number of jobs, which Kueue has no quota for
    return sorted(names)


def cluster_queues(parent: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One ClusterQueue per child quota of ``parent`` (a node of an ElasticQuotaTree, e.g. the seed's root),
    all in the cohort named after ``parent``: nominal quota = the child's ``min``, borrowing limit = its
    ``max - min`` (none when it has no ``max`` for a resource), preemption ``reclaimWithinCohort: Any`` (a
    quota takes its ``min`` back from any borrower, whatever the priorities, like ours) and never within the
    queue; its namespaces select the queue."""
    children = list(parent.get("children") or ())
    if not children:
        raise ValueError(f"quota {parent.get('name')!r} has no children to map to ClusterQueues")
    covered = _quota_resources(children)
    cohort = dns_name(str(parent.get("name") or "cohort"))
    out = []
    for child in children:
        if child.get("children"):
            raise ValueError(f"quota {child.get('name')!r} is not a leaf; map one level of the tree at a time")
        resources = _quota(covered, Resources.parse(child.get("min") or {}),
                           Resources.parse(child.get("max") or {}))
        out.append({
            "apiVersion": API_VERSION,
            "kind": "ClusterQueue",
            "metadata": {"name": dns_name(str(child["name"]))},
            "spec": {
                "cohortName": cohort,
                "namespaceSelector": _namespace_selector(list(child.get("namespaces") or ())),
                "queueingStrategy": "BestEffortFIFO",
                "resourceGroups": [{"coveredResources": covered,
                                    "flavors": [{"name": FLAVOR, "resources": resources}]}],
                "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "Never"},
            },
        })
    return out


def _quota(resources: Sequence[str], nominal: Resources, high: Resources | None) -> list[dict[str, Any]]:
    """A flavor's quotas: ``nominal`` each, with a borrowing limit up to ``high`` where it names the resource."""
    out = []
    for name in resources:
        base = Resources({name: nominal.get_or_zero(name)})
        quota: dict[str, Any] = {"name": name, "nominalQuota": base.to_spec()[name]}
        if high is not None and name in high:
            borrow = (Resources({name: high.get_or_zero(name)}) - base).clamp_min_zero()
            quota["borrowingLimit"] = Resources({name: borrow.get_or_zero(name)}).to_spec()[name]
        out.append(quota)
    return out


def cohort_tree(root: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A two-level quota tree (``root`` -> departments -> leaves) as Kueue's hierarchical cohorts: a Cohort per
    department under a root Cohort, with no quota of its own and a borrowing limit of its ``max`` less its
    leaves' ``min`` (what the department may take beyond its teams' guarantees); a ClusterQueue per leaf in its
    department's Cohort, mapped as :func:`cluster_queues` maps one."""
    departments = list(root.get("children") or ())
    leaves = [leaf for department in departments for leaf in department.get("children") or ()]
    if not leaves:
        raise ValueError(f"quota {root.get('name')!r} has no departments with leaves to map to cohorts")
    covered = _quota_resources(leaves)
    top = dns_name(str(root.get("name") or "root"))
    out: list[dict[str, Any]] = [{"apiVersion": API_VERSION, "kind": "Cohort", "metadata": {"name": top},
                                  "spec": {}}]
    for department in departments:
        name = dns_name(str(department["name"]))
        guaranteed = Resources()
        for leaf in department.get("children") or ():
            guaranteed = guaranteed + Resources.parse(leaf.get("min") or {})
        borrow = (Resources.parse(department.get("max") or {}) - guaranteed).clamp_min_zero()
        out.append({"apiVersion": API_VERSION, "kind": "Cohort", "metadata": {"name": name}, "spec": {
            "parentName": top,
            "resourceGroups": [{"coveredResources": covered, "flavors": [
                {"name": FLAVOR, "resources": _quota(covered, Resources(), borrow)}]}]}})
        out += cluster_queues(department)
    return out


def held_queue(name: str, namespaces: Sequence[str], quota: Mapping[str, str], *, hold: bool) -> dict[str, Any]:
    """A ClusterQueue of its own (no cohort) with ``quota`` as nominal quota; ``hold`` stops it
    (``stopPolicy: Hold``: workloads queue, nothing is admitted until it is set to ``None``)."""
    covered = sorted(quota)
    return {
        "apiVersion": API_VERSION,
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": _namespace_selector(namespaces),
            "queueingStrategy": "BestEffortFIFO",
            "stopPolicy": "Hold" if hold else "None",
            "resourceGroups": [{"coveredResources": covered, "flavors": [
                {"name": FLAVOR, "resources": [{"name": key, "nominalQuota": quota[key]} for key in covered]}]}],
        },
    }


def local_queue(namespace: str, cluster_queue: str) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "LocalQueue",
            "metadata": {"name": LOCAL_QUEUE, "namespace": namespace}, "spec": {"clusterQueue": cluster_queue}}


def flavor() -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "ResourceFlavor", "metadata": {"name": FLAVOR}}


def local_queues(queues: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A LocalQueue in every namespace each ClusterQueue selects."""
    out = []
    for queue in queues:
        for expression in queue["spec"]["namespaceSelector"]["matchExpressions"]:
            out += [local_queue(namespace, queue["metadata"]["name"]) for namespace in expression["values"]]
    return out


def job(name: str, namespace: str, cpu: str, memory: str, *, kueue: bool) -> dict[str, Any]:
    """A one-pod Job. For Kueue it carries the queue-name label and is created suspended (how Kueue's docs
    submit; its webhook would suspend it too). Ours is created as a user writes it: our webhook holds it."""
    spec: dict[str, Any] = {
        "parallelism": 1,
        "completions": 1,
        "template": {"spec": {"restartPolicy": "Never", "containers": [
            {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}},
    }
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if kueue:
        spec["suspend"] = True
        metadata["labels"] = {QUEUE_NAME_LABEL: LOCAL_QUEUE}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": spec}
