"""Patches bound pods with what their ResourcePolicy unit asks for: ``podLabels``, ``podAnnotations`` and
``controller.kubernetes.io/pod-deletion-cost``.

A filter-only extender never learns which node the scheduler picked, so marking happens after the fact: the
pod watch tells :class:`~webhook.extender.state.ExtenderState` that a bound pod lacks its marks, the state
calls :meth:`Marker.enqueue`, and a few workers send one merge patch per pod (with the pod's uid as a
precondition). The patch is computed when it is sent, from the newest state, so a burst of events for one
pod costs one request: a pod is handled by one worker at a time, and a patch already sent is not sent
again while the watch has not yet shown it. Failures are retried with a growing delay; a pod that is gone
is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field

from webhook.extender.decision import MarkPatch
from webhook.extender.state import ExtenderState
from webhook.kube.client import KubeApiError

log = logging.getLogger(__name__)

Patcher = Callable[[MarkPatch], Awaitable[object]]
"""Sends one merge patch (``MarkPatch.body()``) to the pod ``namespace/name``."""

MAX_ATTEMPTS = 8
SENT_MEMORY = 10_000
"""How many sent patches are remembered (to skip re-sending one the watch has not yet reflected)."""


@dataclass(eq=False)
class Marker:
    """A deduplicating work queue of pod keys and the workers that patch them. Run :meth:`run` as a task."""

    state: ExtenderState
    patch: Patcher
    _: KW_ONLY
    workers: int = 4
    retry_delay: float = 0.5
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    patched: int = field(default=0, init=False)
    """Patches sent successfully (for tests and the log)."""
    failures: int = field(default=0, init=False)
    _queue: asyncio.Queue[tuple[str, int]] = field(default_factory=asyncio.Queue, init=False)
    _queued: set[str] = field(default_factory=set, init=False)
    _retries: set[asyncio.Task[None]] = field(default_factory=set, init=False)
    _busy: set[str] = field(default_factory=set, init=False)
    _again: set[str] = field(default_factory=set, init=False)
    _sent: dict[str, MarkPatch] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.state.on_marks_needed = self.enqueue

    def enqueue(self, key: str, attempt: int = 0) -> None:
        """Mark pod ``key`` soon (no-op when it is already waiting)."""
        if key in self._queued:
            return
        self._queued.add(key)
        self._queue.put_nowait((key, attempt))

    async def run(self) -> None:
        tasks = [asyncio.create_task(self._worker(), name=f"marker-{index}") for index in range(self.workers)]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in [*tasks, *self._retries]:
                task.cancel()
            await asyncio.gather(*tasks, *self._retries, return_exceptions=True)

    async def idle(self) -> None:
        """Until the queue is empty and no patch is in flight (for tests)."""
        await self._queue.join()

    async def _worker(self) -> None:
        while True:
            key, attempt = await self._queue.get()
            try:
                self._queued.discard(key)
                if key in self._busy:  # another worker is on it: look again when it is done
                    self._again.add(key)
                    continue
                self._busy.add(key)
                try:
                    await self._mark(key, attempt)
                finally:
                    self._busy.discard(key)
                if key in self._again:
                    self._again.discard(key)
                    self.enqueue(key)
            finally:
                self._queue.task_done()

    async def _mark(self, key: str, attempt: int) -> None:
        patch = self.state.marks_patch(key)
        if patch is None:
            self._sent.pop(key, None)
            return
        if self._sent.get(key) == patch:
            return  # sent already; the watch has not shown it yet
        try:
            await self.patch(patch)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            self.failures += 1
            gone = isinstance(error, KubeApiError) and (error.not_found or error.conflict)
            if gone or attempt + 1 >= MAX_ATTEMPTS:
                log.warning(
                    "component=extender event=mark_failed pod=%s/%s attempt=%d error=%r gave_up=true",
                    patch.namespace,
                    patch.name,
                    attempt + 1,
                    str(error),
                )
                return
            delay = min(30.0, self.retry_delay * 2**attempt)
            log.warning(
                "component=extender event=mark_failed pod=%s/%s attempt=%d error=%r retry_in=%.1fs",
                patch.namespace,
                patch.name,
                attempt + 1,
                str(error),
                delay,
            )
            task = asyncio.create_task(self._retry_later(key, attempt + 1, delay))
            self._retries.add(task)
            task.add_done_callback(self._retries.discard)
            return
        self.patched += 1
        self._sent[key] = patch
        if len(self._sent) > SENT_MEMORY:
            del self._sent[next(iter(self._sent))]
        labels = ",".join(f"{k}={v}" for k, v in sorted(patch.labels.items())) or "-"
        annotations = ",".join(f"{k}={v}" for k, v in sorted(patch.annotations.items())) or "-"
        log.info(
            "component=extender event=pod_marked pod=%s/%s node=%s unit=%r labels=%s annotations=%s",
            patch.namespace,
            patch.name,
            patch.node,
            patch.unit,
            labels,
            annotations,
        )

    async def _retry_later(self, key: str, attempt: int, delay: float) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await self.sleep(delay)
            self.enqueue(key, attempt)
