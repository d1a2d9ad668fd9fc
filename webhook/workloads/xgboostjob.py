"""XGBoostJob (``kubeflow.org/v1``, the Kubeflow training operator): ``spec.xgbReplicaSpecs`` (``Master`` and
``Worker``), held by ``spec.runPolicy.suspend``; the operator creates the pods itself, owned by the job."""

from __future__ import annotations

from webhook.workloads.base import ReplicaSpecsAdapter


class XGBoostJobAdapter(ReplicaSpecsAdapter):
    """``kubeflow.org/v1`` ``XGBoostJob``."""

    group = "kubeflow.org"
    versions = ("v1",)
    kind = "XGBoostJob"
    plural = "xgboostjobs"
    replica_specs_field = "xgbReplicaSpecs"


ADAPTERS = (XGBoostJobAdapter(),)
