"""The operator-run kinds as their operators make their pods (docs/job-kinds.md): what each adds to the pods, how
the kinds without pod templates (SparkApplication, Workflow) are sized, tagged and guarded, and which objects an
operator creates for a queued job are queued with it (webhook/workloads/children.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.builders import res
from tests.service.helpers import (
    message,
    patched,
    pytorchjob,
    raycluster,
    rayjob,
    response,
    review,
    sparkapplication,
    workflow,
)
from webhook.admission.mutate import mutate
from webhook.admission.state import AdmissionState, Settings
from webhook.admission.validate import validate
from webhook.api.names import (
    ADMISSION_ANNOTATION,
    PARENT_ANNOTATION,
    QUOTA_LABEL,
    SUBMITTED_ANNOTATION,
    WORKFLOW_SIZE_ANNOTATION,
)
from webhook.core.workload import WorkloadError
from webhook.workloads.base import Adapter, apply_patch
from webhook.workloads.registry import adapter_for

KUBERAY = "system:serviceaccount:kuberay-system:kuberay-operator"
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"


def adapter(obj: dict[str, Any]) -> Adapter:
    found = adapter_for(obj["apiVersion"].rpartition("/")[0], obj["kind"])
    assert found is not None
    return found


def sets(obj: dict[str, Any]) -> list[tuple[str, int, Any]]:
    return [(s.name, s.count, s.per_pod) for s in adapter(obj).pod_sets(obj)]


def held(obj: dict[str, Any], state: AdmissionState, user: str = "alice") -> dict[str, Any]:
    out = mutate(review(obj, user=user), state, Settings())
    assert response(out)["allowed"], message(out)
    return patched(obj, out)


def refused(old: dict[str, Any], new: dict[str, Any], state: AdmissionState) -> str:
    out = validate(review(new, operation="UPDATE", old=old), state, Settings())
    assert not response(out)["allowed"]
    return message(out)


# What operators add to the pods ------------------------------------------------------------------------------


def test_pytorchjob_workers_get_the_operators_init_container_when_there_is_a_master() -> None:
    job = pytorchjob()
    assert sets(job) == [("master", 1, res(cpu=4)), ("worker", 3, res(cpu=4, memory="10Mi"))]
    del job["spec"]["pytorchReplicaSpecs"]["Master"]
    assert sets(job) == [("worker", 3, res(cpu=4))]


def test_an_mpijob_v1_launcher_gets_the_training_operators_init_container() -> None:
    job = {"apiVersion": "kubeflow.org/v1", "kind": "MPIJob", "metadata": {"name": "m", "namespace": "user-a"},
           "spec": {"mpiReplicaSpecs": {
               "Launcher": {"replicas": 1, "template": {"spec": {"containers": [
                   {"name": "l", "resources": {"requests": {"cpu": "1"}}}]}}},
               "Worker": {"replicas": 2, "template": {"spec": {"containers": [
                   {"name": "w", "resources": {"requests": {"cpu": "4"}}}]}}}}}}
    assert sets(job) == [("launcher", 1, res(cpu=1, memory="512Mi", **{"ephemeral-storage": "5Gi"})),
                         ("worker", 2, res(cpu=4))]
    job["apiVersion"] = "kubeflow.org/v2beta1"  # the MPI Operator v2 runs the launcher as a Job of its own
    assert sets(job)[0] == ("launcher", 1, res(cpu=1))


def test_rayjob_counts_its_submitter_as_kuberay_runs_it() -> None:
    job = rayjob()
    assert sets(job)[-1] == ("submitter", 1, res(cpu="500m", memory="200Mi"))
    job["spec"]["submitterPodTemplate"] = {"spec": {"containers": [
        {"name": "s", "resources": {"requests": {"cpu": "2"}}}]}}
    assert sets(job)[-1] == ("submitter", 1, res(cpu=2))
    job["spec"]["submissionMode"] = "SidecarMode"
    assert [s[0] for s in sets(job)] == ["head", "small", "tpu"]
    assert sets(job)[0] == ("head", 1, res(cpu="2500m", memory="200Mi"))
    job["spec"]["submissionMode"] = "HTTPMode"
    assert sets(job)[0] == ("head", 1, res(cpu=2))
    assert adapter(job).pod_owners(job) == ()  # no cluster yet, no submitter Job in HTTPMode


def test_raycluster_workers_follow_kuberay_and_the_autoscaler_counts_at_its_most() -> None:
    cluster = raycluster()
    assert sets(cluster) == [("head", 1, res(cpu=2)), ("small", 2, res(cpu=1))]
    group = cluster["spec"]["workerGroupSpecs"][0]
    group["replicas"] = 9  # KubeRay keeps it within maxReplicas
    assert sets(cluster)[1] == ("small", 4, res(cpu=1))
    group["suspend"] = True
    assert sets(cluster)[1] == ("small", 0, res(cpu=1))
    del group["suspend"]
    cluster["spec"]["enableInTreeAutoscaling"] = True
    assert sets(cluster) == [("head", 1, res(cpu="2500m", memory="512Mi")), ("small", 4, res(cpu=1))]


# SparkApplication --------------------------------------------------------------------------------------------


def test_a_spark_application_is_sized_as_spark_sizes_its_driver_and_executors() -> None:
    app = sparkapplication()
    # 512m + 384Mi overhead (10% is less than the 384Mi floor); 2g + 384Mi for each executor.
    assert sets(app) == [("driver", 1, res(cpu=1, memory="896Mi")), ("executor", 2, res(cpu=2, memory="2432Mi"))]
    app["spec"]["type"] = "Python"  # non-JVM: 40% overhead
    assert sets(app)[1] == ("executor", 2, res(cpu=2, memory="2868Mi"))
    app["spec"]["executor"].update(coreRequest="1500m", memoryOverhead="1g", gpu={"name": "nvidia.com/gpu",
                                                                                  "quantity": 1})
    assert sets(app)[1] == ("executor", 2, res(cpu="1500m", memory="3Gi", gpu=1))
    app["spec"]["dynamicAllocation"] = {"enabled": True, "minExecutors": 1, "maxExecutors": 5}
    assert sets(app)[1][1] == 5, "dynamic allocation counts at its maximum"
    assert adapter(app).pod_owners(app) == (("SparkApplication", "spark"), ("Pod", "spark-driver"))


def test_spark_sizes_that_do_not_parse_name_their_field() -> None:
    app = sparkapplication()
    app["spec"]["executor"]["memory"] = "lots"
    with pytest.raises(WorkloadError, match=r"spec\.executor\.memory: 'lots' is not a Spark size"):
        adapter(app).pod_sets(app)


def test_dynamic_allocation_without_a_maximum_is_refused_at_submission(state: AdmissionState) -> None:
    app = sparkapplication()
    app["spec"]["dynamicAllocation"] = {"enabled": True}
    out = mutate(review(app), state, Settings())
    assert not response(out)["allowed"]
    assert "spec.dynamicAllocation.maxExecutors (or spark.dynamicAllocation.maxExecutors in spec.sparkConf) must " \
        "be set" in message(out)
    # Enabled through sparkConf, which the operator passes on as it is: refused the same.
    app = sparkapplication()
    app["spec"]["sparkConf"] = {"spark.dynamicAllocation.enabled": "true"}
    assert not response(mutate(review(app), state, Settings()))["allowed"]
    app["spec"]["sparkConf"]["spark.dynamicAllocation.maxExecutors"] = "6"
    assert response(mutate(review(app), state, Settings()))["allowed"]
    assert sets(app)[1][1] == 6


def test_what_spark_conf_sets_and_the_roles_leave_out_is_counted_as_spark_gets_it() -> None:
    """The operator passes spec.sparkConf to spark-submit before the roles' fields: a size the roles leave out
    comes from sparkConf, one they set wins. The driver, which the operator creates, is not held, so a size
    read from the fields alone let it run bigger than counted."""
    app = sparkapplication()  # driver: 1 core, 512m; executors: 2 cores, 2g, 2 of them (the spec's fields)
    app["spec"]["sparkConf"] = {
        "spark.kubernetes.driver.request.cores": "6", "spark.driver.memory": "64g",  # the driver names neither
        "spark.driver.resource.gpu.amount": "2", "spark.driver.resource.gpu.vendor": "nvidia.com",
        "spark.executor.memory": "100g", "spark.executor.instances": "40",  # its memory field wins, not instances
        "spark.kubernetes.memoryOverheadFactor": "0.5",  # beats spec.memoryOverheadFactor, passed before it
    }
    app["spec"]["memoryOverheadFactor"] = "0.1"
    del app["spec"]["executor"]["instances"], app["spec"]["driver"]["memory"]
    assert sets(app) == [("driver", 1, res(cpu=6, memory="96Gi", gpu=2)),
                         ("executor", 40, res(cpu=2, memory="3Gi"))]
    app["spec"]["executor"]["instances"] = 3
    assert sets(app)[1][1] == 3
    app["spec"]["sparkConf"] = {"spark.executor.memoryOverheadFactor": "0.25", "spark.executor.minMemoryOverhead": "1g",
                                "spark.memory.offHeap.enabled": "true", "spark.memory.offHeap.size": "1073741824"}
    assert sets(app)[1] == ("executor", 3, res(cpu=2, memory="4Gi"))  # 2g + 1g floor + 1g off heap
    app["spec"]["sparkConf"] = {"spark.driver.memory": "lots"}
    with pytest.raises(WorkloadError, match=r"spec\.sparkConf\[spark\.driver\.memory\]: 'lots' is not a Spark"):
        adapter(app).pod_sets(app)


def test_an_admitted_application_cannot_grow_its_driver_through_spark_conf(state: AdmissionState) -> None:
    admitted = held(sparkapplication(), state)
    admitted["spec"]["suspend"] = False  # as the controller releases it
    grown = copy.deepcopy(admitted)
    grown["spec"]["sparkConf"] = {"spark.kubernetes.driver.request.cores": "30"}
    assert "an admitted job cannot change its size" in refused(admitted, grown, state)


def test_a_spark_application_is_held_and_its_pods_labelled_through_driver_and_executor(
    state: AdmissionState,
) -> None:
    app = held(sparkapplication(), state)
    assert app["spec"]["suspend"] is True
    for role in ("driver", "executor"):
        assert app["spec"][role]["labels"][QUOTA_LABEL] == "Department-a"
    changed = copy.deepcopy(app)
    changed["spec"]["executor"]["labels"][QUOTA_LABEL] = "Department-b"
    assert f"spec.executor.labels.{QUOTA_LABEL}" in refused(app, changed, state)
    classed = copy.deepcopy(app)
    classed["spec"]["driver"]["priorityClassName"] = "high"
    assert "spec.driver.priorityClassName" in refused(app, classed, state)
    running: dict[str, Any] = apply_patch(app, adapter(app).resume_patch(app))
    grown = copy.deepcopy(running)
    grown["spec"]["executor"]["instances"] = 20
    assert "executor" in refused(running, grown, state)


# Workflow -----------------------------------------------------------------------------------------------------


def test_a_workflow_is_sized_by_its_widest_point() -> None:
    wf = workflow()
    assert sets(wf) == [("widest", 1, res(cpu=6))]  # the group of three 2-CPU steps, not all four steps
    wf["spec"]["parallelism"] = 2
    assert sets(wf) == [("widest", 1, res(cpu=4))]
    del wf["spec"]["parallelism"]
    wf["spec"]["templates"][0] = {"name": "main", "dag": {"tasks": [
        {"name": "a", "template": "work"}, {"name": "b", "template": "work", "dependencies": ["a"]},
        {"name": "c", "template": "work", "withSequence": {"count": "3"}}]}}
    assert sets(wf) == [("widest", 1, res(cpu=10))]  # a DAG may run every task at once
    wf["metadata"]["annotations"] = {WORKFLOW_SIZE_ANNOTATION: "cpu: 3\nmemory: 4Gi"}
    assert sets(wf) == [("declared", 1, res(cpu=3, memory="4Gi"))]
    assert not adapter(wf).needs_all_pods(wf)


def test_a_workflow_is_sized_as_its_pod_spec_patches_make_its_pods() -> None:
    """Argo applies the workflow's podSpecPatch to every step pod, then the template's own (or its
    templateDefaults'), merged into the main container by name: a patch's requests are the pods' requests."""
    wf = workflow()  # 1 pod, then 3 pods at once, each 2 CPU
    wf["spec"]["templates"][1]["container"]["name"] = ""  # as Argo's controller writes it back
    wf["spec"]["podSpecPatch"] = '{"containers": [{"name": "main", "resources": {"requests": {"cpu": "5"}}}]}'
    assert sets(wf) == [("widest", 1, res(cpu=15))]
    wf["spec"]["templateDefaults"] = {"podSpecPatch": "containers:\n- name: main\n  resources:\n"
                                                      "    requests: {cpu: 3, memory: 1Gi}\n"}
    assert sets(wf) == [("widest", 1, res(cpu=9, memory="3Gi"))]  # after the workflow's, and merged key by key
    wf["spec"]["templates"][1]["podSpecPatch"] = (
        '{"containers": [{"name": "main", "resources": {"requests": {"cpu": "7"}}}, {"name": "side", '
        '"resources": {"requests": {"cpu": "1"}}}]}')
    assert sets(wf) == [("widest", 1, res(cpu=24))]  # the template's own replaces its defaults'; "side" is added
    wf["spec"]["templates"][1]["podSpecPatch"] = '{"containers": [{"name": "main", "resources": null}]}'
    assert sets(wf) == [("widest", 1, res())]  # null removes what the template asked


@pytest.mark.parametrize(("patch", "said"), [
    ("{{workflow.parameters.patch}}", "only once Argo fills its variables"),
    ('{"containers": [{"name": "main", "resources": {"limits": {"cpu": "{{inputs.parameters.cpu}}"}}}]}', "cpu"),
    ("not: [a, pod, spec", "expected a pod spec in YAML or JSON"),
])
def test_a_workflow_patch_the_queue_cannot_size_is_refused_unless_the_size_is_declared(
    patch: str, said: str, state: AdmissionState
) -> None:
    wf = workflow()
    wf["spec"]["podSpecPatch"] = patch
    out = mutate(review(wf), state, Settings())
    assert not response(out)["allowed"]
    assert "cannot size" in message(out) and said in message(out)
    wf["metadata"]["annotations"] = {WORKFLOW_SIZE_ANNOTATION: "cpu: 4"}
    assert response(mutate(review(wf), state, Settings()))["allowed"], patch


def test_a_workflow_that_recurses_is_sized_by_what_was_reached() -> None:
    wf = workflow()
    wf["spec"]["templates"].append({"name": "loop", "steps": [[{"name": "again", "template": "loop"}]]})
    wf["spec"]["entrypoint"] = "loop"
    assert sets(wf) == [("widest", 1, res())]


def test_a_bad_declared_size_is_refused_naming_the_annotation(state: AdmissionState) -> None:
    wf = workflow()
    wf["metadata"]["annotations"] = {WORKFLOW_SIZE_ANNOTATION: "cpu: [1, 2]"}
    out = mutate(review(wf), state, Settings())
    assert not response(out)["allowed"]
    assert WORKFLOW_SIZE_ANNOTATION in message(out)


def test_a_workflow_is_held_and_its_pods_labelled_through_pod_metadata(state: AdmissionState) -> None:
    wf = held(workflow(), state)
    assert wf["spec"]["suspend"] is True
    assert wf["spec"]["podMetadata"]["labels"][QUOTA_LABEL] == "Department-a"
    changed = copy.deepcopy(wf)
    del changed["spec"]["podMetadata"]["labels"][QUOTA_LABEL]
    assert f"spec.podMetadata.labels.{QUOTA_LABEL}" in refused(wf, changed, state)
    classed = copy.deepcopy(wf)
    classed["spec"]["podPriorityClassName"] = "high"
    assert "spec.podPriorityClassName" in refused(wf, classed, state)


# Children of queued jobs -------------------------------------------------------------------------------------


def owned_by_rayjob(obj: dict[str, Any], name: str = "ray") -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"]["ownerReferences"] = [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": name,
                                           "uid": "u-ray", "controller": True}]
    return out


@pytest.mark.parametrize("child", ["RayCluster", "Job"])
def test_kuberays_children_of_a_rayjob_are_queued_with_it(child: str, state: AdmissionState) -> None:
    if child == "RayCluster":
        obj = owned_by_rayjob(raycluster())
    else:
        obj = owned_by_rayjob({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "ray", "namespace":
                                "user-a"}, "spec": {"template": {"spec": {"containers": [{"name": "s"}]}}}})
    # KubeRay copies the RayJob's annotations, its records too: a copied stamp is not the webhook's hold.
    obj["metadata"]["annotations"] = {SUBMITTED_ANNOTATION: "2026-01-01T00:00:00.000000Z",
                                      ADMISSION_ANNOTATION: "{}"}
    made = held(obj, state, user=KUBERAY)
    assert not made["spec"].get("suspend"), "not held: its RayJob was queued"
    assert made["metadata"]["annotations"][PARENT_ANNOTATION] == "RayJob/ray"
    assert not adapter(made).manages(made)
    users = held(obj, state)  # alice's own object naming her RayJob is queued on its own
    assert users["spec"]["suspend"] is True
    assert PARENT_ANNOTATION not in users["metadata"]["annotations"]
    assert adapter(users).manages(users)
    marked = copy.deepcopy(users)
    marked["metadata"]["annotations"][PARENT_ANNOTATION] = "RayJob/ray"
    assert PARENT_ANNOTATION in refused(users, marked, state)


JOBSET_CONTROLLER = "system:serviceaccount:jobset-system:jobset-controller-manager"


def jobset_job(name: str = "train-workers-0", *, owned: bool = True) -> dict[str, Any]:
    """A Job of the JobSet ``train`` as JobSet makes it while the JobSet is held: suspended."""
    metadata: dict[str, Any] = {"name": name, "namespace": "user-a"}
    if owned:
        metadata["ownerReferences"] = [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "train",
                                        "uid": "u-js", "controller": True}]
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata,
            "spec": {"suspend": True, "template": {"spec": {"containers": [{"name": "main"}]}}}}


def test_jobsets_controller_resumes_the_jobs_it_made_and_nobody_else_resumes_them(state: AdmissionState) -> None:
    """JobSet makes a held JobSet's Jobs suspended and resumes them once the queue releases the JobSet: its update
    of a Job marked as the JobSet's is allowed. alice's un-suspend of that Job is refused, and so is JobSet's
    controller's of a Job that is not marked (one alice made naming the JobSet is queued on its own)."""
    made = held(jobset_job(), state, user=JOBSET_CONTROLLER)
    assert made["metadata"]["annotations"][PARENT_ANNOTATION] == "JobSet/train"
    assert made["spec"]["suspend"] is True, "as JobSet made it"
    resumed = copy.deepcopy(made)
    resumed["spec"]["suspend"] = False
    out = validate(review(resumed, operation="UPDATE", old=made, user=JOBSET_CONTROLLER), state, Settings())
    assert response(out)["allowed"], message(out)
    assert "only kube-queue may un-suspend" in refused(made, resumed, state)
    alices = held(jobset_job("mine"), state)
    assert PARENT_ANNOTATION not in alices["metadata"].get("annotations", {})
    released = copy.deepcopy(alices)
    released["spec"]["suspend"] = False
    out = validate(review(released, operation="UPDATE", old=alices, user=JOBSET_CONTROLLER), state, Settings())
    assert not response(out)["allowed"] and "only kube-queue may un-suspend" in message(out)


MPI_OPERATOR = "system:serviceaccount:mpi-operator:mpi-operator"


def test_the_mpi_operator_resumes_its_launcher_job_and_a_refusal_points_at_the_mpijob(
    state: AdmissionState,
) -> None:
    """The MPI Operator v2 makes a held MPIJob's launcher Job suspended and resumes it on release: allowed. alice's
    un-suspend of it is refused, and the refusal speaks of the MPIJob she submitted: the launcher Job is no job of
    the queue, so ``kq why`` knows it by its MPIJob's name only."""
    owner = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "name": "hvd", "uid": "u-mpi", "controller": True}
    launcher = {"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": "hvd-launcher", "namespace": "user-a", "ownerReferences": [owner]},
                "spec": {"suspend": True, "template": {"spec": {"containers": [{"name": "launcher"}]}}}}
    made = held(launcher, state, user=MPI_OPERATOR)
    assert made["metadata"]["annotations"][PARENT_ANNOTATION] == "MPIJob/hvd"
    resumed = copy.deepcopy(made)
    resumed["spec"]["suspend"] = False
    out = validate(review(resumed, operation="UPDATE", old=made, user=MPI_OPERATOR), state, Settings())
    assert response(out)["allowed"], message(out)
    text = refused(made, resumed, state)
    assert "Job user-a/hvd-launcher (queued with its MPIJob hvd) is queued for quota" in text, text
    assert "only kube-queue may un-suspend" in text and "`kq why hvd -n user-a`" in text, text


def test_a_cronjobs_job_is_still_queued(state: AdmissionState) -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "nightly-1", "namespace": "user-a", "ownerReferences": [
               {"apiVersion": "batch/v1", "kind": "CronJob", "name": "nightly", "uid": "u", "controller": True}]},
           "spec": {"template": {"spec": {"containers": [{"name": "c"}]}}}}
    assert held(job, state, user=JOB_CONTROLLER)["spec"]["suspend"] is True


def test_a_user_cannot_grow_the_cluster_kuberay_made_for_a_rayjob(state: AdmissionState) -> None:
    made = held(owned_by_rayjob(raycluster()), state, user=KUBERAY)
    grown = copy.deepcopy(made)
    grown["spec"]["workerGroupSpecs"][0]["replicas"] = 4  # its pods count as the RayJob's admitted ones
    assert "an admitted job cannot change its size" in refused(made, grown, state)
