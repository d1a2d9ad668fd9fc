"""What the end-to-end modules share (a support module, not a test module): controller replicas running
inside the test process against the dev cluster (for the fault and leader-election tests), plus the
cluster-global fixtures: the service without its own controller, and a quota tree installed for one module
and restored afterwards.

The replicas run in a background thread with their own event loop, so the test thread can keep using
``kubectl`` (blocking) while they work. Killing a replica cancels its task: no Lease release, no clean-up,
as when a process dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Coroutine, Iterable, Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any, TypeVar

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import DevCluster
from webhook.api.names import EXTENDER_RESOURCE, MANAGED_NAMESPACE_LABEL, POD_OVERHEAD_ANNOTATION
from webhook.controller.controller import Controller
from webhook.controller.settings import ControllerSettings
from webhook.kube.client import KubeClient

T = TypeVar("T")


class LoopThread:
    """An asyncio event loop in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="controllers", daemon=True)
        self.thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def close(self) -> None:
        async def cancel_all() -> None:
            tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        self.run(cancel_all(), timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


class Replica:
    """One controller replica: :meth:`start`, then :meth:`kill` (a crash) or :meth:`stop` (a clean stop)."""

    def __init__(self, loop: LoopThread, kubeconfig: Path, settings: ControllerSettings) -> None:
        self.loop = loop
        self.kubeconfig = kubeconfig
        self.settings = settings
        self.controller: Controller | None = None
        self._task: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None

    async def _main(self, ready: asyncio.Future[None]) -> None:
        client = await KubeClient.connect(str(self.kubeconfig))
        try:
            self._stop = asyncio.Event()
            self.controller = Controller(client, self.settings)
            ready.set_result(None)
            await self.controller.run(self._stop)
        finally:
            await client.close()

    async def astart(self) -> Replica:
        """:meth:`start` from inside the replicas' loop."""
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._task = asyncio.ensure_future(self._main(ready))
        await ready
        return self

    def start(self) -> Replica:
        return self.loop.run(self.astart())

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def is_leader(self) -> bool:
        controller = self.controller
        return controller is not None and self.running and controller.is_leader()

    def admitted(self) -> int:
        return self.controller.stats.admitted if self.controller is not None else 0

    async def akill(self) -> None:
        """:meth:`kill` from inside the replicas' loop."""
        task = self._task
        if task is None:
            return
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    def kill(self) -> None:
        """Cancel the replica at whatever it is doing (the Lease is left to expire)."""
        self.loop.run(self.akill())

    def stop(self) -> None:
        """Stop cleanly (releases the Lease)."""

        async def stop() -> None:
            if self._stop is not None:
                self._stop.set()
            if self._task is not None:
                await asyncio.gather(self._task, return_exceptions=True)

        self.loop.run(stop())


@pytest.fixture(scope="module")
def loop_thread() -> Iterator[LoopThread]:
    thread = LoopThread()
    yield thread
    thread.close()


@pytest.fixture(scope="module")
def service_without_controller(dev_cluster: DevCluster) -> Iterator[DevCluster]:
    """The service (webhooks) keeps running, but its own controller is off while the module's in-process
    replicas run; it is restored afterwards."""
    dev_cluster.restart_service("--no-controller")
    try:
        yield dev_cluster
    finally:
        dev_cluster.restart_service()


@contextlib.contextmanager
def installed_tree(dev: DevCluster, spec: dict[str, Any]) -> Iterator[str]:
    """The cluster's one ElasticQuotaTree has ``spec`` for the duration (created, or an existing tree's spec
    replaced); afterwards the previous spec comes back (or the tree is deleted). Yields the tree's name."""
    existing = dev.get_json("elasticquotatrees", "-n", "kube-system")["items"]
    if existing:
        name = existing[0]["metadata"]["name"]
        saved = existing[0]["spec"]
        _replace_spec(dev, name, spec)
    else:
        name, saved = "elasticquotatree", None
        dev.apply(
            {
                "apiVersion": "scheduling.sigs.k8s.io/v1beta1",
                "kind": "ElasticQuotaTree",
                "metadata": {"name": name, "namespace": "kube-system"},
                "spec": spec,
            }
        )
    try:
        yield name
    finally:
        if saved is not None:
            _replace_spec(dev, name, saved)
        else:
            dev.kubectl("delete", "elasticquotatree", name, "-n", "kube-system", "--ignore-not-found")


def _replace_spec(dev: DevCluster, name: str, spec: dict[str, Any]) -> None:
    patch = json.dumps([{"op": "replace", "path": "/spec", "value": spec}])
    dev.kubectl("patch", "elasticquotatree", name, "-n", "kube-system", "--type=json", "-p", patch)


def create_namespaces(dev: DevCluster, *names: str) -> None:
    """Create namespaces and wait for their default ServiceAccount (pods need it)."""
    for name in names:
        dev.kubectl("create", "namespace", name)
    for name in names:

        def ready(namespace: str = name) -> bool:
            return dev.kubectl_result("get", "serviceaccount", "default", "-n", namespace).returncode == 0

        dev.wait_until(ready, 60, f"default ServiceAccount in {name}")


def wait_managed(dev: DevCluster, *names: str, timeout: float = 60) -> None:
    """Until the controller labelled the namespaces (only then does the webhook hold their jobs)."""

    def labelled() -> bool:
        for name in names:
            labels = dev.get_json("namespace", name)["metadata"].get("labels", {})
            if labels.get(MANAGED_NAMESPACE_LABEL) != "true":
                return False
        return True

    dev.wait_until(labelled, timeout, f"namespaces {names} labelled {MANAGED_NAMESPACE_LABEL}")


def wait_routed(dev: DevCluster, namespace: str, timeout: float = 30) -> None:
    """Until the API server's own admission treats ``namespace`` as managed: a server-side dry run of a pod there
    comes back marked for the extender by the admission policy. The label can be stored a moment before the
    API server's namespace cache, which the policies' and hooks' selectors read, shows it."""
    probe = json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "routed-probe"},
                        "spec": {"containers": [{"name": "c", "image": "busybox"}]}})

    def routed() -> bool:
        result = dev.kubectl_result("create", "-n", namespace, "--dry-run=server", "-o", "json", "-f", "-",
                                    stdin=probe)
        if result.returncode != 0:
            return False
        resources = json.loads(result.stdout)["spec"]["containers"][0].get("resources", {})
        return EXTENDER_RESOURCE in resources.get("requests", {})

    dev.wait_until(routed, timeout, f"the API server's admission to treat namespace {namespace} as managed")


def scrape(port: int) -> str:
    """The text of a ``/metrics`` endpoint on loopback."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return str(response.read().decode())


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a metrics text, by name and labels."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


PASSES: tuple[str, frozenset[tuple[str, str]]] = ("kube_queue_controller_pass_seconds_count", frozenset())
POKE_ANNOTATION = "e2e.kube-queue.x-k8s.io/poke"


def passes_made(dev: DevCluster, count: int, namespace: str, *, spacing: float = 1.1, timeout: float = 60) -> None:
    """Until the service's controller has made ``count`` more passes (its own metric), asking for each by an
    annotation on ``namespace`` (a change of a namespace asks for a pass), at most one every ``spacing``
    seconds (so each pass may write the statuses). A count, not a sleep: a slow machine waits longer instead
    of checking before any pass ran."""
    target = samples(scrape(dev.config.ports.metrics)).get(PASSES, 0.0) + count
    asked = [0.0]

    def made() -> bool:
        if samples(scrape(dev.config.ports.metrics)).get(PASSES, 0.0) >= target:
            return True
        if time.monotonic() - asked[0] >= spacing:
            asked[0] = time.monotonic()
            dev.kubectl("annotate", "namespace", namespace, f"{POKE_ANNOTATION}={time.time_ns()}", "--overwrite")
        return False

    dev.wait_until(made, timeout, f"{count} more passes of the controller")


def refused_again(dev: DevCluster, namespace: str, names: Iterable[str], *, timeout: float = 60) -> None:
    """Until the extender's filter has refused each pod of ``names`` once more, after this call: each pod is
    touched (an annotation; kube-scheduler requeues a pod an extender refused on any update of it) and the
    extender's log, one line per decision, is read for a new refusal naming it. A fresh decision on the
    settled state, not a pause after which nothing may have been asked."""
    log = dev.config.logs / "kq-extender.log"
    start = log.stat().st_size
    waiting = set(names)
    for name in waiting:
        dev.kubectl("annotate", "pod", name, "-n", namespace, f"{POKE_ANNOTATION}={time.time_ns()}", "--overwrite")

    def refused() -> bool:
        with log.open("rb") as lines:
            lines.seek(start)
            for line in lines.read().decode(errors="replace").splitlines():
                for name in list(waiting):
                    if f" verb=filter pod={namespace}/{name} " in line and " passing=0 " in line:
                        waiting.discard(name)
        return not waiting

    dev.wait_until(refused, timeout, f"the extender to refuse {sorted(waiting)} in {namespace} again")


def watched(dev: DevCluster, versions: Iterable[str], caches: Iterable[tuple[int, str]], *,
            timeout: float = 60) -> None:
    """Until each ``(metrics port, cache name)`` has stored the newest of ``versions`` (resourceVersions of
    objects it watches), by its ``kube_queue_watch_resource_version``: the objects reached that watch, a count
    instead of a pause."""
    newest = max((int(version) for version in versions), default=0)
    wanted = list(caches)

    def caught_up() -> bool:
        for port, cache in wanted:
            seen = samples(scrape(port)).get(("kube_queue_watch_resource_version", frozenset({("cache", cache)})))
            if seen is None or seen < newest:
                return False
        return True

    dev.wait_until(caught_up, timeout, f"the watches {[cache for _, cache in wanted]} at resourceVersion {newest}")


def policies_watched(dev: DevCluster, namespace: str) -> None:
    """Until the extender's and the webhook's watches hold every ResourcePolicy of ``namespace`` as it is now."""
    items = dev.get_json("resourcepolicies", "-n", namespace)["items"]
    watched(dev, [item["metadata"]["resourceVersion"] for item in items],
            [(dev.config.ports.extender, "extender-resourcepolicies"), (dev.config.ports.metrics, "resourcepolicies")])


def nodes_watched(dev: DevCluster, names: Iterable[str]) -> None:
    """Until the extender's watch holds the nodes ``names`` as they are now (their labels)."""
    watched(dev, [dev.get_json("node", name)["metadata"]["resourceVersion"] for name in names],
            [(dev.config.ports.extender, "extender-nodes")])


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def replica_settings(**overrides: Any) -> ControllerSettings:
    """Fast settings for in-process replicas (short lease, quick status writes)."""
    values: dict[str, Any] = {
        "oversell_rate": 1,
        "status_interval": 1.0,
        "lease_name": unique("kq-test-lease"),
        "lease_duration": 4.0,
        "renew_deadline": 3.0,
        "retry_period": 0.5,
        "resync_period": 2.0,
        "event_interval": 5.0,
    }
    values.update(overrides)
    values["oversell_rate"] = Fraction(values["oversell_rate"])
    return ControllerSettings(**values)


def deployment(namespace: str, name: str, node: str | None = None) -> dict[str, Any]:
    """A Deployment of no replicas whose one-container pod template (1 CPU) names ``node`` when given."""
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox",
                                            "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}]}
    if node is not None:
        spec["nodeName"] = node
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": spec}}}


def cronjob(namespace: str, name: str, node: str | None = None) -> dict[str, Any]:
    """A CronJob (once a year) whose job template's pod template is :func:`deployment`'s."""
    template = deployment(namespace, name, node)["spec"]["template"]
    template["spec"]["restartPolicy"] = "Never"
    return {"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": name, "namespace": namespace},
            "spec": {"schedule": "0 0 1 1 *", "jobTemplate": {"spec": {"template": template}}}}


SEED_CLASSES = Path(__file__).resolve().parents[2] / "examples" / "seed" / "02-priorityclasses.yaml"


@contextlib.contextmanager
def quotas(dev: DevCluster, children: list[dict[str, Any]], users: dict[str, str]) -> Iterator[None]:
    """A tree of 100 CPU over ``children`` and the seed's PriorityClasses (``priority-3`` preempts lower
    priorities), the service without an oversell rate; ``users``: namespace -> the user with ``edit`` there.
    Afterwards the namespaces go and the service restarts as it was."""
    dev.restart_service("--oversellrate=1", "--status-interval=1")
    dev.kubectl("apply", "-f", str(SEED_CLASSES))
    spec = {"root": {"name": "root", "min": {"cpu": 100, "memory": "100Gi"},
                     "max": {"cpu": 100, "memory": "100Gi"}, "children": children}}
    try:
        create_namespaces(dev, *users)
        for namespace, user in users.items():
            dev.kubectl("create", "rolebinding", f"{user}-edit", "-n", namespace, "--clusterrole=edit",
                        f"--user={user}")
        with installed_tree(dev, spec):
            wait_managed(dev, *users)
            yield
    finally:
        dev.kubectl("delete", "namespace", *users, "--wait=false", "--ignore-not-found")
        dev.restart_service()


def running_pods(dev: DevCluster, namespace: str, selector: str) -> dict[str, str]:
    """Name -> uid of the running pods of ``namespace`` that ``selector`` selects."""
    items = dev.get_json("pods", "-n", namespace, "-l", selector)["items"]
    return {item["metadata"]["name"]: item["metadata"]["uid"] for item in items
            if item["status"].get("phase") == "Running" and not item["metadata"].get("deletionTimestamp")}


def wait_running(dev: DevCluster, namespace: str, selector: str, count: int, timeout: float = 120) -> dict[str, str]:
    """Until ``count`` pods that ``selector`` selects run in ``namespace``: their names -> uids."""
    found: dict[str, str] = {}

    def enough() -> bool:
        found.clear()
        found.update(running_pods(dev, namespace, selector))
        return len(found) == count

    dev.wait_until(enough, timeout, f"{count} running pods {selector} in {namespace}")
    return dict(found)


def kq_as(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``kq ARGS`` run as the user of ``kubeconfig`` (its exit code, stdout and stderr; never raises on a
    failure, which is what some tests expect)."""
    return subprocess.run([sys.executable, "-m", "webhook.cli.main", *args, f"--kubeconfig={kubeconfig}"],
                          capture_output=True, text=True, check=False, timeout=120)


def edit_kubeconfig(dev: DevCluster, namespace: str, account: str) -> Path:
    """The kubeconfig of a new ServiceAccount ``account`` with ``edit`` in ``namespace`` only (a token of its
    own): a namespace user as ``kq`` runs for them."""
    from webhook.devcluster.kubeconfig import write_token_kubeconfig  # noqa: PLC0415

    dev.kubectl("create", "serviceaccount", account, "-n", namespace)
    dev.kubectl("create", "rolebinding", f"{account}-edit", "-n", namespace, "--clusterrole=edit",
                f"--serviceaccount={namespace}:{account}")
    token = dev.kubectl("create", "token", account, "-n", namespace).strip()
    path = dev.config.state_dir / f"{account}-{namespace}.kubeconfig"
    write_token_kubeconfig(path, dev.config.server, dev.config.pki, account, token)
    return path


@contextlib.contextmanager
def runtime_class(dev: DevCluster, overhead: dict[str, str]) -> Iterator[str]:
    """An operator's RuntimeClass whose pods cost ``overhead`` more than their containers ask; deleted after."""
    name = unique("kata")
    dev.apply({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": name},
               "handler": "kata", "overhead": {"podFixed": overhead}})
    try:
        yield name
    finally:
        dev.kubectl("delete", "runtimeclass", name, "--ignore-not-found")


def recorded_overhead(obj: dict[str, Any]) -> dict[str, Any]:
    """The RuntimeClass overheads the webhook recorded on a job (``{}`` without the annotation)."""
    text = obj["metadata"].get("annotations", {}).get(POD_OVERHEAD_ANNOTATION)
    return dict(json.loads(text)) if text else {}


def wait_class_known(dev: DevCluster, namespace: str, probe: dict[str, Any], runtime_class: str) -> None:
    """Wait until the webhook's watch shows ``runtime_class``: a server-side dry run of ``probe`` as alice (which
    goes through the mutating webhook) comes back with the class's overhead recorded."""

    def known() -> bool:
        result = dev.kubectl_result("create", "-n", namespace, "--dry-run=server", "-o", "json", "-f", "-",
                                    stdin=json.dumps(probe), user="alice")
        return result.returncode == 0 and runtime_class in recorded_overhead(json.loads(result.stdout))

    dev.wait_until(known, 30, "the webhook's watch to show the RuntimeClass")
