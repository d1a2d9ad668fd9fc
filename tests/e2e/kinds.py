"""Manifests of every operator-run job kind, as a developer writes them (a support module, not a test module):
``manifest(kind, name, namespace, pods=N, cpu=C)`` makes a job of ``N`` pods of ``C`` CPU each (for a RayJob:
the head and workers, plus KubeRay's submitter pod of 500m, which the queue counts too; for a JobSet: a leader
Job and ``N - 1`` worker Jobs of one pod each), held or not as the user pleases (the webhook holds it anyway).
The Kubeflow kinds run under the training operator but MPIJob (``v2beta1``), which runs under the MPI Operator;
the Ray kinds under KubeRay, JobSet under JobSet's controller (webhook/devcluster/operators.py)."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

GROUPS = {"kubeflow.org": ("v1", "kubeflow"), "ray.io": ("v1", "ray"), "argoproj.io": ("v1alpha1", "argo"),
          "sparkoperator.k8s.io": ("v1beta2", "spark"), "jobset.x-k8s.io": ("v1alpha2", "jobset")}


@dataclass(frozen=True, slots=True)
class Kind:
    kind: str
    group: str
    plural: str
    field: str
    """``tfReplicaSpecs``... for the Kubeflow kinds; ``""`` for the Ray kinds."""
    chief: str
    """The first replica type (one pod) of a Kubeflow kind."""
    container: str = "main"
    """The container name the training operator's webhook asks for."""
    version: str = ""
    """Its API version where it is not its group's (:data:`GROUPS`)."""

    @property
    def resource(self) -> str:
        return f"{self.plural}.{self.group}"


KUBEFLOW = (
    Kind("PyTorchJob", "kubeflow.org", "pytorchjobs", "pytorchReplicaSpecs", "Master", "pytorch"),
    Kind("TFJob", "kubeflow.org", "tfjobs", "tfReplicaSpecs", "Chief", "tensorflow"),
    Kind("MPIJob", "kubeflow.org", "mpijobs", "mpiReplicaSpecs", "Launcher", "mpi", "v2beta1"),
    Kind("XGBoostJob", "kubeflow.org", "xgboostjobs", "xgbReplicaSpecs", "Master", "xgboost"),
    Kind("PaddleJob", "kubeflow.org", "paddlejobs", "paddleReplicaSpecs", "Master", "paddle"),
)
RAY = (
    Kind("RayJob", "ray.io", "rayjobs", "", "head"),
    Kind("RayCluster", "ray.io", "rayclusters", "", "head"),
)
JOBSET = Kind("JobSet", "jobset.x-k8s.io", "jobsets", "", "leader")
OTHERS = (
    Kind("Workflow", "argoproj.io", "workflows", "", ""),
    Kind("SparkApplication", "sparkoperator.k8s.io", "sparkapplications", "", ""),
)
KINDS = {kind.kind: kind for kind in (*KUBEFLOW, *RAY, JOBSET, *OTHERS)}
REPLICATED = sorted(kind.kind for kind in (*KUBEFLOW, *RAY, JOBSET))
"""The kinds :func:`manifest` writes."""
SUBMITTER_CPU = 0.5
"""KubeRay's default submitter pod of a RayJob (webhook/workloads/injected.py)."""


def _template(container: str, cpu: str, **spec: Any) -> dict[str, Any]:
    amounts = {"cpu": cpu, "memory": "1Gi"}
    return {"spec": {"containers": [{"name": container, "image": "busybox:1.36",
                                     "resources": {"requests": amounts, "limits": amounts}}], **spec}}


def manifest(kind: str, name: str, namespace: str, *, pods: int, cpu: int, **pod_spec: Any) -> dict[str, Any]:
    """A job of ``pods`` pods of ``cpu`` CPU and 1Gi each, written with its hold off. ``pod_spec`` goes into
    the spec of the workers' template (all pods' for a one-pod job)."""
    spec_of = KINDS[kind]
    version = spec_of.version or GROUPS[spec_of.group][0]
    obj: dict[str, Any] = {"apiVersion": f"{spec_of.group}/{version}", "kind": kind,
                           "metadata": {"name": name, "namespace": namespace}}
    if spec_of.group == "ray.io":
        head = _template("ray-head", str(cpu))
        cluster: dict[str, Any] = {"headGroupSpec": {"rayStartParams": {}, "template": head}}
        if pods > 1:
            worker = _template("ray-worker", str(cpu), **pod_spec)
            cluster["workerGroupSpecs"] = [{"groupName": "workers", "replicas": pods - 1, "minReplicas": pods - 1,
                                            "maxReplicas": pods - 1, "rayStartParams": {}, "template": worker}]
        if kind == "RayCluster":
            obj["spec"] = {"suspend": False, **cluster}
        else:
            obj["spec"] = {"suspend": False, "entrypoint": "python run.py", "shutdownAfterJobFinishes": True,
                           "rayClusterSpec": cluster}
        return obj
    if kind == "JobSet":  # a leader Job of one pod and a Job of one pod for each other pod
        jobs = [_replicated_job("leader", 1, _template("main", str(cpu), restartPolicy="Never"))]
        if pods > 1:
            jobs.append(_replicated_job("workers", pods - 1, _template("main", str(cpu), restartPolicy="Never",
                                                                        **pod_spec)))
        obj["spec"] = {"suspend": False, "replicatedJobs": jobs}
        return obj
    chief = _template(spec_of.container, str(cpu), restartPolicy="Never")
    worker = _template(spec_of.container, str(cpu), restartPolicy="Never", **pod_spec)
    replicas = {spec_of.chief: {"replicas": 1, "restartPolicy": "Never", "template": chief}}
    workers = pods - 1
    if workers:
        replicas["Worker"] = {"replicas": workers, "restartPolicy": "Never", "template": copy.deepcopy(worker)}
    obj["spec"] = {"runPolicy": {"suspend": False}, spec_of.field: replicas}
    if kind == "MPIJob":
        obj["spec"]["slotsPerWorker"] = 1
    return obj


def _replicated_job(name: str, replicas: int, template: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "replicas": replicas,
            "template": {"spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0, "template": template}}}


def suspended(obj: dict[str, Any]) -> bool:
    """The job's hold, wherever its kind keeps it."""
    spec = obj.get("spec", {})
    if obj["kind"] in ("RayJob", "RayCluster", "Workflow", "SparkApplication", "JobSet"):
        return bool(spec.get("suspend"))
    return bool(spec.get("runPolicy", {}).get("suspend"))


def alice_role(namespace: str) -> list[dict[str, Any]]:
    """``edit`` in ``namespace`` plus every operator kind there (what an operator grants a developer)."""
    rules = [{"apiGroups": [group], "resources": sorted(k.plural for k in KINDS.values() if k.group == group),
              "verbs": ["*"]} for group in GROUPS]
    return [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": "job-kinds", "namespace": namespace}, "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "alice-job-kinds", "namespace": namespace},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "job-kinds"},
         "subjects": [{"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": "alice-edit", "namespace": namespace},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
         "subjects": [{"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}]},
    ]


def workflow(name: str, namespace: str, *, cpu: int, width: int, succeed_after: str = "4s",
             declared: str | None = None) -> dict[str, Any]:
    """An Argo Workflow of a one-pod step, then ``width`` pods of ``cpu`` CPU at once; each pod succeeds
    ``succeed_after`` after it started (the dev cluster's kwok stage), so the workflow finishes."""
    work = {"name": "work", "container": {"image": "busybox", "command": ["sh", "-c", "true"],
                                          "resources": {"requests": {"cpu": str(cpu), "memory": "1Gi"}}}}
    main = {"name": "main", "steps": [[{"name": "prepare", "template": "work"}],
                                      [{"name": "fan", "template": "work", "withItems": list(range(width))}]]}
    obj: dict[str, Any] = {
        "apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"entrypoint": "main", "suspend": False, "templates": [main, work],
                 "podMetadata": {"annotations": {"dev.kube-queue.x-k8s.io/succeed-after": succeed_after}}},
    }
    if declared is not None:
        obj["metadata"]["annotations"] = {"kube-queue/min-resources": declared}
    return obj


def spark_application(name: str, namespace: str, *, executors: int) -> dict[str, Any]:
    """A Scala SparkApplication: a driver of 1 core / 512m and ``executors`` executors of 2 cores / 2g."""
    return {
        "apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"type": "Scala", "mode": "cluster", "sparkVersion": "3.5.0", "image": "spark:3.5.0",
                 "mainClass": "org.apache.spark.examples.SparkPi", "suspend": False,
                 "mainApplicationFile": "local:///opt/spark/examples/jars/spark-examples.jar",
                 "driver": {"cores": 1, "memory": "512m"},
                 "executor": {"cores": 2, "memory": "2g", "instances": executors}},
    }
