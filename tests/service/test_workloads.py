"""Adapters: pod sets, priority, the hold and its patches, for every supported kind."""

from __future__ import annotations

from typing import Any

import pytest

from tests.builders import res
from tests.service.helpers import (
    JOB_BUILDERS,
    OWNING_JOB,
    batch_job,
    jobset,
    mpijob,
    pod,
    pytorchjob,
    rayjob,
    template,
    tfjob,
)
from webhook.api.names import ADMISSION_GATE, QUOTA_FULLNAME_ANNOTATION, QUOTA_LABEL
from webhook.core.workload import Phase, WorkloadError
from webhook.workloads.base import Adapter, PatchError, apply_patch, pointer, value_at
from webhook.workloads.registry import adapter_for, all_adapters


def adapter(kind: str) -> Adapter:
    for candidate in all_adapters():
        if candidate.kind == kind:
            return candidate
    raise AssertionError(kind)


def test_registry_finds_every_kind_by_group_and_kind() -> None:
    found = {(a.group, a.kind) for a in all_adapters()}
    assert found == {
        ("batch", "Job"),
        ("kubeflow.org", "TFJob"),
        ("kubeflow.org", "PyTorchJob"),
        ("kubeflow.org", "MPIJob"),
        ("kubeflow.org", "XGBoostJob"),
        ("kubeflow.org", "PaddleJob"),
        ("ray.io", "RayCluster"),
        ("argoproj.io", "Workflow"),
        ("sparkoperator.k8s.io", "SparkApplication"),
        ("ray.io", "RayJob"),
        ("jobset.x-k8s.io", "JobSet"),
        ("", "Pod"),
    }
    assert adapter_for("batch", "Job") is adapter("Job")
    assert adapter_for("apps", "Deployment") is None
    assert adapter_for("", "Job") is None


@pytest.mark.parametrize(
    ("parallelism", "completions", "pods"),
    [(None, None, 1), (6, None, 6), (6, 2, 2), (2, 6, 2), (0, None, 0), (3, 3, 3)],
)
def test_job_pod_count_is_parallelism_capped_by_completions(
    parallelism: int | None, completions: int | None, pods: int
) -> None:
    job = batch_job(parallelism=parallelism, completions=completions)
    (pod_set,) = adapter("Job").pod_sets(job)
    assert pod_set.count == pods
    assert pod_set.per_pod == res(cpu=10, memory="10Gi")


def test_kubeflow_jobs_have_one_pod_set_per_replica_type_in_role_order() -> None:
    sets = adapter("TFJob").pod_sets(tfjob())
    assert [(s.name, s.count, s.per_pod) for s in sets] == [("ps", 1, res(cpu=1)), ("worker", 2, res(cpu=2))]
    sets = adapter("PyTorchJob").pod_sets(pytorchjob())
    assert [(s.name, s.count) for s in sets] == [("master", 1), ("worker", 3)]
    sets = adapter("MPIJob").pod_sets(mpijob())
    assert [(s.name, s.count, s.per_pod) for s in sets] == [("launcher", 1, res(cpu=1)), ("worker", 4, res(cpu=8))]


def test_replicas_default_to_one() -> None:
    job = tfjob()
    del job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"]
    assert [s.count for s in adapter("TFJob").pod_sets(job)] == [1, 1]


def test_rayjob_counts_head_and_worker_groups_times_hosts() -> None:
    sets = adapter("RayJob").pod_sets(rayjob())
    assert [(s.name, s.count, s.per_pod) for s in sets] == [
        ("head", 1, res(cpu=2)),
        ("small", 2, res(cpu=1)),
        ("tpu", 4, res(cpu=3)),
        ("submitter", 1, res(cpu="500m", memory="200Mi")),  # KubeRay's default submitter pod (K8sJobMode)
    ]


def test_a_jobset_has_one_pod_set_per_replicated_job_counted_as_its_jobs_run_pods() -> None:
    obj = jobset()
    sets = adapter("JobSet").pod_sets(obj)
    assert [(s.name, s.count, s.per_pod) for s in sets] == [("driver", 1, res(cpu=1)), ("workers", 6, res(cpu=2))]
    assert adapter("JobSet").pod_owners(obj) == (("Job", "train-driver-0"), ("Job", "train-workers-0"),
                                                  ("Job", "train-workers-1"))
    assert adapter("JobSet").children == {"Job"}
    assert adapter("JobSet").suspend_patch(obj) == [{"op": "add", "path": "/spec/suspend", "value": True}]
    done = {**obj, "status": {"conditions": [{"type": "Completed", "status": "True"}]}}
    assert adapter("JobSet").to_workload(done, "a", {}).phase is Phase.FINISHED


@pytest.mark.parametrize(
    ("mutation", "where"),
    [
        ({"replicatedJobs": {"driver": {}}}, "/spec/replicatedJobs"),
        ({"replicatedJobs": [{"template": {"spec": {"template": template("1")}}}]}, "/spec/replicatedJobs/0/name"),
        ({"replicatedJobs": [{"name": "w", "replicas": -1, "template": {"spec": {}}}]},
         "/spec/replicatedJobs/0/replicas"),
    ],
)
def test_a_malformed_jobset_is_refused_naming_the_field(mutation: dict[str, Any], where: str) -> None:
    obj = {**jobset(), "spec": mutation}
    with pytest.raises(WorkloadError, match=where):
        adapter("JobSet").pod_sets(obj)


def test_rayjob_on_an_existing_cluster_has_no_pods() -> None:
    job = rayjob()
    del job["spec"]["rayClusterSpec"]
    job["spec"]["clusterSelector"] = {"ray.io/cluster": "shared"}
    assert adapter("RayJob").pod_sets(job) == ()


def test_pod_is_one_pod_set_of_one() -> None:
    (pod_set,) = adapter("Pod").pod_sets(pod(cpu="500m"))
    assert (pod_set.count, pod_set.per_pod) == (1, res(cpu="500m"))


def test_workload_request_and_identity() -> None:
    job = batch_job()
    job["metadata"]["creationTimestamp"] = "2024-05-01T10:00:00Z"
    job["metadata"]["uid"] = "abc"
    workload = adapter("Job").to_workload(job, "Department-a", {})
    assert str(workload.key) == "Job/user-a/pi"
    assert workload.quota == "Department-a"
    assert workload.request == res(cpu=60, memory="60Gi")
    assert workload.created == 1714557600.0
    assert workload.uid == "abc"
    assert workload.phase is Phase.ADMITTED  # suspend: false


def test_workload_phase_follows_hold_and_completion() -> None:
    job = batch_job(suspend=True)
    assert adapter("Job").to_workload(job, "a", {}).phase is Phase.QUEUED
    job["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    assert adapter("Job").to_workload(job, "a", {}).phase is Phase.FINISHED
    ray = rayjob()
    ray["status"] = {"jobDeploymentStatus": "Failed"}
    assert adapter("RayJob").is_finished(ray)
    tf = tfjob()
    tf["status"] = {"conditions": [{"type": "Succeeded", "status": "True"}]}
    assert adapter("TFJob").is_finished(tf)
    assert adapter("Pod").is_finished({**pod(), "status": {"phase": "Succeeded"}})


def test_priority_comes_only_from_the_priority_class_never_a_template_literal() -> None:
    classes = {"high": 1000, "low": 1}
    job = batch_job()
    assert adapter("Job").priority(job, classes) == 0
    job["spec"]["template"]["spec"]["priority"] = 1_000_000_000
    assert adapter("Job").priority(job, classes) == 0  # issue 17: a literal bought position 1
    job["spec"]["template"]["spec"]["priorityClassName"] = "high"
    assert adapter("Job").priority(job, classes) == 1000
    job["spec"]["template"]["spec"]["priorityClassName"] = "unknown"
    assert adapter("Job").priority(job, classes) == 0


def test_kubeflow_priority_class_from_scheduling_policy_first() -> None:
    job = tfjob()
    job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["priorityClassName"] = "low"
    assert adapter("TFJob").priority(job, {"high": 1000, "low": 1}) == 1
    job["spec"]["runPolicy"] = {"schedulingPolicy": {"priorityClass": "high"}}
    assert adapter("TFJob").priority(job, {"high": 1000, "low": 1}) == 1000


def test_pod_priority_uses_resolved_spec_priority() -> None:
    obj = pod(priority=5)
    assert adapter("Pod").priority(obj, {}) == 5


@pytest.mark.parametrize("kind", sorted(JOB_BUILDERS))
def test_suspend_then_resume_round_trips(kind: str) -> None:
    kind_adapter = adapter(kind)
    obj: dict[str, Any] = JOB_BUILDERS[kind]()
    assert not kind_adapter.is_suspended(obj)
    held = apply_patch(obj, kind_adapter.suspend_patch(obj))
    assert kind_adapter.is_suspended(held)
    assert kind_adapter.suspend_patch(held) == []
    released = apply_patch(held, kind_adapter.resume_patch(held))
    assert not kind_adapter.is_suspended(released)
    assert kind_adapter.resume_patch(released) == []


def test_suspend_paths_per_kind() -> None:
    assert adapter("Job").suspend_patch(batch_job()) == [{"op": "add", "path": "/spec/suspend", "value": True}]
    assert adapter("TFJob").suspend_patch(tfjob()) == [
        {"op": "add", "path": "/spec/runPolicy", "value": {"suspend": True}}
    ]
    assert adapter("MPIJob").suspend_patch(mpijob()) == [
        {"op": "add", "path": "/spec/runPolicy/suspend", "value": True}
    ]
    assert adapter("RayJob").suspend_patch(rayjob()) == [{"op": "add", "path": "/spec/suspend", "value": True}]
    assert adapter("Pod").suspend_patch(pod()) == [
        {"op": "add", "path": "/spec/schedulingGates", "value": [{"name": ADMISSION_GATE}]}
    ]


def test_pod_gate_is_appended_to_existing_gates_and_removed_by_index() -> None:
    obj = pod(schedulingGates=[{"name": "other"}])
    held: dict[str, Any] = apply_patch(obj, adapter("Pod").suspend_patch(obj))
    assert held["spec"]["schedulingGates"] == [{"name": "other"}, {"name": ADMISSION_GATE}]
    ops = adapter("Pod").resume_patch(held)
    assert ops[0]["op"] == "test"
    assert value_at(apply_patch(held, ops), "spec", "schedulingGates") == [{"name": "other"}]


def test_pods_owned_by_a_controller_are_not_queued_on_their_own() -> None:
    assert adapter("Pod").manages(pod())
    assert not adapter("Pod").manages(pod(owner=OWNING_JOB))
    assert adapter("Pod").gates_at_creation_only


def test_tag_patch_labels_job_and_every_template() -> None:
    job = rayjob()
    job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"] = template("1", labels={"app": "x"})
    tagged: dict[str, Any] = apply_patch(job, adapter("RayJob").tag_patch(job, "Department-a", "root/Department-a"))
    assert tagged["metadata"]["labels"] == {QUOTA_LABEL: "Department-a"}
    assert tagged["metadata"]["annotations"] == {QUOTA_FULLNAME_ANNOTATION: "root/Department-a"}
    cluster = tagged["spec"]["rayClusterSpec"]
    templates = [cluster["headGroupSpec"]["template"]] + [g["template"] for g in cluster["workerGroupSpecs"]]
    for each in templates:
        assert each["metadata"]["labels"][QUOTA_LABEL] == "Department-a"
        assert each["metadata"]["annotations"][QUOTA_FULLNAME_ANNOTATION] == "root/Department-a"
    assert templates[1]["metadata"]["labels"]["app"] == "x"
    assert adapter("RayJob").tag_patch(tagged, "Department-a", "root/Department-a") == []


@pytest.mark.parametrize(
    ("mutation", "where"),
    [
        (lambda j: j["spec"].__setitem__("parallelism", "six"), "/spec/parallelism"),
        (lambda j: j["spec"].__setitem__("parallelism", -1), "/spec/parallelism"),
        (lambda j: j["spec"].__setitem__("template", []), "/spec/template"),
        (lambda j: j["spec"].__setitem__("suspend", "yes"), "/spec/suspend"),
        (
            lambda j: j["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"].__setitem__(
                "cpu", "lots"
            ),
            "cpu",
        ),
    ],
)
def test_malformed_jobs_raise_workload_errors_naming_the_field(mutation: Any, where: str) -> None:
    job = batch_job()
    mutation(job)
    kind_adapter = adapter("Job")
    with pytest.raises(WorkloadError, match=where):
        kind_adapter.pod_sets(job)
        kind_adapter.is_suspended(job)


def test_pointer_escapes_slash_and_tilde() -> None:
    assert pointer("metadata", "labels", "a/b~c") == "/metadata/labels/a~1b~0c"


def test_apply_patch_refuses_what_the_apiserver_refuses() -> None:
    with pytest.raises(PatchError):
        apply_patch({"a": 1}, [{"op": "remove", "path": "/b"}])
    with pytest.raises(PatchError):
        apply_patch({"a": [1]}, [{"op": "test", "path": "/a/0", "value": 2}])
    assert apply_patch({"a": [1]}, [{"op": "add", "path": "/a/0", "value": 0}]) == {"a": [0, 1]}
