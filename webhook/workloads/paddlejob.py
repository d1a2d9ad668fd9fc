"""PaddleJob (``kubeflow.org/v1``, the Kubeflow training operator): ``spec.paddleReplicaSpecs`` (``Master`` and
``Worker``), held by ``spec.runPolicy.suspend``; the operator creates the pods itself, owned by the job."""

from __future__ import annotations

from webhook.workloads.base import ReplicaSpecsAdapter


class PaddleJobAdapter(ReplicaSpecsAdapter):
    """``kubeflow.org/v1`` ``PaddleJob``."""

    group = "kubeflow.org"
    versions = ("v1",)
    kind = "PaddleJob"
    plural = "paddlejobs"
    replica_specs_field = "paddleReplicaSpecs"


ADAPTERS = (PaddleJobAdapter(),)
