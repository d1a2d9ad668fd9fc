"""Every operator-run kind through the queue, with its genuine operator on the dev cluster (docs/job-kinds.md):
the Kubeflow training operator (PyTorchJob, TFJob, XGBoostJob, PaddleJob), the MPI Operator (MPIJob v2beta1),
KubeRay (RayJob, RayCluster), JobSet's controller (JobSet) and Argo's workflow-controller (Workflow), submitted
by ``alice``
(``edit`` plus the kinds' rights in her namespaces). SparkApplication has no operator here: it is held, sized and
admitted, and nothing runs it.

One set-up for the module: two leaves (``Team-a`` and ``Team-b``, each min 20 / max 40 CPU, root 40) over fresh
namespaces, the service at ``--oversellrate=1`` with a 12 s start timeout. Each test deletes its jobs.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import DevCluster
from tests.e2e.harness import create_namespaces, edit_kubeconfig, installed_tree, kq_as, unique, wait_managed
from tests.e2e.kinds import (
    KINDS,
    REPLICATED,
    SUBMITTER_CPU,
    alice_role,
    manifest,
    spark_application,
    suspended,
    workflow,
)
from webhook.admission.policies import PODS_GUARD
from webhook.admission.state import DEFAULT_CONTROLLER_USER
from webhook.api.names import (
    ADMISSION_ANNOTATION,
    ADMISSION_GATE,
    BACKOFF_ANNOTATION,
    EVICTION_ANNOTATION,
    PARENT_ANNOTATION,
    QUOTA_LABEL,
)
from webhook.devcluster.operators import OPERATORS

pytestmark = pytest.mark.e2e

TIMEOUT = 12


@dataclasses.dataclass
class Setup:
    dev: DevCluster
    a: str
    b: str

    def get(self, kind: str, name: str, namespace: str) -> dict[str, Any]:
        result: dict[str, Any] = self.dev.get_json(KINDS[kind].resource, name, "-n", namespace)
        return result

    def exists(self, kind: str, name: str, namespace: str) -> bool:
        return self.dev.kubectl_result("get", KINDS[kind].resource, name, "-n", namespace).returncode == 0

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        result = self.dev.create(obj, user="alice")
        assert result.returncode == 0, result.stderr
        created: dict[str, Any] = json.loads(result.stdout)
        return created

    def pods(self, namespace: str, prefix: str) -> list[dict[str, Any]]:
        items = self.dev.get_json("pods", "-n", namespace)["items"]
        return [pod for pod in items if pod["metadata"]["name"].startswith(prefix + "-")
                and not pod["metadata"].get("deletionTimestamp")]

    def running(self, namespace: str, prefix: str) -> int:
        return sum(1 for pod in self.pods(namespace, prefix)
                   if pod["status"].get("phase") == "Running" and pod["spec"].get("nodeName"))

    def used_cpu(self, leaf: str) -> float:
        status = self.dev.get_json("eqtree", "elasticquotatree", "-n", "kube-system").get("status", {})
        node: dict[str, Any] = next((c for c in status.get("root", {}).get("children", []) if c["name"] == leaf), {})
        return _cpu(node.get("used", {}).get("cpu", "0"))

    def active(self, leaf: str, namespace: str) -> list[tuple[str, int]]:
        queue = self.dev.get_json("queue", f"root-{leaf.lower()}-{namespace}", "-n", "kube-queue")
        items = queue.get("status", {}).get("queueItemDetails", {}).get("active", [])
        return [(item["name"], item["position"]) for item in items]

    def condition(self, kind: str, name: str, namespace: str, condition_type: str) -> bool:
        """Whether the job's operator has set its condition ``condition_type`` to True."""
        conditions = self.get(kind, name, namespace).get("status", {}).get("conditions", [])
        return any(c["type"] == condition_type and c["status"] == "True" for c in conditions)

    def listed(self, kubeconfig: Path, name: str, namespace: str) -> tuple[str, str]:
        """``(kind, status)`` of the job as ``kq list -o json`` shows it to the user of ``kubeconfig``."""
        result = kq_as(kubeconfig, "list", "-o", "json", "-n", namespace)
        assert result.returncode == 0, result.stderr
        (item,) = [item for item in json.loads(result.stdout)["items"] if item["name"] == name]
        return item["kind"], item["status"]

    def delete(self, kind: str, *names: str, namespace: str) -> None:
        self.dev.kubectl("delete", KINDS[kind].resource, *names, "-n", namespace, "--wait=false",
                         "--ignore-not-found")


def _cpu(text: str) -> float:
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


def _spec(a: str, b: str) -> dict[str, Any]:
    return {
        "root": {
            "name": "root", "min": {"cpu": 40}, "max": {"cpu": 40},
            "children": [
                {"name": "Team-a", "min": {"cpu": 20}, "max": {"cpu": 40}, "namespaces": [a]},
                {"name": "Team-b", "min": {"cpu": 20}, "max": {"cpu": 40}, "namespaces": [b]},
            ],
        }
    }


@pytest.fixture(scope="module")
def setup(dev_cluster: DevCluster) -> Iterator[Setup]:
    dev = dev_cluster
    a, b = unique("kinds-a"), unique("kinds-b")
    dev.restart_service("--oversellrate=1", "--status-interval=1", f"--start-timeout={TIMEOUT}s",
                        "--backoff-base=6s", "--backoff-max=12s")
    try:
        create_namespaces(dev, a, b)
        dev.apply([*alice_role(a), *alice_role(b)])
        with installed_tree(dev, _spec(a, b)):
            wait_managed(dev, a, b)
            yield Setup(dev, a, b)
            for namespace in (a, b):
                for kind in KINDS.values():
                    dev.kubectl("delete", kind.resource, "--all", "-n", namespace, "--wait=false", check=False)
    finally:
        dev.kubectl("delete", "namespace", a, b, "--wait=false", "--ignore-not-found")
        dev.restart_service()


def _expected_pods(kind: str, pods: int) -> int:
    return pods + 1 if kind == "RayJob" else pods  # KubeRay's submitter pod


def test_every_kind_is_held_run_by_its_operator_counted_once_and_freed(setup: Setup) -> None:
    """All the kinds at once (two pods of 2 CPU each, 32.5 CPU of Team-a's 40), each judged on its own."""
    dev, ns = setup.dev, setup.a
    names = {kind: f"run-{kind.lower()}" for kind in REPLICATED}
    requests = {kind: 4 + (SUBMITTER_CPU if kind == "RayJob" else 0) for kind in REPLICATED}
    for kind, name in names.items():
        created = setup.create(manifest(kind, name, ns, pods=2, cpu=2))
        assert suspended(created), f"{kind} held at creation although alice wrote suspend: false"
        assert created["metadata"]["labels"][QUOTA_LABEL] == "Team-a", kind

    for kind, name in names.items():
        expected = _expected_pods(kind, 2)

        def admitted(k: str = kind, n: str = name) -> bool:
            return not suspended(setup.get(k, n, ns))

        def all_running(n: str = name, e: int = expected) -> bool:
            return setup.running(ns, n) == e

        dev.wait_until(admitted, 60, f"{kind} {name} admitted")
        record = json.loads(setup.get(kind, name, ns)["metadata"]["annotations"][ADMISSION_ANNOTATION])
        assert _cpu(record["request"]["cpu"]) == requests[kind], (kind, record)  # sized as its pods will be
        dev.wait_until(all_running, 90, f"{expected} pods of {kind} {name} Running (created by its operator)")
        pods = setup.pods(ns, name)
        assert len(pods) == expected, kind
        assert all(pod["metadata"]["labels"].get(QUOTA_LABEL) == "Team-a" for pod in pods), kind
        assert not any(pod["spec"].get("schedulingGates") for pod in pods), f"{kind}'s pods are not held again"
    # Counted once: the leaf uses exactly the jobs' requests, not the jobs and their pods too.
    total = sum(requests.values())
    dev.wait_until(lambda: setup.used_cpu("Team-a") == total, 30, f"Team-a using {total} CPU")

    for kind, name in names.items():
        setup.delete(kind, name, namespace=ns)
    dev.wait_until(lambda: setup.used_cpu("Team-a") == 0, 60, "Team-a's quota freed")
    for kind, name in names.items():

        def gone(n: str = name) -> bool:
            return not setup.pods(ns, n)

        dev.wait_until(gone, 60, f"{kind} {name}'s pods gone")


@pytest.mark.parametrize(("first", "second"), [("PyTorchJob", "TFJob"), ("RayJob", "XGBoostJob")])
def test_a_second_job_waits_at_its_position_and_runs_when_the_first_is_deleted(
    setup: Setup, first: str, second: str
) -> None:
    dev, ns = setup.dev, setup.a
    one, two = f"first-{first.lower()}", f"second-{second.lower()}"
    setup.create(manifest(first, one, ns, pods=2, cpu=10))
    dev.wait_until(lambda: setup.running(ns, one) == _expected_pods(first, 2), 90, f"{one} running")
    setup.create(manifest(second, two, ns, pods=3, cpu=10))  # 20 + 30 > Team-a's 40
    dev.wait_until(lambda: setup.active("Team-a", ns) == [(two, 1)], 60, f"{two} waiting at position 1")
    assert suspended(setup.get(second, two, ns)) and not setup.pods(ns, two)
    setup.delete(first, one, namespace=ns)
    dev.wait_until(lambda: setup.running(ns, two) == 3, 90, f"{two} running once {one} is gone")
    setup.delete(second, two, namespace=ns)
    dev.wait_until(lambda: setup.used_cpu("Team-a") == 0, 60, "Team-a's quota freed")


@pytest.mark.parametrize(
    ("victim", "reclaimer"), [("MPIJob", "PyTorchJob"), ("RayJob", "MPIJob"), ("JobSet", "TFJob")]
)
def test_reclaim_suspends_a_borrowing_job_its_operator_removes_its_pods_and_it_requeues(
    setup: Setup, victim: str, reclaimer: str
) -> None:
    dev = setup.dev
    keeper, borrower, owner = "keeper", f"borrow-{victim.lower()}", f"owner-{reclaimer.lower()}"
    setup.create(manifest("TFJob", keeper, setup.b, pods=2, cpu=10))  # Team-b's min 20, never reclaimed
    dev.wait_until(lambda: setup.running(setup.b, keeper) == 2, 90, f"{keeper} running")
    setup.create(manifest(victim, borrower, setup.b, pods=2, cpu=9))  # 18 more: borrowed from Team-a's min
    dev.wait_until(lambda: setup.running(setup.b, borrower) == _expected_pods(victim, 2), 90, f"{borrower} running")
    setup.create(manifest(reclaimer, owner, setup.a, pods=2, cpu=5))  # within Team-a's min; the root is full
    dev.wait_until(lambda: setup.running(setup.a, owner) == _expected_pods(reclaimer, 2), 120,
                   f"{owner} running on what Team-b borrowed")
    evicted = setup.get(victim, borrower, setup.b)
    assert suspended(evicted), "evicted: held again, not deleted"
    note = json.loads(evicted["metadata"]["annotations"][EVICTION_ANNOTATION])
    assert note["by"] == f"{reclaimer}/{setup.a}/{owner}"
    dev.wait_until(lambda: not setup.pods(setup.b, borrower), 60, f"the operator removed {borrower}'s pods")
    dev.wait_until(lambda: setup.active("Team-b", setup.b) == [(borrower, 1)], 60, f"{borrower} requeued at 1")
    assert setup.running(setup.b, keeper) == 2, "Team-b keeps its min"
    setup.delete(reclaimer, owner, namespace=setup.a)
    setup.delete(victim, borrower, namespace=setup.b)
    setup.delete("TFJob", keeper, namespace=setup.b)
    dev.wait_until(lambda: setup.used_cpu("Team-a") == 0 and setup.used_cpu("Team-b") == 0, 60, "quotas freed")


@pytest.mark.parametrize("kind", ["PyTorchJob", "RayCluster", "JobSet"])
def test_a_gang_that_cannot_all_start_is_backed_off_and_its_pods_go(setup: Setup, kind: str) -> None:
    dev, ns = setup.dev, setup.a
    name = f"gang-{kind.lower()}"
    setup.create(manifest(kind, name, ns, pods=3, cpu=2, nodeSelector={"kube-queue.test/no-such-node": "true"}))
    dev.wait_until(lambda: setup.running(ns, name) == 1 and len(setup.pods(ns, name)) == 3, 60,
                   f"{name}: its first pod runs, the others cannot")

    def backed_off() -> dict[str, Any] | None:
        raw = setup.get(kind, name, ns)["metadata"].get("annotations", {}).get(BACKOFF_ANNOTATION)
        return json.loads(raw) if raw else None

    dev.wait_until(lambda: backed_off() is not None, TIMEOUT + 40, f"{name} backed off")
    note = backed_off()
    assert note is not None and note["category"] == "PartialStart", note
    assert suspended(setup.get(kind, name, ns))
    dev.wait_until(lambda: not setup.pods(ns, name), 60, f"the operator removed {name}'s pods")
    dev.wait_until(lambda: setup.used_cpu("Team-a") == 0, 30, "its quota given back")
    setup.delete(kind, name, namespace=ns)


def test_a_developer_submits_a_jobset_with_kq_it_runs_to_its_end_and_kq_reads_its_pods(
    setup: Setup,
) -> None:
    """A namespace user (``edit`` and the kinds' Role) runs ``kq submit jobset``: held and queued, then JobSet's
    controller runs its three Jobs; ``kq logs --all`` finds their pods through the Jobs; the JobSet completes
    (its pods succeed after 20 s) and ``kq list`` says so, its quota freed."""
    dev, ns = setup.dev, setup.a
    kubeconfig = edit_kubeconfig(dev, ns, "trainer")
    dev.kubectl("create", "rolebinding", "trainer-job-kinds", "-n", ns, "--role=job-kinds",
                f"--serviceaccount={ns}:trainer")
    submitted = kq_as(kubeconfig, "submit", "jobset", "--name", "kq-js", "--cpu", "2", "--memory", "1Gi",
                      "--workers", "3", "--annotation", "dev.kube-queue.x-k8s.io/succeed-after=20s", "-n", ns)
    assert submitted.returncode == 0, submitted.stderr
    assert "queued: quota root/Team-a" in submitted.stdout, submitted.stdout
    dev.wait_until(lambda: setup.running(ns, "kq-js") == 3, 90, "kq-js's three pods running")
    logs = kq_as(kubeconfig, "logs", "kq-js", "--all", "--tail", "1", "-n", ns)
    assert logs.returncode == 0, logs.stderr
    pods = sorted(line.split("]")[0].strip("[").rsplit("-", 1)[0] for line in logs.stdout.splitlines())
    assert pods == ["kq-js-leader-0-0", "kq-js-workers-0-0", "kq-js-workers-1-0"], logs.stdout
    dev.wait_until(lambda: setup.condition("JobSet", "kq-js", ns, "Completed"), 90,
                   "kq-js Completed by JobSet's controller")
    dev.wait_until(lambda: setup.used_cpu("Team-a") == 0, 60, "Team-a's quota freed")
    assert setup.listed(kubeconfig, "kq-js", ns) == ("JobSet", "SUCCEEDED")
    setup.delete("JobSet", "kq-js", namespace=ns)


def test_alice_cannot_pass_her_objects_off_as_an_operators(setup: Setup) -> None:
    dev, ns = setup.dev, setup.a
    setup.create(manifest("PyTorchJob", "real", ns, pods=1, cpu=1))
    dev.wait_until(lambda: setup.running(ns, "real") == 1, 60, "real running")
    job = setup.get("PyTorchJob", "real", ns)
    owner = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "real", "uid": job["metadata"]["uid"],
             "controller": True}
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "real-forged-0", "namespace": ns, "ownerReferences": [owner]},
           "spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "10"}}}]}}
    forged = setup.create(pod)
    assert any(gate["name"] == ADMISSION_GATE for gate in forged["spec"].get("schedulingGates", [])), (
        "a pod alice makes is held like a bare Pod, whatever owner it names")

    setup.create(manifest("RayJob", "rj", ns, pods=1, cpu=1))
    rayjob = setup.get("RayJob", "rj", ns)
    cluster = manifest("RayCluster", "rj-mine", ns, pods=1, cpu=1)
    cluster["metadata"]["ownerReferences"] = [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "rj",
                                               "uid": rayjob["metadata"]["uid"], "controller": True}]
    cluster["metadata"]["annotations"] = {PARENT_ANNOTATION: "RayJob/rj"}
    mine = setup.create(cluster)
    assert mine["spec"]["suspend"] is True, "alice's RayCluster naming her RayJob is queued on its own"
    assert PARENT_ANNOTATION not in mine["metadata"].get("annotations", {}), "the mark is kube-queue's only"
    refused = dev.kubectl_result("annotate", "rayclusters.ray.io", "rj-mine", "-n", ns,
                                 f"{PARENT_ANNOTATION}=RayJob/rj", user="alice")
    assert refused.returncode != 0
    dev.kubectl("delete", "pod", "real-forged-0", "-n", ns, "--wait=false")
    setup.delete("RayCluster", "rj-mine", namespace=ns)
    setup.delete("RayJob", "rj", namespace=ns)
    setup.delete("PyTorchJob", "real", namespace=ns)
    dev.wait_until(lambda: setup.used_cpu("Team-a") == 0, 60, "Team-a's quota freed")


def test_no_operator_binds_a_pod_to_the_node_a_user_named(setup: Setup) -> None:
    """An operator copies what its job says into the pods it creates: a nodeName there binds them without the
    scheduler, whose extender keeps the quota's max, a ResourcePolicy's order and the virtual node's pod cap. Alice's
    jobs naming a node are refused at submission; one stored past the queue (before the rule, or by an identity no
    hook reads) gets each of its pods refused by the pod guard, the operator's own identity notwithstanding."""
    dev, ns = setup.dev, setup.a
    pinned = manifest("PyTorchJob", "pinned", ns, pods=2, cpu=1, nodeName="virtual-kubelet")
    refused = dev.create(pinned, user="alice")
    field = "spec.pytorchReplicaSpecs.Worker.template.spec.nodeName"
    assert refused.returncode != 0 and f"{field}: in a namespace under quota" in refused.stderr, refused.stderr
    patched = workflow("pinned-wf", ns, cpu=1, width=1)
    patched["spec"]["podSpecPatch"] = json.dumps({"nodeName": "ecs-0"})
    refused = dev.create(patched, user="alice")
    assert refused.returncode != 0 and "spec.podSpecPatch: in a namespace under quota" in refused.stderr, (
        refused.stderr)

    writer = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
              "metadata": {"name": "write-pytorchjobs", "namespace": ns},
              "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "job-kinds"},
              "subjects": [{"kind": "User", "name": DEFAULT_CONTROLLER_USER, "apiGroup": "rbac.authorization.k8s.io"}]}
    dev.apply([writer])
    try:
        stored = dev.create(pinned, user=DEFAULT_CONTROLLER_USER)  # no hook reads kube-queue's own writes
        assert stored.returncode == 0, stored.stderr
    finally:
        dev.kubectl("delete", "rolebinding", "write-pytorchjobs", "-n", ns, "--ignore-not-found")

    def refused_by_the_guard() -> bool:
        events = dev.get_json("events", "-n", ns, "--field-selector", "involvedObject.name=pinned")["items"]
        return any(event["reason"] == "FailedCreatePod" and PODS_GUARD in event["message"]
                   and "spec.nodeName: a Pod in a namespace under quota" in event["message"] for event in events)

    dev.wait_until(refused_by_the_guard, 60, "the training operator's bound pod refused by the pod guard")
    assert all(pod["spec"].get("nodeName") != "virtual-kubelet" for pod in setup.pods(ns, "pinned"))
    setup.delete("PyTorchJob", "pinned", namespace=ns)
    dev.wait_until(lambda: not setup.pods(ns, "pinned"), 60, "pinned's pods gone")


def test_a_workflow_is_held_sized_by_its_widest_step_run_by_argo_counted_once_and_finishes(setup: Setup) -> None:
    dev, ns = setup.dev, setup.a
    created = setup.create(workflow("wf", ns, cpu=2, width=3))
    assert suspended(created) and created["spec"]["podMetadata"]["labels"][QUOTA_LABEL] == "Team-a"
    dev.wait_until(lambda: not suspended(setup.get("Workflow", "wf", ns)), 60, "the workflow admitted")
    record = json.loads(setup.get("Workflow", "wf", ns)["metadata"]["annotations"][ADMISSION_ANNOTATION])
    assert _cpu(record["request"]["cpu"]) == 6, record  # its widest step: three pods of 2 CPU at once
    dev.wait_until(lambda: setup.running(ns, "wf") == 3, 90, "the three pods of the wide step Running")
    pods = setup.pods(ns, "wf")
    assert all(pod["metadata"]["labels"].get(QUOTA_LABEL) == "Team-a" for pod in pods)
    assert all(pod["metadata"]["ownerReferences"][0]["kind"] == "Workflow" for pod in pods)
    assert setup.used_cpu("Team-a") == 6, "counted once: the workflow, not also its pods"
    dev.wait_until(lambda: setup.get("Workflow", "wf", ns).get("status", {}).get("phase") == "Succeeded", 120,
                   "the workflow Succeeded (its pods succeed on the dev cluster, nothing reports outputs)")
    dev.wait_until(lambda: setup.used_cpu("Team-a") == 0, 60, "a finished workflow frees its quota")
    setup.delete("Workflow", "wf", namespace=ns)


def test_a_workflow_is_sized_as_argo_patches_its_pods(setup: Setup) -> None:
    """A podSpecPatch raises what each step pod asks and names a RuntimeClass with a pod overhead: the queue sizes
    the workflow as Argo and the API server make the pods, so the quota counts what they use (before, the
    workflow counted its templates' 1 CPU a pod)."""
    dev, ns = setup.dev, setup.a
    runtime = unique("kata")
    dev.apply({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": runtime},
               "handler": "kata", "overhead": {"podFixed": {"cpu": "500m", "memory": "128Mi"}}})
    patched = workflow("patched", ns, cpu=1, width=2)
    patched["spec"]["podSpecPatch"] = json.dumps({"runtimeClassName": runtime, "containers": [
        {"name": "main", "resources": {"requests": {"cpu": "3", "memory": "1Gi"}}}]})
    try:
        setup.create(patched)
        dev.wait_until(lambda: not suspended(setup.get("Workflow", "patched", ns)), 60, "the workflow admitted")
        record = json.loads(setup.get("Workflow", "patched", ns)["metadata"]["annotations"][ADMISSION_ANNOTATION])
        assert _cpu(record["request"]["cpu"]) == 7, record  # the wide step: two pods of 3 CPU + 0.5 overhead
        dev.wait_until(lambda: setup.running(ns, "patched") == 2, 90, "the two pods of the wide step Running")
        for pod in setup.pods(ns, "patched"):  # what Argo and the API server made of the patch
            main = next(c for c in pod["spec"]["containers"] if c["name"] == "main")
            assert _cpu(main["resources"]["requests"]["cpu"]) == 3, main
            assert pod["spec"]["overhead"]["cpu"] == "500m", pod["spec"]
        assert setup.used_cpu("Team-a") == 7
    finally:
        setup.delete("Workflow", "patched", namespace=ns)
        dev.wait_until(lambda: setup.used_cpu("Team-a") == 0, 60, "Team-a's quota freed")
        dev.kubectl("delete", "runtimeclass", runtime, "--ignore-not-found")


def test_a_second_workflow_waits_for_the_declared_size_of_the_first(setup: Setup) -> None:
    dev, ns = setup.dev, setup.a
    setup.create(workflow("big", ns, cpu=1, width=1, succeed_after="8s", declared='{"cpu": "30"}'))
    dev.wait_until(lambda: setup.running(ns, "big") == 1, 60, "big running")
    setup.create(workflow("next", ns, cpu=1, width=1, declared="cpu: 20"))  # 30 + 20 > Team-a's 40
    dev.wait_until(lambda: setup.active("Team-a", ns) == [("next", 1)], 60, "next waiting at position 1")
    dev.wait_until(lambda: not suspended(setup.get("Workflow", "next", ns)), 120, "next admitted once big ends")
    setup.delete("Workflow", "big", "next", namespace=ns)


def test_a_spark_application_is_held_sized_and_admitted_with_no_operator_to_run_it(setup: Setup) -> None:
    dev, ns = setup.dev, setup.a
    first = setup.create(spark_application("spark-one", ns, executors=4))
    assert suspended(first) and first["spec"]["driver"]["labels"][QUOTA_LABEL] == "Team-a"
    dev.wait_until(lambda: not suspended(setup.get("SparkApplication", "spark-one", ns)), 60, "spark-one admitted")
    record = json.loads(setup.get("SparkApplication", "spark-one", ns)["metadata"]["annotations"][
        ADMISSION_ANNOTATION])
    assert record["request"] == {"cpu": "9", "memory": "10624Mi"}  # driver 1 / 896Mi, 4 x (2 / 2432Mi)
    setup.create(spark_application("spark-two", ns, executors=16))  # 9 + 33 > 40
    dev.wait_until(lambda: setup.active("Team-a", ns) == [("spark-two", 1)], 60, "spark-two at position 1")
    assert not setup.pods(ns, "spark-one"), "no Spark operator runs on the dev cluster"
    setup.delete("SparkApplication", "spark-one", "spark-two", namespace=ns)
    dev.wait_until(lambda: setup.used_cpu("Team-a") == 0, 60, "Team-a's quota freed")


def test_each_operator_runs_under_its_own_least_privilege_identity(setup: Setup) -> None:
    dev = setup.dev

    def can(user: str, *args: str) -> str:
        return dev.kubectl_result("auth", "can-i", *args, "--as", user).stdout.strip()

    identities = {
        "system:serviceaccount:kubeflow:training-operator": ("create", "pods", "-n", setup.a),
        "system:serviceaccount:kuberay-system:kuberay-operator": ("create", "rayclusters.ray.io", "-n", setup.a),
        "system:serviceaccount:argo:argo": ("create", "pods", "-n", setup.a),
        "system:serviceaccount:jobset-system:jobset-controller-manager": ("create", "jobs.batch", "-n", setup.a),
        "system:serviceaccount:mpi-operator:mpi-operator": ("create", "pods", "-n", setup.a),
    }
    for user, needed in identities.items():
        assert can(user, "*", "*") == "no", f"{user} is not cluster-admin"
        assert can(user, *needed) == "yes", f"{user} may do what its own manifests grant"
        assert can(user, "patch", "elasticquotatrees.scheduling.sigs.k8s.io", "-n", "kube-system") == "no"
    for name in OPERATORS:
        config = json.loads((dev.config.state_dir / "operators" / name / "kubeconfig").read_text())
        assert set(config["users"][0]["user"]) == {"token"}, f"{name} runs with a ServiceAccount token"


def test_an_mpijob_waits_with_its_launcher_job_held_and_only_the_mpi_operator_resumes_it(
    setup: Setup, tmp_path: Path
) -> None:
    """MPIJob v2beta1 under the MPI Operator, written with ``kq submit mpijob --dry-run`` by a namespace user, its
    launcher made to succeed after 10 s, and submitted with ``kq submit -f``. While it waits, the operator has made
    its launcher Job, suspended and marked as queued with it, and no workers; alice's un-suspend of that Job is
    refused and points her at the MPIJob. Released, the operator resumes the launcher and makes the workers, all
    counted by the MPIJob's one admission. The launcher completes: the MPIJob Succeeds, its running workers are
    deleted (``cleanPodPolicy: Running``, which ``kq submit`` writes) and the quota is freed."""
    dev, ns = setup.dev, setup.a
    setup.create(manifest("PyTorchJob", "fill", ns, pods=2, cpu=18))  # 36 of Team-a's 40
    dev.wait_until(lambda: setup.running(ns, "fill") == 2, 90, "fill running")
    kubeconfig = edit_kubeconfig(dev, ns, "mpi-user")
    dev.kubectl("create", "rolebinding", "mpi-user-job-kinds", "-n", ns, "--role=job-kinds",
                f"--serviceaccount={ns}:mpi-user")
    written = kq_as(kubeconfig, "submit", "mpijob", "--name", "hvd", "--cpu", "2", "--workers", "2", "-n", ns,
                    "--dry-run", "--", "mpirun", "hostname")  # 1 + 2 x 2 = 5 CPU: waits behind fill
    assert written.returncode == 0, written.stderr
    mpijob = yaml.safe_load(written.stdout)
    launcher = mpijob["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]
    launcher.setdefault("metadata", {}).setdefault("annotations", {})["dev.kube-queue.x-k8s.io/succeed-after"] = "10s"
    (tmp_path / "hvd.yaml").write_text(yaml.safe_dump(mpijob))
    submitted = kq_as(kubeconfig, "submit", "mpijob", "-f", str(tmp_path / "hvd.yaml"), "-n", ns)
    assert submitted.returncode == 0, submitted.stderr

    def launcher_job() -> dict[str, Any] | None:
        found = dev.kubectl_result("get", "job", "hvd-launcher", "-n", ns, "-o", "json")
        return json.loads(found.stdout) if found.returncode == 0 else None

    dev.wait_until(lambda: launcher_job() is not None, 60, "the MPI Operator made hvd's launcher Job")
    job = launcher_job()
    assert job is not None and job["spec"]["suspend"] is True, "created held with its MPIJob"
    assert job["metadata"]["annotations"][PARENT_ANNOTATION] == "MPIJob/hvd"
    assert setup.active("Team-a", ns) == [("hvd", 1)] and not setup.pods(ns, "hvd"), "no workers while it waits"
    refused = dev.kubectl_result("patch", "job", "hvd-launcher", "-n", ns, "--type=merge",
                                 "-p", '{"spec":{"suspend":false}}', user="alice")
    assert refused.returncode != 0, "alice cannot start the launcher around the queue"
    assert "(queued with its MPIJob hvd)" in refused.stderr and f"kq why hvd -n {ns}" in refused.stderr
    assert launcher_job() is not None and bool(launcher_job()["spec"]["suspend"])  # type: ignore[index]

    setup.delete("PyTorchJob", "fill", namespace=ns)
    dev.wait_until(lambda: setup.running(ns, "hvd") == 3, 90, "hvd's launcher and two workers running")
    record = json.loads(setup.get("MPIJob", "hvd", ns)["metadata"]["annotations"][ADMISSION_ANNOTATION])
    assert _cpu(record["request"]["cpu"]) == 5, record
    dev.wait_until(lambda: setup.used_cpu("Team-a") == 5, 30, "Team-a using hvd's 5 CPU, counted once")
    dev.wait_until(lambda: setup.condition("MPIJob", "hvd", ns, "Succeeded"), 90,
                   "hvd Succeeded by the MPI Operator once its launcher completed")
    dev.wait_until(lambda: setup.running(ns, "hvd") == 0, 60, "hvd's workers deleted")
    dev.wait_until(lambda: setup.used_cpu("Team-a") == 0, 60, "Team-a's quota freed")
    assert setup.listed(kubeconfig, "hvd", ns) == ("MPIJob", "SUCCEEDED")
    setup.delete("MPIJob", "hvd", namespace=ns)
