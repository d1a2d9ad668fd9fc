"""MPIJob (``kubeflow.org/v2beta1``, the MPI Operator v2; ``v1`` has the same shape): ``spec.mpiReplicaSpecs``
(``Launcher`` and ``Worker``), held by ``spec.runPolicy.suspend``."""

from __future__ import annotations

from webhook.api.objects import Obj
from webhook.workloads.base import ReplicaSpecsAdapter, value_at


class MPIJobAdapter(ReplicaSpecsAdapter):
    """``kubeflow.org/v2beta1`` ``MPIJob``."""

    group = "kubeflow.org"
    versions = ("v2beta1", "v1")
    kind = "MPIJob"
    plural = "mpijobs"
    replica_specs_field = "mpiReplicaSpecs"

    def pod_owners(self, obj: Obj) -> tuple[tuple[str, str], ...]:
        """The MPI Operator v2 owns the workers itself and runs the launcher as a Job ``<name>-launcher``."""
        name = value_at(obj, "metadata", "name")
        return ((self.kind, name), ("Job", f"{name}-launcher")) if isinstance(name, str) else ()


ADAPTERS = (MPIJobAdapter(),)
