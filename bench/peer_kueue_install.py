"""Kueue on a bare dev cluster, out of cluster on loopback (the peer benchmark's I/O side).

The manager binary comes from ``webhook/devcluster/build-binaries.sh kueue`` (built once into the binary cache,
keyed by version). Its CRDs and webhook manifests come from the same module in the Go module cache. It runs as
one more process of the dev cluster (pid file and log beside the others, so ``cluster.down`` stops it) in a
private mount namespace: with internal certificate management off it insists on reading
``/etc/kueue/metrics/certs/tls.{crt,key}``, which an overlay on ``/etc`` visible only to it provides without
touching the machine's ``/etc``.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import shutil
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from bench import peer_kueue_objects as objects
from webhook.devcluster import cluster, processes
from webhook.devcluster.config import ClusterConfig

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "webhook" / "devcluster" / "build-binaries.sh"
GOMOD = REPO / "webhook" / "devcluster" / "gomod-kueue"
COMPONENT = "kueue"
BUILD_TIMEOUT = 3600.0


@functools.cache
def binary() -> Path:
    """The kueue manager, built into the binary cache when absent (cold: minutes of CPU); asked once a process
    (a failed build raises, and is tried again on the next call)."""
    done = subprocess.run(["bash", str(BUILD), "kueue"], capture_output=True, text=True, check=False,
                          timeout=BUILD_TIMEOUT)
    if done.returncode != 0:
        raise RuntimeError(f"building Kueue failed ({BUILD} kueue): {done.stderr.strip()[-2000:]}")
    path = Path(done.stdout.strip().splitlines()[-1]) / "kueue"
    if not path.is_file():
        raise RuntimeError(f"{BUILD} kueue printed {done.stdout.strip()!r}, where no kueue binary is")
    return path


def module_dir() -> Path:
    """The Kueue module's source in the Go module cache (downloaded by the build), for its CRDs and manifests."""
    done = subprocess.run(["go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/kueue"], cwd=GOMOD,
                          capture_output=True, text=True, check=False, timeout=300,
                          env={**_go_env(), "GOFLAGS": "-mod=mod"})
    path = Path(done.stdout.strip())
    if done.returncode != 0 or not (path / "config" / "components").is_dir():
        raise RuntimeError(f"the Kueue module is not in the Go module cache ({done.stderr.strip()}); "
                           f"run {BUILD} kueue")
    return path


def _go_env() -> dict[str, str]:
    return {**os.environ, "GOTOOLCHAIN": "local"}


def ports(config: ClusterConfig, replica: int = 0) -> objects.ManagerPorts:
    """Three ports after the dev cluster's own ten, three more for each further replica."""
    base = config.ports.base + 3 * replica
    return objects.ManagerPorts(webhook=base + 10, metrics=base + 11, health=base + 12)


def name(replica: int = 0) -> str:
    """The process name of a replica (the first is :data:`COMPONENT`)."""
    return COMPONENT if replica == 0 else f"{COMPONENT}-{replica}"


def component(config: ClusterConfig, kueue: Path, unlimited: bool, *, replica: int = 0,
              leader_elect: bool = False) -> processes.Component:
    """How to run replica ``replica`` of the manager: its own ports, home and mount namespace."""
    home = config.state_dir / name(replica)
    certs = home / "certs"
    certs.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(config.pki / "service.crt", certs / "tls.crt")  # the dev PKI's 127.0.0.1 serving cert
    shutil.copyfile(config.pki / "service.key", certs / "tls.key")
    (home / "overlay").mkdir(exist_ok=True)
    settings = home / "config.yaml"
    settings.write_text(yaml.safe_dump(objects.manager_config(ports(config, replica), str(certs),
                                                              unlimited=unlimited, leader_elect=leader_elect)))
    overlay = home / "overlay"
    script = "; ".join([
        "set -e",
        f"mount -t tmpfs kq-peer-kueue {shlex.quote(str(overlay))}",
        f"mkdir {shlex.quote(str(overlay / 'upper'))} {shlex.quote(str(overlay / 'work'))}",
        f"mount -t overlay overlay -o lowerdir=/etc,upperdir={overlay / 'upper'},workdir={overlay / 'work'} /etc",
        "mkdir -p /etc/kueue/metrics/certs",
        f"cp {shlex.quote(str(certs))}/tls.crt {shlex.quote(str(certs))}/tls.key /etc/kueue/metrics/certs/",
        f"exec {shlex.quote(str(kueue))} --config={shlex.quote(str(settings))} --zap-log-level=info",
    ])
    unshare = shutil.which("unshare") or "/usr/bin/unshare"
    return processes.Component(name(replica), (unshare, "-m", "--propagation", "private", "sh", "-c", script),
                               ports(config, replica).webhook, env={"KUBECONFIG": str(config.kubeconfig)})


def ready(config: ClusterConfig, replica: int = 0) -> bool:
    """Whether replica ``replica`` answers its ``/readyz``."""
    url = f"http://127.0.0.1:{ports(config, replica).health}/readyz"
    try:
        with urllib.request.urlopen(url, timeout=1.0) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def start(config: ClusterConfig, kueue: Path, unlimited: bool, *, replica: int = 0,
          leader_elect: bool = False) -> None:
    """Start replica ``replica`` and wait until it is ready (a follower is ready too: its webhook serves)."""
    processes.start(component(config, kueue, unlimited, replica=replica, leader_elect=leader_elect),
                    config.run, config.logs)
    marker = str(config.state_dir)

    def up() -> bool:
        if processes.running_pid(config.run, name(replica), marker) is None:
            raise RuntimeError(f"kueue exited at start; see {config.logs}/{name(replica)}.log")
        return ready(config, replica)

    processes.wait_for(up, 120, f"{name(replica)} /readyz")


def register_webhooks(config: ClusterConfig, bins: Path, replica: int = 0) -> None:
    """Kueue's webhook configurations, pointed at replica ``replica`` (as a Service would route to it)."""
    manifests = yaml.safe_load_all((module_dir() / "config" / "components" / "webhook" / "manifests.yaml")
                                   .read_text())
    ca = (config.pki / "ca.crt").read_bytes()
    _apply(config, bins, objects.webhook_configs(manifests, f"https://127.0.0.1:{ports(config, replica).webhook}",
                                                 ca))


def _apply(config: ClusterConfig, bins: Path, items: list[dict[str, Any]]) -> None:
    doc = json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
    cluster.kubectl(config, bins, "apply", "--server-side", "--force-conflicts", "-f", "-", stdin=doc)


def install(config: ClusterConfig, bins: Path, kueue: Path, *, unlimited: bool, leader_elect: bool = False) -> None:
    """CRDs, namespace, the manager (until ready) and its webhooks, on a cluster that has only the control
    plane."""
    crds = module_dir() / "config" / "components" / "crd" / "bases"
    cluster.kubectl(config, bins, "apply", "--server-side", "--force-conflicts", "-f", str(crds))
    cluster.kubectl(config, bins, "wait", "--for=condition=Established", "--timeout=60s", "-f", str(crds))
    _apply(config, bins, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": objects.NAMESPACE}}])
    start(config, kueue, unlimited, leader_elect=leader_elect)
    register_webhooks(config, bins)


def pid(config: ClusterConfig, replica: int = 0) -> int | None:
    return processes.running_pid(config.run, name(replica), str(config.state_dir))
