"""End-to-end tier: one dev cluster per test session (each pytest-xdist worker's own), a namespace per test.

The cluster gets its own state directory and port base so it never touches a developer's own
``kq dev up`` cluster. Set ``KQ_E2E_KEEP=1`` to leave it running after the session for debugging.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from webhook.cli import devsystem
from webhook.devcluster import cluster
from webhook.devcluster.config import ClusterConfig, Ports
from webhook.devcluster.operators import OPERATORS

WORKER_PORTS = 200
"""Ports each pytest-xdist worker's cluster set takes: its dev cluster from the base, a module's second cluster
from ``base + 100`` (tests/e2e/test_devcluster_lifecycle.py)."""


def _port_base() -> int:
    """``$KQ_E2E_PORT_BASE`` (26400 by default), moved by ``WORKER_PORTS`` for each pytest-xdist worker after the
    first: with ``-n 2`` each worker runs its modules on a dev cluster of its own."""
    base = int(os.environ.get("KQ_E2E_PORT_BASE", "26400"))
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return base + WORKER_PORTS * int(worker.removeprefix("gw") or "0")


E2E_PORT_BASE = _port_base()


@dataclass
class DevCluster:
    """A running dev cluster and helpers to talk to it as a user would."""

    config: ClusterConfig
    bins: Path

    def restart_service(self, *args: str, env: Mapping[str, str] | None = None) -> None:
        """Restart ``kq serve`` with ``args`` after the cluster's own service arguments (and ``env``); without
        them it runs as the cluster was started (what the modules do to restore it)."""
        config = dataclasses.replace(self.config, service_args=(*self.config.service_args, *args))
        devsystem.restart_service(config, self.bins, env)

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True, user: str | None = None) -> str:
        """Run kubectl as the cluster admin (or impersonate ``user`` with --as)."""
        argv = [str(self.bins / "kubectl"), f"--kubeconfig={self.config.kubeconfig}", *args]
        if user:
            argv.append(f"--as={user}")
        result = subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False, timeout=120)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({result.returncode}): {result.stderr}")
        return result.stdout if result.returncode == 0 else result.stderr

    def kubectl_result(
        self, *args: str, stdin: str | None = None, user: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        argv = [str(self.bins / "kubectl"), f"--kubeconfig={self.config.kubeconfig}", *args]
        if user:
            argv.append(f"--as={user}")
        return subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False, timeout=120)

    def apply(self, obj: dict[str, Any] | list[dict[str, Any]]) -> str:
        items = obj if isinstance(obj, list) else [obj]
        doc = json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
        return self.kubectl("apply", "-f", "-", stdin=doc)

    def create(self, obj: dict[str, Any], user: str | None = None) -> subprocess.CompletedProcess[str]:
        return self.kubectl_result("create", "-o", "json", "-f", "-", stdin=json.dumps(obj), user=user)

    def get_json(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", "-o", "json", *args))

    def wait_until(self, check: Callable[[], bool], timeout: float = 60, what: str = "condition") -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return
            time.sleep(0.3)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@pytest.fixture(scope="session")
def dev_cluster() -> Iterator[DevCluster]:
    state = Path(tempfile.mkdtemp(prefix="kq-e2e-"))
    # The job operators run as on `kq dev up` (tests/e2e/test_operator_kinds.py).
    config = ClusterConfig(state_dir=state, ports=Ports(E2E_PORT_BASE), operators=tuple(OPERATORS))
    try:
        bins = devsystem.up(config)
    except BaseException:  # any failure half-way (not only DevClusterError) must not leave processes running
        cluster.down(config, echo=lambda _: None)
        raise
    try:
        yield DevCluster(config, bins)
    finally:
        if not os.environ.get("KQ_E2E_KEEP"):
            cluster.down(config, purge=True, echo=lambda _: None)


REUSED_NAMESPACES = frozenset(("user-a", "user-b", "user-c"))
"""The namespaces modules create under fixed names (examples/seed/00-namespaces.yaml); every other namespace of
the tier has a unique name."""


@pytest.fixture(scope="module", autouse=True)
def previous_namespaces_gone(dev_cluster: DevCluster) -> None:
    """Each module starts once what earlier modules deleted (``--wait=false``) no longer counts: no pod is left
    in a terminating namespace (none holds node capacity or quota), and the namespaces created under fixed names
    are gone (so they can be created again). Other terminating namespaces may linger: the namespace controller
    waits 5 s before it deletes one, and a namespace no tree names holds nothing. Bounded: after 120 s the
    module runs anyway."""

    def settled() -> bool:
        items = dev_cluster.get_json("namespaces")["items"]
        terminating = {item["metadata"]["name"] for item in items
                       if item.get("status", {}).get("phase") == "Terminating"}
        if not terminating:
            return True
        if terminating & REUSED_NAMESPACES:
            return False
        pods = dev_cluster.get_json("pods", "-A")["items"]
        return not any(pod["metadata"]["namespace"] in terminating for pod in pods)

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not settled():
        time.sleep(0.5)


@pytest.fixture
def namespace(dev_cluster: DevCluster) -> Iterator[str]:
    """A fresh namespace (with its default ServiceAccount ready); deleted after the test."""
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    dev_cluster.kubectl("create", "namespace", name)
    dev_cluster.wait_until(
        lambda: dev_cluster.kubectl_result("get", "serviceaccount", "default", "-n", name).returncode == 0,
        30,
        f"default ServiceAccount in {name}",
    )
    yield name
    dev_cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)
