"""``kq dev up`` / ``kq dev down``: a real Kubernetes control plane on loopback, with kwok fake nodes.

etcd, kube-apiserver (TLS, RBAC), kube-controller-manager, kube-scheduler and kwok run as local processes
built from the upstream Go modules (see ``build-binaries.sh``). State lives in one directory (``.dev`` by
default): ``kubeconfig``, ``pki/``, ``logs/``, ``run/`` (pid files), ``etcd/`` (data), ``kwok/`` (pod log).

Pod logs: the API server reads a pod's log from its node's kubelet at the node's InternalIP
(``--kubelet-preferred-address-types=InternalIP``) and ``status.daemonEndpoints.kubeletEndpoint.Port``. For the
fake nodes those are 127.0.0.1 and kwok's own server (``--node-ip``, ``--node-port``, written into the nodes'
status by the stages in ``kwok-stages.yaml``); kwok serves HTTPS with a certificate from the dev CA, which the
API server checks (``--kubelet-certificate-authority``). kwok answers with the file its ``ClusterLogs``
document names: a generated log shared by every pod (:mod:`webhook.devcluster.podlog`).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from webhook.api.names import DEFAULT_SCHEDULER
from webhook.devcluster import podlog, processes
from webhook.devcluster.config import KWOK_NODE_IP, ClusterConfig
from webhook.devcluster.kubeconfig import write_kubeconfig
from webhook.devcluster.pki_setup import FRONT_PROXY_CLIENT, ensure_pki

log = logging.getLogger("kq.dev")

HERE = Path(__file__).resolve().parent
STAGES = HERE / "kwok-stages.yaml"
BUILD_SCRIPT = HERE / "build-binaries.sh"
ORDER = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "kwok-pod-log", "kq-serve")
"""Start order; stop goes in reverse."""
CONTROL_PLANE = ORDER[:-1]
"""The cluster's own processes; whatever follows them is our service, started once the API is ready."""
SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
ServiceHook = Callable[[ClusterConfig, Path], Sequence[processes.Component]]
"""Builds the service's components (our webhook, controller, extender) for a cluster; registered by the
shell that owns them so this module need not import it."""


class DevClusterError(RuntimeError):
    """Something a user can fix: says what failed and where to look."""


@dataclass(frozen=True, slots=True)
class Status:
    """Which components run, and whether the API answers."""

    running: dict[str, int | None]
    api_ready: bool

    @property
    def all_running(self) -> bool:
        return all(pid is not None for pid in self.running.values())


def binaries_dir() -> Path:
    """Build (once) and return the directory of the upstream binaries."""
    override = os.environ.get("KQ_BIN_DIR")
    if override:
        return Path(override)
    result = subprocess.run(
        ["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, stderr=sys.stderr, text=True, check=False
    )
    if result.returncode != 0:
        raise DevClusterError(
            f"building the Kubernetes binaries failed (exit {result.returncode}); see the Go output above. "
            f"Retry with: bash {BUILD_SCRIPT}"
        )
    return Path(result.stdout.strip().splitlines()[-1])


def helm_binary() -> Path:
    """Build (once) and return the ``helm`` binary (``$KQ_HELM`` when set), for the chart in manifests/helm/."""
    override = os.environ.get("KQ_HELM")
    if override:
        return Path(override)
    result = subprocess.run(
        ["bash", str(BUILD_SCRIPT), "helm"], stdout=subprocess.PIPE, stderr=sys.stderr, text=True, check=False
    )
    if result.returncode != 0:
        raise DevClusterError(
            f"building helm failed (exit {result.returncode}); see the Go output above. "
            f"Retry with: bash {BUILD_SCRIPT} helm"
        )
    return Path(result.stdout.strip().splitlines()[-1]) / "helm"


def _marker(config: ClusterConfig) -> str:
    return str(config.state_dir)


def components(
    config: ClusterConfig, bins: Path, service: ServiceHook | None = None
) -> list[processes.Component]:
    """Every process of the cluster, in start order."""
    pki = config.pki
    p = config.ports
    etcd_url = f"http://127.0.0.1:{p.etcd}"
    peer_url = f"http://127.0.0.1:{p.etcd_peer}"
    out = [
        processes.Component(
            "etcd",
            (
                str(bins / "etcd"),
                "--name=kq-dev",
                f"--data-dir={config.state_dir / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=kq-dev={peer_url}",
                "--unsafe-no-fsync=true",
                "--quota-backend-bytes=4294967296",
                "--log-level=warn",
            ),
            p.etcd,
        ),
        processes.Component(
            "kube-apiserver",
            (
                str(bins / "kube-apiserver"),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={p.apiserver}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                "--authorization-mode=Node,RBAC",
                "--allow-privileged=true",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                "--endpoint-reconciler-type=none",
                "--enable-priority-and-fairness=false",
                # Pod logs come from kwok's server at each fake node's InternalIP (see the module's doc).
                "--kubelet-preferred-address-types=InternalIP",
                f"--kubelet-certificate-authority={pki / 'ca.crt'}",
                # The aggregator: an aggregated API (an APIService) gets the user as X-Remote-* headers from a
                # client of the front-proxy CA; one on loopback is reached through an ExternalName Service.
                f"--requestheader-client-ca-file={pki / 'front-proxy-ca.crt'}",
                f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
                f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
                "--max-requests-inflight=2000",
                "--max-mutating-requests-inflight=1000",
                "--v=1",
            ),
            p.apiserver,
        ),
        processes.Component(
            "kube-controller-manager",
            (
                str(bins / "kube-controller-manager"),
                f"--kubeconfig={config.state_dir / 'kcm.kubeconfig'}",
                f"--authentication-kubeconfig={config.state_dir / 'kcm.kubeconfig'}",
                f"--authorization-kubeconfig={config.state_dir / 'kcm.kubeconfig'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                "--use-service-account-credentials=true",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={p.controller_manager}",
                "--controllers=*,-nodeipam,-service-lb-controller,-cloud-node-lifecycle-controller,"
                "-persistentvolume-attach-detach-controller",
                "--kube-api-qps=500",
                "--kube-api-burst=1000",
                "--concurrent-job-syncs=20",
                "--v=1",
            ),
            p.controller_manager,
        ),
        processes.Component(
            "kube-scheduler",
            (
                str(bins / "kube-scheduler"),
                f"--config={config.state_dir / 'scheduler-config.yaml'}",
                f"--authentication-kubeconfig={config.state_dir / 'scheduler.kubeconfig'}",
                f"--authorization-kubeconfig={config.state_dir / 'scheduler.kubeconfig'}",
                "--bind-address=127.0.0.1",
                f"--secure-port={p.scheduler}",
                "--v=1",
            ),
            p.scheduler,
        ),
        processes.Component(
            "kwok",
            (
                str(bins / "kwok"),
                f"--kubeconfig={config.state_dir / 'kwok.kubeconfig'}",
                f"--config={STAGES}",
                f"--config={config.kwok_logs_config}",
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                f"--server-address={KWOK_NODE_IP}:{p.kwok}",
                f"--tls-cert-file={pki / 'kwok-serving.crt'}",
                f"--tls-private-key-file={pki / 'kwok-serving.key'}",
                "--node-lease-duration-seconds=40",
                "--cidr=10.244.0.0/16",
                f"--node-ip={KWOK_NODE_IP}",
                f"--node-port={p.kwok}",
            ),
            p.kwok,
        ),
        processes.Component(
            "kwok-pod-log",
            (
                sys.executable,
                "-m",
                "webhook.devcluster.podlog",
                f"--file={config.pod_log}",
                f"--interval={podlog.INTERVAL:g}",
                f"--keep={podlog.KEEP}",
            ),
        ),
    ]
    if service is not None and config.with_service:
        out.extend(service(config, bins))
    return out


def scheduler_config(
    config: ClusterConfig, extender: dict[str, object] | None, settings: Mapping[str, object] | None = None
) -> str:
    """The KubeSchedulerConfiguration (JSON is YAML) of the dev cluster's scheduler: ``extender`` as its
    ``extenders[]`` entry, ``settings`` as top-level fields (what the extender asks of its scheduler: its
    ``profiles``, replacing the one default profile)."""
    doc: dict[str, object] = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {
            "kubeconfig": str(config.state_dir / "scheduler.kubeconfig"),
            "qps": 500,
            "burst": 1000,
        },
        "leaderElection": {"leaderElect": False},
        "profiles": [{"schedulerName": DEFAULT_SCHEDULER}],
    }
    doc.update(settings or {})
    if extender is not None:
        doc["extenders"] = [extender]
    return json.dumps(doc, indent=2)


def _tls_context(config: ClusterConfig) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(config.pki / "ca.crt"))
    context.load_cert_chain(str(config.pki / "admin.crt"), str(config.pki / "admin.key"))
    return context


def api_get(config: ClusterConfig, path: str, timeout: float = 2.0) -> tuple[int, bytes]:
    """GET a path of the apiserver as the admin; ``(status, body)``."""
    request = urllib.request.Request(config.server + path)
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=_tls_context(config)) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as error:
        return int(error.code), error.read()


def api_ready(config: ClusterConfig) -> bool:
    """Whether the apiserver answers ``/readyz`` with ok."""
    try:
        status, _ = api_get(config, "/readyz", timeout=1.0)
    except OSError:
        return False
    return status == 200


def status(config: ClusterConfig, names: Sequence[str] = ORDER) -> Status:
    """What runs now."""
    marker = _marker(config)
    running = {
        name: processes.running_pid(config.run, name, marker)
        for name in dict.fromkeys((*names, "kq-extender", "kq-console"))
        if name not in ("kq-serve", "kq-extender", "kq-console") or processes.pid_file(config.run, name).exists()
    }
    return Status(running=running, api_ready=bool(running.get("kube-apiserver")) and api_ready(config))


def kubectl(config: ClusterConfig, bins: Path, *args: str, stdin: str | None = None) -> str:
    """Run kubectl as the admin; raises :class:`DevClusterError` with its stderr on failure."""
    result = subprocess.run(
        [str(bins / "kubectl"), f"--kubeconfig={config.kubeconfig}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    if result.returncode != 0:
        raise DevClusterError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout


def _write_configs(
    config: ClusterConfig, extender: dict[str, object] | None, scheduler_settings: Mapping[str, object] | None
) -> None:
    config.state_dir.mkdir(parents=True, exist_ok=True)
    ensure_pki(config.pki)
    users = {
        "kubeconfig": "admin",
        "kcm.kubeconfig": "kcm",
        "scheduler.kubeconfig": "scheduler",
        "kwok.kubeconfig": "kwok",
        config.controller_kubeconfig.name: "controller",
        "extender.kubeconfig": "extender",
    }
    for filename, user in users.items():
        write_kubeconfig(config.state_dir / filename, config.server, config.pki, user)
    text = scheduler_config(config, extender, scheduler_settings)
    (config.state_dir / "scheduler-config.yaml").write_text(text)
    podlog.ensure_file(config.pod_log)
    config.kwok_logs_config.write_text(podlog.cluster_logs(config.pod_log))


def up(
    config: ClusterConfig,
    *,
    bins: Path | None = None,
    service: ServiceHook | None = None,
    extender: dict[str, object] | None = None,
    scheduler_settings: Mapping[str, object] | None = None,
    after_api: Callable[[ClusterConfig, Path], None] | None = None,
    after_service: Callable[[ClusterConfig, Path], None] | None = None,
    echo: Callable[[str], None] = print,
) -> Path:
    """Bring the cluster up (idempotent: a healthy cluster is left as it is). Returns the binaries' dir.

    ``extender`` is the scheduler's ``extenders[]`` entry, ``scheduler_settings`` top-level fields of its
    configuration. ``after_api`` runs once the API answers and the nodes exist (CRDs, RBAC...); ``after_service`` once
    the service's components listen (webhook configurations that point at them).
    """
    bins = bins or binaries_dir()
    wanted = components(config, bins, service)
    current = status(config, [c.name for c in wanted])
    if current.all_running and current.api_ready:
        echo(f"dev cluster already up ({config.state_dir})")
        return bins
    if any(pid is not None for pid in current.running.values()):
        echo("dev cluster partly up: restarting it")
        down(config, echo=echo)
    clash = processes.busy_ports([c.port for c in wanted if c.port is not None])
    if clash:
        raise DevClusterError(
            f"ports {clash} on 127.0.0.1 are in use by another program; stop it, or choose another port base "
            "with --port-base (or KQ_DEV_PORT_BASE)"
        )
    started = time.monotonic()
    _write_configs(config, extender, scheduler_settings)
    config.logs.mkdir(parents=True, exist_ok=True)
    by_name = {c.name: c for c in wanted}
    try:
        _start(config, by_name["etcd"])
        _wait_port(config, by_name["etcd"], 30)
        _start(config, by_name["kube-apiserver"])
        processes.wait_for(lambda: api_ready(config), 90, "kube-apiserver /readyz")
        for name in ("kube-controller-manager", "kube-scheduler", "kwok", "kwok-pod-log"):
            _start(config, by_name[name])
        _create_nodes(config, bins)
        _wait_nodes_ready(config, bins, 60)
        _point_nodes_at_kwok(config, bins)
        _wait_port(config, by_name["kwok"], 30)
        _wait_default_service_account(config, bins, 60)
        if after_api is not None:
            after_api(config, bins)
        for component in wanted:
            if component.name not in by_name or component.name in CONTROL_PLANE:
                continue
            _start(config, component)
        for component in wanted:
            if component.name not in CONTROL_PLANE and component.port is not None:
                _wait_port(config, component, 60)
        if after_service is not None:
            after_service(config, bins)
    except (TimeoutError, DevClusterError) as error:
        raise DevClusterError(f"{error}. Logs: {config.logs}/") from error
    echo(f"dev cluster up in {time.monotonic() - started:.1f}s: {config.server}")
    return bins


def _start(config: ClusterConfig, component: processes.Component) -> None:
    processes.start(component, config.run, config.logs)


def _wait_port(config: ClusterConfig, component: processes.Component, timeout: float) -> None:
    port = component.port
    assert port is not None

    def ready() -> bool:
        if processes.running_pid(config.run, component.name, _marker(config)) is None:
            raise DevClusterError(f"{component.name} exited at start; see {config.logs}/{component.name}.log")
        return processes.port_open(port)

    processes.wait_for(ready, timeout, f"{component.name} to listen on 127.0.0.1:{port}")


def _create_nodes(config: ClusterConfig, bins: Path) -> None:
    items = [node.manifest() for node in config.nodes]
    doc = json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
    kubectl(config, bins, "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=doc)


def _wait_nodes_ready(config: ClusterConfig, bins: Path, timeout: float) -> None:
    names = {node.name for node in config.nodes}

    def ready() -> bool:
        out = json.loads(kubectl(config, bins, "get", "nodes", "-o", "json"))
        ready_names = {
            item["metadata"]["name"]
            for item in out["items"]
            if any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in item.get("status", {}).get("conditions", [])
            )
        }
        return names <= ready_names

    processes.wait_for(ready, timeout, f"nodes {sorted(names)} to be Ready (kwok)", interval=0.5)


def kubelet_endpoint_status(config: ClusterConfig) -> dict[str, object]:
    """The part of a fake node's status that sends the API server's log requests to kwok's server."""
    return {
        "addresses": [{"type": "InternalIP", "address": KWOK_NODE_IP}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": config.ports.kwok}},
    }


def _point_nodes_at_kwok(config: ClusterConfig, bins: Path) -> None:
    """Patch the status of fake nodes that do not point at kwok's server yet. kwok's node stage writes it when
    a node first becomes Ready; nodes kept Ready in the etcd of an older state directory (or of another port
    base) still carry the old address or port."""
    wanted = kubelet_endpoint_status(config)
    patch = json.dumps({"status": wanted})
    names = {node.name for node in config.nodes}
    for item in json.loads(kubectl(config, bins, "get", "nodes", "-o", "json"))["items"]:
        name = item["metadata"]["name"]
        current = item.get("status", {})
        internal = [a.get("address") for a in current.get("addresses", []) if a.get("type") == "InternalIP"]
        port = current.get("daemonEndpoints", {}).get("kubeletEndpoint", {}).get("Port")
        if name in names and (internal != [KWOK_NODE_IP] or port != config.ports.kwok):
            kubectl(config, bins, "patch", "node", name, "--subresource=status", "-p", patch)


def _wait_default_service_account(config: ClusterConfig, bins: Path, timeout: float) -> None:
    def exists() -> bool:
        status_code, _ = api_get(config, "/api/v1/namespaces/default/serviceaccounts/default")
        return status_code == 200

    processes.wait_for(exists, timeout, "the default ServiceAccount (kube-controller-manager)")


def down(config: ClusterConfig, purge: bool = False, echo: Callable[[str], None] = print) -> None:
    """Stop every component (reverse order) and check that no port is left open."""
    marker = _marker(config)
    stopped = []
    names = list(ORDER)
    if config.run.is_dir():
        names += [p.stem for p in config.run.glob("*.pid") if p.stem not in names]
    for name in reversed(names):
        if processes.stop(config.run, name, marker):
            stopped.append(name)
    deadline = time.monotonic() + 10
    ports = list(config.ports.all().values())
    while processes.busy_ports(ports) and time.monotonic() < deadline:
        time.sleep(0.1)
    if purge and config.state_dir.exists():
        shutil.rmtree(config.state_dir)
    echo(f"dev cluster down (stopped: {', '.join(stopped) or 'nothing was running'})")
