"""Start estimates in the controller, off the pass (docs/eta.md).

After each pass the controller offers what it decided on (:meth:`EtaService.offer`: the tree, the jobs, the pods
no job accounts for...). At most every ``--eta-interval`` seconds (and never more than a fifth of a core on
average), and only on the replica holding the Lease, :meth:`EtaService.run` takes the latest offer and, in a
worker thread, replays it forward with the core's estimator (:func:`webhook.core.eta.estimate`). The replay
waits between its own passes while a real pass runs (:meth:`busy`), so it never delays one by more than one of
its steps; the webhook and the pass keep the event loop. Its result is :meth:`published`: the
``estimatedStart`` and ``estimatedStartLatest`` of each waiting job (written into its Queue's
``status.queueItemDetails.active`` item) and each namespace's run-time history (the Queue's
``status.runtimeHistory``).

**The history** (:class:`~webhook.core.runtimes.RuntimeHistory`) lives in this process and in the Queues' status:
each job seen to *succeed* adds its run time, from when its pods were first seen running (else its admission) to
its finish time, to its (namespace, kind, name stem) group: at most 20 run times a group, 32 groups a Queue. A
restarted (or newly elected) controller reads the groups back from the Queues' status; jobs that finished since
(after a group's ``lastFinished``) and are still in the cluster are then counted. What is lost: the run times
of jobs finished and deleted while no controller ran, and the pods' start times seen only in memory (jobs
running across the restart count from their admission).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from webhook.api.objects import Obj, rfc3339_seconds
from webhook.controller import metrics
from webhook.controller.model import TrackedJob
from webhook.controller.records import kv
from webhook.controller.starts import PodIndex
from webhook.core.decide import leaf_policies
from webhook.core.eta import Estimate, estimate
from webhook.core.eta_pack import pack_estimate
from webhook.core.eta_replay import ReplayInput
from webhook.core.handoff import NO_HANDOFF, Handoff, HandoffHistory
from webhook.core.quota import QuotaTree, queue_name
from webhook.core.runtimes import RuntimeHistory, history_items, restore_items, running_since
from webhook.core.workload import Phase, Workload, WorkloadKey
from webhook.kube.collector import collector_paused, release_free_memory
from webhook.workloads.runtime import finished_at, job_runtime, stem_of, succeeded

log = logging.getLogger("webhook.controller")

FINISHED_KEPT = 10_000
"""Start times of ended admissions kept for the history at most (the oldest go first)."""
CPU_SHARE = 0.2
"""Refreshes are spaced so that they take at most this share of one core on average."""
PAUSE_LIMIT = 10.0
"""Seconds the replay waits for a pass (or a read of the read API) to end before it goes on anyway (neither
takes that long)."""


@dataclass(frozen=True, slots=True)
class EtaInputs:
    """What one pass decided on."""

    tree: QuotaTree
    jobs: Sequence[TrackedJob]
    queues: Mapping[str, Obj]
    rate: Fraction
    strict: bool
    now: float
    loose: Sequence[Workload] = ()
    protected: Mapping[WorkloadKey, str] | None = None
    closing: frozenset[str] = frozenset()
    tries: int = 16
    tree_status: object = None
    """The honoured tree's ``status`` as stored (its control plane's time is read back once, after a restart)."""


@dataclass(frozen=True, slots=True)
class EtaStatus:
    """What the status of the Queues and the tree says of the estimates: per waiting job its fields, per namespace
    its history, and the control plane's time per turn (``None``: nothing measured or read back yet)."""

    items: Mapping[WorkloadKey, Mapping[str, str]] = field(default_factory=dict)
    history: Mapping[str, list[dict[str, object]]] = field(default_factory=dict)
    handoff: Mapping[str, list[float]] | None = None
    explained: Mapping[WorkloadKey, bytes] = field(default_factory=dict, compare=False)
    """Each waiting job's whole estimate, packed (:mod:`webhook.core.eta_pack`), for ``kq why``; not a change
    of status."""
    turn: Handoff = field(default=NO_HANDOFF, compare=False)
    """The control plane's time per turn the replay added."""


class EtaService:
    """The controller's estimates (see the module)."""

    def __init__(self, interval: float, pods: PodIndex, *, wall: Callable[[], float],
                 clock: Callable[[], float] = time.monotonic, poke: Callable[[], None] | None = None) -> None:
        self.interval = interval
        self._poke = poke
        self.pods = pods
        self._wall = wall
        self._clock = clock
        self.history = RuntimeHistory()
        self._restored = False
        self._latest: EtaInputs | None = None
        self._offered = asyncio.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._unread = threading.Event()
        """Clear while the read API builds an answer: the replay waits for it too (one worker builds them)."""
        self._unread.set()
        self._status = EtaStatus()
        self._since: dict[str, float] = {}
        """Admission (:func:`_admission`) -> when its pods were first seen running."""
        self._pending: set[str] = set()
        """Admissions seen not running yet (so their start can be dated when they do)."""
        self._finished_since: dict[str, float] = {}
        """The same for admissions that ended (finished or evicted), until the history takes them."""
        self._counted: set[str] = set()
        """Uids of finished jobs already in the history."""
        self.handoff = HandoffHistory()
        self._admitted: set[str] = set()
        """Uids of the jobs admitted at the last pass."""
        self._ended_seen: dict[str, float] = {}
        """Uid -> the pass that first saw it finished after it was admitted, until the history takes it."""
        self.refreshes = 0
        self.last_cpu = 0.0
        """CPU seconds the last refresh took (its thread's)."""
        self._spent = 0.0
        """The worker thread's CPU clock when the refresh's CPU was last counted."""

    # The pass's side ---------------------------------------------------------------------------------------
    def busy(self) -> None:
        """A pass starts: the replay waits before its next step."""
        self._idle.clear()

    def idle(self) -> None:
        self._idle.set()

    def reading(self, busy: bool) -> None:
        """The read API starts (``True``) or ends an answer: the replay waits before its next step meanwhile, so
        the answer does not share the interpreter with it (from the read API's one worker thread)."""
        if busy:
            self._unread.clear()
        else:
            self._unread.set()

    def offer(self, inputs: EtaInputs) -> None:
        """What the pass decided on (cheap: kept until the next refresh, and one walk over the jobs for the jobs
        it is the first to see finished)."""
        self._latest = inputs
        self._offered.set()
        admitted: set[str] = set()
        before, seen = self._admitted, self._ended_seen
        for job in inputs.jobs:
            workload = job.workload
            if workload.phase is Phase.ADMITTED:
                admitted.add(workload.uid)
            elif workload.phase is Phase.FINISHED and workload.uid in before and workload.uid not in seen:
                seen[workload.uid] = inputs.now  # this pass hands the job's room on
        self._admitted = admitted
        for old in list(seen)[:max(0, len(seen) - FINISHED_KEPT)]:
            del seen[old]  # jobs that failed are never taken: the oldest go

    def published(self) -> EtaStatus:
        return self._status

    # The refresh -------------------------------------------------------------------------------------------
    async def run(self) -> None:
        """Refresh at most every :attr:`interval` seconds, when a pass offered something new."""
        while True:
            await self._offered.wait()
            self._offered.clear()
            inputs = self._latest
            if inputs is None:
                continue
            running = self._running(inputs.jobs, inputs.now)
            started = self._clock()
            try:
                status = await asyncio.to_thread(self.refresh, inputs, running)
                changed = status != self._status
                self._status = status
                if changed and self._poke is not None:
                    self._poke()  # a pass writes what changed into the Queues' status
            except Exception as error:  # an estimate is advice: its failure must not stop the controller
                log.exception(kv(component="controller", event="eta_failed", error=repr(error)))
            took = self._clock() - started
            # At most every `interval` seconds, and never more than CPU_SHARE of a core on average.
            await asyncio.sleep(max(0.0, self.interval - took, self.last_cpu / CPU_SHARE - took))

    def refresh_now(self) -> None:
        """One refresh over what the last pass offered, in the caller's thread (what :meth:`run` does in a worker
        thread, at its pace)."""
        if self._latest is not None:
            self._status = self.refresh(self._latest, self._running(self._latest.jobs, self._latest.now))

    def _running(self, jobs: Sequence[TrackedJob], now: float) -> dict[WorkloadKey, float]:
        """Admitted jobs whose pods run, and since when (read here, on the event loop, which owns the pod
        index): their pods' start (:func:`~webhook.core.runtimes.running_since`); where no pod says, first seen
        running after being seen not running: now; already running when first seen: its admission."""
        out: dict[WorkloadKey, float] = {}
        live: set[str] = set()
        for job in jobs:
            workload = job.workload
            if workload.phase is not Phase.ADMITTED:
                continue
            key = _admission(job)
            live.add(key)
            since = self._since.get(key)
            if since is None:
                pods = self.pods.pods_of(job)
                if not any(pod.phase == "Running" for pod in pods):
                    self._pending.add(key)
                    continue
                since = running_since((pod.started for pod in pods if pod.runs and pod.started is not None),
                                      workload.admitted_at)
                if since is None:
                    since = now if key in self._pending else (workload.admitted_at or now)
                self._since[key] = since
                self._pending.discard(key)
            out[workload.key] = since
        for gone in [key for key in self._since if key not in live]:
            self._finished_since[gone] = self._since.pop(gone)
        for old in list(self._finished_since)[:max(0, len(self._finished_since) - FINISHED_KEPT)]:
            del self._finished_since[old]  # evicted jobs' entries are never taken: the oldest go
        self._pending &= live
        return out

    def refresh(self, inputs: EtaInputs, running: Mapping[WorkloadKey, float]) -> EtaStatus:
        """One refresh (in the worker thread): the history, the replays, what to publish."""
        started = self._spent = time.thread_time()
        if not self._restored:
            self._restore(inputs)
        self._learn(inputs)
        tree = inputs.tree
        runtimes = {}
        for job in inputs.jobs:
            if job.workload.phase is not Phase.FINISHED:
                runtimes[job.workload.key] = job_runtime(job.obj, job.workload.key.kind, self.history,
                                                         job.leaf.namespaces, job.adapter)
        policies = leaf_policies(tree, inputs.queues, inputs.strict)
        given = ReplayInput(tree, inputs.jobs, policies, inputs.rate, inputs.now, runtimes, running, inputs.loose,
                            inputs.protected, inputs.closing, inputs.tries, self.handoff.figure())
        with collector_paused():  # the replays make no garbage cycles, as the pass makes none
            found = estimate(given, between=self._wait_for_pass)
        status = EtaStatus(self._items(found.by_key), self._histories(tree),
                           self.handoff.items() if len(self.handoff) else None,
                           {key: pack_estimate(one) for key, one in found.by_key.items()}, found.handoff)
        self.refreshes += 1
        self.last_cpu = time.thread_time() - started
        metrics.ETA_REFRESH.observe(self.last_cpu)
        metrics.ETA_CPU.inc(time.thread_time() - self._spent)
        log.debug(kv(component="controller", event="eta_refreshed", waiting=len(found.by_key), passes=found.passes,
                     cpu_seconds=f"{self.last_cpu:.3f}"))
        del found, given
        release_free_memory()  # what the replays freed, some tens of MiB at 50,000 waiting jobs
        return status

    def _wait_for_pass(self) -> None:
        metrics.ETA_CPU.inc(time.thread_time() - self._spent)
        self._idle.wait(PAUSE_LIMIT)
        self._unread.wait(PAUSE_LIMIT)
        self._spent = time.thread_time()

    @staticmethod
    def _items(estimates: Mapping[WorkloadKey, Estimate]) -> dict[WorkloadKey, dict[str, str]]:
        """The status fields of each estimate (the writer keeps a published one while the new one is close to it:
        :func:`~webhook.controller.decide.with_published_estimates`)."""
        items: dict[WorkloadKey, dict[str, str]] = {}
        for key, found in estimates.items():
            fields = {}
            if found.start is not None:
                fields["estimatedStart"] = rfc3339_seconds(found.start)
            if found.latest is not None:
                fields["estimatedStartLatest"] = rfc3339_seconds(found.latest)
            if fields:
                items[key] = fields
        return items

    # The history -------------------------------------------------------------------------------------------
    def _restore(self, inputs: EtaInputs) -> None:
        for namespace in inputs.tree.leaf_by_namespace:
            leaf = inputs.tree.leaf_for_namespace(namespace)
            queue = inputs.queues.get(queue_name(leaf.name, namespace)) if leaf is not None else None
            status = queue.get("status") if queue is not None else None
            if isinstance(status, Mapping):
                restore_items(self.history, namespace, status.get("runtimeHistory"))
        self.handoff.restore_status(inputs.tree_status)
        self._restored = True

    def _learn(self, inputs: EtaInputs) -> None:
        """Add the run time of every job that succeeded since the last refresh, and the control plane's time
        around it (:mod:`webhook.core.handoff`): from its admission to its pods' start, from its finish to the pass
        that saw it finished."""
        live: set[str] = set()
        for job in inputs.jobs:
            workload = job.workload
            if workload.phase is not Phase.FINISHED or not workload.uid:
                continue
            live.add(workload.uid)
            if workload.uid in self._counted:
                continue
            self._counted.add(workload.uid)
            if not succeeded(job.obj):
                continue
            group = (workload.key.namespace, workload.key.kind, stem_of(job.obj))
            ended = finished_at(job.obj) or inputs.now
            if ended <= self.history.last.get(group, float("-inf")) and self.refreshes == 0:
                continue  # counted before a restart (the group's last finish says so)
            seen = self._ended_seen.pop(workload.uid, None)
            admitted = job.record.admitted_at if job.record is not None and job.record.admitted_at else None
            began = self._finished_since.pop(_admission(job), None)
            if admitted is not None:
                self.handoff.add(began - admitted if began is not None else None,
                                 seen - ended if seen is not None else None)
            if began is None:
                began = admitted
            if began is not None and ended >= began:
                self.history.add(group, ended - began, ended)
        self._counted &= live

    def _histories(self, tree: QuotaTree) -> dict[str, list[dict[str, object]]]:
        return {namespace: history_items(self.history, namespace) for namespace in tree.leaf_by_namespace}


def _admission(job: TrackedJob) -> str:
    """One admission of one job: its uid and the admission record's id."""
    return f"{job.workload.uid}/{job.record.id if job.record is not None else ''}"


__all__ = ["EtaInputs", "EtaService", "EtaStatus"]
