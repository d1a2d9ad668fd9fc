"""MPIJob: ``spec.mpiReplicaSpecs`` (``Launcher`` and ``Worker``), held by ``spec.runPolicy.suspend``.

Two operators serve it with the same shape: the MPI Operator v2 (``kubeflow.org/v2beta1``), which runs the
launcher as a Job ``<name>-launcher``, and the Kubeflow training operator (``kubeflow.org/v1``, the version the
dev cluster runs), which creates the launcher as a Pod of the MPIJob with an init container of its own
(:data:`~webhook.workloads.injected.MPI_LAUNCHER_INIT`)."""

from __future__ import annotations

from webhook.api.objects import Obj, PodSpec
from webhook.workloads.base import PodTemplate, ReplicaSpecsAdapter, value_at
from webhook.workloads.injected import MPI_LAUNCHER_INIT, with_init_containers


class MPIJobAdapter(ReplicaSpecsAdapter):
    """``kubeflow.org/v2beta1`` or ``kubeflow.org/v1`` ``MPIJob``."""

    group = "kubeflow.org"
    versions = ("v2beta1", "v1")
    kind = "MPIJob"
    plural = "mpijobs"
    replica_specs_field = "mpiReplicaSpecs"
    children = frozenset({"Job"})

    def pod_owners(self, obj: Obj) -> tuple[tuple[str, str], ...]:
        """The MPI Operator v2 owns the workers itself and runs the launcher as a Job ``<name>-launcher``; the
        training operator owns both itself."""
        name = value_at(obj, "metadata", "name")
        return ((self.kind, name), ("Job", f"{name}-launcher")) if isinstance(name, str) else ()

    def created_spec(self, obj: Obj, template: PodTemplate) -> PodSpec:
        if template.name == "launcher" and value_at(obj, "apiVersion") == f"{self.group}/v1":
            return with_init_containers(template.spec, [MPI_LAUNCHER_INIT])
        return template.spec


ADAPTERS = (MPIJobAdapter(),)
