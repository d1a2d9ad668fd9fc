"""Sends pods refused for pod-level quota back to kube-scheduler when room appears (docs/pod-quota.md).

The cache calls :meth:`Waker.notify` whenever usage goes down while pods wait
(:attr:`~webhook.extender.cache.ExtenderCache.on_room`); a pass (a burst of notifications makes one) asks the
state which waiting pods the room can take (:meth:`~webhook.extender.state.ExtenderState.pods_to_wake`: as
many as fit, highest priority then oldest first) and touches each
(:func:`~webhook.extender.nudge.touch_pod`), which requeues it in the scheduler. The touches are
rate-limited (a token bucket, :data:`WAKE_RATE` a second, bursts of :data:`WAKE_BURST`): a burst of
refusals and frees never turns into a storm of patches, and pods the limit holds back are taken by the
next pass, once tokens are back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field

from webhook.core.waiting import WaitingPod
from webhook.extender.metrics import WOKEN
from webhook.extender.nudge import Toucher, touch_pod
from webhook.extender.state import ExtenderState
from webhook.kube.client import KubeApiError

log = logging.getLogger(__name__)

WAKE_RATE = 20.0
"""Touches a second, at most, in the long run."""
WAKE_BURST = 40
"""Touches at once, at most."""
TICK_SECONDS = 1.0
"""While pods wait or hold room, a pass at least this often (a woken pod's reservation lapses by time)."""
GATHER_SECONDS = 0.05
"""A pass waits this long after the first notification, so that a burst of frees makes one pass."""


@dataclass(slots=True)
class TokenBucket:
    """``rate`` tokens a second, at most ``burst`` saved up, full at first use (times are passed in)."""

    rate: float
    burst: int
    _tokens: float = field(init=False)
    _at: float | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self._tokens = float(self.burst)

    def available(self, now: float) -> int:
        """Whole tokens there are now."""
        if self._at is not None:
            self._tokens = min(float(self.burst), self._tokens + max(0.0, now - self._at) * self.rate)
        self._at = now if self._at is None else max(self._at, now)
        return int(self._tokens)

    def take(self, count: int, now: float) -> None:
        self.available(now)
        self._tokens -= count

    def wait(self, now: float) -> float:
        """Seconds until a whole token is there (0 when one is)."""
        self.available(now)
        return 0.0 if self._tokens >= 1 else (1.0 - self._tokens) / self.rate


@dataclass(eq=False)
class Waker:
    """Wakes waiting pods as room appears. Run :meth:`run` as a task; :meth:`notify` from the event loop."""

    state: ExtenderState
    touch: Toucher
    clock: Callable[[], float]
    _: KW_ONLY
    bucket: TokenBucket = field(default_factory=lambda: TokenBucket(WAKE_RATE, WAKE_BURST))
    tick: float = TICK_SECONDS
    gather: float = GATHER_SECONDS
    sent: int = field(default=0, init=False)
    """Pods touched successfully."""
    _event: asyncio.Event = field(default_factory=asyncio.Event, init=False)

    def notify(self) -> None:
        """Room appeared: a pass soon."""
        self._event.set()

    async def run(self) -> None:
        while True:
            timeout = self.tick if self.state.wake_pending else None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._event.wait(), timeout)
            if self.gather:
                await asyncio.sleep(self.gather)
            self._event.clear()
            try:
                await self.wake_once()
            except Exception:  # a bug must not stop the waking for good
                log.exception("component=extender event=wake_pass_failed")

    async def wake_once(self) -> int:
        """One pass: touch the pods the room can take, as many as the rate allows; how many were chosen."""
        now = self.clock()
        tokens = self.bucket.available(now)
        if tokens <= 0:
            self._later(self.bucket.wait(now))
            return 0
        pods = self.state.pods_to_wake(now, tokens)
        self.bucket.take(len(pods), now)
        for pod in pods:
            await self._wake(pod, now)
        if len(pods) == tokens and self.state.waiting:
            self._later(self.bucket.wait(self.clock()))  # the limit held some back: go on once tokens are back
        return len(pods)

    def _later(self, delay: float) -> None:
        asyncio.get_running_loop().call_later(max(delay, 0.01), self._event.set)

    async def _wake(self, pod: WaitingPod, now: float) -> None:
        try:
            await touch_pod(self.touch, pod.namespace, pod.name, pod.uid, now)
        except KubeApiError as error:
            gone = error.not_found or error.status == 409  # 409: the uid precondition (a re-created pod)
            WOKEN.labels("gone" if gone else "failed").inc()
            if gone:
                self.state.unwait(pod.key)
            log.info(
                "component=extender event=wake_failed pod=%s/%s gone=%s error=%r",
                pod.namespace,
                pod.name,
                str(gone).lower(),
                str(error),
            )
            return
        self.sent += 1
        WOKEN.labels("sent").inc()
        log.info("component=extender event=pod_woken pod=%s/%s reason=quota_room", pod.namespace, pod.name)
