"""The API resources the system reads and writes: group, version, plural and kind, defined once.

The job kinds are not here: each job-kind adapter (:mod:`webhook.workloads`) names its own, and the registry
is their one home. The API clients build their references from these (``ResourceRef.of(QUEUE)``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final
from urllib.parse import quote


@dataclass(frozen=True, slots=True)
class Kind:
    """One API resource: ``Kind("scheduling.x-k8s.io", "v1alpha1", "queues", "Queue")``; ``group`` is ``""`` for
    the core group."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        """``group/version``, or just ``version`` for the core group."""
        return f"{self.group}/{self.version}" if self.group else self.version


def api_path(
    group: str,
    version: str,
    plural: str,
    *,
    namespace: str | None = None,
    name: str | None = None,
    subresource: str | None = None,
) -> str:
    """The URL path of a collection (in ``namespace`` when given, else across namespaces or cluster-scoped) or,
    with ``name``, of one object (and its ``subresource``); names are percent-encoded. Both API clients build
    their paths here."""
    out = f"/apis/{group}/{version}" if group else f"/api/{version}"
    if namespace:
        out += f"/namespaces/{quote(namespace, safe='')}"
    out += f"/{plural}"
    if name is not None:
        out += f"/{quote(name, safe='')}"
        if subresource:
            out += f"/{subresource}"
    return out


def selector_query(label_selector: str | None = None, field_selector: str | None = None) -> list[tuple[str, str]]:
    """The query parameters that narrow a list or a watch to the objects the selectors match (an empty selector
    is left out). Both API clients narrow their lists here."""
    query: list[tuple[str, str]] = []
    if label_selector:
        query.append(("labelSelector", label_selector))
    if field_selector:
        query.append(("fieldSelector", field_selector))
    return query


ELASTIC_QUOTA_TREE: Final = Kind("scheduling.sigs.k8s.io", "v1beta1", "elasticquotatrees", "ElasticQuotaTree")
QUEUE: Final = Kind("scheduling.x-k8s.io", "v1alpha1", "queues", "Queue")
RESOURCE_POLICY: Final = Kind("scheduling.alibabacloud.com", "v1alpha1", "resourcepolicies", "ResourcePolicy")

POD: Final = Kind("", "v1", "pods", "Pod")
EVENT: Final = Kind("", "v1", "events", "Event")
NODE: Final = Kind("", "v1", "nodes", "Node", namespaced=False)
NAMESPACE: Final = Kind("", "v1", "namespaces", "Namespace", namespaced=False)
LIMIT_RANGE: Final = Kind("", "v1", "limitranges", "LimitRange")
JOB: Final = Kind("batch", "v1", "jobs", "Job")
DEPLOYMENT: Final = Kind("apps", "v1", "deployments", "Deployment")
REPLICA_SET: Final = Kind("apps", "v1", "replicasets", "ReplicaSet")
STATEFUL_SET: Final = Kind("apps", "v1", "statefulsets", "StatefulSet")
DAEMON_SET: Final = Kind("apps", "v1", "daemonsets", "DaemonSet")
PRIORITY_CLASS: Final = Kind("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False)
POD_DISRUPTION_BUDGET: Final = Kind("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget")
LEASE: Final = Kind("coordination.k8s.io", "v1", "leases", "Lease")
SECRET: Final = Kind("", "v1", "secrets", "Secret")
CONFIG_MAP: Final = Kind("", "v1", "configmaps", "ConfigMap")
DEVICE_CLASS: Final = Kind("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", namespaced=False)
RUNTIME_CLASS: Final = Kind("node.k8s.io", "v1", "runtimeclasses", "RuntimeClass", namespaced=False)
RESOURCE_CLAIM: Final = Kind("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim")
RESOURCE_CLAIM_TEMPLATE: Final = Kind("resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate")
MUTATING_WEBHOOK_CONFIGURATION: Final = Kind(
    "admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations", "MutatingWebhookConfiguration", False
)
VALIDATING_WEBHOOK_CONFIGURATION: Final = Kind(
    "admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations", "ValidatingWebhookConfiguration", False
)
API_SERVICE: Final = Kind("apiregistration.k8s.io", "v1", "apiservices", "APIService", False)
ADMISSION_REVIEW: Final = Kind("admission.k8s.io", "v1", "", "AdmissionReview", namespaced=False)

OUR_KINDS: Final = (ELASTIC_QUOTA_TREE, RESOURCE_POLICY, QUEUE)
"""The custom resources the system's CRDs define (manifests/crds/)."""
