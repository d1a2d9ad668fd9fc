"""Kubeflow training jobs (``kubeflow.org/v1``): TFJob and PyTorchJob, held by ``spec.runPolicy.suspend``.

Each replica type (``Chief``, ``PS``, ``Worker``, ``Master``...) is one pod set of ``replicas`` pods
(default 1). ``spec.runPolicy.schedulingPolicy.priorityClass`` names the priority class when set; else
the first pod template's ``priorityClassName``.
"""

from __future__ import annotations

from webhook.workloads.base import ReplicaSpecsAdapter


class TFJobAdapter(ReplicaSpecsAdapter):
    """``kubeflow.org/v1`` ``TFJob`` (``spec.tfReplicaSpecs``)."""

    group = "kubeflow.org"
    versions = ("v1",)
    kind = "TFJob"
    plural = "tfjobs"
    replica_specs_field = "tfReplicaSpecs"


class PyTorchJobAdapter(ReplicaSpecsAdapter):
    """``kubeflow.org/v1`` ``PyTorchJob`` (``spec.pytorchReplicaSpecs``)."""

    group = "kubeflow.org"
    versions = ("v1",)
    kind = "PyTorchJob"
    plural = "pytorchjobs"
    replica_specs_field = "pytorchReplicaSpecs"


ADAPTERS = (TFJobAdapter(), PyTorchJobAdapter())
