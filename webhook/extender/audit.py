"""Looks at placements the extender counts but has not seen bound, and forgets the ones that are over.

The pod watch brings bound pods only (``webhook.extender.sources``), so a pod deleted before its binding, or
one the scheduler gave up on, would keep its assumed placement counted until ``--assume-ttl`` (30 s) - a
phantom charge that refuses other pods of its quota (and fills a ResourcePolicy unit). Every
:data:`TICK_SECONDS` the :class:`Auditor` takes the assumptions not seen bound :data:`CHECK_AFTER` seconds
after they were made (a binding normally reaches the watch within milliseconds, so in the steady state
there are none), reads each pod (``GET``, rate-limited: :data:`READ_RATE` a second), and lets
:func:`webhook.core.assumed.assumed_fate` say whether it is over; the cache forgets those
(:meth:`~webhook.extender.cache.ExtenderCache.forget`), which frees their room and wakes the pods waiting
for it (:mod:`webhook.extender.wake`). A pod still on its way is looked at again later, less and less often.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field

from webhook.api.objects import Obj
from webhook.core.assumed import assumed_fate
from webhook.extender.state import ExtenderState
from webhook.extender.wake import TokenBucket
from webhook.kube.client import KubeApiError

log = logging.getLogger(__name__)

CHECK_AFTER = 2.0
"""Seconds after the filter an assumption not yet seen bound is first looked at."""
TICK_SECONDS = 0.5
READ_RATE = 10.0
"""Pod reads a second, at most, in the long run."""
READ_BURST = 20

Reader = Callable[[str, str], Awaitable[Obj | None]]
"""Reads the pod ``(namespace, name)`` from the API server (``None`` when it does not exist)."""


@dataclass(eq=False)
class Auditor:
    """Forgets assumptions whose pods are gone or were given up on. Run :meth:`run` as a task."""

    state: ExtenderState
    read: Reader
    clock: Callable[[], float]
    _: KW_ONLY
    after: float = CHECK_AFTER
    tick: float = TICK_SECONDS
    bucket: TokenBucket = field(default_factory=lambda: TokenBucket(READ_RATE, READ_BURST))
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    reads: int = field(default=0, init=False)
    forgotten: int = field(default=0, init=False)

    async def run(self) -> None:
        while True:
            await self.sleep(self.tick)
            try:
                await self.audit_once()
            except Exception:  # a bug must not stop the audit for good
                log.exception("component=extender event=audit_failed")

    async def audit_once(self) -> int:
        """Look at the assumptions due (as many as the rate allows); how many were forgotten."""
        now = self.clock()
        tokens = self.bucket.available(now)
        if tokens <= 0:
            return 0
        due = self.state.assumptions_to_check(now, after=self.after, limit=tokens)
        self.bucket.take(len(due), now)
        forgotten = 0
        for key, assumption in due:
            view = assumption.view
            try:
                current = await self.read(view.namespace, view.name)
            except KubeApiError as error:
                log.info("component=extender event=audit_read_failed pod=%s error=%r", view.key, str(error))
                continue
            self.reads += 1
            if self.state.forget(key, assumption, assumed_fate(view.uid, assumption.mark, current)):
                forgotten += 1
        self.forgotten += forgotten
        return forgotten
