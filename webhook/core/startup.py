"""Start timeout and backoff: a released job must start in time or give its quota back (docs/start-timeout.md).

A released (admitted) job whose pods are not running within the start timeout is suspended again and waits
in its Queue's ``backoff`` list until its retry time; then it queues again at its original place. The rules,
all pure (the shell reads pods and the clock and passes them in):

* **Started.** A job that needs all its pods at once (a *gang*: Kubeflow kinds, RayJob, a batch Job with
  ``parallelism == completions``) has started when all its expected pods run (or have finished); any other
  job when one of its pods runs (or has finished). Once started, a job is not checked again for that
  admission.
* **Failed start.** A job not started when ``admitted_at + timeout`` has passed. One exception: when none of
  its pods runs and every pod that waits is refused by pod-level quota only (the queue oversold on purpose,
  ``--oversellrate`` above 1), the job waits for quota, not for something that will never come; it is not
  backed off. A gang with some pods running is a failed start whatever the others wait for: half-started
  gangs must not sit on nodes.
* **The reason** comes from the pods: a container that cannot start (``ErrImagePull`` ...) first, then the
  scheduler's ``PodScheduled=False`` message, then "not created" or "Pending". Its *category* (a short word
  from a bounded set) labels the metric.
* **Backoff.** The n-th failed start waits ``min(max_delay, base_delay × 2^(n-1))``; after ``limit`` failed
  starts (0 = no limit) the job gives up (``GaveUp``) and stays held until its spec changes (it is edited or
  resubmitted), which starts it afresh.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from enum import Enum

from webhook.api.names import REASON_GAVE_UP
from webhook.api.objects import RAN_PHASES, Obj, event_time, involved_object

__all__ = [
    "BackoffNote",
    "BackoffPolicy",
    "BackoffState",
    "PodState",
    "StartStatus",
    "StartVerdict",
    "after_failed_start",
    "backoff_state",
    "creation_refusal",
    "start_verdict",
    "with_creation_refusal",
]

CONTAINER_FAILURES = (
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
    "CrashLoopBackOff",
)
"""Container waiting reasons that mean the pod will not run by itself (each is also a metric category)."""

CATEGORIES = (*CONTAINER_FAILURES, "Unschedulable", "PartialStart", "NotCreated", "NotRunning")
"""Every category a failed start may have (the metric's ``reason`` label takes only these)."""

GAVE_UP = REASON_GAVE_UP
"""The reason a job in backoff shows once it has used all its attempts."""

_POD_QUOTA_REFUSAL = re.compile(r"quota \S+: \S+ request \S+ \+ used \S+ > max \S+")
"""How the extender words a pod-level quota refusal (``quota root/D: cpu request 10 + used 95 > max 100``);
a test holds the extender's own wording to it."""


@dataclass(frozen=True, slots=True)
class PodState:
    """What the start check reads of one pod of a job."""

    name: str
    phase: str
    """``Pending``, ``Running``, ``Succeeded``, ``Failed`` or ``Unknown``."""
    unschedulable: str = ""
    """The scheduler's ``PodScheduled=False`` message, empty when none."""
    container_reason: str = ""
    """The first container waiting reason, empty when none."""
    container_message: str = ""
    deleting: bool = False
    started: float | None = None
    """When the kubelet took the pod (``status.startTime``, seconds since the epoch), ``None`` before."""

    @property
    def runs(self) -> bool:
        """Running, or finished (it did run)."""
        return not self.deleting and self.phase in RAN_PHASES

    @property
    def quota_refused(self) -> bool:
        """Waiting only because pod-level quota refuses it (the queue oversold on purpose)."""
        return bool(self.unschedulable) and _POD_QUOTA_REFUSAL.search(self.unschedulable) is not None


class StartStatus(Enum):
    STARTED = "started"
    WAITING = "waiting"
    """Not started, the deadline not reached (or waiting for pod-level quota)."""
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class StartVerdict:
    status: StartStatus
    deadline: float | None = None
    """When a waiting job fails (``None`` when it waits for pod-level quota, with no deadline)."""
    reason: str = ""
    """For a failed start: what the pods say, one line."""
    category: str = ""
    """For a failed start: one of :data:`CATEGORIES`."""
    missing: int = 0
    """For a failed start: how many of its expected pods were not there (never created, or gone)."""


def _describe(pod: PodState) -> tuple[str, str] | None:
    """``(category, text)`` of a pod that does not run, from the most telling signal it has."""
    if pod.container_reason in CONTAINER_FAILURES:
        text = f"pod {pod.name}: {pod.container_reason}"
        if pod.container_message:
            text += f": {pod.container_message}"
        return pod.container_reason, text
    if pod.unschedulable:
        return "Unschedulable", f"pod {pod.name} cannot be scheduled: {pod.unschedulable}"
    return None


def failure_reason(expected: int, pods: Sequence[PodState], gang: bool) -> tuple[str, str]:
    """``(category, reason)`` of a job that did not start: what its pods say."""
    live = [pod for pod in pods if not pod.deleting]
    running = sum(1 for pod in live if pod.runs)
    described = [found for pod in sorted(live, key=lambda p: p.name) if not pod.runs and (found := _describe(pod))]
    containers = [found for found in described if found[0] in CONTAINER_FAILURES]
    best = containers[0] if containers else (described[0] if described else None)
    if not live:
        category, text = "NotCreated", f"none of its {expected} pod(s) was created"
    elif best is not None:
        category, text = best
    else:
        waiting = sorted(pod.name for pod in live if not pod.runs)
        category = "NotRunning"
        text = f"{len(live) - running} pod(s) not running ({', '.join(waiting[:3])})" if waiting else (
            f"{len(live)} of {expected} pod(s) created"
        )
    if gang and running:
        return "PartialStart", f"only {running} of {expected} pods run and it needs all at once; {text}"
    return category, text


def start_verdict(
    expected: int,
    pods: Sequence[PodState],
    *,
    gang: bool,
    admitted_at: float,
    now: float,
    timeout: float,
) -> StartVerdict:
    """Whether a released job started, still may, or failed to start in ``timeout`` seconds (module rules).
    ``expected`` is how many pods it runs at once; ``pods`` are its current pods."""
    live = [pod for pod in pods if not pod.deleting]
    running = sum(1 for pod in live if pod.runs)
    if (gang and running >= max(1, expected)) or (not gang and running >= 1) or expected <= 0:
        return StartVerdict(StartStatus.STARTED)
    waiting = [pod for pod in live if not pod.runs]
    if running == 0 and waiting and all(pod.quota_refused for pod in waiting):
        return StartVerdict(StartStatus.WAITING)
    deadline = admitted_at + timeout
    if now < deadline:
        return StartVerdict(StartStatus.WAITING, deadline=deadline)
    category, reason = failure_reason(expected, pods, gang)
    return StartVerdict(StartStatus.FAILED, deadline=deadline, reason=reason, category=category,
                        missing=max(0, expected - len(live)))


_FAILED_CREATE = re.compile(r"^Failed(To)?Create")
"""The reasons of the Events a workload controller writes when it cannot create a pod: the Job controller's
``FailedCreate``, the training operator's ``FailedCreatePod``, KubeRay's ``FailedToCreateHeadPod``..."""


def creation_refusal(events: Iterable[Obj], uid: str, since: float) -> str | None:
    """What the job's operator said the last time it could not create one of its pods: the message of the
    newest ``Warning`` Event about the job (its ``uid``) whose reason is a failed creation, no older than
    ``since`` (the admission); ``None`` when there is none."""
    refusals = [event for event in events if event.get("type") == "Warning"
                and involved_object(event).get("uid") == uid
                and _FAILED_CREATE.match(str(event.get("reason") or "")) and event_time(event) >= since]
    if not refusals:
        return None
    newest = max(refusals, key=event_time)
    return str(newest.get("message") or newest.get("reason"))


REFUSAL_CHARS = 300
"""The most of an operator's refusal a backoff note keeps (it goes into the Queue's status too)."""


def with_creation_refusal(verdict: StartVerdict, refusal: str | None) -> StartVerdict:
    """A failed start whose pods were not all there, with why its operator could not create them."""
    if refusal is None or not verdict.missing:
        return verdict
    if len(refusal) > REFUSAL_CHARS:
        refusal = refusal[:REFUSAL_CHARS - 3] + "..."
    return replace(verdict, reason=f"{verdict.reason}; its operator could not create them: {refusal}")


# Backoff ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BackoffPolicy:
    """How long a job that failed to start waits before it queues again."""

    base_delay: float = 60.0
    max_delay: float = 1800.0
    limit: int = 0
    """Failed starts after which the job gives up (0 = never)."""

    def delay(self, attempts: int) -> float:
        """The wait after the ``attempts``-th failed start (1-based)."""
        exponent = min(max(0, attempts - 1), 62)
        return float(min(self.max_delay, self.base_delay * 2**exponent))


@dataclass(frozen=True, slots=True)
class BackoffNote:
    """What a job in backoff carries: how often it failed to start, why, and until when it waits."""

    attempts: int
    reason: str
    category: str
    retry_at: float
    failed_at: float
    spec: str
    """A fingerprint of the job's spec at the failure: a different spec (edited, resubmitted) starts afresh."""
    gave_up: bool = False


def after_failed_start(
    previous: BackoffNote | None, spec: str, verdict: StartVerdict, *, now: float, policy: BackoffPolicy
) -> BackoffNote:
    """The note of a job that just failed to start (counting on from ``previous`` if it is for this spec)."""
    attempts = (previous.attempts if previous is not None and previous.spec == spec else 0) + 1
    gave_up = policy.limit > 0 and attempts >= policy.limit
    return BackoffNote(
        attempts=attempts,
        reason=verdict.reason,
        category=verdict.category,
        retry_at=now + policy.delay(attempts),
        failed_at=now,
        spec=spec,
        gave_up=gave_up,
    )


class BackoffState(Enum):
    NONE = "none"
    """No note, or one for another spec: the job queues as any other."""
    WAITING = "waiting"
    """In backoff until ``retry_at``."""
    RETRYING = "retrying"
    """Its retry time has come: it queues at its original place (the note keeps counting attempts)."""
    GAVE_UP = "gave-up"


def backoff_state(note: BackoffNote | None, spec: str, now: float) -> BackoffState:
    """Where a held job stands with its backoff note (module rules)."""
    if note is None or note.spec != spec:
        return BackoffState.NONE
    if note.gave_up:
        return BackoffState.GAVE_UP
    return BackoffState.WAITING if now < note.retry_at else BackoffState.RETRYING
