"""Scenario files: durations, job expansion and naming, settings, includes, and the errors a user sees."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from webhook.api.objects import annotations_of, meta, spec_of
from webhook.core.queueing import Policy
from webhook.core.resources import Resources
from webhook.sim.model import ScenarioError, format_duration, parse_duration, parse_run_for
from webhook.sim.scenario import scenario_from_objects, scenario_from_text

TREE = """
apiVersion: scheduling.sigs.k8s.io/v1beta1
kind: ElasticQuotaTree
metadata: {name: elasticquotatree, namespace: kube-system}
spec:
  root:
    name: root
    min: {cpu: 100}
    max: {cpu: 100}
    children:
      - {name: Department-a, min: {cpu: 60}, max: {cpu: 100}, namespaces: [user-a, user-b]}
      - {name: Department-b, min: {cpu: 40}, max: {cpu: 100}, namespaces: [user-c]}
"""


def job_yaml(name: str = "", namespace: str = "user-a", cpu: int = 10, annotations: str = "",
             generate: str = "") -> str:
    meta = f"name: {name}" if name else f"generateName: {generate or 'pi-'}"
    return f"""
apiVersion: batch/v1
kind: Job
metadata:
  {meta}
  namespace: {namespace}
  {annotations}
spec:
  template:
    spec:
      containers:
        - name: c
          resources: {{requests: {{cpu: {cpu}}}}}
"""


def scenario(*docs: str) -> str:
    return "\n---\n".join([TREE, *docs])


@pytest.mark.parametrize(
    ("text", "micros"),
    [
        ("0s", 0),
        ("60s", 60_000_000),
        ("200ms", 200_000),
        ("1m30s", 90_000_000),
        ("1.5h", 5_400_000_000),
        ("2d", 172_800_000_000),
        ("1h2m3.5s", 3_723_500_000),
        ("250us", 250),
        ("1500ns", 2),
        ("12", 12_000_000),
        (12, 12_000_000),
        (0.25, 250_000),
    ],
)
def test_durations_are_go_style_or_seconds(text: object, micros: int) -> None:
    assert parse_duration(text) == micros


@pytest.mark.parametrize("text", ["", "ten seconds", "5 s", "-1s", "1s2", True, None, -3])
def test_a_bad_duration_says_how_to_write_one(text: object) -> None:
    with pytest.raises(ScenarioError, match=r"duration"):
        parse_duration(text, "at")


def test_run_for_forever_and_duration_display() -> None:
    assert parse_run_for(None, "x") is None
    assert parse_run_for("forever", "x") is None
    assert parse_run_for("5s", "x") == 5_000_000
    assert [format_duration(m) for m in (None, 0, 1_500_000, 90_000_000, 3_723_500_000)] == [
        "forever", "0s", "1.5s", "1m30s", "1h2m3.5s"]


def test_annotations_time_a_job_and_copies_get_sequential_generated_names() -> None:
    annotations = ('annotations: {sim.kube-queue.x-k8s.io/submit-at: "2s", sim.kube-queue.x-k8s.io/run-for: "30s", '
                   'sim.kube-queue.x-k8s.io/count: "3", sim.kube-queue.x-k8s.io/every: "500ms", keep: "me"}')
    loaded = scenario_from_text(scenario(job_yaml(annotations=annotations), job_yaml(name="solo", namespace="user-c")))
    names = [(s.namespace, s.name, s.at, s.run_for) for s in loaded.submissions]
    assert names == [
        ("user-c", "solo", 0, None),
        ("user-a", "pi-00001", 2_000_000, 30_000_000),
        ("user-a", "pi-00002", 2_500_000, 30_000_000),
        ("user-a", "pi-00003", 3_000_000, 30_000_000),
    ]
    obj = loaded.submissions[1].obj
    assert annotations_of(obj) == {"keep": "me"}, "only the simulator's annotations are dropped"
    assert "generateName" not in meta(obj)
    assert loaded.submissions[0].leaf == "department-b"


def test_the_simulator_still_reads_the_annotations_and_group_of_an_earlier_release() -> None:
    # sim.kube-queue.io was the group before every name moved under kube-queue.x-k8s.io (docs/architecture.md).
    annotations = ('annotations: {sim.kube-queue.io/submit-at: "2s", sim.kube-queue.io/count: "2", '
                   'sim.kube-queue.io/run-for: "1s", sim.kube-queue.x-k8s.io/run-for: "30s", keep: "me"}')
    settings = "apiVersion: sim.kube-queue.io/v1alpha1\nkind: Scenario\nspec: {oversellrate: 1}"
    loaded = scenario_from_text("\n---\n".join([settings, TREE, job_yaml(annotations=annotations)]))
    assert [(s.name, s.at, s.run_for) for s in loaded.submissions] == [
        ("pi-00001", 2_000_000, 30_000_000), ("pi-00002", 2_000_000, 30_000_000)], "the current name wins"
    assert loaded.oversell_rate == 1
    assert annotations_of(loaded.submissions[0].obj) == {"keep": "me"}


def test_the_scenario_document_holds_settings_nodes_and_wrapped_jobs(tmp_path: Path) -> None:
    (tmp_path / "tree.yaml").write_text(TREE)
    (tmp_path / "jobs").mkdir()
    run_for = 'annotations: {sim.kube-queue.x-k8s.io/run-for: "9s"}'
    (tmp_path / "jobs" / "pi.yaml").write_text(job_yaml(annotations=run_for))
    text = """
apiVersion: sim.kube-queue.x-k8s.io/v1alpha1
kind: Scenario
metadata: {name: mine}
spec:
  oversellrate: 1.5
  strictPriority: false
  queuePolicy: Round
  queuePolicies: {department-b: Block}
  until: 10m
  nodes:
    - {name: ecs, count: 2, cpu: 32, memory: 128Gi, pods: 110}
    - {name: gpu, count: 1, cpu: 8, nvidia.com/gpu: 4}
  include: [tree.yaml]
  jobs:
    - {file: jobs/pi.yaml, at: 1s, count: 2, every: 1s}
    - {file: jobs/pi.yaml, runFor: forever}
"""
    loaded = scenario_from_text(text, base=tmp_path)
    assert loaded.name == "mine"
    assert loaded.oversell_rate == Fraction(3, 2)
    assert loaded.until == 600_000_000
    assert [(n.name, n.count) for n in loaded.nodes] == [("ecs", 2), ("gpu", 1)]
    assert loaded.nodes[1].allocatable == Resources.of(cpu=8, gpu=4)
    assert [(s.name, s.at, s.run_for) for s in loaded.submissions] == [
        ("pi-00003", 0, None), ("pi-00001", 1_000_000, 9_000_000), ("pi-00002", 2_000_000, 9_000_000)]
    policies = {name: spec_of(queue)["queuePolicy"] for name, queue in loaded.queues.items()}
    assert policies == {"root-department-a-user-a": "Round", "root-department-a-user-b": "Round",
                        "root-department-b-user-c": "Block"}
    assert Policy.parse(str(policies["root-department-b-user-c"])) is Policy.BLOCK


def test_queue_and_priority_class_documents_count_as_in_the_cluster() -> None:
    loaded = scenario_from_text(scenario(
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: high}\nvalue: 1000",
        "apiVersion: scheduling.x-k8s.io/v1alpha1\nkind: Queue\nmetadata: {name: root-department-a-user-a}\n"
        "spec: {queuePolicy: Block}",
        "apiVersion: v1\nkind: Namespace\nmetadata: {name: user-a}",
    ))
    assert loaded.priority_classes == {"high": 1000}
    assert spec_of(loaded.queues["root-department-a-user-a"])["queuePolicy"] == "Block"
    assert loaded.oversell_rate == 2, "the controller's default"


def test_a_pytorchjob_is_sized_by_its_adapter() -> None:
    manifest: dict[str, Any] = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "train", "namespace": "user-b"},
        "spec": {"pytorchReplicaSpecs": {
            "Master": {"replicas": 1, "template": {"spec": {"containers": [
                {"name": "pytorch", "resources": {"requests": {"cpu": "2"}}}]}}},
            "Worker": {"replicas": 3, "template": {"spec": {"containers": [
                {"name": "pytorch", "resources": {"limits": {"cpu": "2"}}}]}}},
        }},
    }
    import yaml  # noqa: PLC0415

    loaded = scenario_from_objects([*yaml.safe_load_all(TREE), manifest])
    submission = loaded.submissions[0]
    assert submission.adapter.kind == "PyTorchJob"
    workload = submission.adapter.to_workload(submission.obj, "Department-a", {})
    # Each worker also gets the training operator's init container (10Mi requested: docs/job-kinds.md).
    assert workload.request == Resources.of(cpu=8, memory="30Mi")


def test_a_scenario_needs_exactly_one_tree() -> None:
    with pytest.raises(ScenarioError, match=r"exactly one ElasticQuotaTree document \(found: none\)"):
        scenario_from_text(job_yaml())
    with pytest.raises(ScenarioError, match=r"exactly one ElasticQuotaTree document \(found: scenario#1, scenario#2\)"):
        scenario_from_text(scenario(TREE))


SETTINGS = "apiVersion: sim.kube-queue.x-k8s.io/v1alpha1\nkind: Scenario\nspec: "


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (job_yaml(namespace="elsewhere"), "namespace 'elsewhere' is in no leaf of the ElasticQuotaTree"),
        (job_yaml(name="x") + "\n---\n" + job_yaml(name="x"), "Job user-a/x is already submitted by scenario#2"),
        (job_yaml(name="x", annotations='annotations: {sim.kube-queue.x-k8s.io/count: "2"}'),
         "2 copies cannot share the name 'x'; use generateName instead"),
        (job_yaml(annotations='annotations: {sim.kube-queue.x-k8s.io/submit-at: "soon"}'),
         "submit time: 'soon' is not"),
        (job_yaml().replace("cpu: 10", "cpu: ten"), "cannot size Job user-a/pi-00001"),
        (SETTINGS + "{oversell: 1}", "unknown setting(s) oversell; known:"),
        (SETTINGS + "{oversellrate: 0}", "oversellrate must be positive"),
        (SETTINGS + "{queuePolicies: {root: Block}}", "queuePolicies names 'root', which is not a leaf of the tree"),
        (SETTINGS + "{queuePolicy: Fifo}", "unknown queuePolicy 'Fifo'"),
        (SETTINGS + "{jobs: [{at: 1s}]}", "give exactly one of file (a YAML path) and manifest"),
        (SETTINGS + "{jobs: [{manifest: {kind: Job}, every: 1s, later: 2s}]}", "unknown field(s) later"),
        (SETTINGS + "{nodes: [{count: 2}]}", "give the node's allocatable resources"),
        (SETTINGS + "{strictPriority: yes please}", "strictPriority must be true or false"),
        (SETTINGS + "{}\n---\n" + SETTINGS + "{}", "a second Scenario document (the first is scenario#2)"),
        ("kind: Deployment\napiVersion: apps/v1\nmetadata: {name: d}", "kind 'Deployment' (apps) is neither"),
        ("just text", "expected a Kubernetes object"),
    ],
)
def test_scenario_errors_name_the_document_and_the_fix(doc: str, message: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        scenario_from_text(scenario(doc))
    assert message in str(caught.value)


def test_an_invalid_tree_is_refused_with_its_violations() -> None:
    with pytest.raises(ScenarioError, match=r"the ElasticQuotaTree is invalid: .*min-le-max"):
        scenario_from_text(TREE.replace("min: {cpu: 60}", "min: {cpu: 160}"))


def test_a_missing_include_names_the_file(tmp_path: Path) -> None:
    text = "apiVersion: sim.kube-queue.x-k8s.io/v1alpha1\nkind: Scenario\nspec: {include: [nowhere.yaml]}"
    with pytest.raises(ScenarioError, match=r"cannot read scenario file .*nowhere.yaml"):
        scenario_from_text(text, base=tmp_path)


@pytest.mark.parametrize(
    ("manifest", "request_"),
    [
        ({"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow", "metadata": {"name": "wf", "namespace": "user-b"},
          "spec": {"entrypoint": "main", "templates": [
              {"name": "main", "steps": [[{"name": "a", "template": "w", "withItems": [1, 2]}]]},
              {"name": "w", "container": {"resources": {"requests": {"cpu": "3"}}}}]}},
         Resources.of(cpu=6)),
        ({"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
          "metadata": {"name": "sp", "namespace": "user-b"},
          "spec": {"type": "Scala", "driver": {"cores": 1, "memory": "1g"},
                   "executor": {"cores": 1, "memory": "1g", "instances": 3}}},
         Resources.of(cpu=4, memory="5632Mi")),
    ],
)
def test_templateless_kinds_are_sized_by_their_adapters_in_the_simulator(
    manifest: dict[str, Any], request_: Resources
) -> None:
    import yaml  # noqa: PLC0415

    loaded = scenario_from_objects([*yaml.safe_load_all(TREE), manifest])
    submission = loaded.submissions[0]
    assert submission.adapter.kind == manifest["kind"]
    assert submission.adapter.to_workload(submission.obj, "Department-a", {}).request == request_
