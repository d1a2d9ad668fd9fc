"""The controller's writes about a job's life beyond admission, and the pod watch that drives them.

A part the controller's loop (:class:`webhook.controller.controller.Controller`) owns and calls, given what it
reads and nothing more:

* the pod watch's listener: a change of a pod whose job waits to start, or of a bound pod in a namespace of
  the tree that no job accounts for, asks for a pass (``docs/accounting.md``);
* the start timeout (``docs/start-timeout.md``): holding a job that did not start again with its backoff note,
  dropping the note once it started, and the timer for the next deadline or retry;
* Events that tell a job why the queue treats it as it does: held for a PriorityClass that does not exist,
  counted although it runs without admission.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from webhook.api.kinds import EVENT
from webhook.api.names import BACKOFF_ANNOTATION, QUOTA_LABEL, REASON_BACKOFF, REASON_GAVE_UP, REASON_HELD
from webhook.api.objects import (
    Obj,
    events_about,
    labels_of,
    mappings,
    meta,
    namespace_of,
    owner_references_of,
    pod_spec,
    rfc3339_seconds,
)
from webhook.controller import metrics
from webhook.controller.cache import ClusterCache
from webhook.controller.decide import JobDecisions
from webhook.controller.model import TrackedJob, held_reason, track
from webhook.controller.records import backoff_patch, clear_backoff_patch, kv, spec_fingerprint
from webhook.controller.starts import StartChecks
from webhook.controller.writer import Stats, Writer
from webhook.core.limitrange import NO_DEFAULTS
from webhook.core.quota import queue_name
from webhook.core.startup import (
    BackoffPolicy,
    StartVerdict,
    after_failed_start,
    creation_refusal,
    with_creation_refusal,
)
from webhook.core.workload import Phase, WorkloadError
from webhook.kube.cache import RELIST, CacheEvent, WatchCache
from webhook.kube.client import KubeApiError, ResourceRef
from webhook.kube.events import EventRecorder
from webhook.workloads.registry import job_owner_kinds

log = logging.getLogger("webhook.controller")


def format_seconds(seconds: float) -> str:
    """``5m0s``, ``90s``: a duration as operators wrote it."""
    whole = int(seconds)
    return f"{whole // 60}m{whole % 60}s" if whole >= 60 else f"{seconds:g}s"


class JobLifecycle:
    """The writes and listeners above, with the state they keep between passes."""

    def __init__(
        self,
        writer: Writer,
        *,
        queue_namespace: str,
        start_timeout: float,
        backoff: BackoffPolicy,
        on_change: Callable[[], None],
        on_status: Callable[[], None],
        clock: Callable[[], float],
    ) -> None:
        """Writes go through ``writer`` (its cache, Events, counters and leadership are this part's too);
        ``on_change`` asks for a pass now, ``on_status`` within ``status_debounce`` (a change of status only);
        ``clock`` is monotonic."""
        self.writer = writer
        self.cache: ClusterCache = writer.cache
        self.events: EventRecorder = writer.events
        self.stats: Stats = writer.stats
        self.queue_namespace = queue_namespace
        self.start_timeout = start_timeout
        self.backoff = backoff
        self.is_leader: Callable[[], bool] = writer.is_leader
        self._on_change = on_change
        self._on_status = on_status
        self._clock = clock
        self.awaiting: set[tuple[str, str, str]] = set()
        """The admissions whose start the last pass waits for (a change of their pods asks for a pass)."""
        self.timer_due: float | None = None
        """When (monotonic) a start deadline or a retry time comes: a pass is due then."""
        self._held_told: dict[str, str] = {}
        """Uid -> missing PriorityClass of the held jobs told why (Event ``Held``)."""
        self._outside_told: set[str] = set()
        """Uids of jobs told they run without having been admitted (Event ``RunsOutsideQueue``)."""

    # Pods -------------------------------------------------------------------------------------------------------
    def pod_changed(self, cache: WatchCache, event: CacheEvent) -> None:
        """A pod bound in a managed namespace outside any job asks for a pass (it changes the quota's usage); one
        of a job waiting to start asks within ``status_debounce`` (its start check is not urgent: a burst of
        them makes one pass). Pods of running jobs change all the time and change nothing the queue decides."""
        index = self.cache.pod_index
        index.listener(cache, event)
        if event.type == RELIST or self._foreign_pod(event):
            self._on_change()
        elif index.changed & self.awaiting:
            self._on_status()
        index.changed.clear()

    def _foreign_pod(self, event: CacheEvent) -> bool:
        """Whether the event is a bound pod's, in a namespace of the tree, with no controller owner a job of the
        queue could be (so it may change the quota's foreign usage)."""
        obj = event.obj
        tree = self.cache.tree_parsed[0]
        if obj is None or tree is None:
            return False
        if tree.leaf_for_namespace(namespace_of(obj)) is None:
            return False
        was_bound = event.old is not None and pod_spec(event.old).get("nodeName")
        if not (pod_spec(obj).get("nodeName") or was_bound):
            return False
        return not any(ref.get("kind") in job_owner_kinds() for ref in owner_references_of(obj))

    def tell_held(self, decisions: JobDecisions) -> None:
        """Tell each job held for a missing PriorityClass why, once per class it misses."""
        live: dict[str, str] = {}
        for job in decisions.held:
            workload, missing = job.workload, job.missing_class
            assert missing is not None
            if self._held_told.get(workload.uid) == missing:
                live[workload.uid] = missing
                continue
            if not self.is_leader():
                continue  # the leader tells (a follower that takes over will)
            live[workload.uid] = missing
            reason = held_reason(missing)
            log.info(kv(component="controller", decision="hold", job=str(workload.key), quota=job.leaf.full_name,
                        reason=reason))
            self.events.emit(job.obj, "Warning", REASON_HELD, "Queue", f"Held in quota {job.leaf.full_name}: {reason}")
        self._held_told = live

    def tell_outside(self, jobs: Sequence[TrackedJob]) -> None:
        """A job released without an admission record (it ran before its namespace joined the tree, or while
        the webhook could not hold it) counts against its quota at once; tell it so, once."""
        live: set[str] = set()
        for job in jobs:
            workload = job.workload
            if workload.phase is not Phase.ADMITTED or job.record is not None or not workload.uid:
                continue
            live.add(workload.uid)
            if workload.uid in self._outside_told or not self.is_leader():
                continue
            self._outside_told.add(workload.uid)
            log.info(kv(component="controller", decision="count-unadmitted", job=str(workload.key),
                        quota=job.leaf.full_name, request=workload.request.describe()))
            self.events.emit(job.obj, "Warning", "RunsOutsideQueue", "Count", outside_message(job))
        self._outside_told &= live

    def set_timer(self, checks: StartChecks | None, decisions: JobDecisions, now: float) -> None:
        """A pass is due at the next start deadline or retry time, or when a job kept from reclaim by its
        quota's minimum run time may be taken."""
        due = [checks.next_deadline] if checks is not None and checks.next_deadline is not None else []
        due += [job.backoff.retry_at for job in decisions.backoff if job.backoff and not job.backoff.gave_up]
        if decisions.reclaimable_at is not None and decisions.positions:
            due.append(decisions.reclaimable_at)
        self.timer_due = None if not due else self._clock() + max(0.0, min(due) - now) + 0.05

    async def back_off_all(
        self, jobs: list[TrackedJob], checks: StartChecks, now: float
    ) -> list[TrackedJob] | None:
        """Hold every job that failed to start again; the jobs of the pass with those held (``None`` when one
        could not be written: the pass then decides nothing on a quota it may not have freed)."""
        replaced: dict[int, TrackedJob] = {}
        complete = True
        for job, verdict in checks.failed:
            updated = await self._back_off(job, verdict, now)
            if updated is None:
                complete = False
            else:
                replaced[id(job)] = updated
        if not complete:
            return None
        return [replaced.get(id(job), job) for job in jobs]

    async def _back_off(self, job: TrackedJob, verdict: StartVerdict, now: float) -> TrackedJob | None:
        workload = job.workload
        if verdict.missing and verdict.deadline is not None:
            uid = str(meta(job.obj).get("uid") or "")
            admitted = verdict.deadline - self.start_timeout  # an Event's time is in whole seconds: one less
            refusal = creation_refusal(await self._events_about(job), uid, admitted - 1)
            verdict = with_creation_refusal(verdict, refusal)
        note = after_failed_start(
            job.backoff, job.spec or spec_fingerprint(job.obj), verdict, now=now, policy=self.backoff
        )
        updated = await self.writer.patch_job(job, backoff_patch(job.adapter, job.obj, note), "backoff")
        if updated is None:
            return None
        self.stats.backed_off += 1
        metrics.START_FAILURES.labels(verdict.category).inc()
        queue = f"{self.queue_namespace}/{queue_name(job.leaf.name, workload.key.namespace)}"
        timeout = format_seconds(self.start_timeout)
        retry = "gave up: change or resubmit the job to try again" if note.gave_up else (
            f"retries at {rfc3339_seconds(note.retry_at)} at its place in the queue"
        )
        log.info(kv(component="controller", decision="backoff", job=str(workload.key), quota=job.leaf.full_name,
                    category=verdict.category, reason=verdict.reason, attempts=note.attempts,
                    retry_at=None if note.gave_up else rfc3339_seconds(note.retry_at),
                    gave_up="true" if note.gave_up else None))
        self.events.emit(
            updated, "Warning", REASON_GAVE_UP if note.gave_up else REASON_BACKOFF, "Backoff",
            f"Did not start within {timeout} ({verdict.reason}); held again and moved to the backoff list of "
            f"queue {queue}, attempt {note.attempts}; its quota goes to the jobs behind it; {retry}",
        )
        defaults, overheads = self.cache.admission()  # sized as a pass sizes it, with everything it reads
        try:
            return track(job.adapter, updated, job.leaf, self.cache.priorities(), self.cache.devices.quota(),
                         defaults=defaults.get(job.workload.key.namespace, NO_DEFAULTS), overheads=overheads)
        except WorkloadError:
            return None

    async def _events_about(self, job: TrackedJob) -> list[Obj]:
        """The Events about the job (by name and uid; one list, only for a failed start with pods missing);
        none when they cannot be read: the backoff is written without them."""
        selector = events_about(job.workload.key.name, str(meta(job.obj).get("uid") or ""))
        try:
            page = await self.writer.client.list_page(ResourceRef.of(EVENT, job.workload.key.namespace),
                                                      field_selector=selector)
        except KubeApiError as error:
            log.warning(kv(component="controller", event="events_unreadable", job=str(job.workload.key),
                           error=repr(error)))
            return []
        return mappings(page.get("items"))

    async def clear_backoff(self, job: TrackedJob) -> None:
        ops = clear_backoff_patch(job.obj)
        if ops and await self.writer.patch_job(job, ops, "clear-backoff") is not None:
            log.info(kv(component="controller", decision="clear-backoff", job=str(job.workload.key),
                        quota=job.leaf.full_name, reason=f"started, {BACKOFF_ANNOTATION} dropped"))


def outside_message(job: TrackedJob) -> str:
    """What the ``RunsOutsideQueue`` Event says of a job released without an admission record. A Pod the
    webhook tagged was created in a namespace of the tree by a workload controller for its owner: it runs
    unqueued because that owner is gone (a job deleted with ``--cascade=orphan``), not because it came early."""
    workload = job.workload
    counted = f"it counts against the quota as admitted (request {workload.request.describe()})"
    if job.adapter.gates_at_creation_only and QUOTA_LABEL in labels_of(job.obj):
        return (f"Runs in quota {job.leaf.full_name} without an owner (its job was deleted and left it running): "
                f"{counted}, and reclaim may evict it like any pod no queued job accounts for")
    return (f"Started before its namespace joined quota {job.leaf.full_name} (or while kube-queue could not "
            f"hold it): {counted}; jobs created from now on are queued")
