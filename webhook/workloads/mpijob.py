"""MPIJob (``kubeflow.org/v2beta1``, the MPI Operator v2; ``v1`` has the same shape): ``spec.mpiReplicaSpecs``
(``Launcher`` and ``Worker``), held by ``spec.runPolicy.suspend``."""

from __future__ import annotations

from webhook.workloads.base import ReplicaSpecsAdapter


class MPIJobAdapter(ReplicaSpecsAdapter):
    """``kubeflow.org/v2beta1`` ``MPIJob``."""

    group = "kubeflow.org"
    versions = ("v2beta1", "v1")
    kind = "MPIJob"
    plural = "mpijobs"
    replica_specs_field = "mpiReplicaSpecs"


ADAPTERS = (MPIJobAdapter(),)
