"""End to end on a dev cluster of its own: jobs admitted per second from a deep queue (a report, not a test).

    .venv/bin/python -m bench.e2e_bench [--jobs 500] [--port-base 56400]

1. Starts a dev cluster (``webhook.cli.devsystem.up``) in a temporary state directory on its own ports, with the
   service (webhook, controller, extender) running ``--oversellrate=1``.
2. Installs a tree whose leaf holds namespace ``bench-admit`` with ``kube-queue/max-jobs: 0``: nothing can be
   admitted, so the JOBS small Jobs created there (1 pod, 10m CPU, 16Mi) pile up in the queue, held by the webhook.
3. Watches the Jobs, then lifts the cap (patches the tree). Each Job's admission is the moment the watch sees its
   ``spec.suspend`` flip to false with the controller's admission annotation. The sustained rate is
   ``(N - 1) / (last - first admission)``; the end-to-end rate counts from the patch.
4. Stops the cluster and removes its state.

Goal (issue 7): at least 100 jobs/s sustained; the peer (Kueue) is ~42/s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.machine import header
from webhook.api.kinds import ELASTIC_QUOTA_TREE
from webhook.api.names import ADMISSION_ANNOTATION, MANAGED_NAMESPACE_LABEL, TREE_NAMESPACE
from webhook.cli import devsystem
from webhook.devcluster import cluster
from webhook.devcluster.config import ClusterConfig, Ports
from webhook.kube.client import KubeApiError, KubeClient, ResourceRef

COMMAND = ".venv/bin/python -m bench.e2e_bench"
NAMESPACE = "bench-admit"
TREES = ResourceRef.of(ELASTIC_QUOTA_TREE, TREE_NAMESPACE)
NAMESPACES = ResourceRef("", "v1", "namespaces")
JOBS = ResourceRef("batch", "v1", "jobs", NAMESPACE)


def tree(cap: int) -> dict[str, Any]:
    total = {"cpu": "1000", "memory": "1000Gi"}
    return {
        "apiVersion": ELASTIC_QUOTA_TREE.api_version,
        "kind": "ElasticQuotaTree",
        "metadata": {"name": "elasticquotatree", "namespace": TREE_NAMESPACE},
        "spec": {"root": {"name": "root", "min": total, "max": total, "children": [
            {"name": "bench", "min": total, "max": {**total, "kube-queue/max-jobs": cap}, "namespaces": [NAMESPACE]},
        ]}},
    }


def job(index: int) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"small-{index:04d}", "namespace": NAMESPACE},
        "spec": {
            "parallelism": 1,
            "completions": 1,
            "template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}},
        },
    }


async def _wait(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.25)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


async def measure(kubeconfig: Path, count: int) -> dict[str, Any]:
    async with await KubeClient.connect(str(kubeconfig)) as client:
        await client.create(TREES, tree(0))
        await client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})

        async def managed() -> bool:
            labels = (await client.get(NAMESPACES, NAMESPACE)).get("metadata", {}).get("labels", {})
            return bool(labels.get(MANAGED_NAMESPACE_LABEL) == "true")

        await _wait(managed, 120, f"namespace {NAMESPACE} to be managed")

        async def service_account() -> bool:
            try:
                await client.get(ResourceRef("", "v1", "serviceaccounts", NAMESPACE), "default")
            except KubeApiError:
                return False
            return True

        await _wait(service_account, 60, "the default ServiceAccount")
        semaphore = asyncio.Semaphore(16)

        async def create(index: int) -> None:
            async with semaphore:
                await client.create(JOBS, job(index))

        started = time.perf_counter()
        await asyncio.gather(*(create(index) for index in range(count)))
        created = time.perf_counter() - started

        async def all_held() -> bool:
            items = (await client.list_page(JOBS, limit=count + 10)).get("items", [])
            return len(items) == count and all(item["spec"].get("suspend") for item in items)

        await _wait(all_held, 120, f"{count} held Jobs")
        listing = await client.list_page(JOBS, limit=count + 10)
        version = str(listing["metadata"]["resourceVersion"])
        admitted: dict[str, float] = {}
        done = asyncio.Event()

        async def watch() -> None:
            nonlocal version
            while not done.is_set():
                async with client.watch(JOBS, resource_version=version, timeout_seconds=60) as events:
                    async for event in events:
                        obj = event.get("object", {})
                        metadata = obj.get("metadata", {})
                        if metadata.get("resourceVersion"):
                            version = str(metadata["resourceVersion"])
                        if event.get("type") not in ("ADDED", "MODIFIED"):
                            continue
                        name = metadata.get("name")
                        released = not obj.get("spec", {}).get("suspend")
                        recorded = ADMISSION_ANNOTATION in (metadata.get("annotations") or {})
                        if released and recorded and name not in admitted:
                            admitted[name] = time.perf_counter()
                            if len(admitted) == count:
                                done.set()
                                return

        watcher = asyncio.ensure_future(watch())
        await asyncio.sleep(1.0)  # the watch is open before the cap is lifted
        patch = [{"op": "replace", "path": "/spec/root/children/0/max/kube-queue~1max-jobs", "value": count * 2}]
        lifted = time.perf_counter()
        await client.json_patch(TREES, "elasticquotatree", patch)
        try:
            await asyncio.wait_for(done.wait(), timeout=600)
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError, KubeApiError):
                await watcher
        times = sorted(admitted.values())
        return {
            "jobs": count,
            "created_seconds": created,
            "first_after_patch": times[0] - lifted,
            "last_after_patch": times[-1] - lifted,
            "sustained_per_second": (count - 1) / (times[-1] - times[0]) if times[-1] > times[0] else float("inf"),
            "end_to_end_per_second": count / (times[-1] - lifted),
        }


def report(figures: dict[str, Any] | None, command: str, problem: str = "") -> str:
    lines = header("End to end on the dev cluster: admissions per second from a deep queue", command)
    if figures is None:
        return "\n".join([*lines, f"not measured: {problem}", ""])
    lines += [
        f"A dev cluster of its own (real kube-apiserver, etcd, kube-controller-manager, kube-scheduler, kwok; the "
        f"service with `--oversellrate=1`). {figures['jobs']} small Jobs (1 pod, 10m CPU) wait in one quota capped "
        "at `kube-queue/max-jobs: 0`; then the cap is lifted. An admission is the moment a watch sees the Job "
        "released (`spec.suspend: false`) with its admission record; the Job controller creates and the "
        "scheduler binds the pods meanwhile, on the same machine.",
        "",
        "| figure | value | goal / peer |",
        "|---|---:|---:|",
        f"| sustained admissions (first to last) | {figures['sustained_per_second']:.1f} jobs/s | >= 100/s; "
        "Kueue ~42/s |",
        f"| from lifting the cap to the last admission | {figures['end_to_end_per_second']:.1f} jobs/s "
        f"({figures['last_after_patch']:.2f} s for {figures['jobs']}) | - |",
        f"| from lifting the cap to the first admission | {figures['first_after_patch'] * 1000:.0f} ms | - |",
        f"| creating the {figures['jobs']} Jobs (webhook on the path, 16 at a time) | "
        f"{figures['jobs'] / figures['created_seconds']:.1f} jobs/s | - |",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--port-base", type=int, default=56400)
    args = parser.parse_args(argv)
    command = COMMAND if (args.jobs, args.port_base) == (500, 56400) else (
        f"{COMMAND} --jobs {args.jobs} --port-base {args.port_base}")
    if not devsystem.service_available():
        sys.stdout.write(report(None, command, "the service (kq serve) is not in this build"))
        return 0
    state = Path(tempfile.mkdtemp(prefix="kq-bench-e2e-"))
    config = ClusterConfig(state_dir=state, ports=Ports(args.port_base), service_args=("--oversellrate=1",))
    echo = lambda line: print(line, file=sys.stderr)  # noqa: E731
    figures: dict[str, Any] | None = None
    problem = ""
    try:
        print(f"e2e bench: dev cluster in {state} on ports {args.port_base}+ ...", file=sys.stderr)
        with contextlib.redirect_stdout(sys.stderr):  # its progress lines are not part of the report
            devsystem.up(config)
        figures = asyncio.run(measure(config.kubeconfig, args.jobs))
        print(json.dumps(figures), file=sys.stderr)
    except Exception as error:  # a report, not a test: say what went wrong instead of inventing numbers
        problem = f"{type(error).__name__}: {error}"
        print(f"e2e bench failed: {problem}; logs in {config.logs}", file=sys.stderr)
    finally:
        cluster.down(config, purge=True, echo=echo)
        shutil.rmtree(state, ignore_errors=True)
    sys.stdout.write(report(figures, command, problem))
    return 0


if __name__ == "__main__":
    sys.exit(main())
