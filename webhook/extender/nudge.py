"""Wakes pods whose ResourcePolicy verdict changes by time alone.

Under ``whenTryNextUnits: TimeoutOrExceedMax`` a pod waits for its preferred unit until ``timeout`` has
passed, then may use the next unit. Nothing in the cluster changes at that moment, so kube-scheduler - which
retries unschedulable pods on cluster events, or after ``podMaxInUnschedulablePodsDuration`` (5 minutes) -
could leave the pod waiting far longer than its timeout. The filter therefore reports when the wait ends
(``Decision.retry_at``), and :class:`Nudger` touches the pod then: one annotation,
``kube-queue.x-k8s.io/placement-retry-at``, whose update sends the pod back to the scheduler's active queue (pods
an extender rejected are requeued on any update of theirs).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from webhook.api.names import PLACEMENT_RETRY_ANNOTATION
from webhook.api.objects import Doc, rfc3339
from webhook.kube.client import KubeApiError

log = logging.getLogger(__name__)

MARGIN_SECONDS = 0.5
"""Touch the pod this long after the wait ends, so the next filter sees it over."""

Toucher = Callable[[str, str, Doc], Awaitable[object]]
"""Sends a merge patch ``(namespace, name, body)`` to a pod."""


async def touch_pod(touch: Toucher, namespace: str, name: str, uid: str, at: float) -> None:
    """Write :data:`~webhook.api.names.PLACEMENT_RETRY_ANNOTATION` (``at``) on the pod, with its uid as a
    precondition (never a re-created pod of the same name): kube-scheduler requeues a pod it could not place on
    any update of it. Raises :class:`~webhook.kube.client.KubeApiError`."""
    metadata: Doc = {"annotations": {PLACEMENT_RETRY_ANNOTATION: rfc3339(at)}}
    if uid:
        metadata["uid"] = uid
    await touch(namespace, name, {"metadata": metadata})


class Nudger:
    """One timer per waiting pod (the latest ``retry_at`` wins). Close it to cancel every timer."""

    def __init__(self, touch: Toucher, clock: Callable[[], float]) -> None:
        self._touch = touch
        self._clock = clock
        self._timers: dict[str, tuple[float, asyncio.TimerHandle]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.sent = 0

    def schedule(self, namespace: str, name: str, uid: str, retry_at: float) -> None:
        """Touch the pod at ``retry_at`` (epoch seconds); replaces an earlier timer of the same pod."""
        key = uid or f"{namespace}/{name}"
        current = self._timers.get(key)
        if current is not None:
            if current[0] == retry_at:
                return
            current[1].cancel()
        delay = max(0.0, retry_at - self._clock()) + MARGIN_SECONDS
        loop = asyncio.get_running_loop()
        handle = loop.call_later(delay, self._fire, key, namespace, name, uid, retry_at)
        self._timers[key] = (retry_at, handle)

    @property
    def waiting(self) -> int:
        """How many pods have a timer."""
        return len(self._timers)

    def _fire(self, key: str, namespace: str, name: str, uid: str, retry_at: float) -> None:
        self._timers.pop(key, None)
        task = asyncio.get_running_loop().create_task(self._send(namespace, name, uid, retry_at))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, namespace: str, name: str, uid: str, retry_at: float) -> None:
        stamp = rfc3339(retry_at)
        try:
            await touch_pod(self._touch, namespace, name, uid, retry_at)
        except KubeApiError as error:
            log.info(
                "component=extender event=nudge_failed pod=%s/%s error=%r", namespace, name, str(error)
            )
            return
        self.sent += 1
        log.info("component=extender event=pod_nudged pod=%s/%s wait_ended=%s", namespace, name, stamp)

    async def close(self) -> None:
        for _, handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        for task in list(self._tasks):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*self._tasks, return_exceptions=True)
