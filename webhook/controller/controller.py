"""The queue controller: informers feed a snapshot, one debounced loop decides, writers carry it out.

Design (as Kueue's): a cache fed by watches (:class:`webhook.controller.cache.ClusterCache`) keeps every object
a pass reads; any change marks the state dirty; a single loop waits for that (or a periodic tick), builds
immutable values, calls the pure :func:`webhook.controller.decide.decide` (the core's pass) and carries out
its decisions with guarded API writes (:class:`webhook.controller.writer.Writer`). Only the Lease holder writes
(followers keep their caches warm). A restart rebuilds everything from the API: the jobs' admission records.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from aiohttp import web

from webhook.api.names import CONTROLLER_COMPONENT, QUEUED_KEY_ANNOTATION, REASON_QUEUED
from webhook.api.objects import Obj, meta, name_of
from webhook.controller import metrics
from webhook.controller.cache import ClusterCache
from webhook.controller.changes import ChangeFlag
from webhook.controller.decide import JobDecisions, PassRecord, decide, reason_key
from webhook.controller.eta import EtaInputs, EtaService
from webhook.controller.events import EventGate, queued_memory, read_queued_events
from webhook.controller.leader import LeaderElector, lease_terms
from webhook.controller.lifecycle import JobLifecycle
from webhook.controller.model import TrackedJob
from webhook.controller.records import kv
from webhook.controller.reservations import ReservationWriter
from webhook.controller.settings import ControllerSettings, settings_from_args
from webhook.controller.spawned import Spawned, SpawnedPods, split_spawned
from webhook.controller.starts import StartMemo, check_starts
from webhook.controller.writer import Stats, Writer, writer_settings
from webhook.core.fit import FitResult
from webhook.core.loose import loose_inputs, reserved_for_jobs, with_claimed_devices
from webhook.core.queueing import Policy
from webhook.core.quota import QuotaTree, queue_name
from webhook.core.rate import format_rate
from webhook.kube.client import KubeApiError, KubeClient
from webhook.kube.collector import HeapFreezer, collector_paused
from webhook.kube.events import EventRecorder
from webhook.kube.shared import WATCHES, SharedWatches
from webhook.kube.tasks import TaskGroup
from webhook.workloads.base import Adapter

log = logging.getLogger("webhook.controller")


class Controller:
    """One replica of the queue controller. ``await controller.run(stop)``.

    It holds the loop's own state; the watched objects are in :attr:`cache`, the writes go through
    :attr:`writer`, the start-timeout writes and listeners are :attr:`lifecycle`'s.
    """

    def __init__(
        self,
        client: KubeClient,
        settings: ControllerSettings,
        *,
        wall: Callable[[], float] = time.time,
        clock: Callable[[], float] = time.monotonic,
        watches: SharedWatches | None = None,
    ) -> None:
        self.client = client
        self.settings = settings
        metrics.OVERSELL.set(float(settings.oversell_rate))
        self._wall = wall
        self._clock = clock
        self._tasks = TaskGroup("controller")
        self._dirty = ChangeFlag(self._read_clock)
        self._status_timer: asyncio.TimerHandle | None = None
        """Set when a change of status only asked for a pass (it comes within ``status_debounce``)."""
        self.cache = ClusterCache(client, tree_namespace=settings.tree_namespace,
                                  queue_namespace=settings.queue_namespace, on_change=self._dirty.set,
                                  start=self._start, on_unsized=self._warn_unsized, on_status=self._status_changed,
                                  shared=watches)
        self._started: set[str] = set()
        """Admission ids of released jobs seen started (docs/start-timeout.md)."""
        self._start_memo = StartMemo()
        """The start verdicts of released jobs not seen started yet, carried from pass to pass."""
        self._gate = EventGate(settings.event_interval, clock)
        self._gate_ready = True
        """False while a new leader reads back the Queued events the previous one sent (none is sent then)."""
        self._size_warned: dict[str, str] = {}
        self._unsized: set[str] = set()
        """Uids of the jobs the current pass could not size."""
        self._reported_problem: str | None = None
        self._heap = HeapFreezer(clock=clock)
        """Keeps the cached jobs and pods out of the collector's walks between passes."""
        self.events = EventRecorder(client, settings.identity, component=CONTROLLER_COMPONENT, wall=wall)
        self.stats = Stats(kinds=self.cache.kinds)
        self.writer = Writer(client, writer_settings(settings), self.cache, events=self.events, gate=self._gate,
                             stats=self.stats, is_leader=self.is_leader, poke=self._dirty.set, wall=self._read_wall,
                             clock=self._read_clock)
        self.lifecycle = JobLifecycle(
            self.writer, queue_namespace=settings.queue_namespace, start_timeout=settings.start_timeout,
            backoff=settings.backoff, on_change=self._dirty.set, on_status=self._status_changed,
            clock=self._read_clock)
        """The start timeout's writes, the pod watch's listener, the Events of held and unadmitted jobs."""
        self.cache.pods.add_listener(self.lifecycle.pod_changed)
        self.spawned = SpawnedPods(self.writer)
        """Releases the held pods a job's pod created (a SparkApplication's executors) within its admission."""
        self._spawned: list[Spawned] = []
        self.reservations = ReservationWriter(client, settings.queue_namespace, wall=self._read_wall,
                                              clock=self._read_clock)
        """Publishes what admitted jobs hold for the extender (:mod:`webhook.controller.reservations`)."""
        self.eta: EtaService | None = None
        """The waiting jobs' start estimates, refreshed off the pass (docs/eta.md); ``None`` at interval 0."""
        if settings.eta_interval > 0:
            self.eta = EtaService(settings.eta_interval, self.cache.pod_index, wall=self._read_wall,
                                  clock=self._read_clock, poke=self._status_changed)
        self.elector: LeaderElector | None = None
        if settings.leader_elect:
            self.elector = LeaderElector(client, lease_terms(settings), on_change=self._leadership_changed,
                                         clock=clock, wall=wall)
        self.ready = asyncio.Event()
        """Set once every cache listed and discovery ran (the first pass can happen)."""

    # Wiring ------------------------------------------------------------------------------------------------
    def _read_wall(self) -> float:
        """The wall clock, read through the controller (the writer's too, so one clock is set for both)."""
        return self._wall()

    def _read_clock(self) -> float:
        """The monotonic clock, read through the controller (as :meth:`_read_wall`)."""
        return self._clock()

    def _status_changed(self) -> None:
        """A change of status only: a pass within ``status_debounce`` (coalesced with any pass before then)."""
        if self._status_timer is None:
            self._status_timer = asyncio.get_running_loop().call_later(self.settings.status_debounce,
                                                                       self._dirty.set)

    def _leadership_changed(self, leading: bool) -> None:
        # Another replica may have written in between: forget what this one remembers having written.
        self.writer.forget()
        self.reservations.forget()
        self._gate.reset()
        if leading:
            self._read_back_queued_events()
        metrics.LEADER.set(1 if leading else 0)
        if not leading:
            metrics.clear_quota_gauges()
        self._dirty.set()

    def _read_back_queued_events(self) -> None:
        """Hold Queued events until :meth:`_seed_gate` has read back the ones already sent."""
        self._gate_ready = False
        self._start(self._seed_gate(), "seed-queued-events")

    async def _seed_gate(self) -> None:
        """Read back the Queued events already sent (by the previous leader, or this replica before a restart)
        so waiting jobs are not told their unchanged place again; bounded; on failure they are sent again."""
        seen: list[Obj] = []
        try:
            await read_queued_events(self.client, self.settings.event_readback_pages, seen)
        except KubeApiError as error:
            log.warning(kv(component="controller", event="queued_events_unread", status=error.status,
                           error=error.message[:300] or error.reason))
        finally:
            for uid, (key, age) in queued_memory(seen, self._wall()).items():
                self._gate.seed(uid, key, age)
            self._gate_ready = True
            self._dirty.set()

    def is_leader(self) -> bool:
        return self.elector is None or self.elector.is_leader()

    def poke(self) -> None:
        """Ask for a pass soon."""
        self._dirty.set()

    def _start(self, coroutine: Awaitable[None], name: str) -> asyncio.Task[None]:
        return self._tasks.start(coroutine, name)

    async def run(self, stop: asyncio.Event) -> None:
        """Run until ``stop`` is set (then release the Lease) or the task is cancelled (a crash: the Lease
        is left to expire)."""
        clean = False
        if self.elector is None:
            metrics.LEADER.set(1)
        try:
            for cache in self.cache.own_caches():
                self._start(cache.run(), f"cache-{cache.name}")
            self._start(self.events.run(), "events")
            if self.elector is not None:
                self._start(self.elector.run(), "leader-election")
            else:
                self._read_back_queued_events()
            self._start(self._discovery_loop(), "discovery")
            if self.eta is not None:
                self._start(self.eta.run(), "eta")
            self._start(self._loop(), "loop")
            # Until stop is set, or a task fails: the group cancels the others and the error surfaces here.
            await self._tasks.wait(stop)
            clean = True
            await self.events.flush(2.0)
        finally:
            try:
                await self._tasks.close()
            except Exception as error:  # already logged by the group; the stop goes on
                log.warning(kv(component="controller", event="task_failed_while_stopping", error=repr(error)))
            if self._status_timer is not None:
                self._status_timer.cancel()
                self._status_timer = None
            if clean and self.elector is not None and self.settings.release_on_stop:
                await self.elector.release()
            metrics.LEADER.set(0)

    # Discovery ---------------------------------------------------------------------------------------------
    async def _discovery_loop(self) -> None:
        while True:
            try:
                await self.cache.discover()
                if not self.ready.is_set():
                    await asyncio.gather(*(cache.synced.wait() for cache in self.cache.all_caches()))
                    self.ready.set()
                    self._dirty.set()
                    log.info(kv(component="controller", event="ready", kinds=",".join(self.cache.kinds),
                                identity=self.settings.identity))
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log.warning(kv(component="controller", event="discovery_failed", error=repr(error)))
                await asyncio.sleep(min(5.0, self.settings.discovery_interval))
                continue
            await asyncio.sleep(self.settings.discovery_interval)

    def _synced(self) -> bool:
        return self.ready.is_set() and self.cache.synced()

    # The loop ----------------------------------------------------------------------------------------------
    async def _loop(self) -> None:
        failures = 0
        while True:
            timeout = self.settings.resync_period
            for due in (self.writer.status_due, self.lifecycle.timer_due):
                if due is not None:
                    timeout = max(0.05, min(timeout, due - self._clock()))
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancellation that arrives
            # as the event is set, and the controller would never stop.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._dirty.wait()
            await asyncio.sleep(self._dirty.settle(self.settings.debounce))
            self._dirty.clear()
            if self._status_timer is not None:  # this pass reads every change so far
                self._status_timer.cancel()
                self._status_timer = None
            if not self._synced() or not self.is_leader():
                if self._synced():
                    self._keep_warm()
                self._after_pass(None)  # a follower caches the same jobs and pods, and serves the webhook
                continue
            try:
                if self.eta is not None:
                    self.eta.busy()
                try:
                    decisions = await self.reconcile()
                finally:
                    if self.eta is not None:
                        self.eta.idle()
                failures = 0
                self._after_pass(decisions)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                failures += 1
                self.stats.errors += 1
                delay = min(30.0, 0.5 * 2**failures)
                log.exception(kv(component="controller", event="pass_failed", error=repr(error), retry_in=delay))
                await asyncio.sleep(delay)
                self._dirty.set()

    def _keep_warm(self) -> None:
        """A follower builds the model of each job that changed, as a pass would, and decides nothing: a new
        leader's first pass then finds every model built (docs/queueing.md, "One pass")."""
        try:
            _, tree, problem = self.cache.tree()
            if problem is None and tree is not None:
                self.tracked_jobs(tree)
        except Exception as error:  # the leader's pass reports the same problem; a follower keeps serving
            log.warning(kv(component="controller", event="follower_models_failed", error=repr(error)))

    def _after_pass(self, decisions: JobDecisions | None) -> None:
        busy = decisions is not None and bool(decisions.admissions or decisions.reclaims)
        collected = self._heap.after_pass(busy=busy)
        if collected is not None:
            log.info(kv(component="controller", event="heap_collected", seconds=f"{collected:.3f}"))

    # Snapshot ----------------------------------------------------------------------------------------------
    def tracked_jobs(self, tree: QuotaTree) -> list[TrackedJob]:
        """Every job of a managed namespace, sized (jobs that cannot be sized get a Warning event once)."""
        self._unsized = set()
        jobs = self.cache.tracked_jobs(tree)
        if any(adapter.spawned_pod_set and len(cache) for adapter, _, cache in self.cache.job_caches.values()):
            jobs, self._spawned = split_spawned(jobs, self.cache.pod_index)  # a SparkApplication's executors
        else:
            self._spawned = []
        for uid in [uid for uid in self._size_warned if uid not in self._unsized]:
            del self._size_warned[uid]
        return jobs

    def _warn_unsized(self, obj: Obj, adapter: Adapter, problem: str) -> None:
        uid = str(meta(obj).get("uid") or "")
        self._unsized.add(uid)
        if self._size_warned.get(uid) == problem:
            return
        self._size_warned[uid] = problem
        log.warning(kv(component="controller", decision="skip", job=f"{adapter.kind}/{meta(obj).get('namespace')}/"
                       f"{name_of(obj)}", reason=f"cannot size: {problem}"))
        if self.is_leader():
            self.events.emit(obj, "Warning", "CannotSize", "Queue",
                             f"kube-queue cannot size this job for its quota, so it is not queued: {problem}")

    # One pass ----------------------------------------------------------------------------------------------
    async def reconcile(self) -> JobDecisions | None:
        """One pass: namespaces, Queues, admissions, reclaims, events, statuses."""
        started = self._clock()
        self.stats.passes += 1
        cache, writer = self.cache, self.writer
        tree_obj, tree, problem = cache.tree()
        if problem is not None:
            if problem != self._reported_problem:
                log.warning(kv(component="controller", event="tree_invalid", reason=problem))
                self._reported_problem = problem
            return None
        self._reported_problem = None
        await writer.sync_namespaces(tree)
        await writer.sync_queues(tree)
        if tree is None or tree_obj is None:
            return None
        jobs = self.tracked_jobs(tree)
        pods = with_claimed_devices(cache.pod_index.loose_pods(tree, cache.accounts_for(jobs)), cache.devices.quota())
        loose, protected = loose_inputs(tree, pods, cache.disruption_budgets())
        protected.update(writer.evictions.protected())
        now = self._wall()
        checks = None
        if self.settings.start_timeout > 0:
            checks = check_starts(jobs, cache.pod_index, self._started, now=now, timeout=self.settings.start_timeout,
                                  memo=self._start_memo)
            admissions = {job.record.id for job in jobs if job.record is not None}
            self._started &= admissions
            self._start_memo.keep_only(admissions)
            self.lifecycle.awaiting = checks.awaiting
            if checks.failed:
                held = await self.lifecycle.back_off_all(jobs, checks, now)
                if held is None:
                    return None  # a failed start could not be held: decide on what is written, next pass
                jobs = held
            for job in checks.started_with_note:
                await self.lifecycle.clear_backoff(job)
        prepared = self._clock()
        metrics.PASS_PHASE.labels("prepare").observe(prepared - started)
        with collector_paused():  # the pass makes no garbage cycles: no young collections while it runs
            decisions = decide(
                tree,
                jobs,
                cache.by_name(cache.queues),
                oversell_rate=self.settings.oversell_rate,
                strict_priority=self.settings.strict_priority,
                reclaim_tries_per_quota=self.settings.reclaim_tries_per_quota,
                now=now,
                loose=loose,
                protected=protected,
                closing=cache.closing_namespaces(),
            )
        self.stats.last_pass, decided = PassRecord(tree, jobs, loose, protected, decisions, now), self._clock()
        metrics.PASS_PHASE.labels("decide").observe(decided - prepared)
        self.lifecycle.set_timer(checks, decisions, now)
        self.lifecycle.tell_outside(jobs)
        self.lifecycle.tell_held(decisions)
        if self.is_leader():
            evicted = {workload.key for plan in decisions.reclaims for workload in plan.pods}
            reserved = await self.reservations.write(reserved_for_jobs(decisions.ledger, loose, evicted))
            if not reserved and (decisions.admissions or decisions.reclaims or decisions.late_admissions):
                writer.poke()
                return decisions  # nothing released before the extender can keep loose pods out of its room
        await writer.carry_out(decisions)
        if self._spawned and self.is_leader():
            await self.spawned.release(self._spawned, cache.pod_index)
        released = self._clock()
        metrics.PASS_PHASE.labels("release").observe(released - decided)
        self._queued_events(decisions)
        await writer.write_statuses(tree, tree_obj, decisions, self.eta.published() if self.eta is not None else None)
        if self.eta is not None and self.is_leader():
            self.eta.offer(EtaInputs(tree, jobs, cache.by_name(cache.queues), self.settings.oversell_rate,
                                     self.settings.strict_priority, now, loose, protected, cache.closing_namespaces(),
                                     self.settings.reclaim_tries_per_quota, tree_obj.get("status")))
        metrics.PASS_PHASE.labels("status").observe(self._clock() - released)
        self.stats.last_pass_seconds = self._clock() - started
        metrics.observe_pass(tree, decisions, self.stats.last_pass_seconds, self._wall())
        return decisions

    # Events ------------------------------------------------------------------------------------------------
    def _queued_events(self, decisions: JobDecisions) -> None:
        if not self._gate_ready:
            return
        live: set[str] = set()
        # Per reason object, held here so that its id stays its own (the jobs of one shape share one).
        said: dict[int, tuple[FitResult | None, str, str, bool]] = {}
        for job in decisions.waiting:
            workload = job.workload
            live.add(workload.uid)
            reason = decisions.reasons.get(workload.key)
            known = said.get(id(reason))
            if known is None:
                known = said[id(reason)] = (
                    reason,
                    reason_key(reason),
                    reason.explain() if reason is not None else "waiting for its turn",
                    reason is not None and any(blocker.never_fits for blocker in reason.blockers),
                )
            _, key, why, hopeless = known
            if not self._gate.due(workload.uid, key):
                continue
            self._gate.mark(workload.uid, key)
            position = decisions.positions.get(workload.key, 0)
            policy = decisions.policies.get(job.leaf.key, Policy.ROUND).value
            queue = queue_name(job.leaf.name, workload.key.namespace)
            log.info(kv(component="controller", decision="queue", job=str(workload.key), quota=job.leaf.full_name,
                        position=position, reason=why))
            self.events.emit(
                job.obj,
                "Warning" if hopeless else "Normal",
                REASON_QUEUED,
                "Queue",
                f"Queued at position {position} in quota {job.leaf.full_name} (queue "
                f"{self.settings.queue_namespace}/{queue}, policy {policy}): {why}",
                annotations={QUEUED_KEY_ANNOTATION: key},
            )
        self._gate.keep_only(live)
        decisions.forget_reasons()  # the pass is kept for the read API, not every reason read for the events


# Entry points --------------------------------------------------------------------------------------------------


async def run_controller(args: argparse.Namespace, api_client: KubeClient, stop: asyncio.Event,
                         watches: SharedWatches | None = None,
                         made: Callable[[Controller], None] | None = None) -> None:
    """Run the controller (flags: :func:`add_controller_args`) until ``stop`` is set, reading ``watches``' caches
    instead of its own; ``made`` is told of it before it runs. Returns at once with ``--no-controller``."""
    settings = settings_from_args(args)
    if not settings.enabled:
        log.info(kv(component="controller", event="disabled", reason="--no-controller"))
        return
    log.info(
        kv(
            component="controller",
            event="starting",
            oversellrate=format_rate(settings.oversell_rate),
            strict_priority=str(settings.strict_priority).lower(),
            leader_elect=str(settings.leader_elect).lower(),
            identity=settings.identity,
        )
    )
    controller = Controller(api_client, settings, watches=watches)
    if made is not None:
        made(controller)
    await controller.run(stop)


def controller_context(
    args: argparse.Namespace, client: KubeClient | Callable[[], KubeClient],
    made: Callable[[Controller], None] | None = None,
) -> Callable[[web.Application], contextlib.AbstractAsyncContextManager[None]]:
    """An aiohttp ``cleanup_ctx`` entry running the controller while the application runs (:func:`run_controller`);
    ``client`` may be a function, for a client made after the entry is registered."""

    @contextlib.asynccontextmanager
    async def context(app: web.Application) -> AsyncIterator[None]:
        stop = asyncio.Event()
        api = client() if callable(client) else client
        task = asyncio.ensure_future(run_controller(args, api, stop, app.get(WATCHES), made))
        try:
            yield
        finally:
            stop.set()
            try:
                async with asyncio.timeout(15):
                    await task
            except TimeoutError:
                log.warning(kv(component="controller", event="stop_timeout"))
            except Exception:
                log.exception(kv(component="controller", event="stopped_with_error"))

    return context

