"""Kubeflow training jobs (``kubeflow.org/v1``): TFJob, PyTorchJob, XGBoostJob and PaddleJob, held by
``spec.runPolicy.suspend``.

They differ only in the field of ``spec`` that holds the replica types (``tfReplicaSpecs``,
``pytorchReplicaSpecs``, ``xgbReplicaSpecs``, ``paddleReplicaSpecs``; XGBoost and Paddle have ``Master`` and
``Worker``) and in what the operator adds to a PyTorchJob's workers. Each replica type (``Chief``, ``PS``,
``Worker``, ``Master``...) is one pod set of ``replicas`` pods (default 1).
``spec.runPolicy.schedulingPolicy.priorityClass`` names the priority class when set; else the first pod template's
``priorityClassName``. The training operator creates the pods itself, owned by the job (docs/job-kinds.md).
"""

from __future__ import annotations

from webhook.api.objects import Obj, PodSpec
from webhook.workloads.base import PodTemplate, ReplicaSpecsAdapter, mapping_at
from webhook.workloads.injected import PYTORCH_WORKER_INIT, with_init_containers


class TrainingJobAdapter(ReplicaSpecsAdapter):
    """A ``kubeflow.org/v1`` job of the training operator; each kind names itself and its replica specs field."""

    group = "kubeflow.org"
    versions = ("v1",)


class TFJobAdapter(TrainingJobAdapter):
    """``kubeflow.org/v1`` ``TFJob`` (``spec.tfReplicaSpecs``)."""

    kind = "TFJob"
    plural = "tfjobs"
    replica_specs_field = "tfReplicaSpecs"


class PyTorchJobAdapter(TrainingJobAdapter):
    """``kubeflow.org/v1`` ``PyTorchJob`` (``spec.pytorchReplicaSpecs``). Each worker of a job with a master
    gets the operator's init container (:data:`~webhook.workloads.injected.PYTORCH_WORKER_INIT`)."""

    kind = "PyTorchJob"
    plural = "pytorchjobs"
    replica_specs_field = "pytorchReplicaSpecs"

    def created_spec(self, obj: Obj, template: PodTemplate) -> PodSpec:
        specs = mapping_at(obj, "spec", self.replica_specs_field) or {}
        has_master = any(str(role).lower() == "master" for role in specs)
        if template.name == "worker" and has_master:
            return with_init_containers(template.spec, [PYTORCH_WORKER_INIT])
        return template.spec


class XGBoostJobAdapter(TrainingJobAdapter):
    """``kubeflow.org/v1`` ``XGBoostJob`` (``spec.xgbReplicaSpecs``)."""

    kind = "XGBoostJob"
    plural = "xgboostjobs"
    replica_specs_field = "xgbReplicaSpecs"


class PaddleJobAdapter(TrainingJobAdapter):
    """``kubeflow.org/v1`` ``PaddleJob`` (``spec.paddleReplicaSpecs``)."""

    kind = "PaddleJob"
    plural = "paddlejobs"
    replica_specs_field = "paddleReplicaSpecs"


ADAPTERS = (TFJobAdapter(), PyTorchJobAdapter(), XGBoostJobAdapter(), PaddleJobAdapter())
