"""The three workloads the peer benchmark runs on each system, the same for both (a report, not a test).

An admission is the moment a watch sees a Job's ``spec.suspend`` turn false, for both systems (ours also
writes its admission annotation; Kueue's Workload status is written before it unsuspends the Job). An eviction
is an admitted Job seen suspended again.

a) :func:`held` - N small Jobs wait behind a hold (ours: ``kube-queue/max-jobs: 0``; Kueue: ``stopPolicy:
   Hold``), then the hold is lifted: sustained rate and release to last admission.
b) :func:`open_submit` - N small Jobs created into a quota that fits them all: rate and create-to-admit.
c) :func:`reclaim` - the seed's departments: Department-a (user-a, user-b) submits first and borrows up to the
   whole enterprise, then Department-b (user-c) submits and must get its ``min`` back by evictions.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bench import e2e_shapes
from bench import peer_kueue_objects as objects
from webhook.api.objects import mapping, mappings, meta, resource_version_of
from webhook.core.resources import Resources
from webhook.kube.client import KubeApiError, KubeClient, ResourceRef

ALL_JOBS = ResourceRef("batch", "v1", "jobs")
SIZES = (1, 2, 4)
"""CPU (and GiB of memory) of the mixed jobs of workload c, in turn."""
ONE_CPU = Resources.parse({"cpu": "1"}).get_or_zero("cpu")
"""One core in the units of :class:`~webhook.core.resources.Resources`."""
SETTLE_S = 5.0
"""A phase of workload c is over when no Job was admitted or evicted for this long once it looks done..."""
STALL_S = 30.0
"""... or for this long whatever it looks like."""


def body(name: str, namespace: str, cpu: str, memory: str, kueue: bool) -> dict[str, Any]:
    return objects.job(name, namespace, cpu, memory, kueue=kueue)


def small(index: int, namespace: str, kueue: bool) -> dict[str, Any]:
    """The e2e bench's small Job (10m CPU, 16Mi), addressed to Kueue's LocalQueue when ``kueue``."""
    return body(f"small-{index:04d}", namespace, "10m", "16Mi", kueue)


@dataclass
class JobWatch:
    """A watch on every Job of the cluster: when each was first admitted, how often admitted ones were
    suspended again (evictions), and what the admitted ones request now."""

    client: KubeClient
    first: dict[str, float] = field(default_factory=dict)
    admitted: dict[str, Resources] = field(default_factory=dict)
    evictions: dict[str, int] = field(default_factory=dict)
    last_change: float = field(default_factory=time.perf_counter)
    _task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        listing = await self.client.list_page(ALL_JOBS, limit=1)
        self._task = asyncio.ensure_future(self._watch(resource_version_of(listing)))
        await asyncio.sleep(0.5)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, KubeApiError):
                await self._task

    async def _watch(self, version: str) -> None:
        while True:
            async with self.client.watch(ALL_JOBS, resource_version=version, timeout_seconds=60) as events:
                async for event in events:
                    obj = mapping(event.get("object"))
                    metadata = meta(obj)
                    if metadata.get("resourceVersion"):
                        version = str(metadata["resourceVersion"])
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        self.seen(obj)

    def seen(self, obj: Mapping[str, Any]) -> None:
        metadata = obj.get("metadata", {})
        key = f"{metadata.get('namespace')}/{metadata.get('name')}"
        now = time.perf_counter()
        if obj.get("spec", {}).get("suspend") is False:
            if key not in self.admitted:
                containers = obj["spec"]["template"]["spec"]["containers"]
                self.admitted[key] = sum((Resources.parse(c.get("resources", {}).get("requests") or {})
                                          for c in containers), Resources())
                self.first.setdefault(key, now)
                self.last_change = now
        elif key in self.admitted:
            del self.admitted[key]
            namespace = key.partition("/")[0]
            self.evictions[namespace] = self.evictions.get(namespace, 0) + 1
            self.last_change = now

    def cpu(self, namespaces: tuple[str, ...]) -> float:
        """CPU cores admitted now in ``namespaces``."""
        return sum(r.get_or_zero("cpu") for key, r in self.admitted.items()
                   if key.partition("/")[0] in namespaces) / ONE_CPU


async def held(client: KubeClient, namespace: str, count: int, kueue: bool,
               lift: Callable[[], Awaitable[None]]) -> dict[str, Any]:
    """Workload a: ``count`` Jobs created behind the hold, then ``lift()``."""
    await e2e_shapes.create_all(client, [small(index, namespace, kueue) for index in range(count)], namespace)
    await e2e_shapes.all_suspended(client, namespace, count, timeout=300)
    if kueue:
        workloads = ResourceRef(objects.GROUP, "v1beta2", "workloads", namespace)

        async def queued() -> bool:
            return len(mappings((await client.list_page(workloads, limit=count + 10)).get("items"))) >= count

        await e2e_shapes.wait_for(queued, 300, f"{count} Kueue Workloads in {namespace}")
    watch = e2e_shapes.Releases(client, namespace, count, annotated=False)
    await watch.start()
    started = time.perf_counter()
    await lift()
    times = await watch.wait(timeout=600)
    return {"jobs": count, **e2e_shapes.rates(times, started)}


async def open_submit(client: KubeClient, namespace: str, count: int, kueue: bool) -> dict[str, Any]:
    """Workload b: ``count`` Jobs created into a quota that fits them all, admissions as users feel them."""
    watch = e2e_shapes.Releases(client, namespace, count, annotated=False)
    await watch.start()
    started = time.perf_counter()
    sent = await e2e_shapes.create_all(client, [small(index, namespace, kueue) for index in range(count)],
                                       namespace)
    times = await watch.wait(timeout=600)
    return {"jobs": count, **e2e_shapes.rates(times, started), **e2e_shapes.latency(sent, watch.at)}


async def _settle(watch: JobWatch, timeout: float, full: Callable[[], bool]) -> None:
    """Until no Job was admitted or evicted for :data:`SETTLE_S` once ``full()`` holds, or for
    :data:`STALL_S` if it never does (a manager slow to start must not end the phase before it began)."""
    async def quiet() -> bool:
        idle = time.perf_counter() - watch.last_change
        return idle >= STALL_S or (idle >= SETTLE_S and full())

    await e2e_shapes.wait_for(quiet, timeout, f"admissions to settle ({SETTLE_S:.0f} s without a change)")


def mixed(count: int, namespaces: tuple[str, ...], kueue: bool, prefix: str) -> list[tuple[str, dict[str, Any]]]:
    """``count`` Jobs of :data:`SIZES` CPU (and as many GiB), spread over ``namespaces`` in turn."""
    out = []
    for index in range(count):
        namespace, size = namespaces[index % len(namespaces)], SIZES[index % len(SIZES)]
        out.append((namespace, body(f"{prefix}-{index:04d}", namespace, str(size), f"{size}Gi", kueue)))
    return out


async def reclaim(client: KubeClient, borrower: tuple[str, ...], owner: tuple[str, ...], *, owner_min: float,
                  capacity: float, count: int, kueue: bool) -> dict[str, Any]:
    """Workload c: ``count`` mixed Jobs, 60 % from the ``borrower`` department first (it borrows up to the
    ``capacity`` of the cohort), then 40 % from the ``owner`` department, which needs its ``owner_min`` CPU
    back; when the owner got it, how many Jobs were evicted and how full the cohort ends."""
    watch = JobWatch(client)
    await watch.start()
    try:
        first = count * 3 // 5
        await _create(client, mixed(first, borrower, kueue, "borrow"))
        await _settle(watch, 300, lambda: watch.cpu(borrower) > capacity - max(SIZES))
        borrowed = watch.cpu(borrower)
        started = time.perf_counter()
        submit = asyncio.ensure_future(_create(client, mixed(count - first, owner, kueue, "reclaim")))

        async def has_min() -> bool:
            return watch.cpu(owner) >= owner_min

        back: float | None = None
        with contextlib.suppress(TimeoutError):
            await e2e_shapes.wait_for(has_min, 300, f"{owner} to get {owner_min:g} CPU back")
            back = time.perf_counter() - started
        await submit
        await _settle(watch, 300, lambda: watch.cpu(owner) >= owner_min)
        used = watch.cpu(borrower) + watch.cpu(owner)
        return {"jobs": count, "borrower_cpu_before": borrowed, "min_back_s": back,
                "evictions": sum(watch.evictions.get(ns, 0) for ns in (*borrower, *owner)),
                "owner_cpu": watch.cpu(owner), "borrower_cpu": watch.cpu(borrower),
                "utilisation": used / capacity, "admitted": _count(watch.admitted, (*borrower, *owner)),
                "admitted_ever": _count(watch.first, (*borrower, *owner))}
    finally:
        await watch.stop()


def _count(jobs: Mapping[str, object], namespaces: tuple[str, ...]) -> int:
    return sum(1 for key in jobs if key.split("/")[0] in namespaces)


async def _create(client: KubeClient, jobs: list[tuple[str, dict[str, Any]]]) -> None:
    limit = asyncio.Semaphore(e2e_shapes.CREATES_IN_FLIGHT)

    async def one(namespace: str, job: dict[str, Any]) -> None:
        async with limit:
            await client.create(e2e_shapes.jobs_ref(namespace), job)

    await asyncio.gather(*(one(namespace, job) for namespace, job in jobs))
