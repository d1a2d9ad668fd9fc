"""RayJob (``ray.io/v1``): held by ``spec.suspend``; pods from ``spec.rayClusterSpec`` and its submitter.

Pod sets: the RayCluster it creates (:func:`~webhook.workloads.raycluster.ray_pod_templates`: the head and
each worker group) and, in the default ``K8sJobMode``, the pod of the submitter Job KubeRay creates once the
cluster is ready (``spec.submitterPodTemplate``, else KubeRay's default container); in ``SidecarMode`` that
container runs beside the head instead. The RayCluster and the submitter Job are the RayJob's children: queued
with it (:mod:`webhook.workloads.children`), their pods counted as its pods.

KubeRay only suspends a RayJob that deletes its cluster when it finishes (``shutdownAfterJobFinishes: true``)
and never one that runs on an existing cluster (``spec.clusterSelector``). The first is a queueing problem
the webhook reports at creation; the second has no pods of its own and is not held (its cluster is).
"""

from __future__ import annotations

from webhook.api.objects import Obj, PodSpec
from webhook.core.workload import PodSet, WorkloadError, pod_set
from webhook.workloads.base import (
    PodTemplate,
    SpecSuspendAdapter,
    bool_at,
    mapping_at,
    str_at,
    value_at,
)
from webhook.workloads.injected import RAY_SUBMITTER, with_containers
from webhook.workloads.raycluster import head_with_autoscaler, ray_pod_templates

CLUSTER = ("spec", "rayClusterSpec")


class RayJobAdapter(SpecSuspendAdapter):
    """``ray.io/v1`` ``RayJob``."""

    group = "ray.io"
    versions = ("v1",)
    kind = "RayJob"
    plural = "rayjobs"
    children = frozenset({"RayCluster", "Job"})

    def _mode(self, obj: Obj) -> str:
        return str_at(obj, "spec", "submissionMode") or "K8sJobMode"

    def pod_templates(self, obj: Obj) -> tuple[PodTemplate, ...]:
        if mapping_at(obj, *CLUSTER) is None:
            return ()
        out = ray_pod_templates(obj, *CLUSTER)
        submitter = mapping_at(obj, "spec", "submitterPodTemplate")
        if submitter is not None and self._mode(obj) == "K8sJobMode":
            out += (PodTemplate("submitter", 1, ("spec", "submitterPodTemplate"), submitter),)
        return out

    def pod_sets(self, obj: Obj) -> tuple[PodSet, ...]:
        """The cluster's pod sets, and KubeRay's default submitter pod in ``K8sJobMode`` when the RayJob names
        no ``submitterPodTemplate``."""
        sets = super().pod_sets(obj)
        if (
            mapping_at(obj, *CLUSTER) is not None
            and self._mode(obj) == "K8sJobMode"
            and mapping_at(obj, "spec", "submitterPodTemplate") is None
        ):
            try:
                sets += (pod_set("submitter", 1, {"containers": [RAY_SUBMITTER]}),)
            except WorkloadError as error:  # pragma: no cover - a constant that parses
                raise WorkloadError(f"/spec/submitterPodTemplate: {error}") from None
        return sets

    def created_spec(self, obj: Obj, template: PodTemplate) -> PodSpec:
        spec = head_with_autoscaler(obj, template, *CLUSTER)
        if template.name == "head" and self._mode(obj) == "SidecarMode":
            return with_containers(spec, [RAY_SUBMITTER])
        return spec

    def manages(self, obj: Obj) -> bool:
        return mapping_at(obj, *CLUSTER) is not None

    def queueing_problems(self, obj: Obj) -> list[str]:
        if not self.manages(obj) or bool_at(obj, "spec", "shutdownAfterJobFinishes"):
            return []
        return [
            "spec.shutdownAfterJobFinishes must be true: KubeRay only suspends a RayJob that deletes its cluster "
            "when it finishes, and the queue holds every job suspended until its quota allows"
        ]

    def pod_owners(self, obj: Obj) -> tuple[tuple[str, str], ...]:
        """A RayJob's pods belong to the RayCluster it created (``status.rayClusterName``) and to its submitter
        Job (named as the RayJob)."""
        owners: tuple[tuple[str, str], ...] = ()
        cluster = value_at(obj, "status", "rayClusterName")
        if isinstance(cluster, str) and cluster:
            owners += (("RayCluster", cluster),)
        name = value_at(obj, "metadata", "name")
        if isinstance(name, str) and name and self._mode(obj) == "K8sJobMode":
            owners += (("Job", name),)
        return owners

    def is_finished(self, obj: Obj) -> bool:
        status = value_at(obj, "status", "jobDeploymentStatus")
        return status in ("Complete", "Failed")


ADAPTERS = (RayJobAdapter(),)
