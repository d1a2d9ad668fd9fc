"""A do-nothing admission webhook on the dev cluster: the least any webhook costs (a report's yardstick).

``bench/noop-webhook/main.go`` allows every request at once (``/mutate`` adds one annotation by JSONPatch). It
is built with the machine's Go into the binary cache, keyed by its source and the Go version (standard library
only: seconds, no network), and runs as one more process of the dev cluster (pid file and log beside the
others, so ``cluster.down`` stops it too), serving the dev PKI's 127.0.0.1 certificate over HTTP/1.1.
:func:`configurations` sends the Jobs created in one namespace through a mutating and a validating call to it:
what a job submitted open costs the API server in any system that holds jobs with admission webhooks, before
that system's own work (issue 23).
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from webhook.api.kinds import MUTATING_WEBHOOK_CONFIGURATION, VALIDATING_WEBHOOK_CONFIGURATION
from webhook.devcluster import processes
from webhook.devcluster.config import ClusterConfig

SOURCE = Path(__file__).resolve().parent / "noop-webhook"
COMPONENT = "noop-webhook"
NAME = "bench-noop"
"""The name of both configurations and the prefix of both webhooks."""
ANNOTATION = "bench.example/noop"
"""What ``/mutate`` adds (``main.go`` writes the same key)."""
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kube-queue" / "bin"
BUILD_TIMEOUT = 600.0


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise RuntimeError("the do-nothing webhook needs Go on PATH to be built (go build, standard library only)")
    return go


def binary() -> Path:
    """The built webhook: ``<cache>/noop-webhook-<source hash>-<go version>/noop-webhook``, built when absent."""
    go = _go()
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"}
    version = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=True, env=env,
                             timeout=60).stdout.strip()
    digest = hashlib.sha256(b"".join((SOURCE / name).read_bytes() for name in ("go.mod", "main.go"))).hexdigest()
    path = CACHE / f"noop-webhook-{digest[:12]}-{version}" / "noop-webhook"
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"noop-webhook.tmp.{os.getpid()}")
    done = subprocess.run([go, "build", "-o", str(partial), "."], cwd=SOURCE, capture_output=True, text=True,
                          check=False, env=env, timeout=BUILD_TIMEOUT)
    if done.returncode != 0 or not partial.is_file():
        raise RuntimeError(f"building {SOURCE} failed: {done.stderr.strip()[-2000:]}")
    partial.replace(path)
    return path


def port(config: ClusterConfig) -> int:
    """The port after the dev cluster's own ten."""
    return config.ports.base + 10


def start(config: ClusterConfig) -> None:
    """Run it until :func:`stop` (or ``cluster.down``); returns once it answers."""
    argv = (str(binary()), f"127.0.0.1:{port(config)}", str(config.pki / "service.crt"),
            str(config.pki / "service.key"))
    processes.start(processes.Component(COMPONENT, argv, port(config)), config.run, config.logs)
    marker = str(config.state_dir)

    def ready() -> bool:
        if processes.running_pid(config.run, COMPONENT, marker) is None:
            raise RuntimeError(f"{COMPONENT} exited at start; see {config.logs}/{COMPONENT}.log")
        return processes.port_open(port(config))

    processes.wait_for(ready, 30, f"{COMPONENT} on port {port(config)}")


def stop(config: ClusterConfig) -> None:
    processes.stop(config.run, COMPONENT, str(config.state_dir))


def configurations(config: ClusterConfig, namespace: str) -> list[dict[str, Any]]:
    """A Mutating- and a ValidatingWebhookConfiguration that send every Job created in ``namespace`` to it,
    failing closed with the same timeout as ours."""
    ca = base64.b64encode((config.pki / "ca.crt").read_bytes()).decode("ascii")

    def hook(kind: str, path: str) -> dict[str, Any]:
        return {
            "name": f"jobs.{kind}.{NAME}.example",
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "timeoutSeconds": 5,
            "clientConfig": {"url": f"https://127.0.0.1:{port(config)}{path}", "caBundle": ca},
            "rules": [{"apiGroups": ["batch"], "apiVersions": ["v1"], "resources": ["jobs"],
                       "operations": ["CREATE"], "scope": "Namespaced"}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        }

    return [
        {"apiVersion": kind.api_version, "kind": kind.kind, "metadata": {"name": NAME}, "webhooks": [hook(verb, path)]}
        for kind, verb, path in ((MUTATING_WEBHOOK_CONFIGURATION, "mutate", "/mutate"),
                                 (VALIDATING_WEBHOOK_CONFIGURATION, "validate", "/validate"))
    ]

