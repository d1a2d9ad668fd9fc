"""What the dev cluster looks like: where it keeps its state, which loopback ports, which fake nodes."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from webhook.api.names import (
    CONTROLLER_COMPONENT,
    FAKE_NODE_ANNOTATION,
    QUEUE_NAMESPACE,
    VIRTUAL_NODE_LABEL_KEY,
    VIRTUAL_NODE_LABEL_VALUE,
    VIRTUAL_NODE_TAINT_KEY,
    VIRTUAL_NODE_TAINT_VALUE,
)

VIRTUAL_NODE_LABEL = (VIRTUAL_NODE_LABEL_KEY, VIRTUAL_NODE_LABEL_VALUE)
VIRTUAL_NODE_TAINT = {"key": VIRTUAL_NODE_TAINT_KEY, "value": VIRTUAL_NODE_TAINT_VALUE, "effect": "NoSchedule"}
ECS_NODE_LABEL = ("type", "ecs")
"""The extender's identity, as manifests/scheduler/rbac.yaml names it (a client certificate)."""
SERVICE_ACCOUNT = (QUEUE_NAMESPACE, CONTROLLER_COMPONENT)
"""``kq serve`` runs as this ServiceAccount (manifests/controller/rbac.yaml), with a TokenRequest token."""
"""The identity (client-certificate CN) our service uses on the dev cluster."""
KWOK_NODE_IP = "127.0.0.1"
"""Every fake node's InternalIP. The API server reads pod logs from ``https://<InternalIP>:<kubelet port>``; kwok
answers there (its ``--server-address``, the node's ``status.daemonEndpoints.kubeletEndpoint.Port``)."""


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One fake node."""

    name: str
    cpu: str
    memory: str
    gpus: int = 0
    pods: int = 110
    virtual: bool = False

    def manifest(self) -> dict[str, object]:
        """The Node object to create (kwok keeps the status' allocatable and capacity)."""
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "kwok.x-k8s.io/fake": "true",
        }
        key, value = VIRTUAL_NODE_LABEL if self.virtual else ECS_NODE_LABEL
        labels[key] = value
        # Local disk too: the training operator's MPIJob launcher asks 5Gi of ephemeral storage.
        resources: dict[str, str] = {"cpu": self.cpu, "memory": self.memory, "pods": str(self.pods),
                                     "ephemeral-storage": "500Gi"}
        if self.gpus:
            resources["nvidia.com/gpu"] = str(self.gpus)
        spec: dict[str, object] = {}
        if self.virtual:
            spec["taints"] = [VIRTUAL_NODE_TAINT]
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": labels,
                "annotations": {FAKE_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            },
            "spec": spec,
            "status": {"allocatable": resources, "capacity": resources},
        }


def default_nodes(
    regular: int = 4,
    cpu: str = "32",
    memory: str = "128Gi",
    gpus: int = 4,
    virtual: int = 1,
) -> tuple[NodeSpec, ...]:
    """``regular`` ECS nodes and ``virtual`` virtual-kubelet nodes."""
    nodes = [NodeSpec(f"ecs-{i}", cpu, memory, gpus) for i in range(regular)]
    nodes += [
        NodeSpec(
            "virtual-kubelet" if virtual == 1 else f"virtual-kubelet-{i}",
            "1000",
            "4Ti",
            0,
            pods=1000,
            virtual=True,
        )
        for i in range(virtual)
    ]
    return tuple(nodes)


def default_state_dir() -> Path:
    """``$KQ_DEV_DIR``, else ``.dev`` in the repository (or current directory)."""
    env = os.environ.get("KQ_DEV_DIR")
    if env:
        return Path(env).resolve()
    return (_repo_root() / ".dev").resolve()


def _repo_root() -> Path:
    here = Path(__file__).resolve().parent
    for candidate in (here, *here.parents):
        if (candidate / "pyproject.toml").exists() and (candidate / "webhook").is_dir():
            return candidate
    return Path.cwd()


@dataclass(frozen=True, slots=True)
class Ports:
    """Loopback ports, all derived from one base so two clusters (a user's and the tests') can coexist."""

    base: int = 16400

    @property
    def etcd(self) -> int:
        return self.base

    @property
    def etcd_peer(self) -> int:
        return self.base + 1

    @property
    def console(self) -> int:
        return self.base + 2

    @property
    def apiserver(self) -> int:
        return self.base + 3

    @property
    def controller_manager(self) -> int:
        return self.base + 4

    @property
    def scheduler(self) -> int:
        return self.base + 5

    @property
    def kwok(self) -> int:
        return self.base + 6

    @property
    def webhook(self) -> int:
        return self.base + 7

    @property
    def extender(self) -> int:
        return self.base + 8

    @property
    def metrics(self) -> int:
        return self.base + 9

    @property
    def training_operator_metrics(self) -> int:
        return self.base + 20

    @property
    def training_operator_probe(self) -> int:
        return self.base + 21

    @property
    def training_operator_webhook(self) -> int:
        return self.base + 22

    @property
    def kuberay_metrics(self) -> int:
        return self.base + 23

    @property
    def kuberay_probe(self) -> int:
        return self.base + 24

    @property
    def jobset_webhook(self) -> int:
        return self.base + 25

    @property
    def jobset_probe(self) -> int:
        return self.base + 26

    def all(self) -> dict[str, int]:
        """Every port by its use."""
        return {
            "etcd": self.etcd,
            "etcd-peer": self.etcd_peer,
            "console": self.console,
            "kube-apiserver": self.apiserver,
            "kube-controller-manager": self.controller_manager,
            "kube-scheduler": self.scheduler,
            "kwok": self.kwok,
            "webhook": self.webhook,
            "extender": self.extender,
            "metrics": self.metrics,
            "training-operator-metrics": self.training_operator_metrics,
            "training-operator-probe": self.training_operator_probe,
            "training-operator-webhook": self.training_operator_webhook,
            "kuberay-metrics": self.kuberay_metrics,
            "kuberay-probe": self.kuberay_probe,
            "jobset-webhook": self.jobset_webhook,
            "jobset-probe": self.jobset_probe,
        }


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """Everything ``kq dev up`` needs to know."""

    state_dir: Path = field(default_factory=default_state_dir)
    ports: Ports = field(default_factory=Ports)
    nodes: tuple[NodeSpec, ...] = field(default_factory=default_nodes)
    with_service: bool = True
    """Start our service (webhook, controller, extender) and register it, when it is installed."""
    service_args: tuple[str, ...] = ()
    """Extra arguments for ``kq serve`` (``--oversellrate 1``...)."""
    operators: tuple[str, ...] = ()
    """Job operators to run beside the control plane (``training-operator``, ``kuberay``, ``argo-workflows``,
    ``jobset``, ``mpi-operator``: :mod:`webhook.devcluster.operators`); ``kq dev up`` and the end-to-end tests
    run them all."""

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def controller_kubeconfig(self) -> Path:
        """The service's kubeconfig: the controller's service account (``kq dev up``), which the webhooks'
        conditions recognise."""
        return self.state_dir / "controller.kubeconfig"

    @property
    def logs(self) -> Path:
        return self.state_dir / "logs"

    @property
    def pki(self) -> Path:
        return self.state_dir / "pki"

    @property
    def run(self) -> Path:
        return self.state_dir / "run"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports.apiserver}"

    @property
    def pod_log(self) -> Path:
        """The generated log kwok serves as every fake pod's log (see :mod:`webhook.devcluster.podlog`)."""
        return self.state_dir / "kwok" / "pod.log"

    @property
    def kwok_logs_config(self) -> Path:
        """kwok's ``ClusterLogs`` document pointing every pod at :attr:`pod_log`."""
        return self.state_dir / "kwok" / "logs.yaml"
