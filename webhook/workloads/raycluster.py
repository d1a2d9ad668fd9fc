"""RayCluster (``ray.io/v1``, KubeRay): held by ``spec.suspend`` (KubeRay deletes a suspended cluster's pods and
creates them again when it is resumed).

Pod sets: the head (one pod) and each worker group, as many pods as KubeRay wants for it (its ``replicas``
kept within ``minReplicas`` and ``maxReplicas``, times ``numOfHosts``; none for a group with ``suspend``); with
``enableInTreeAutoscaling`` the autoscaler may grow each group to ``maxReplicas``, so that is what counts, and
the head gets the autoscaler's sidecar. The RayCluster a RayJob creates is queued with the RayJob, not on its
own (:mod:`webhook.workloads.children`). A cluster runs until it is deleted: it never finishes by itself.
"""

from __future__ import annotations

from webhook.api.objects import Obj, PodSpec
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
from webhook.workloads.children import queued_with_parent
from webhook.workloads.injected import RAY_AUTOSCALER, with_containers

MAX_REPLICAS = 2147483647
"""KubeRay's default ``maxReplicas`` (the CRD's)."""


def ray_pod_templates(obj: Obj, *base: str) -> tuple[PodTemplate, ...]:
    """The head and worker-group templates of the RayCluster spec at ``base`` (``("spec",)`` for a RayCluster,
    ``("spec", "rayClusterSpec")`` for a RayJob), each with the pod count KubeRay creates."""
    out: list[PodTemplate] = []
    head = mapping_at(obj, *base, "headGroupSpec", "template")
    if head is not None:
        out.append(PodTemplate("head", 1, (*base, "headGroupSpec", "template"), head))
    groups = value_at(obj, *base, "workerGroupSpecs")
    if groups is None:
        return tuple(out)
    if not isinstance(groups, list):
        raise WorkloadError(f"/{'/'.join(base)}/workerGroupSpecs: expected a list")
    autoscaled = bool_at(obj, *base, "enableInTreeAutoscaling")
    for index in range(len(groups)):
        group_path: tuple[str | int, ...] = (*base, "workerGroupSpecs", index)
        if mapping_at(obj, *group_path) is None:
            continue
        name = str_at(obj, *group_path, "groupName") or f"workers-{index}"
        template = mapping_at(obj, *group_path, "template") or {}
        out.append(PodTemplate(name, _group_pods(obj, group_path, autoscaled), (*group_path, "template"), template))
    return tuple(out)


def _group_pods(obj: Obj, path: tuple[str | int, ...], autoscaled: bool) -> int:
    """KubeRay's desired pods of a worker group (``GetWorkerGroupDesiredReplicas``), or its most when the
    autoscaler may grow it."""
    if bool_at(obj, *path, "suspend"):
        return 0
    minimum = int_at(obj, 0, *path, "minReplicas") or 0
    maximum = int_at(obj, MAX_REPLICAS, *path, "maxReplicas")
    maximum = MAX_REPLICAS if maximum is None else maximum
    replicas = int_at(obj, None, *path, "replicas")
    hosts = int_at(obj, 1, *path, "numOfHosts")
    if autoscaled or minimum > maximum:
        wanted = maximum
    elif replicas is None or replicas < minimum:
        wanted = minimum
    else:
        wanted = min(replicas, maximum)
    return wanted * (1 if hosts is None else hosts)


def head_with_autoscaler(obj: Obj, template: PodTemplate, *base: str) -> PodSpec:
    """The head's spec with the autoscaler sidecar KubeRay adds when ``enableInTreeAutoscaling`` is on (its
    ``autoscalerOptions.resources`` when given, else the default)."""
    if template.name != "head" or not bool_at(obj, *base, "enableInTreeAutoscaling"):
        return template.spec
    resources = mapping_at(obj, *base, "autoscalerOptions", "resources")
    sidecar = {"name": "autoscaler", "resources": dict(resources)} if resources is not None else RAY_AUTOSCALER
    return with_containers(template.spec, [sidecar])


class RayClusterAdapter(SpecSuspendAdapter):
    """``ray.io/v1`` ``RayCluster``."""

    group = "ray.io"
    versions = ("v1",)
    kind = "RayCluster"
    plural = "rayclusters"

    def pod_templates(self, obj: Obj) -> tuple[PodTemplate, ...]:
        return ray_pod_templates(obj, "spec")

    def created_spec(self, obj: Obj, template: PodTemplate) -> PodSpec:
        return head_with_autoscaler(obj, template, "spec")

    def manages(self, obj: Obj) -> bool:
        """Every RayCluster but the one KubeRay creates for a RayJob (queued with the RayJob)."""
        return not queued_with_parent(obj, self.kind)

    def needs_all_pods(self, obj: Obj) -> bool:
        """Ray runs once the head and every worker it asked for are up: a gang."""
        return True

    def is_finished(self, obj: Obj) -> bool:
        """A RayCluster runs until it is deleted (KubeRay's ``failed`` state is not final: it retries)."""
        return False


ADAPTERS = (RayClusterAdapter(),)
