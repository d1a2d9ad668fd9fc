"""A SparkApplication's executors made by Spark itself (docs/job-kinds.md, "Spark").

No Spark operator can be had here, but Spark can: its jars come from PyPI's pyspark
(``build-binaries.sh spark``), and Spark's own driver runs on this machine in client mode against the dev
cluster. The test plays the operator's one step: once the queue admits ``alice``'s application it creates the
driver pod, owned by the application, as the Kubeflow Spark operator's ServiceAccount would (a trusted pod
creator by default). Then Spark's driver, under the application's ServiceAccount of alice's namespace (which anyone with
``edit`` can run pods as), creates the executor pods. It asks for more than the application declares, as a
user's program can, and alice makes a pod of her own that names the driver as its owner. The webhook holds all
of them; the controller releases exactly the executors the admission counted, the quota counts the
application once, and a restarted controller releases no more. A second application builds its executors on a
template under a RuntimeClass with an overhead: it is counted with the overhead, and its executors run. A third
takes its executors' memory from ``spec.sparkConf``: it is counted at the size Spark makes them, and they run.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import DevCluster
from tests.e2e.harness import (
    create_namespaces,
    edit_kubeconfig,
    installed_tree,
    kq_as,
    passes_made,
    recorded_overhead,
    unique,
    wait_class_known,
    wait_managed,
    wait_routed,
)
from tests.e2e.harness import runtime_class as harness_runtime_class
from tests.e2e.kinds import alice_role, suspended
from webhook.api.names import ADMISSION_GATE, QUOTA_LABEL, REASON_HELD
from webhook.devcluster.kubeconfig import write_token_kubeconfig

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
OPERATOR = "system:serviceaccount:spark-operator:spark-operator-controller"
"""The Spark operator's identity as its own chart installs it (trusted by default: webhook/core/integrity.py)."""
EXECUTOR_CPU = 2
OVERHEAD = {"cpu": "1", "memory": "64Mi"}


def spark_home() -> Path:
    result = subprocess.run(["bash", str(ROOT / "webhook/devcluster/build-binaries.sh"), "spark"],
                            capture_output=True, text=True, check=True, timeout=900)
    return Path(result.stdout.strip().splitlines()[-1])


def _cpu(text: str) -> float:
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


class Spark:
    """Compiles the test's driver once and runs it as a ServiceAccount of the namespace."""

    def __init__(self, dev: DevCluster, namespace: str, work: Path) -> None:
        self.dev, self.namespace, self.work = dev, namespace, work
        self.jars = spark_home() / "jars"
        subprocess.run(["javac", "-cp", f"{self.jars}/*", "-d", str(work / "classes"),
                        str(Path(__file__).parent / "spark" / "SparkDriver.java")], check=True, timeout=120)
        self.server = dev.config.server

    def kubeconfig(self, service_account: str) -> Path:
        token = self.dev.kubectl("create", "token", service_account, "-n", self.namespace, "--duration=1h").strip()
        path = self.work / f"{service_account}.kubeconfig"
        write_token_kubeconfig(path, self.server, self.dev.config.pki, service_account, token)
        return path

    def driver(self, app: dict[str, Any], *, executors: int, seconds: int,
               conf: tuple[str, ...] = ()) -> subprocess.Popen[bytes]:
        """Spark's driver for ``app`` in client mode, asking for ``executors``, with the labels the operator
        passes on (``spec.executor.labels``, the quota's among them) and ``conf`` (``-Dspark...`` options)."""
        spec = app["spec"]
        labels = {f"-Dspark.kubernetes.executor.label.{key}={value}"
                  for key, value in spec["executor"].get("labels", {}).items()}
        # As the operator passes them: spec.sparkConf first, then the executor's fields (a later one wins).
        settings = [f"-D{key}={value}" for key, value in sorted(spec.get("sparkConf", {}).items())]
        settings += [f"-Dspark.executor.{field}={spec['executor'][field]}" for field in ("cores", "memory")
                     if field in spec["executor"]]
        argv = [
            "java", "-Xmx512m", "-cp", f"{self.jars}/*:{self.work / 'classes'}",
            f"-Dspark.master=k8s://{self.server}", f"-Dspark.app.name={app['metadata']['name']}",
            "-Dspark.submit.deployMode=client", f"-Dspark.kubernetes.namespace={self.namespace}",
            f"-Dspark.kubernetes.driver.pod.name={app['metadata']['name']}-driver",
            f"-Dspark.executor.instances={executors}", *settings,
            "-Dspark.kubernetes.container.image=spark:4.1.1", "-Dspark.driver.host=127.0.0.1",
            "-Dspark.ui.enabled=false", *sorted(labels), *conf, "SparkDriver", str(seconds),
        ]
        env = {"KUBECONFIG": str(self.kubeconfig(spec["driver"]["serviceAccount"])), "PATH": "/usr/bin:/bin"}
        with (self.work / "driver.log").open("wb") as log:  # the driver keeps its own copy of the file
            return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.work)


@pytest.fixture(scope="module")
def spark_namespace(dev_cluster: DevCluster) -> Iterator[tuple[DevCluster, str, Spark]]:
    dev = dev_cluster
    namespace = unique("spark")
    tree = {"root": {"name": "root", "min": {"cpu": 40}, "max": {"cpu": 40}, "children": [
        {"name": "Team-s", "min": {"cpu": 8}, "max": {"cpu": 8}, "namespaces": [namespace]},
        {"name": "Team-o", "min": {"cpu": 32}, "max": {"cpu": 32}, "namespaces": [unique("spark-other")]}]}}
    try:
        create_namespaces(dev, namespace)
        dev.apply(alice_role(namespace))
        dev.kubectl("create", "serviceaccount", "spark", "-n", namespace)
        for name, subject in (("spark-driver", f"--serviceaccount={namespace}:spark"),
                              ("spark-operator", "--serviceaccount=spark-operator:spark-operator-controller")):
            dev.kubectl("create", "rolebinding", name, "-n", namespace, "--clusterrole=edit", subject)
        with installed_tree(dev, tree), tempfile.TemporaryDirectory(prefix="kq-spark-") as work:
            wait_managed(dev, namespace)
            wait_routed(dev, namespace)
            yield dev, namespace, Spark(dev, namespace, Path(work))
    finally:
        dev.kubectl("delete", "namespace", namespace, "--wait=false", "--ignore-not-found")


def application(name: str, namespace: str) -> dict[str, Any]:
    """A driver of 1 core / 512m and 2 executors of 2 cores / 2g: 5 CPU in all."""
    return {
        "apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"type": "Scala", "mode": "client", "sparkVersion": "4.1.1", "image": "spark:4.1.1",
                 "mainClass": "SparkDriver", "mainApplicationFile": "local:///opt/spark/driver.jar",
                 "driver": {"cores": 1, "memory": "512m", "serviceAccount": "spark"},
                 "executor": {"cores": EXECUTOR_CPU, "memory": "2g", "instances": 2}},
    }


def driver_pod(app: dict[str, Any]) -> dict[str, Any]:
    """The driver pod as the operator's ``spark-submit`` makes it: owned by the application, with its labels."""
    metadata, spec = app["metadata"], app["spec"]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"{metadata['name']}-driver", "namespace": metadata["namespace"],
                     "labels": {**spec["driver"].get("labels", {}), "spark-role": "driver"},
                     "ownerReferences": [{"apiVersion": app["apiVersion"], "kind": "SparkApplication",
                                          "name": metadata["name"], "uid": metadata["uid"], "controller": True}]},
        "spec": {"serviceAccountName": "spark", "restartPolicy": "Never", "containers": [{
            "name": "spark-kubernetes-driver", "image": "spark:4.1.1",
            "resources": {"requests": {"cpu": "1", "memory": "896Mi"}, "limits": {"memory": "896Mi"}}}]},
    }


def executors(dev: DevCluster, namespace: str, app: str | None = None) -> list[dict[str, Any]]:
    """The executor pods that are not going (``app``'s only, when given)."""
    items: list[dict[str, Any]] = dev.get_json("pods", "-n", namespace, "-l", "spark-role=executor")["items"]
    return [pod for pod in items if not pod["metadata"].get("deletionTimestamp")
            and (app is None or pod["metadata"]["ownerReferences"][0]["name"] == f"{app}-driver")]


def gated(pod: dict[str, Any]) -> bool:
    return any(gate.get("name") == ADMISSION_GATE for gate in pod["spec"].get("schedulingGates") or ())


def used_cpu(dev: DevCluster) -> float:
    status = dev.get_json("eqtree", "elasticquotatree", "-n", "kube-system")["status"]["root"]["children"]
    return _cpu(next(node for node in status if node["name"] == "Team-s").get("used", {}).get("cpu", "0"))


def wait_or_explain(spark_namespace: tuple[DevCluster, str, Spark], check: Callable[[], bool], what: str,
                    app: str | None = None) -> None:
    """Wait up to 120 s for ``check``; on a timeout say which executors there are and what Spark's driver said."""
    dev, ns, spark = spark_namespace
    try:
        dev.wait_until(check, 120, what)
    except AssertionError as error:
        log = (spark.work / "driver.log").read_text(errors="replace")[-3000:]
        names = [pod["metadata"]["name"] for pod in executors(dev, ns, app)]
        raise AssertionError(f"{names}; Spark's driver said:\n{log}") from error


def test_spark_creates_the_executors_and_the_queue_releases_only_what_it_admitted(
    spark_namespace: tuple[DevCluster, str, Spark],
) -> None:
    dev, ns, spark = spark_namespace
    created = json.loads(dev.create(application("etl", ns), user="alice").stdout)
    assert suspended(created) and created["spec"]["executor"]["labels"][QUOTA_LABEL] == "Team-s"

    def app() -> dict[str, Any]:
        found: dict[str, Any] = dev.get_json("sparkapplications", "etl", "-n", ns)
        return found

    dev.wait_until(lambda: not suspended(app()), 60, "the application admitted")
    result = dev.create(driver_pod(app()), user=OPERATOR)
    assert result.returncode == 0, result.stderr
    assert not json.loads(result.stdout)["spec"].get("schedulingGates"), "the operator's driver pod is not held"
    process = spark.driver(app(), executors=4, seconds=240)  # two more than admitted
    try:
        def settled() -> bool:
            pods = executors(dev, ns)
            running = [pod for pod in pods if not gated(pod) and pod["status"].get("phase") == "Running"]
            return len(pods) == 4 and len(running) == 2 and sum(map(gated, pods)) == 2

        wait_or_explain(spark_namespace, settled, "Spark's four executors: two released and running, two held")
        pods = executors(dev, ns)
        assert {pod["metadata"]["ownerReferences"][0]["name"] for pod in pods} == {"etl-driver"}
        assert {pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] for pod in pods} == {"2"}
        held = {pod["metadata"]["name"] for pod in pods if gated(pod)}

        # alice poses as the driver: a pod of her own naming it as its owner stays held, queued nowhere.
        owner = dev.get_json("pod", "etl-driver", "-n", ns)["metadata"]
        posing = {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": "etl-exec-alice", "namespace": ns,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "etl-driver", "uid": owner["uid"],
                                 "controller": True}]},
            "spec": {"containers": [{"name": "work", "image": "busybox",
                                     "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}
        result = dev.create(posing, user="alice")
        assert result.returncode == 0, result.stderr
        assert gated(json.loads(result.stdout)), "a pod alice makes is held at creation"

        def told(name: str) -> str:
            events = dev.get_json("events", "-n", ns, "--field-selector",
                                  f"involvedObject.name={name},reason={REASON_HELD}")["items"]
            return " ".join(str(event.get("message")) for event in events)

        dev.wait_until(lambda: all("admitted with 2 executor pod(s)" in told(name) for name in
                                   [*held, "etl-exec-alice"]), 60, "the held pods told why")
        passes_made(dev, 2, ns)  # two passes more (a count, not a pause): nothing else is released
        # A new controller (a restart, a new leader) counts the executors in the cluster: it releases no more.
        dev.restart_service()  # as the cluster runs it (its start timeout, 5 minutes, does not come into play)
        passes_made(dev, 2, ns, timeout=120)
        pods = executors(dev, ns)
        assert sum(1 for pod in pods if not gated(pod)) == 2
        assert gated(dev.get_json("pod", "etl-exec-alice", "-n", ns))
        queue = dev.get_json("queue", f"root-team-s-{ns}", "-n", "kube-queue").get("status", {})
        active = queue.get("queueItemDetails", {}).get("active", [])
        assert active == [], f"no executor is queued on its own: {active}"
        assert used_cpu(dev) == 1 + 2 * EXECUTOR_CPU, "the application counted once"
        # `kq why` of a held executor, as a colleague with alice's rights: it explains the application.
        bob = edit_kubeconfig(dev, ns, "dev-bob")
        dev.kubectl("create", "rolebinding", "bob-job-kinds", "-n", ns, "--role=job-kinds",
                    f"--serviceaccount={ns}:dev-bob")
        why = kq_as(bob, "why", "etl-exec-alice", "-n", ns)
        assert why.returncode == 0, why.stderr
        assert "pod etl-exec-alice belongs to SparkApplication etl" in why.stderr, why.stderr
        assert "etl" in why.stdout and "RUNNING" in why.stdout, why.stdout
        assert "More pods of it are held by the queue" in why.stdout and "etl-exec-alice" in why.stdout, why.stdout
    finally:
        process.terminate()
        process.wait(timeout=60)
        dev.kubectl("delete", "sparkapplication", "etl", "-n", ns, "--wait=false")


@pytest.fixture
def runtime_class(dev_cluster: DevCluster) -> Iterator[str]:
    with harness_runtime_class(dev_cluster, OVERHEAD) as name:
        yield name


@contextlib.contextmanager
def running(spark_namespace: tuple[DevCluster, str, Spark], name: str,
            conf: tuple[str, ...] = ()) -> Iterator[list[dict[str, Any]]]:
    """Once alice's application ``name`` is admitted, its driver pod made as the operator makes it and Spark's
    driver asking for its two executors: the executors, once both are released and run. Spark's driver is
    stopped and the application deleted afterwards."""
    dev, ns, spark = spark_namespace

    def current() -> dict[str, Any]:
        found: dict[str, Any] = dev.get_json("sparkapplications", name, "-n", ns)
        return found

    dev.wait_until(lambda: not suspended(current()), 120, f"{name} admitted (once the others' pods go)")
    result = dev.create(driver_pod(current()), user=OPERATOR)
    assert result.returncode == 0, result.stderr
    process = spark.driver(current(), executors=2, seconds=240, conf=conf)
    try:
        def both_run() -> bool:
            pods = executors(dev, ns, name)
            return len(pods) == 2 and all(not gated(pod) and pod["status"].get("phase") == "Running" for pod in pods)

        wait_or_explain(spark_namespace, both_run, f"Spark's two executors of {name} released and running", name)
        yield executors(dev, ns, name)
    finally:
        process.terminate()
        process.wait(timeout=60)
        dev.kubectl("delete", "sparkapplication", name, "-n", ns, "--wait=false")


def test_executors_built_on_a_template_under_a_runtime_class_are_counted_with_its_overhead_and_run(
    spark_namespace: tuple[DevCluster, str, Spark], runtime_class: str,
) -> None:
    """alice's executors take a RuntimeClass from ``spec.executor.template``, which Spark builds them on: the
    application is admitted for 7 CPU (1 + 2 x (2 + 1)) of Team-s's 8, and Spark's executors, each 3 CPU with
    the class's overhead, are released and run. Sized without the template, it was admitted for 5 and its
    executors stayed held for good, each bigger than the executor it was counted as."""
    dev, ns, spark = spark_namespace
    app = application("kata-etl", ns)
    app["spec"]["executor"]["template"] = {"spec": {"runtimeClassName": runtime_class}}
    wait_class_known(dev, ns, app, runtime_class)
    created = json.loads(dev.create(app, user="alice").stdout)
    assert recorded_overhead(created) == {runtime_class: OVERHEAD}
    template = spark.work / "executor-template.yaml"
    template.write_text(json.dumps({"apiVersion": "v1", "kind": "Pod", "spec": {
        "runtimeClassName": runtime_class, "containers": [{"name": "executor"}]}}))
    with running(spark_namespace, "kata-etl", (f"-Dspark.kubernetes.executor.podTemplateFile={template}",)) as pods:
        for pod in pods:
            assert pod["spec"]["runtimeClassName"] == runtime_class and pod["spec"]["overhead"] == OVERHEAD
            assert pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] == str(EXECUTOR_CPU)
        assert used_cpu(dev) == 1 + 2 * (EXECUTOR_CPU + 1), "counted with the class's overhead"


def test_executor_sizes_spark_conf_sets_are_counted_as_spark_makes_the_executors(
    spark_namespace: tuple[DevCluster, str, Spark],
) -> None:
    """The executor's memory comes from ``spec.sparkConf`` (its field left out), with off-heap memory, which
    Spark adds to each executor pod: the application is counted as Spark makes them (3g + 384Mi + 512m each),
    and they are released and run. Sized from the fields alone (1g by default) they stayed held."""
    dev, ns, _ = spark_namespace
    app = application("conf-etl", ns)
    del app["spec"]["executor"]["memory"]
    app["spec"]["sparkConf"] = {"spark.executor.memory": "3g", "spark.memory.offHeap.enabled": "true",
                                "spark.memory.offHeap.size": "512m"}
    assert dev.create(app, user="alice").returncode == 0
    with running(spark_namespace, "conf-etl") as pods:
        for pod in pods:
            assert pod["spec"]["containers"][0]["resources"]["requests"]["memory"] == "3968Mi"
        assert used_cpu(dev) == 1 + 2 * EXECUTOR_CPU
