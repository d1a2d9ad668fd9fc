"""The shapes :mod:`bench.e2e_bench` measures on one dev cluster, and the watch that times them (a report).

* :func:`raw_release` - the physical limit: N suspended Jobs in a namespace outside the quota tree (no webhook,
  no controller), released by a ``spec.suspend: false`` merge patch each, with as many patches in flight as the
  controller keeps (its ``write_concurrency``).
* :func:`raw_open` - a job submitted open with nothing of a queue on its path: create it suspended, then that
  one patch (:mod:`bench.e2e_bench` also runs it through a do-nothing webhook: the limit for webhook-based
  queues).
* :func:`held_release` - our admissions of N Jobs held by a quota capped at ``kube-queue/max-jobs: 0``, from
  the moment the cap is lifted.
* :func:`replay_release` - the controller's own release patches, replayed by the bench on N such held Jobs
  under the controller's identity: what the API server's admission path costs, without the controller.
* :func:`open_submit` - our admissions of N Jobs created into a quota that fits them all, as users feel them:
  from each create request to its release.

Every release is timed the same way: the moment a watch on the namespace sees ``spec.suspend`` false (for ours,
with the controller's admission annotation).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.machine import busy_seconds, settle
from webhook.api.names import ADMISSION_ANNOTATION, MANAGED_NAMESPACE_LABEL
from webhook.api.objects import (
    annotations_of,
    conditions_of,
    labels_of,
    mapping,
    mappings,
    meta,
    name_of,
    spec_of,
    status_of,
    text,
)
from webhook.controller.model import track
from webhook.controller.records import AdmissionRecord, admit_patch
from webhook.core.quota import parse_tree
from webhook.kube.client import KubeApiError, KubeClient, ResourceRef
from webhook.workloads.registry import adapter_for

CREATES_IN_FLIGHT = 16
"""Jobs created at once, like a busy user's script (the webhook is on the path of ours)."""


def jobs_ref(namespace: str) -> ResourceRef:
    return ResourceRef("batch", "v1", "jobs", namespace)


def job(index: int, namespace: str, *, suspend: bool | None = None) -> dict[str, Any]:
    """A small one-pod Job (10m CPU, 16Mi); ``suspend`` set only when given (ours are held by the webhook)."""
    spec: dict[str, Any] = {
        "parallelism": 1,
        "completions": 1,
        "template": {"spec": {"restartPolicy": "Never", "containers": [
            {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}},
    }
    if suspend is not None:
        spec["suspend"] = suspend
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": f"small-{index:04d}", "namespace":
                                                                      namespace}, "spec": spec}


async def wait_for(check: Callable[[], Awaitable[bool]], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.25)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


async def pods_running(client: KubeClient, namespace: str, count: int, timeout: float = 180) -> float:
    """Wait until ``count`` pods of the namespace run; the seconds waited."""
    started = time.perf_counter()
    pods = ResourceRef("", "v1", "pods", namespace)

    async def check() -> bool:
        items = mappings((await client.list_page(pods, limit=count + 50)).get("items"))
        return sum(1 for item in items if status_of(item).get("phase") == "Running") >= count

    await wait_for(check, timeout, f"{count} running pods in {namespace}")
    return time.perf_counter() - started


async def namespaces_ready(client: KubeClient, managed: Sequence[str], others: Sequence[str] = ()) -> None:
    """Wait until the ``managed`` namespaces carry the managed label (the controller labels the tree's
    namespaces) and every namespace has its default ServiceAccount (the Job controller needs it for pods)."""
    namespaces = ResourceRef("", "v1", "namespaces")
    for namespace in managed:
        async def labelled(namespace: str = namespace) -> bool:
            labels = labels_of(await client.get(namespaces, namespace))
            return bool(labels.get(MANAGED_NAMESPACE_LABEL) == "true")

        await wait_for(labelled, 120, f"namespace {namespace} to be managed")
    for namespace in (*managed, *others):
        async def service_account(namespace: str = namespace) -> bool:
            try:
                await client.get(ResourceRef("", "v1", "serviceaccounts", namespace), "default")
            except KubeApiError:
                return False
            return True

        await wait_for(service_account, 60, f"the default ServiceAccount of {namespace}")


QUIET_CORES = 0.3
"""A shape starts once the machine used less than this many cores over the last :data:`QUIET_WINDOW` seconds."""
QUIET_WINDOW = 1.0


async def settled(timeout: float = 30.0) -> float:
    """Wait until the machine is quiet (the previous shape's trailing work done: Events still being sent, the Job
    controller's status writes), at most ``timeout`` seconds; how long it took. Without it the shape that runs
    right after another is slowed by its tail, and a round's order moves its ratios by tens of percent."""
    started = time.perf_counter()
    await settle(busy_seconds, QUIET_CORES, window=QUIET_WINDOW, timeout=timeout)
    return time.perf_counter() - started


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))]


@dataclass
class Releases:
    """A watch on one namespace's Jobs recording when each is first seen released."""

    client: KubeClient
    namespace: str
    expected: int
    annotated: bool
    """Count a release only with the controller's admission annotation (ours) or on the flip alone (raw)."""
    at: dict[str, float] = field(default_factory=dict)
    done: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        listing = await self.client.list_page(jobs_ref(self.namespace), limit=1)
        self._task = asyncio.ensure_future(self._watch(text(mapping(listing.get("metadata")).get("resourceVersion"))))
        await asyncio.sleep(0.5)  # the watch is open before anything is released

    async def _watch(self, version: str) -> None:
        while not self.done.is_set():
            async with self.client.watch(jobs_ref(self.namespace), resource_version=version,
                                         timeout_seconds=60) as events:
                async for event in events:
                    obj = mapping(event.get("object"))
                    metadata = meta(obj)
                    if metadata.get("resourceVersion"):
                        version = str(metadata["resourceVersion"])
                    if event.get("type") not in ("ADDED", "MODIFIED"):
                        continue
                    name = name_of(obj)
                    released = spec_of(obj).get("suspend") is False
                    recorded = not self.annotated or ADMISSION_ANNOTATION in annotations_of(obj)
                    if released and recorded and name not in self.at:
                        self.at[name] = time.perf_counter()
                        if len(self.at) >= self.expected:
                            self.done.set()
                            return

    async def wait(self, timeout: float = 600) -> list[float]:
        """Every release time, sorted (raises ``TimeoutError`` when not all came)."""
        try:
            await asyncio.wait_for(self.done.wait(), timeout=timeout)
        finally:
            if self._task is not None:
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError, KubeApiError):
                    await self._task
        return sorted(self.at.values())


def rates(times: list[float], started: float) -> dict[str, float]:
    """``sustained`` (first to last release), ``end_to_end`` (from ``started``), first/last after ``started``."""
    count = len(times)
    span = times[-1] - times[0]
    return {
        "sustained_per_second": (count - 1) / span if span > 0 else float("inf"),
        "end_to_end_per_second": count / (times[-1] - started),
        "first_after_start": times[0] - started,
        "last_after_start": times[-1] - started,
    }


async def create_all(client: KubeClient, bodies: list[dict[str, Any]], namespace: str,
                     then: Callable[[str], Awaitable[None]] | None = None) -> dict[str, float]:
    """Create ``bodies`` with :data:`CREATES_IN_FLIGHT` requests at once (each followed by ``then(name)`` when
    given, outside that limit); the moment each create request was sent, by name."""
    limit = asyncio.Semaphore(CREATES_IN_FLIGHT)
    sent: dict[str, float] = {}
    followers: list[asyncio.Task[None]] = []

    async def one(body: dict[str, Any]) -> None:
        name = str(body["metadata"]["name"])
        async with limit:
            sent[name] = time.perf_counter()
            await client.create(jobs_ref(namespace), body)
        if then is not None:
            followers.append(asyncio.ensure_future(then(name)))

    await asyncio.gather(*(one(body) for body in bodies))
    await asyncio.gather(*followers)
    return sent


async def all_suspended(client: KubeClient, namespace: str, count: int, timeout: float = 120) -> None:
    """Wait until the namespace holds ``count`` Jobs, every one suspended and seen so by the Job controller
    (its ``Suspended`` condition), so a measurement starts on a quiet namespace."""

    async def check() -> bool:
        items = mappings((await client.list_page(jobs_ref(namespace), limit=count + 10)).get("items"))
        return len(items) == count and all(
            spec_of(item).get("suspend")
            and any(c.get("type") == "Suspended" for c in conditions_of(item))
            for item in items)

    await wait_for(check, timeout, f"{count} suspended Jobs in {namespace}")


async def raw_prepare(client: KubeClient, namespace: str, count: int) -> None:
    """The ``count`` suspended Jobs :func:`raw_release` releases."""
    await create_all(client, [job(index, namespace, suspend=True) for index in range(count)], namespace)
    await all_suspended(client, namespace, count)


async def raw_release(client: KubeClient, namespace: str, count: int, in_flight: int) -> dict[str, Any]:
    """Release the ``count`` suspended Jobs of :func:`raw_prepare` by one merge patch each, ``in_flight`` at
    once; the watch times it."""
    watch = Releases(client, namespace, count, annotated=False)
    await watch.start()
    limit = asyncio.Semaphore(in_flight)
    latencies: list[float] = []

    async def patch(index: int) -> None:
        async with limit:
            sent = time.perf_counter()
            await client.merge_patch(jobs_ref(namespace), f"small-{index:04d}", {"spec": {"suspend": False}})
            latencies.append(time.perf_counter() - sent)

    started = time.perf_counter()
    await asyncio.gather(*(patch(index) for index in range(count)))
    times = await watch.wait()
    return {"jobs": count, "in_flight": in_flight, **rates(times, started),
            "patch_p50_ms": percentile(latencies, 0.5) * 1000, "patch_p99_ms": percentile(latencies, 0.99) * 1000}


async def replay_release(client: KubeClient, controller: KubeClient, tree_spec: dict[str, Any], namespace: str, *,
                         count: int, in_flight: int) -> dict[str, Any]:
    """Release the ``count`` held Jobs of ``namespace`` by the patch the controller writes (the same JSON
    patch, record and field manager, sent with ``controller``, a client under the controller's identity),
    ``in_flight`` at once: the held shape without the controller. The tree spec gives each job's leaf, as the
    controller reads it; the controller then counts them admitted."""
    tree = parse_tree(tree_spec)
    leaf = tree.leaf_for_namespace(namespace)
    adapter = adapter_for("batch", "Job")
    assert leaf is not None and adapter is not None, f"no leaf lists {namespace}"
    items = mappings((await client.list_page(jobs_ref(namespace), limit=count + 10)).get("items"))
    patches = {}
    for obj in items:
        job = track(adapter, obj, leaf, {})
        record = AdmissionRecord.new(leaf.full_name, job.workload.request, time.time())
        patches[name_of(obj)] = admit_patch(adapter, obj, record)
    watch = Releases(client, namespace, count, annotated=True)
    await watch.start()
    limit = asyncio.Semaphore(in_flight)

    async def patch(name: str, ops: list[Any]) -> None:
        async with limit:
            await controller.json_patch(jobs_ref(namespace), name, ops, namespace)

    started = time.perf_counter()
    await asyncio.gather(*(patch(name, ops) for name, ops in patches.items()))
    times = await watch.wait()
    return {"jobs": count, "in_flight": in_flight, **rates(times, started)}


async def raw_open(client: KubeClient, namespace: str, count: int, in_flight: int) -> dict[str, Any]:
    """Create ``count`` Jobs suspended and release each by one patch as soon as it exists (patches
    ``in_flight`` at once): the least a job submitted open can cost."""
    watch = Releases(client, namespace, count, annotated=False)
    await watch.start()
    limit = asyncio.Semaphore(in_flight)

    async def release(name: str) -> None:
        async with limit:
            await client.merge_patch(jobs_ref(namespace), name, {"spec": {"suspend": False}})

    started = time.perf_counter()
    sent = await create_all(client, [job(index, namespace, suspend=True) for index in range(count)], namespace,
                            then=release)
    times = await watch.wait()
    return {"jobs": count, "in_flight": in_flight, **rates(times, started), **latency(sent, watch.at)}


def latency(sent: dict[str, float], released: dict[str, float]) -> dict[str, float]:
    """Create request to release, per job: p50 / p99 / max in ms."""
    waits = [released[name] - sent[name] for name in sent if name in released]
    return {"latency_p50_ms": percentile(waits, 0.5) * 1000, "latency_p99_ms": percentile(waits, 0.99) * 1000,
            "latency_max_ms": max(waits) * 1000}


async def held_release(client: KubeClient, namespace: str, count: int,
                       lift: Callable[[], Awaitable[None]]) -> dict[str, Any]:
    """Our admissions of ``count`` held Jobs (created before), from ``lift()`` (which opens the quota)."""
    watch = Releases(client, namespace, count, annotated=True)
    await watch.start()
    started = time.perf_counter()
    await lift()
    times = await watch.wait()
    return {"jobs": count, **rates(times, started)}


async def open_submit(client: KubeClient, namespace: str, count: int) -> dict[str, Any]:
    """Our admissions of ``count`` Jobs created into a quota that fits them all."""
    watch = Releases(client, namespace, count, annotated=True)
    await watch.start()
    started = time.perf_counter()
    sent = await create_all(client, [job(index, namespace) for index in range(count)], namespace)
    created = time.perf_counter() - started
    times = await watch.wait()
    return {"jobs": count, **rates(times, started), **latency(sent, watch.at),
            "created_per_second": count / created}
