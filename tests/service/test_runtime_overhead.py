"""A job whose pod templates name a RuntimeClass with a pod overhead is sized with it, as the API server will
admit its pods (docs/queueing.md, "RuntimeClass overhead"): the mutating webhook records each named class's
overhead on the job, every sizing adds it, and a user can neither forge the record nor move a held job onto a
class it was not sized for."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests.builders import res
from tests.service.helpers import JOB_BUILDERS, batch_job, patched, pod, review
from webhook.admission.mutate import mutate
from webhook.admission.state import AdmissionState, Settings, StateStore
from webhook.admission.validate import validate
from webhook.api.names import POD_OVERHEAD_ANNOTATION
from webhook.workloads.registry import adapter_for

KATA = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "kata"}, "handler": "kata",
        "overhead": {"podFixed": {"cpu": "250m", "memory": "160Mi"}}}
RUNC = {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "runc"}, "handler": "runc"}


@pytest.fixture
def classes(state: AdmissionState) -> AdmissionState:
    store = StateStore(state)
    store.set_runtime_classes([KATA, RUNC])
    return store.current


def _adapter(obj: dict[str, Any]) -> Any:
    adapter = adapter_for(obj["apiVersion"].split("/")[0] if "/" in obj["apiVersion"] else "", obj["kind"])
    assert adapter is not None
    return adapter


def under(obj: dict[str, Any], runtime_class: str) -> dict[str, Any]:
    """``obj`` with every pod template naming ``runtime_class``."""
    for template in _adapter(obj).pod_templates(obj):
        template.spec["runtimeClassName"] = runtime_class
    return obj


def test_the_store_keeps_the_classes_that_declare_an_overhead(classes: AdmissionState) -> None:
    assert dict(classes.runtime_overheads) == {"kata": {"cpu": "250m", "memory": "160Mi"}}


TEMPLATED = sorted(kind for kind in JOB_BUILDERS if kind not in ("Pod", "SparkApplication", "Workflow"))
"""The kinds whose pods are made from pod templates (a SparkApplication's and a Workflow's are not)."""


@pytest.mark.parametrize("kind", TEMPLATED)
def test_every_pod_set_of_a_job_under_a_class_is_sized_with_its_overhead(
    kind: str, classes: AdmissionState, settings: Settings
) -> None:
    obj = under(JOB_BUILDERS[kind](), "kata")
    adapter = _adapter(obj)
    before = {pod_set.name: pod_set for pod_set in adapter.pod_sets(obj)}  # the hole: the templates alone
    held = patched(obj, mutate(review(obj), classes, settings))
    assert json.loads(held["metadata"]["annotations"][POD_OVERHEAD_ANNOTATION]) == {
        "kata": {"cpu": "250m", "memory": "160Mi"}}
    templated = {template.name for template in adapter.pod_templates(held)}
    for pod_set in adapter.pod_sets(held):
        # KubeRay's own submitter pod names no class: only the templates' pod sets grow.
        grown = res(cpu="250m", memory="160Mi") if pod_set.name in templated else res()
        assert pod_set.per_pod == before[pod_set.name].per_pod + grown, (kind, pod_set.name)


def test_a_class_without_overhead_a_template_with_its_own_and_bare_pods_get_no_record(
    classes: AdmissionState, settings: Settings
) -> None:
    plain = under(batch_job(), "runc")
    assert POD_OVERHEAD_ANNOTATION not in patched(plain, mutate(review(plain), classes, settings))["metadata"].get(
        "annotations", {})
    own = under(batch_job(), "kata")
    own["spec"]["template"]["spec"]["overhead"] = {"cpu": "250m", "memory": "160Mi"}  # counted as written
    held = patched(own, mutate(review(own), classes, settings))
    assert POD_OVERHEAD_ANNOTATION not in held["metadata"].get("annotations", {})
    (pod_set,) = _adapter(held).pod_sets(held)
    assert pod_set.per_pod == res(cpu="10.25", memory="10Gi") + res(memory="160Mi")
    bare = pod()  # the API server has written its overhead before any webhook sees it
    bare["spec"]["runtimeClassName"] = "kata"
    assert POD_OVERHEAD_ANNOTATION not in patched(bare, mutate(review(bare), classes, settings))["metadata"].get(
        "annotations", {})


def test_a_forged_record_is_replaced_by_the_classes_own(classes: AdmissionState, settings: Settings) -> None:
    forged = under(batch_job(), "kata")
    forged["metadata"].setdefault("annotations", {})[POD_OVERHEAD_ANNOTATION] = json.dumps({"kata": {"cpu": "0"}})
    held = patched(forged, mutate(review(forged), classes, settings))
    assert json.loads(held["metadata"]["annotations"][POD_OVERHEAD_ANNOTATION]) == {
        "kata": {"cpu": "250m", "memory": "160Mi"}}
    plain = batch_job()
    plain["metadata"].setdefault("annotations", {})[POD_OVERHEAD_ANNOTATION] = json.dumps({"kata": {"cpu": "9"}})
    assert POD_OVERHEAD_ANNOTATION not in patched(plain, mutate(review(plain), classes, settings))["metadata"].get(
        "annotations", {})


def test_a_user_can_neither_change_the_record_nor_move_a_held_job_onto_an_unrecorded_class(
    classes: AdmissionState, settings: Settings
) -> None:
    obj = JOB_BUILDERS["PyTorchJob"]()
    held = patched(obj, mutate(review(obj), classes, settings))
    moved = under(copy.deepcopy(held), "kata")  # a PyTorchJob's templates may change while it is held
    out = validate(review(moved, operation="UPDATE", old=held), classes, settings)
    assert not out["response"]["allowed"]
    text = out["response"]["status"]["message"]
    assert ("spec.pytorchReplicaSpecs.Master.template.spec.runtimeClassName: RuntimeClass 'kata' adds a pod overhead "
            "the queue did not size the job with") in text
    assert validate(review(under(copy.deepcopy(held), "runc"), operation="UPDATE", old=held), classes,
                    settings)["response"]["allowed"]
    recorded = patched(under(obj, "kata"), mutate(review(under(obj, "kata")), classes, settings))
    lowered = copy.deepcopy(recorded)
    lowered["metadata"]["annotations"][POD_OVERHEAD_ANNOTATION] = json.dumps({"kata": {"cpu": "1m"}})
    refused = validate(review(lowered, operation="UPDATE", old=recorded), classes, settings)
    assert not refused["response"]["allowed"]
    assert POD_OVERHEAD_ANNOTATION in refused["response"]["status"]["message"]


def test_a_workflow_whose_pod_spec_patch_names_a_class_is_sized_with_its_overhead(
    classes: AdmissionState, settings: Settings
) -> None:
    """Argo's pods take their RuntimeClass from a podSpecPatch (a Workflow has no pod template): the webhook
    records the class's overhead as for a template's, and each pod the patch reaches is sized with it."""
    wf = JOB_BUILDERS["Workflow"]()  # one pod, then three at once, of 2 CPU each
    wf["spec"]["templates"][1]["podSpecPatch"] = '{"runtimeClassName": "kata"}'
    adapter = _adapter(wf)
    assert [s.per_pod for s in adapter.pod_sets(wf)] == [res(cpu=6)]  # no record yet
    held = patched(wf, mutate(review(wf), classes, settings))
    assert json.loads(held["metadata"]["annotations"][POD_OVERHEAD_ANNOTATION]) == {
        "kata": {"cpu": "250m", "memory": "160Mi"}}
    assert [s.per_pod for s in adapter.pod_sets(held)] == [res(cpu="6.75", memory="480Mi")]
    # A held workflow cannot move its pods onto a class the queue did not size it with.
    moved = copy.deepcopy(patched(JOB_BUILDERS["Workflow"](), mutate(review(JOB_BUILDERS["Workflow"]()), classes,
                                                                        settings)))
    before = copy.deepcopy(moved)
    moved["spec"]["podSpecPatch"] = "runtimeClassName: kata"
    out = validate(review(moved, operation="UPDATE", old=before), classes, settings)
    assert not out["response"]["allowed"]
    assert "spec.podSpecPatch: RuntimeClass 'kata' adds a pod overhead" in out["response"]["status"]["message"]


def test_a_spark_applications_templates_are_sized_as_spark_builds_its_pods_on_them(
    classes: AdmissionState, settings: Settings
) -> None:
    """Spark builds a role's pods on its ``template``: the class it names is recorded and counted, the first
    container keeps its other resources beside Spark's CPU and memory, and the template's other containers
    count. Without reading the template the executors, bigger than counted, would stay held for good
    (docs/job-kinds.md, Spark)."""
    app = JOB_BUILDERS["SparkApplication"]()  # executors of 2 cores and 2g: 2 CPU and 2432Mi each
    app["spec"]["executor"]["template"] = {"spec": {"runtimeClassName": "kata", "containers": [
        {"name": "executor", "resources": {"requests": {"memory": "1Mi"}, "limits": {"nvidia.com/gpu": "1"}}},
        {"name": "proxy", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}}
    adapter = _adapter(app)
    executor = {s.name: s for s in adapter.pod_sets(app)}["executor"]
    assert executor.per_pod == res(cpu="2.1", memory="2496Mi", **{"nvidia.com/gpu": 1})  # no record yet
    held = patched(app, mutate(review(app), classes, settings))
    assert json.loads(held["metadata"]["annotations"][POD_OVERHEAD_ANNOTATION]) == {
        "kata": {"cpu": "250m", "memory": "160Mi"}}
    sets = {s.name: s for s in adapter.pod_sets(held)}
    assert sets["executor"].per_pod == res(cpu="2.35", memory="2656Mi", **{"nvidia.com/gpu": 1})
    assert sets["executor"].count == 2
    assert sets["driver"].per_pod == res(cpu=1, memory="896Mi")  # its template names no class


def test_a_spark_template_can_neither_name_a_node_nor_move_a_held_application_onto_an_unrecorded_class(
    classes: AdmissionState, settings: Settings
) -> None:
    pinned = JOB_BUILDERS["SparkApplication"]()
    pinned["spec"]["driver"]["template"] = {"spec": {"nodeName": "node-1"}}
    out = validate(review(pinned), classes, settings)
    assert not out["response"]["allowed"]
    assert "spec.driver.template.spec" in out["response"]["status"]["message"]
    held = patched(JOB_BUILDERS["SparkApplication"](), mutate(review(JOB_BUILDERS["SparkApplication"]()), classes,
                                                               settings))
    moved = copy.deepcopy(held)
    moved["spec"]["executor"]["template"] = {"spec": {"runtimeClassName": "kata"}}
    out = validate(review(moved, operation="UPDATE", old=held), classes, settings)
    assert not out["response"]["allowed"]
    assert "RuntimeClass 'kata' adds a pod overhead" in out["response"]["status"]["message"]
    # The template's PriorityClass is the executors' (Spark keeps it): it may not change while queued either.
    raised = copy.deepcopy(held)
    raised["spec"]["executor"]["template"] = {"spec": {"priorityClassName": "system-cluster-critical"}}
    out = validate(review(raised, operation="UPDATE", old=held), classes, settings)
    assert not out["response"]["allowed"]
    assert "spec.executor.template.spec.priorityClassName: the priority class" in out["response"]["status"]["message"]
