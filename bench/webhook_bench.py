"""Benchmark of the mutating webhook over HTTPS on loopback (a report, not a test: it asserts nothing).

    .venv/bin/python bench/webhook_bench.py [--rate 500] [--seconds 10] [--concurrency 64] [--runs 3]

1. the handler alone (``respond``: decode, decide, patch, encode) in-process, per request kind;
2. the service as ``kq serve`` serves it (``make_app`` with the seed's tree; the event loop, TLS context, server
   settings and heap freeze of :mod:`webhook.admission.server`; INFO logging as ``kq`` configures it) in a child
   process, driven by the native load generator ``bench/loadgen`` (Go, standard library only; built on demand
   into ``~/.cache/kube-queue/bin/loadgen-<hash of its source>``, or ``$KQ_CACHE_DIR/bin``). It runs open loop
   at ``--rate``: latency counts from each request's *scheduled* send time, so a stalled server cannot hide its
   queueing; the time from the *actual* send is printed in brackets. ``--runs`` runs, each with the load
   average, the CPU the server and the client used, and how late the client itself released requests;
3. the same client unpaced (closed loop) for the highest throughput;
4. for comparison, the client this benchmark used before: aiohttp in a Python process, paced at the same rate.
   It shares the two cores with the server, and its event loop's lateness lands in what it measures. If the
   Go build fails (no ``go``, no network for the toolchain), the benchmark says so and uses only this client.

The requests alternate between the seed's Job (``examples/seed/jobs/pi.yaml``: 6 pods x 10 CPU / 10Gi, written
with ``suspend: false``) and a plain Pod, both as the apiserver sends them to a mutating webhook (defaults
applied, ``managedFields``, the service-account volume); each gets a patch. Goal (issue 4): p99 under 5 ms at
500 requests/s. Figures depend on the machine and its load: the 2 cores here are shared.
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import hashlib
import math
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.objects import seed_tree
from webhook.admission.app import respond
from webhook.admission.server import choose_loop
from webhook.admission.state import AdmissionState, Settings
from webhook.cli.certs import write_certs

LOADGEN_SOURCE = Path(__file__).resolve().parent / "loadgen"
BUILD_SECONDS = 300.0

JOB_GVK = {"group": "batch", "version": "v1", "kind": "Job"}
POD_GVK = {"group": "", "version": "v1", "kind": "Pod"}


# ---------------------------------------------------------------- request bodies


def _managed_fields(manager: str, api_version: str, spec_fields: dict[str, Any]) -> list[dict[str, Any]]:
    """One ``managedFields`` entry as server-side field tracking writes it for ``kubectl create``."""
    return [
        {
            "manager": manager,
            "operation": "Update",
            "apiVersion": api_version,
            "time": "2025-01-01T00:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}, "f:spec": spec_fields},
        }
    ]


def _container(name: str, image: str, command: list[str], cpu: str, memory: str) -> dict[str, Any]:
    """A container with the defaults the apiserver fills in."""
    return {
        "name": name,
        "image": image,
        "command": command,
        "resources": {"requests": {"cpu": cpu, "memory": memory}, "limits": {"cpu": cpu, "memory": memory}},
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
    }


def _pod_defaults() -> dict[str, Any]:
    return {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "securityContext": {},
        "schedulerName": "default-scheduler",
    }


def seed_job(index: int) -> dict[str, Any]:
    """The seed's Job (``examples/seed/jobs/pi.yaml`` with ``suspend: false``) after the apiserver's defaulting."""
    container = _container("pi", "perl:5.34.0", ["perl", "-Mbignum=bpi", "-wle", "print bpi(2000)"], "10", "10Gi")
    spec_fields: dict[str, Any] = {
        "f:completions": {}, "f:parallelism": {}, "f:suspend": {}, "f:template": {"f:spec": {}},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"pi-{index}",
            "namespace": "user-a",
            "labels": {"app": "pi"},
            "managedFields": _managed_fields("kubectl-create", "batch/v1", spec_fields),
        },
        "spec": {
            "parallelism": 6,
            "completions": 6,
            "backoffLimit": 6,
            "completionMode": "NonIndexed",
            "suspend": False,
            "podReplacementPolicy": "TerminatingOrFailed",
            "manualSelector": False,
            "template": {
                "metadata": {"labels": {"app": "pi"}},
                "spec": {"containers": [container], **_pod_defaults()},
            },
        },
        "status": {},
    }


def plain_pod(index: int) -> dict[str, Any]:
    """A bare Pod in user-b as it reaches the webhooks: defaulted, with the service-account token volume and
    the default tolerations the built-in admission plugins add first."""
    container = _container("main", "busybox:1.36", ["sleep", "3600"], "1", "1Gi")
    container["volumeMounts"] = [
        {"name": "kube-api-access", "readOnly": True, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}
    ]
    volume = {
        "name": "kube-api-access",
        "projected": {
            "defaultMode": 420,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
            ],
        },
    }
    tolerations = [
        {"key": f"node.kubernetes.io/{taint}", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
        for taint in ("not-ready", "unreachable")
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"sleeper-{index}",
            "namespace": "user-b",
            "labels": {"app": "sleeper"},
            "managedFields": _managed_fields("kubectl-run", "v1", {"f:containers": {}, "f:restartPolicy": {}}),
        },
        "spec": {
            "containers": [container],
            "volumes": [volume],
            "serviceAccountName": "default",
            "serviceAccount": "default",
            "tolerations": tolerations,
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
            **_pod_defaults(),
        },
        "status": {},
    }


def review_body(obj: dict[str, Any], gvk: dict[str, str], resource: str, index: int) -> bytes:
    """The AdmissionReview the apiserver POSTs for creating ``obj``."""
    metadata = obj["metadata"]
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": f"0b4d6f2e-bench-{index:08d}",
            "kind": gvk,
            "resource": {"group": gvk["group"], "version": gvk["version"], "resource": resource},
            "requestKind": gvk,
            "requestResource": {"group": gvk["group"], "version": gvk["version"], "resource": resource},
            "name": metadata["name"],
            "namespace": metadata["namespace"],
            "operation": "CREATE",
            "userInfo": {"username": "alice", "groups": ["developers", "system:authenticated"]},
            "object": obj,
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions", "fieldManager": "kubectl-create"},
        },
    }
    return orjson.dumps(review)


def job_body(index: int) -> bytes:
    return review_body(seed_job(index), JOB_GVK, "jobs", index)


def pod_body(index: int) -> bytes:
    return review_body(plain_pod(index), POD_GVK, "pods", index)


def mixed_bodies(count: int) -> list[bytes]:
    """Job, Pod, Job, Pod, ... (distinct names and uids)."""
    return [job_body(i) if i % 2 == 0 else pod_body(i) for i in range(count)]


# ---------------------------------------------------------------- figures

PERCENTILES = (("p50", 0.5, "p50"), ("p90", 0.9, "p90"), ("p99", 0.99, "p99"), ("p99.9", 0.999, "p99_9"))
"""Label, fraction, and the key of the Go client's JSON."""


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile (as the Go client computes it)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))
    return ordered[index]


def load_now() -> str:
    return f"load {os.getloadavg()[0]:.2f}"


def spread(ms: Sequence[float]) -> str:
    """``p50=.. p90=.. p99=.. p99.9=.. max=.. ms``."""
    cells = [f"{label}={percentile(ms, fraction):.2f}" for label, fraction, _ in PERCENTILES]
    return "  ".join([*cells, f"max={max(ms) if ms else float('nan'):.2f} ms"])


def bench_handler(name: str, make_body: Callable[[int], bytes], count: int) -> None:
    """``respond`` in-process: decode, decide, patch, encode."""
    state, settings = AdmissionState(tree=seed_tree()), Settings()
    bodies = [make_body(i) for i in range(count)]
    latencies = []
    for body in bodies:
        t0 = time.perf_counter()
        status, answer = respond("mutate", body, state, settings)
        latencies.append((time.perf_counter() - t0) * 1000)
        assert status == 200 and b'"patch"' in answer, answer
    print(f"  {name + f' ({len(bodies[0])} B)':<24} n={count}  {spread(latencies)}", flush=True)


# ---------------------------------------------------------------- the Go load generator


def cache_dir() -> Path:
    """Where built binaries live (as for the dev cluster's: ``$KQ_CACHE_DIR`` or ``~/.cache/kube-queue``)."""
    return Path(os.environ.get("KQ_CACHE_DIR") or Path.home() / ".cache" / "kube-queue") / "bin"


def go_env() -> dict[str, str]:
    """Build with the machine's toolchain only, no workspace, no cgo."""
    return {**os.environ, "GOTOOLCHAIN": "local", "GOWORK": "off", "CGO_ENABLED": "0", "GOFLAGS": ""}


def source_hash() -> str:
    """A hash of the generator's source files (and the Go version), naming its cached binary."""
    digest = hashlib.sha256()
    for path in sorted(LOADGEN_SOURCE.iterdir()):
        if path.suffix in {".go", ".mod", ".sum"} and not path.name.endswith("_test.go"):
            digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    version = subprocess.run(["go", "version"], capture_output=True, text=True, env=go_env(), check=True).stdout
    digest.update(version.encode())
    return digest.hexdigest()[:16]


def build_loadgen() -> tuple[Path | None, str]:
    """``(binary, "")`` built or found in the cache, or ``(None, why not)``."""
    if shutil.which("go") is None:
        return None, "`go` is not on PATH"
    try:
        target = cache_dir() / f"loadgen-{source_hash()}"
    except (OSError, subprocess.CalledProcessError) as error:
        return None, f"cannot read the Go version or the source: {error}"
    if target.is_file():
        return target, ""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    print(f"building the load generator: go build -o {target} ./bench/loadgen", file=sys.stderr, flush=True)
    try:
        done = subprocess.run(["go", "build", "-trimpath", "-o", str(partial), "."], cwd=LOADGEN_SOURCE,
                              env=go_env(), capture_output=True, text=True, timeout=BUILD_SECONDS, check=False)
    except subprocess.TimeoutExpired:
        return None, f"go build took over {BUILD_SECONDS:.0f} s"
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        return None, f"go build failed (exit {done.returncode}): {done.stderr.strip()[-600:]}"
    partial.replace(target)
    return target, ""


def run_loadgen(binary: Path, url: str, ca: Path, bodies: Path, *, rate: float, seconds: float, requests: int,
                conns: int, pid: int) -> dict[str, Any]:
    """One run of the generator (it also reads the server's CPU time, ``pid``, over the timed part); its JSON."""
    argv = [str(binary), "-url", url, "-ca", str(ca), "-bodies", str(bodies), "-rate", str(rate),
            "-duration", f"{seconds}s", "-conns", str(conns), "-expect", '"allowed":true', "-pid", str(pid)]
    if requests:
        argv += ["-requests", str(requests)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 120, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"loadgen failed (exit {done.returncode}): {done.stderr.strip()[-600:]}")
    result: dict[str, Any] = orjson.loads(done.stdout)
    return result


def both(result: dict[str, Any]) -> str:
    """``p50=1.02 (0.90)  ...``: from the scheduled send, and in brackets from the actual send."""
    scheduled, sent = result["scheduled_ms"], result["sent_ms"]
    cells = [f"{label}={scheduled[key]:.2f} ({sent[key]:.2f})" for label, _, key in PERCENTILES]
    return "  ".join([*cells, f"max={scheduled['max']:.2f} ({sent['max']:.2f}) ms"])


def costs(result: dict[str, Any]) -> str:
    """CPU of the server (per request, and as a share of one core) and of the client; when paced, how late the
    client released requests (its own timer and scheduling, counted in the latency from the scheduled send)."""
    seconds = result["seconds"] or float("nan")
    server_cpu, client_cpu = result["server_cpu_seconds"], result["client_cpu_seconds"]
    text = (f"CPU server {1000 * server_cpu / max(result['requests'], 1):.2f} ms/request = "
            f"{100 * server_cpu / seconds:.0f}%, client {100 * client_cpu / seconds:.0f}%")
    if result["unpaced"]:
        return text + " of a core"
    return text + f" of a core, client late p99 {result['dispatch_lag_ms']['p99']:.2f} ms"


def print_paced(run: int, runs: int, result: dict[str, Any], load: str) -> None:
    print(f"  run {run}/{runs}  {load}  {result['achieved_rate']:.1f}/s  {both(result)}  errors={result['errors']}  "
          f"{costs(result)}", flush=True)
    if result.get("first_error"):
        print(f"    first error: {result['first_error']}", flush=True)


# ---------------------------------------------------------------- the service


def serve_forever(port: int, cert: Path, key: Path) -> None:
    """The service process: the real app on loopback, served as ``kq serve`` serves it, logging as ``kq`` does
    (INFO, one line per patched or denied request, to stderr: a pipe, as in a container)."""
    import logging  # noqa: PLC0415

    from webhook.admission import server  # noqa: PLC0415
    from webhook.admission.state import StateStore  # noqa: PLC0415

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s", stream=sys.stderr)
    store = StateStore(AdmissionState(tree=seed_tree()), ready=True)
    server.run_forever(store, Settings(), host="127.0.0.1", port=port, cert=cert, key=key)


class Service:
    """The service in a child process (``webhook_bench.py --serve``); its log pipe is drained and the last
    lines kept, to show if it fails."""

    def __init__(self, port: int, cert: Path, key: Path) -> None:
        argv = [sys.executable, __file__, "--serve", str(port), str(cert), str(key)]
        self.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.tail: collections.deque[bytes] = collections.deque(maxlen=20)
        self.lines = 0
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines += 1
            self.tail.append(line)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def last_lines(self) -> str:
        return b"".join(self.tail).decode(errors="replace")


async def wait_up(url: str, context: ssl.SSLContext) -> None:
    async with aiohttp.ClientSession() as session:
        for _ in range(400):
            try:
                async with session.get(url + "/readyz", ssl=context) as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    raise RuntimeError("the service did not come up")


async def drive(
    url: str, context: ssl.SSLContext, bodies: Sequence[bytes], *, rate: float | None, concurrency: int
) -> tuple[list[float], float, int]:
    """The Python client: send ``bodies`` (at ``rate``/s, or as fast as ``concurrency`` allows when ``None``)."""
    latencies: list[float] = []
    errors = 0
    connector = aiohttp.TCPConnector(limit=concurrency, ssl=context)
    gate = asyncio.Semaphore(concurrency)
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(connector=connector) as session:
        # Warm the connection pool and TLS sessions.
        await asyncio.gather(
            *(session.post(url + "/mutate", data=bodies[0], headers=headers) for _ in range(concurrency))
        )
        loop = asyncio.get_running_loop()
        start = loop.time()

        async def one(index: int) -> None:
            nonlocal errors
            planned = start + index / rate if rate else None
            if planned is not None:
                delay = planned - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
            async with gate:
                sent = planned if planned is not None else loop.time()
                try:
                    async with session.post(url + "/mutate", data=bodies[index], headers=headers) as resp:
                        await resp.read()
                        if resp.status != 200:
                            errors += 1
                except aiohttp.ClientError:
                    errors += 1
                latencies.append(loop.time() - sent)

        await asyncio.gather(*(one(i) for i in range(len(bodies))))
        elapsed = loop.time() - start
    return latencies, elapsed, errors


def go_runs(
    binary: Path, url: str, files: dict[str, Path], bodies: Path, *, pid: int, args: argparse.Namespace
) -> None:
    """``--runs`` paced runs, then one unpaced, with the Go client."""
    print(f"HTTPS /mutate at {args.rate:.0f}/s, Go client ({args.concurrency} keep-alive connections, "
          f"{args.seconds:.0f} s a run); ms from the scheduled send (from the actual send):", flush=True)
    p99s = []
    for run in range(1, args.runs + 1):
        load = load_now()
        result = run_loadgen(binary, url, files["ca.crt"], bodies, rate=args.rate, seconds=args.seconds,
                             requests=0, conns=args.concurrency, pid=pid)
        print_paced(run, args.runs, result, load)
        p99s.append(result["scheduled_ms"]["p99"])
    print(f"  p99 over {args.runs} runs: {', '.join(f'{p:.2f}' for p in p99s)} ms (goal < 5 ms)", flush=True)
    load = load_now()
    result = run_loadgen(binary, url, files["ca.crt"], bodies, rate=0, seconds=args.seconds,
                         requests=int(args.rate * args.seconds), conns=args.concurrency, pid=pid)
    sent = result["sent_ms"]
    print(f"HTTPS /mutate unpaced (closed loop), Go client: {load}  {result['achieved_rate']:.1f}/s  "
          f"p50={sent['p50']:.2f}  p99={sent['p99']:.2f} ms from the send  errors={result['errors']}  "
          f"{costs(result)}", flush=True)


def python_runs(url: str, context: ssl.SSLContext, args: argparse.Namespace, runs: int) -> None:
    """The Python aiohttp client paced at ``--rate``: it shares the cores, and its event loop's lateness counts
    as latency (the figure this benchmark printed before the Go client)."""
    total = int(args.rate * args.seconds)
    print(f"HTTPS /mutate at {args.rate:.0f}/s, Python aiohttp client ({args.concurrency} connections; for "
          "comparison: its own event-loop lateness counts as latency); ms from the scheduled send:", flush=True)
    for run in range(1, runs + 1):
        load = load_now()
        seconds, elapsed, errors = asyncio.run(
            drive(url, context, mixed_bodies(total), rate=args.rate, concurrency=args.concurrency)
        )
        ms = [x * 1000 for x in seconds]
        print(f"  run {run}/{runs}  {load}  {len(ms) / elapsed:.1f}/s  {spread(ms)}  errors={errors}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=500.0, help="target requests per second (default 500)")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each paced run (default 10)")
    parser.add_argument("--concurrency", type=int, default=64, help="client connections (default 64)")
    parser.add_argument("--runs", type=int, default=3, help="paced runs with the Go client (default 3)")
    parser.add_argument("--no-python-client", action="store_true", help="skip the Python-client comparison")
    parser.add_argument("--serve", nargs=3, metavar=("PORT", "CERT", "KEY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        port, cert, key = args.serve
        serve_forever(int(port), Path(cert), Path(key))
        return

    loop = choose_loop()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, {load_now()} at the start; "
          f"server event loop {loop.name} ({loop.reason})", flush=True)
    print("handler only (in-process: decode, decide, patch, encode), ms:", flush=True)
    bench_handler("seed Job", job_body, 2500)
    bench_handler("plain Pod", pod_body, 2500)
    binary, why_not = build_loadgen()
    if binary is None:
        print(f"Go load generator unavailable: {why_not}. Falling back to the Python client, whose figures include "
              "its own event-loop lateness.", flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        files = write_certs(Path(tmp), [], ["127.0.0.1"])
        bodies = Path(tmp) / "bodies.ndjson"
        bodies.write_bytes(b"\n".join(mixed_bodies(1000)) + b"\n")
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        service = Service(port, files["tls.crt"], files["tls.key"])
        try:
            url = f"https://127.0.0.1:{port}"
            try:
                asyncio.run(wait_up(url, ssl.create_default_context(cafile=str(files["ca.crt"]))))
            except RuntimeError as error:
                raise SystemExit(f"{error}; its last lines:\n{service.last_lines()}") from None
            drive_service(binary, url, files, bodies, service=service, args=args)
        finally:
            service.stop()
        print(f"the service logged {service.lines} lines to its stderr pipe (INFO: one per patched request)")


def drive_service(
    binary: Path | None, url: str, files: dict[str, Path], bodies: Path, *, service: Service, args: argparse.Namespace
) -> None:
    """The Go client's runs (the Python client's if there is no Go client or it fails), then the comparison."""
    context = ssl.create_default_context(cafile=str(files["ca.crt"]))
    if binary is not None:
        try:
            go_runs(binary, url + "/mutate", files, bodies, pid=service.process.pid, args=args)
        except (RuntimeError, subprocess.TimeoutExpired, orjson.JSONDecodeError) as error:
            print(f"Go load generator failed: {error}. Falling back to the Python client.", flush=True)
            binary = None
    if binary is None:
        python_runs(url, context, args, args.runs)
    elif not args.no_python_client:
        python_runs(url, context, args, 1)


if __name__ == "__main__":
    main()
