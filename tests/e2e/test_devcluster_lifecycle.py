"""``kq dev down`` leaves no process and no listening port behind (a cluster of its own, control plane only)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from tests.e2e.conftest import E2E_PORT_BASE, DevCluster
from webhook.devcluster import cluster, processes
from webhook.devcluster.config import ClusterConfig, Ports, default_nodes


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_down_leaves_no_process_or_port(dev_cluster: DevCluster) -> None:
    config = ClusterConfig(
        state_dir=Path(tempfile.mkdtemp(prefix="kq-lifecycle-")),
        ports=Ports(E2E_PORT_BASE + 100),
        nodes=default_nodes(regular=1, virtual=1),
        with_service=False,
    )
    try:
        cluster.up(config, bins=dev_cluster.bins, echo=lambda _: None)
        running = cluster.status(config).running
        pids = [pid for pid in running.values() if pid is not None]
        assert len(pids) == 6  # etcd, apiserver, kcm, scheduler, kwok, kwok-pod-log
        assert processes.busy_ports([config.ports.apiserver, config.ports.etcd])
    finally:
        cluster.down(config, purge=True, echo=lambda _: None)
    assert not [pid for pid in pids if _alive(pid)]
    assert processes.busy_ports(list(config.ports.all().values())) == []
    assert not config.state_dir.exists()
