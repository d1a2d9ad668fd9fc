"""RayJob (``ray.io/v1``): held by ``spec.suspend``; pods from ``spec.rayClusterSpec``.

Pod sets: the head (one pod) and each worker group (``replicas`` pods, default ``minReplicas``, default 1,
times ``numOfHosts`` for multi-host groups).

KubeRay only suspends a RayJob that deletes its cluster when it finishes (``shutdownAfterJobFinishes: true``)
and never one that runs on an existing cluster (``spec.clusterSelector``). The first is a queueing problem
the webhook reports at creation; the second has no pods of its own and is not held (its cluster is).
"""

from __future__ import annotations

from webhook.api.objects import Obj
from webhook.core.workload import WorkloadError
from webhook.workloads.base import (
    PodTemplate,
    SpecSuspendAdapter,
    bool_at,
    int_at,
    mapping_at,
    str_at,
    value_at,
)


class RayJobAdapter(SpecSuspendAdapter):
    """``ray.io/v1`` ``RayJob``."""

    group = "ray.io"
    versions = ("v1",)
    kind = "RayJob"
    plural = "rayjobs"

    def pod_templates(self, obj: Obj) -> tuple[PodTemplate, ...]:
        cluster = mapping_at(obj, "spec", "rayClusterSpec")
        if cluster is None:
            return ()
        base = ("spec", "rayClusterSpec")
        out: list[PodTemplate] = []
        head = mapping_at(obj, *base, "headGroupSpec", "template")
        if head is not None:
            out.append(PodTemplate("head", 1, (*base, "headGroupSpec", "template"), head))
        groups = value_at(obj, *base, "workerGroupSpecs")
        if groups is None:
            return tuple(out)
        if not isinstance(groups, list):
            raise WorkloadError("/spec/rayClusterSpec/workerGroupSpecs: expected a list")
        for index in range(len(groups)):
            group_path = (*base, "workerGroupSpecs", index)
            if mapping_at(obj, *group_path) is None:
                continue
            minimum = int_at(obj, 1, *group_path, "minReplicas")
            replicas = int_at(obj, minimum, *group_path, "replicas")
            hosts = int_at(obj, 1, *group_path, "numOfHosts")
            name = str_at(obj, *group_path, "groupName") or f"workers-{index}"
            template = mapping_at(obj, *group_path, "template") or {}
            count = (replicas if replicas is not None else 1) * (hosts if hosts is not None else 1)
            out.append(PodTemplate(name, count, (*group_path, "template"), template))
        return tuple(out)

    def manages(self, obj: Obj) -> bool:
        return mapping_at(obj, "spec", "rayClusterSpec") is not None

    def queueing_problems(self, obj: Obj) -> list[str]:
        if not self.manages(obj) or bool_at(obj, "spec", "shutdownAfterJobFinishes"):
            return []
        return [
            "spec.shutdownAfterJobFinishes must be true: KubeRay only suspends a RayJob that deletes its cluster "
            "when it finishes, and the queue holds every job suspended until its quota allows"
        ]

    def pod_owners(self, obj: Obj) -> tuple[tuple[str, str], ...]:
        """A RayJob's pods belong to the RayCluster it created (``status.rayClusterName``)."""
        cluster = value_at(obj, "status", "rayClusterName")
        return (("RayCluster", cluster),) if isinstance(cluster, str) and cluster else ()

    def is_finished(self, obj: Obj) -> bool:
        status = value_at(obj, "status", "jobDeploymentStatus")
        return status in ("Complete", "Failed")


ADAPTERS = (RayJobAdapter(),)
