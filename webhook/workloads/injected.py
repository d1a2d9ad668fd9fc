"""What job operators add to the pods they create, so a job is sized as its pods will be.

Operators do not create pods exactly from the templates users write: the Kubeflow training operator gives each
PyTorchJob worker an init container that waits for the master, and each MPIJob (``kubeflow.org/v1``) launcher
one that delivers ``kubectl``; KubeRay runs a RayJob's ``ray job submit`` in a pod of its own (or a sidecar of
the head). The amounts are the operators' own defaults (docs/job-kinds.md names the version each was read
from); an operator configured otherwise sizes its pods otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import cast

from webhook.api.objects import Container, Obj, PodSpec


def _container(name: str, requests: Mapping[str, str], limits: Mapping[str, str]) -> Container:
    return {"name": name, "resources": {"requests": dict(requests), "limits": dict(limits)}}


PYTORCH_WORKER_INIT = _container(
    "init-pytorch", {"cpu": "50m", "memory": "10Mi"}, {"cpu": "100m", "memory": "20Mi"}
)
"""The init container the training operator (v1.8.1, its default template) adds to every PyTorchJob worker
when the job has a master: it waits until the master's name resolves."""

MPI_LAUNCHER_INIT = _container(
    "kubectl-delivery",
    {"cpu": "100m", "memory": "512Mi", "ephemeral-storage": "5Gi"},
    {"cpu": "100m", "memory": "512Mi", "ephemeral-storage": "5Gi"},
)
"""The init container the training operator (v1.8.1) adds to an MPIJob (``kubeflow.org/v1``) launcher: it
copies ``kubectl`` into the launcher."""

RAY_SUBMITTER = _container("ray-job-submitter", {"cpu": "500m", "memory": "200Mi"}, {"cpu": "1", "memory": "1Gi"})
"""KubeRay's (v1.5.0) default submitter container: the pod of a RayJob's submitter Job (``K8sJobMode``) or a
sidecar of its head pod (``SidecarMode``), when the RayJob names no ``submitterPodTemplate``."""

RAY_AUTOSCALER = _container("autoscaler", {"cpu": "500m", "memory": "512Mi"}, {"cpu": "500m", "memory": "512Mi"})
"""KubeRay's (v1.5.0) default autoscaler sidecar on the head of a cluster with ``enableInTreeAutoscaling``."""


def with_init_containers(spec: PodSpec, containers: Sequence[Obj]) -> PodSpec:
    """``spec`` with ``containers`` appended to its init containers (a new mapping; ``spec`` is not changed)."""
    current = spec.get("initContainers")
    existing = list(current) if isinstance(current, list) else []
    return cast(PodSpec, {**spec, "initContainers": [*existing, *containers]})


def with_containers(spec: PodSpec, containers: Sequence[Obj]) -> PodSpec:
    """``spec`` with ``containers`` appended to its containers (a new mapping)."""
    current = spec.get("containers")
    existing = list(current) if isinstance(current, list) else []
    return cast(PodSpec, {**spec, "containers": [*existing, *containers]})
