"""Builders for the service tests: AdmissionReviews and job objects of every supported kind."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Mapping
from typing import Any

from tests import builders
from webhook.admission.review import decoded_patch
from webhook.workloads.base import apply_patch

USER = "alice"
CONTROLLER = "system:serviceaccount:kube-queue:kube-queue-controller"

KINDS: dict[str, tuple[str, str, str]] = {
    "Job": ("batch", "v1", "jobs"),
    "TFJob": ("kubeflow.org", "v1", "tfjobs"),
    "PyTorchJob": ("kubeflow.org", "v1", "pytorchjobs"),
    "MPIJob": ("kubeflow.org", "v2beta1", "mpijobs"),
    "RayJob": ("ray.io", "v1", "rayjobs"),
    "RayCluster": ("ray.io", "v1", "rayclusters"),
    "XGBoostJob": ("kubeflow.org", "v1", "xgboostjobs"),
    "PaddleJob": ("kubeflow.org", "v1", "paddlejobs"),
    "Workflow": ("argoproj.io", "v1alpha1", "workflows"),
    "SparkApplication": ("sparkoperator.k8s.io", "v1beta2", "sparkapplications"),
    "JobSet": ("jobset.x-k8s.io", "v1alpha2", "jobsets"),
    "Pod": ("", "v1", "pods"),
    "Deployment": ("apps", "v1", "deployments"),
    "ReplicaSet": ("apps", "v1", "replicasets"),
    "StatefulSet": ("apps", "v1", "statefulsets"),
    "DaemonSet": ("apps", "v1", "daemonsets"),
    "CronJob": ("batch", "v1", "cronjobs"),
    "ElasticQuotaTree": ("scheduling.sigs.k8s.io", "v1beta1", "elasticquotatrees"),
    "ResourcePolicy": ("scheduling.alibabacloud.com", "v1alpha1", "resourcepolicies"),
    "Queue": ("scheduling.x-k8s.io", "v1alpha1", "queues"),
    "Namespace": ("", "v1", "namespaces"),
    "ResourceClaim": ("resource.k8s.io", "v1", "resourceclaims"),
    "ResourceClaimTemplate": ("resource.k8s.io", "v1", "resourceclaimtemplates"),
}


def pod_spec(cpu: str = "1", memory: str | None = None, **extra: Any) -> dict[str, Any]:
    requests: dict[str, str] = {"cpu": cpu}
    if memory is not None:
        requests["memory"] = memory
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "busybox", "resources": {"requests": requests}}],
        "restartPolicy": "Never",
    }
    spec.update(extra)
    return spec


def template(cpu: str = "1", labels: Mapping[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"spec": pod_spec(cpu, **extra)}
    if labels is not None:
        out["metadata"] = {"labels": dict(labels)}
    return out


def metadata(name: str, namespace: str) -> dict[str, Any]:
    return {"name": name, "namespace": namespace}


def batch_job(
    name: str = "pi",
    namespace: str = "user-a",
    *,
    parallelism: int | None = 6,
    suspend: bool | None = False,
    cpu: str = "10",
    memory: str | None = "10Gi",
    completions: int | None = None,
) -> dict[str, Any]:
    """The seed's Job: 6 pods x (10 CPU, 10Gi), written with suspend: false."""
    spec: dict[str, Any] = {"template": {"spec": pod_spec(cpu, memory)}}
    if parallelism is not None:
        spec["parallelism"] = parallelism
    if completions is not None:
        spec["completions"] = completions
    if suspend is not None:
        spec["suspend"] = suspend
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata(name, namespace), "spec": spec}


def tfjob(name: str = "tf", namespace: str = "user-a", *, suspend: bool | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "tfReplicaSpecs": {
            "Worker": {"replicas": 2, "template": template("2")},
            "PS": {"replicas": 1, "template": template("1")},
        }
    }
    if suspend is not None:
        spec["runPolicy"] = {"suspend": suspend}
    return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": metadata(name, namespace), "spec": spec}


def pytorchjob(name: str = "pt", namespace: str = "user-a") -> dict[str, Any]:
    spec = {
        "runPolicy": {"cleanPodPolicy": "None"},
        "pytorchReplicaSpecs": {
            "Master": {"replicas": 1, "template": template("4")},
            "Worker": {"replicas": 3, "template": template("4")},
        },
    }
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": metadata(name, namespace),
        "spec": spec,
    }


def mpijob(name: str = "mpi", namespace: str = "user-a") -> dict[str, Any]:
    spec = {
        "slotsPerWorker": 1,
        "runPolicy": {"suspend": False},
        "mpiReplicaSpecs": {
            "Launcher": {"replicas": 1, "template": template("1")},
            "Worker": {"replicas": 4, "template": template("8")},
        },
    }
    return {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": metadata(name, namespace), "spec": spec}


def rayjob(name: str = "ray", namespace: str = "user-a") -> dict[str, Any]:
    spec = {
        "entrypoint": "python run.py",
        "shutdownAfterJobFinishes": True,
        "rayClusterSpec": {
            "headGroupSpec": {"rayStartParams": {}, "template": template("2")},
            "workerGroupSpecs": [
                {"groupName": "small", "replicas": 2, "minReplicas": 0, "template": template("1")},
                {"groupName": "tpu", "replicas": 1, "numOfHosts": 4, "template": template("3")},
            ],
        },
    }
    return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": metadata(name, namespace), "spec": spec}


def raycluster(name: str = "rc", namespace: str = "user-a") -> dict[str, Any]:
    spec = {
        "suspend": False,
        "headGroupSpec": {"rayStartParams": {}, "template": template("2")},
        "workerGroupSpecs": [{"groupName": "small", "replicas": 2, "minReplicas": 0, "maxReplicas": 4,
                              "template": template("1")}],
    }
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": metadata(name, namespace), "spec": spec}


def jobset(name: str = "train", namespace: str = "user-a") -> dict[str, Any]:
    """A driver Job of one pod and two worker Jobs of three pods each (``completions`` caps the first's 2)."""
    spec = {
        "replicatedJobs": [
            {"name": "driver", "template": {"spec": {"parallelism": 2, "completions": 1, "template": template("1")}}},
            {"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 3, "template": template("2")}}},
        ],
    }
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": metadata(name, namespace),
            "spec": spec}


def xgboostjob(name: str = "xgb", namespace: str = "user-a") -> dict[str, Any]:
    spec = {"runPolicy": {"suspend": False}, "xgbReplicaSpecs": {
        "Master": {"replicas": 1, "template": template("2")}, "Worker": {"replicas": 2, "template": template("2")}}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "XGBoostJob", "metadata": metadata(name, namespace), "spec": spec}


def paddlejob(name: str = "paddle", namespace: str = "user-a") -> dict[str, Any]:
    spec = {"runPolicy": {"suspend": False}, "paddleReplicaSpecs": {
        "Master": {"replicas": 1, "template": template("2")}, "Worker": {"replicas": 2, "template": template("2")}}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PaddleJob", "metadata": metadata(name, namespace), "spec": spec}


def workflow(name: str = "wf", namespace: str = "user-a") -> dict[str, Any]:
    """Two steps in a row, the second a group of three pods of 2 CPU at once."""
    work = {"name": "work", "container": {"image": "busybox", "resources": {"requests": {"cpu": "2"}}}}
    main = {"name": "main", "steps": [[{"name": "prepare", "template": "work"}],
                                      [{"name": "train", "template": "work", "withItems": [1, 2, 3]}]]}
    spec = {"entrypoint": "main", "suspend": False, "templates": [main, work]}
    return {"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": metadata(name, namespace),
            "spec": spec}


def sparkapplication(name: str = "spark", namespace: str = "user-a") -> dict[str, Any]:
    """A driver of 1 core / 512m and 2 executors of 2 cores / 2g (Scala: 10% overhead, at least 384Mi)."""
    spec = {"type": "Scala", "mode": "cluster", "image": "spark:3.5.0", "mainClass": "Pi",
            "mainApplicationFile": "local:///opt/spark/examples.jar", "sparkVersion": "3.5.0", "suspend": False,
            "driver": {"cores": 1, "memory": "512m"}, "executor": {"cores": 2, "memory": "2g", "instances": 2}}
    return {"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
            "metadata": metadata(name, namespace), "spec": spec}


OWNING_JOB: dict[str, Any] = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "pi", "uid": "u-1"}}
"""The Job a pod built with ``pod(owner=OWNING_JOB)`` belongs to (a pod the queue leaves to its Job)."""

pod = functools.partial(builders.pod, restartPolicy="Never")
"""``pod(name="p", cpu="1", namespace="user-a", ...)``: :func:`tests.builders.pod` as a user submits it, no status."""


JOB_BUILDERS: dict[str, Callable[..., dict[str, Any]]] = {
    "Job": batch_job,
    "TFJob": tfjob,
    "PyTorchJob": pytorchjob,
    "MPIJob": mpijob,
    "RayJob": rayjob,
    "RayCluster": raycluster,
    "XGBoostJob": xgboostjob,
    "PaddleJob": paddlejob,
    "Workflow": workflow,
    "SparkApplication": sparkapplication,
    "JobSet": jobset,
    "Pod": pod,
}


def review(
    obj: Mapping[str, Any] | None,
    *,
    operation: str = "CREATE",
    old: Mapping[str, Any] | None = None,
    user: str = USER,
    kind: str | None = None,
    namespace: str | None = None,
    uid: str = "req-1",
    sub_resource: str | None = None,
) -> dict[str, Any]:
    """An AdmissionReview request as the apiserver sends it."""
    source = obj if obj is not None else old
    assert source is not None
    kind = kind or str(source["kind"])
    group, version, resource = KINDS[kind]
    meta = source.get("metadata", {})
    request: dict[str, Any] = {
        "uid": uid,
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": resource},
        "requestKind": {"group": group, "version": version, "kind": kind},
        "name": meta.get("name", ""),
        "namespace": namespace if namespace is not None else meta.get("namespace", ""),
        "operation": operation,
        "userInfo": {"username": user, "groups": ["system:authenticated"]},
        "object": copy.deepcopy(dict(obj)) if obj is not None else None,
        "oldObject": copy.deepcopy(dict(old)) if old is not None else None,
        "dryRun": False,
        "options": None,
    }
    if sub_resource:
        request["subResource"] = sub_resource
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def response(out: Mapping[str, Any]) -> dict[str, Any]:
    resp = out["response"]
    assert isinstance(resp, dict)
    return resp


def patched(obj: Mapping[str, Any], out: Mapping[str, Any]) -> dict[str, Any]:
    """``obj`` with the response's patch applied, as the apiserver would."""
    return apply_patch(obj, decoded_patch(out))


def message(out: Mapping[str, Any]) -> str:
    return str(response(out)["status"]["message"])
