"""The controller's read API, a ``kq serve`` plugin: ``jobsummaries`` of :data:`~webhook.api.names.VISIBILITY_GROUP`,
an aggregated API ``kq serve`` answers on its HTTPS port (docs/queueing.md, "Reading every job"; docs/security.md, "The
controller's read API").

The API server authenticates and authorizes the user (``list jobsummaries`` in the namespace, or in every
namespace) before it proxies the request here; this side trusts the user it names only from the front proxy's
client certificate (:mod:`webhook.kube.frontproxy`). The summaries are the read model's
(:mod:`webhook.readmodel.summaries`) over the caches of the controller ``kq serve`` runs. The routes run on
the admission thread's loop: the cached objects are taken on the controller's loop (references, a few
milliseconds), the inputs and the answer made in a worker thread, so neither loop waits on the other. Between
reads, the same worker keeps the summaries built (:meth:`ReadApi.keep_warm`), so a read only builds those of the
jobs that changed since the last warm-up.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping

import orjson
from aiohttp import web
from prometheus_client import Counter, Histogram

from webhook.api.names import (
    JOB_SUMMARIES,
    JOB_SUMMARY_KIND,
    TABLE_MEDIA_TYPE,
    VISIBILITY_GROUP,
    VISIBILITY_VERSION,
)
from webhook.api.objects import Obj, controller_of, mapping, namespace_of, rfc3339_seconds
from webhook.controller.cache import ClusterCache
from webhook.controller.controller import Controller
from webhook.controller.decide import ESTIMATE_FIELDS
from webhook.controller.model import TrackedJob
from webhook.controller.plugin import RUNNING, RunningController
from webhook.controller.records import kv
from webhook.core.handoff import NO_HANDOFF, Handoff
from webhook.core.workload import WorkloadKey
from webhook.kube.client import KubeClient
from webhook.kube.collector import release_free_memory
from webhook.kube.frontproxy import FRONT_PROXY, caller_of
from webhook.readmodel.eta import published_estimates as queue_estimates
from webhook.readmodel.explain import AHEAD_SHOWN
from webhook.readmodel.explained import WhyInputs, explain_served, failure
from webhook.readmodel.summaries import INCLUDE_OBJECT, SummaryBook, SummaryInputs, one_row_table, owners_of, running_of
from webhook.readmodel.view import KindSource, ViewContext, listed_job
from webhook.readmodel.waiting import oversell_rate
from webhook.workloads.base import Adapter
from webhook.workloads.spawned import separate_spawned, spawner_of, spawning_pods

log = logging.getLogger(__name__)

GROUP_PATH = f"/apis/{VISIBILITY_GROUP}"
VERSION_PATH = f"{GROUP_PATH}/{VISIBILITY_VERSION}"
GROUP_VERSION = f"{VISIBILITY_GROUP}/{VISIBILITY_VERSION}"
READ_SECONDS = Histogram(
    "kube_queue_read_api_seconds",
    "Seconds one read of the job summaries takes in kq serve (inputs taken, summaries built, answer encoded), by "
    "scope: one namespace's list, every namespace's, or one job with why it waits",
    ["scope"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
WARM_SECONDS = 10.0
"""How often ``kq serve`` looks whether enough jobs and pods changed to build the changed jobs' summaries ahead
of the next read (a look costs nothing)."""
WARM_CHANGES = 500
"""Changes of the jobs and pods that make a warm-up worth its walk over every job (some 0.3 s of CPU at 50,000):
fewer, the next read builds them in a few tens of milliseconds. A new tree, new PriorityClasses or devices always
do (every summary is built again)."""
WARM_STALE_SECONDS = 300.0
"""While the jobs change fast (as many changes in one look as :data:`WARM_CHANGES`: a burst of creates, where
each job would be built twice, before and after the pass sizes it), a warm-up waits for them to calm down, this
long at most. Warm-ups during a burst of 50,000 creates left ``kq serve`` some 0.8 KiB a job larger."""
WARM_SHARE = 0.5
"""The share of the interpreter a warm-up takes at most: it sleeps as long as it builds."""
Marker = tuple[int, tuple[int, ...]]
"""How many changes the job and pod caches stored, and what sizes a job besides the job (:func:`_changes`)."""
READER_GRACE_SECONDS = 1.5
"""How long after a list is written the start estimates' replay still waits: the reader decodes and lays out the
answer then (some 0.5 s of CPU for 50,000 jobs), on the same cores."""
LOOP_WAIT_SECONDS = 2.0
"""How long a warm-up step waits for the controller's loop to be free of a pass's long stretch."""
WARM_CPU = Counter(
    "kube_queue_read_api_warm_cpu_seconds",
    "CPU seconds kq serve spent keeping the job summaries built between reads (the read API's warm-ups, counted "
    "after each step of some 500 jobs)",
)
READ_REFUSED = Counter(
    "kube_queue_read_api_refused_total",
    "Lists of the job summaries refused, by reason: unauthenticated (not the front proxy), unavailable (no "
    "front-proxy CA, or the controller not ready)",
    ["reason"],
)


def _status(code: int, reason: str, message: str) -> web.Response:
    return web.json_response(failure(code, reason, message).body, status=code)


def _starting() -> web.Response:
    READ_REFUSED.labels("unavailable").inc()
    return _status(503, "ServiceUnavailable", "the queue controller is starting (its caches are listing) or does "
                   "not run here (--no-controller); ask again in a few seconds")


def wants_table(accept: str) -> bool:
    """Whether a request's ``Accept`` header offers a Table of ``meta.k8s.io/v1`` (as ``kubectl get`` does, beside
    plain JSON)."""
    for offer in accept.split(","):
        media, *parameters = (part.strip() for part in offer.split(";"))
        given = dict(parameter.partition("=")[::2] for parameter in parameters)
        if media == "application/json" and given.get("as") == "Table" and given.get("g") == "meta.k8s.io" and (
                given.get("v") == "v1"):
            return True
    return False


def _include(request: web.Request) -> str | web.Response | None:
    """What each row of a Table carries besides its cells (``includeObject``), the refusal, or ``None`` when the
    request does not accept a Table."""
    if not wants_table(request.headers.get("Accept", "")):
        return None
    include = request.query.get("includeObject", "Metadata")
    if include not in INCLUDE_OBJECT:
        return _status(400, "BadRequest", f"includeObject is one of {', '.join(INCLUDE_OBJECT)}, not {include!r}")
    return include


def published_estimates(queues: Mapping[str, Obj]) -> dict[WorkloadKey, dict[str, str]]:
    """The start estimates the Queues' status carries (what a replica that does not estimate serves), read by
    the read model's rule."""
    out: dict[WorkloadKey, dict[str, str]] = {}
    for (kind, namespace, name), times in queue_estimates(queues).items():
        fields = {field: rfc3339_seconds(value) for field, value in zip(ESTIMATE_FIELDS, times, strict=True) if value}
        if fields:
            out[WorkloadKey(kind, namespace, name)] = fields
    return out


class ReadApi:
    """The routes of the read API and the summaries it keeps between reads."""

    def __init__(self, running: RunningController) -> None:
        self.book = SummaryBook()
        self._running = running
        self._worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kq-read-api")
        """One thread builds every answer: its allocator's arena is reused from read to read, where a new
        thread's each would keep its own high-water mark."""
        self._lists = 0
        """Lists being built (on the admission thread's loop): the start estimates' replay waits meanwhile."""

    def _reading(self, step: int) -> None:
        self._lists += step
        controller = self._running.controller
        if controller is not None and controller.eta is not None:
            controller.eta.reading(self._lists > 0)

    async def keep_warm(self, app: web.Application) -> AsyncIterator[None]:
        """While ``kq serve`` runs (an entry of its ``cleanup_ctx``): every :data:`WARM_SECONDS`, when a warm-up is
        due (:func:`warm_due`), build the summaries a read would build (:meth:`SummaryBook.warm`)."""
        task = asyncio.create_task(self._warming(), name="read-api-warm")
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def _warming(self) -> None:
        seen: Marker | None = None
        looked: Marker | None = None
        warmed = time.monotonic()
        while True:
            await asyncio.sleep(WARM_SECONDS)
            controller = self._running.controller
            if controller is None or self._lists or not controller.ready.is_set():
                continue
            marker, previous = _changes(controller), looked
            looked = marker
            started = time.monotonic()
            if not warm_due(seen, previous, marker, started - warmed):
                continue
            try:
                inputs, _ = await self._inputs()
                if inputs is None:
                    continue
                built = await asyncio.get_running_loop().run_in_executor(self._worker, self._warm, inputs)
            except Exception as error:  # a warm-up only saves a read some time: it must not stop kq serve
                log.warning(kv(component="read-api", event="warm_failed", error=repr(error)))
                continue
            seen, warmed = marker, time.monotonic()
            if built:
                log.info(kv(component="read-api", event="warmed", resource=JOB_SUMMARIES, jobs=len(inputs.jobs),
                            built=built, seconds=f"{time.monotonic() - started:.3f}"))

    def _warm(self, inputs: SummaryInputs) -> int:
        """One warm-up, in the worker thread. It takes :data:`WARM_SHARE` of the interpreter at most, waits while
        the controller's loop is in a long stretch (a pass's decisions), and stops when a read comes: the
        summaries it did not build are the read's to build."""
        stretch, spent = time.monotonic(), time.thread_time()

        def between() -> bool:
            nonlocal stretch, spent
            WARM_CPU.inc(time.thread_time() - spent)
            if self._lists:
                spent = time.thread_time()
                return False
            time.sleep((time.monotonic() - stretch) * (1 / WARM_SHARE - 1))
            loop = self._running.loop
            if loop is not None:
                with contextlib.suppress(concurrent.futures.TimeoutError):
                    asyncio.run_coroutine_threadsafe(asyncio.sleep(0), loop).result(LOOP_WAIT_SECONDS)
            stretch, spent = time.monotonic(), time.thread_time()
            return not self._lists

        built = self.book.warm(inputs, between)
        release_free_memory()
        WARM_CPU.inc(time.thread_time() - spent)
        return built

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get(GROUP_PATH, self._group)
        app.router.add_get(VERSION_PATH, self._resources)
        app.router.add_get(f"{VERSION_PATH}/{JOB_SUMMARIES}", self._list)
        app.router.add_get(f"{VERSION_PATH}/namespaces/{{namespace}}/{JOB_SUMMARIES}", self._list)
        app.router.add_get(f"{VERSION_PATH}/namespaces/{{namespace}}/{JOB_SUMMARIES}/{{name}}", self._get)

    async def _group(self, request: web.Request) -> web.Response:
        version = {"groupVersion": GROUP_VERSION, "version": VISIBILITY_VERSION}
        return web.json_response({"kind": "APIGroup", "apiVersion": "v1", "name": VISIBILITY_GROUP,
                                  "versions": [version], "preferredVersion": version})

    async def _resources(self, request: web.Request) -> web.Response:
        resource = {"name": JOB_SUMMARIES, "singularName": "jobsummary", "namespaced": True,
                    "kind": JOB_SUMMARY_KIND, "verbs": ["get", "list"]}
        return web.json_response({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": GROUP_VERSION,
                                  "resources": [resource]})

    @staticmethod
    def _caller(request: web.Request) -> str | web.Response:
        """Who asks, as the API server's front proxy says, or the refusal."""
        front = request.app.get(FRONT_PROXY)
        if front is None:
            READ_REFUSED.labels("unavailable").inc()
            return _status(503, "ServiceUnavailable", "kq serve could not read the API server's front-proxy CA "
                           "(kube-system/extension-apiserver-authentication), so it cannot tell who asks; see its "
                           "log (event=front_proxy_unreadable)")
        caller = caller_of(request, front)
        if caller is None:
            READ_REFUSED.labels("unauthenticated").inc()
            return _status(401, "Unauthorized", f"{JOB_SUMMARIES} are answered only through the API server: "
                           f"kubectl get --raw {request.path}, kq list -A or kq why")
        return caller.user

    async def _get(self, request: web.Request) -> web.Response:
        """One job's summary with why it waits (:mod:`webhook.readmodel.explained`)."""
        caller = self._caller(request)
        if not isinstance(caller, str):
            return caller
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        try:
            width = min(max(int(request.query.get("width", "100")), 40), 1000)
            ahead = max(int(request.query.get("ahead", str(AHEAD_SHOWN))), 0)
        except ValueError:
            return _status(400, "BadRequest", "width and ahead are whole numbers")
        kind = request.query.get("kind") or None
        include = _include(request)
        if isinstance(include, web.Response):
            return include
        started = time.monotonic()
        controller, loop = self._running.controller, self._running.loop
        taken = None
        if controller is not None and loop is not None:
            taken = await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(
                _collect_one(controller, namespace, name), loop))
        if taken is None:
            return _starting()
        answer = await asyncio.get_running_loop().run_in_executor(
            self._worker, lambda: explain_served(taken, namespace, name, kind, width=width, ahead=ahead))
        took = time.monotonic() - started
        READ_SECONDS.labels("job").observe(took)
        unexplained = mapping(answer.body.get("unexplained"))
        log.info(kv(component="read-api", event="explained", resource=JOB_SUMMARIES, user=caller,
                    namespace=namespace, name=name, code=answer.code,
                    unexplained=unexplained.get("reason", "-"), seconds=f"{took:.3f}"))
        body = answer.body
        if include is not None and answer.code == 200:
            return web.Response(body=orjson.dumps(one_row_table(body, time.time(), include)),
                                headers={"Content-Type": TABLE_MEDIA_TYPE})
        return web.json_response(body, status=answer.code, dumps=lambda body: orjson.dumps(body).decode())

    async def _list(self, request: web.Request) -> web.StreamResponse:
        caller = self._caller(request)
        if not isinstance(caller, str):
            return caller
        namespace = request.match_info.get("namespace")
        include = _include(request)
        if isinstance(include, web.Response):
            return include
        started = time.monotonic()
        self._reading(+1)  # until the reader has the answer: the API server's proxy and the reader share the cores
        written = False
        try:
            inputs, waited = await self._inputs()
            if inputs is None:
                return _starting()
            chunks, count, sized = await asyncio.get_running_loop().run_in_executor(self._worker, self._render,
                                                                                     inputs, namespace, include)
            took = time.monotonic() - started
            READ_SECONDS.labels("namespace" if namespace else "cluster").observe(took)
            log.info(kv(component="read-api", event="listed", resource=JOB_SUMMARIES, user=caller,
                        namespace=namespace or "*", table=include or "-", jobs=count, built=self.book.rebuilt,
                        sized_by_pass=sized, controller_loop_seconds=f"{waited:.3f}", seconds=f"{took:.3f}"))
            response = web.StreamResponse(headers={"Content-Type": TABLE_MEDIA_TYPE if include else "application/json"})
            await response.prepare(request)
            for chunk in chunks:  # each written as the connection takes it: no copy of the whole answer waits
                await response.write(chunk)
            await response.write_eof()
            written = True
            del chunks
        finally:
            if written and READER_GRACE_SECONDS > 0:
                asyncio.get_running_loop().call_later(READER_GRACE_SECONDS, self._reading, -1)
            else:
                self._reading(-1)
        await asyncio.get_running_loop().run_in_executor(self._worker, release_free_memory)
        return response

    async def _inputs(self) -> tuple[SummaryInputs | None, float]:
        """A list's inputs (``None`` until the controller is ready), and how long the controller's loop took to
        hand them over."""
        controller, loop = self._running.controller, self._running.loop
        if controller is None or loop is None:
            return None, 0.0
        asked = time.monotonic()
        taken = await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(_collect(controller), loop))
        waited = time.monotonic() - asked
        if taken is None:
            return None, waited
        return await asyncio.get_running_loop().run_in_executor(self._worker, taken), waited

    def _render(self, inputs: SummaryInputs, namespace: str | None, include: str | None) -> tuple[
            list[bytes], int, int]:
        """The answer's pieces (a Table whose rows carry ``include`` unless it is ``None``), how many jobs it holds
        and how many of all the last pass had sized (in the worker thread: a walk over every job has no place on
        the admission thread)."""
        if include is None:
            chunks, count = self.book.render_chunks(inputs, namespace)
        else:
            chunks, count = self.book.table_chunks(inputs, namespace, time.time(), include)
        return chunks, count, sum(1 for _, _, how in inputs.jobs if how is not None)


async def _collect(controller: Controller) -> Callable[[], SummaryInputs] | None:
    """What a read takes on the controller's loop, where the caches change (``None`` until they listed): each job
    kind's objects and the rest by reference; the returned function makes the inputs from them off that loop."""
    if not controller.ready.is_set():
        return None
    cache = controller.cache
    leading = controller.is_leader()
    estimates, _, _ = _estimates(controller, leading)
    record = controller.stats.last_pass if leading else None
    positions = record.decisions.positions if record is not None else None
    _, tree, _ = cache.tree()
    context = ViewContext(tree, cache.priorities(), cache.devices.quota(), time.time(), *cache.admission())
    kinds = [(KindSource(adapter, ref.version), watched.name, cache.view(watched))
             for adapter, ref, watched in cache.job_caches.values()]
    epoch, index, running = cache.epoch(), cache.jobs, cache.pod_index.running_by_owner()

    def inputs() -> SummaryInputs:
        jobs: list[tuple[KindSource, Obj, TrackedJob | str | None]] = []
        for source, name, objects in kinds:
            jobs.extend((source, obj, index.sized(name, obj, epoch)) for obj in objects if listed_job(source, obj))
        kept, _ = separate_spawned([(job, job[0].adapter, job[1]) for job in jobs])
        return SummaryInputs([job for job, _, _ in kept], running, context, positions, estimates)

    return inputs


def warm_due(seen: Marker | None, previous: Marker | None, marker: Marker, waited: float) -> bool:
    """Whether a warm-up is due now (``marker``), given the one at the last warm-up (``seen``, ``None`` before the
    first), the one at the last look (``previous``) and the seconds since the last warm-up (``waited``)."""
    if seen is None or marker[1] != seen[1]:
        return True
    if marker[0] - seen[0] < WARM_CHANGES:
        return False
    calm = previous is not None and marker[0] - previous[0] < WARM_CHANGES
    return calm or waited >= WARM_STALE_SECONDS


def _changes(controller: Controller) -> Marker:
    """What moves when a summary may change: how many changes the job caches and the pods' cache stored, and
    what sizes a job besides the job."""
    cache = controller.cache
    kinds = tuple(cache.job_caches.values())  # one step: the controller's loop may add a kind meanwhile
    return sum(watched.changes for _, _, watched in kinds) + cache.pods.changes, cache.epoch()


def _estimates(controller: Controller, leading: bool) -> tuple[
        Mapping[WorkloadKey, Mapping[str, str]], Mapping[WorkloadKey, bytes] | None, Handoff]:
    """The start estimates a read serves: the leader's last refresh (each job's fields, each job's whole estimate
    packed, the control plane's time per turn), or those the Queues publish on a replica that does not lead (no
    whole estimates: ``{}``, or ``None`` when the controller makes none)."""
    if leading and controller.eta is not None:
        status = controller.eta.published()
        return status.items, status.explained, status.turn
    cache = controller.cache
    return published_estimates(cache.by_name(cache.queues)), None if controller.eta is None else {}, NO_HANDOFF


async def _collect_one(controller: Controller, namespace: str, name: str) -> WhyInputs | None:
    """What the answer for one job reads, taken on the controller's loop (``None`` until the caches listed): the
    cached jobs of that name, the last pass when this replica leads, and the published estimates."""
    if not controller.ready.is_set():
        return None
    cache = controller.cache
    leading = controller.is_leader()
    queues = cache.by_name(cache.queues)
    tree_obj, tree, _ = cache.tree()
    estimates, explained, turn = _estimates(controller, leading)
    rate, source = oversell_rate(None, tree_obj, queues)
    if rate != controller.settings.oversell_rate:
        rate, source = controller.settings.oversell_rate, "the controller's --oversellrate"
    epoch = cache.epoch()
    found = []
    for adapter, ref, watched in cache.job_caches.values():
        source_kind = KindSource(adapter, ref.version)
        obj = cache.current(watched, namespace, name)
        if obj is not None and listed_job(source_kind, obj) and not _spawned(cache, namespace, adapter, obj):
            owners = owners_of(source_kind, obj)  # None: the job itself owns its pods
            counted = owners if owners is not None else ((namespace, adapter.kind, name),)
            running = cache.pod_index.running_by_owner(counted)
            found.append((source_kind, obj, cache.jobs.sized(watched.name, obj, epoch),
                          running_of(source_kind, obj, owners, running)))
    context = ViewContext(tree, cache.priorities(), cache.devices.quota(), time.time(), *cache.admission())
    return WhyInputs(found, context, controller.stats.last_pass if leading else None, rate, source, estimates,
                     explained, turn)


def _spawned(cache: ClusterCache, namespace: str, adapter: Adapter, obj: Obj) -> bool:
    """Whether ``obj`` is a Pod a job's own pod created (a SparkApplication's executor): that job's, not a job."""
    owner = controller_of(obj) if adapter.kind == "Pod" else None
    if owner is None or owner.get("kind") != "Pod":
        return False
    jobs = [(item, spawning, item) for spawning, _, watched in cache.job_caches.values() if spawning.spawned_pod_set
            for item in cache.view(watched) if namespace_of(item) == namespace]
    return spawner_of(obj, spawning_pods(jobs)) is not None


async def attach(app: web.Application, client: KubeClient, args: argparse.Namespace) -> None:
    """Answer the read API on ``kq serve``'s port, from the controller the controller plugin runs."""
    running = app.get(RUNNING)
    if running is not None:
        read_api = ReadApi(running)
        read_api.add_routes(app)
        app.cleanup_ctx.append(read_api.keep_warm)
