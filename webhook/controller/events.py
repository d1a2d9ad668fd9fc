"""Kubernetes Events on jobs (``kubectl describe job`` shows them): Queued, Admitted, Evicted.

:class:`EventRecorder` sends ``core/v1`` Events from a bounded background queue, so a slow or failing API
never holds up a decision; when the queue is full the oldest pending Event is dropped (and counted).
:class:`EventGate` decides whether a waiting job's Queued event is due: only when its reason changed, and
at most every ``interval`` seconds per job.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from webhook.api import kinds, names
from webhook.api.names import CONTROLLER_COMPONENT
from webhook.api.objects import Doc, Obj, parse_time, rfc3339, rfc3339_seconds
from webhook.controller.records import kv
from webhook.kube.client import KubeApiError, KubeClient, ResourceRef

log = logging.getLogger(__name__)

EVENTS = ResourceRef.of(kinds.EVENT)
MAX_MESSAGE = 1024
"""The apiserver refuses Event messages over 1 KiB."""




def queued_memory(events: Sequence[Obj], now: float) -> dict[str, tuple[str, float]]:
    """From Queued Events (as listed), each job's latest ``uid -> (dedupe key, age in seconds)``; events
    without a key (sent by an older version) or a readable time are skipped."""
    latest: dict[str, tuple[str, float]] = {}
    for event in events:
        if event.get("reason") != names.REASON_QUEUED or not _ours(event):
            continue
        target = event.get("involvedObject")
        uid = target.get("uid") if isinstance(target, Mapping) else None
        metadata = event.get("metadata")
        annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
        key = annotations.get(names.QUEUED_KEY_ANNOTATION) if isinstance(annotations, Mapping) else None
        sent = parse_time(event.get("eventTime")) or parse_time(event.get("lastTimestamp"))
        if not isinstance(uid, str) or not uid or not isinstance(key, str) or sent is None:
            continue
        if uid not in latest or latest[uid][1] > now - sent:
            latest[uid] = (key, now - sent)
    return latest


def _ours(event: Obj) -> bool:
    source = event.get("source")
    component = source.get("component") if isinstance(source, Mapping) else None
    return CONTROLLER_COMPONENT in (component, event.get("reportingComponent"))


@dataclass(frozen=True, slots=True)
class PendingEvent:
    namespace: str
    body: Obj


def involved(obj: Obj) -> Doc:
    """``involvedObject`` of an Event about ``obj``."""
    metadata = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    assert isinstance(metadata, Mapping)
    out = {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "name": metadata.get("name"),
        "namespace": metadata.get("namespace"),
        "uid": metadata.get("uid"),
        "resourceVersion": metadata.get("resourceVersion"),
    }
    return {key: value for key, value in out.items() if value}


class EventRecorder:
    """Queue Events and send them from :meth:`run`."""

    def __init__(
        self,
        client: KubeClient,
        instance: str,
        *,
        max_pending: int = 2000,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.instance = instance
        self._wall = wall
        self._pending: collections.deque[PendingEvent] = collections.deque(maxlen=max_pending)
        self._wake = asyncio.Event()
        self.sent = 0
        self.dropped = 0
        self.failed = 0

    def emit(
        self,
        obj: Obj,
        event_type: str,
        reason: str,
        action: str,
        message: str,
        *,
        annotations: Mapping[str, str] | None = None,
    ) -> None:
        """Queue one Event about ``obj`` (``event_type`` ``Normal`` or ``Warning``); ``annotations`` go on the
        Event object itself (the Queued event's dedupe key, read back by a new leader)."""
        target = involved(obj)
        namespace = str(target.get("namespace") or "default")
        now = self._wall()
        if len(message) > MAX_MESSAGE:
            message = message[: MAX_MESSAGE - 3] + "..."
        metadata: Doc = {"generateName": f"{target.get('name', 'object')}.", "namespace": namespace}
        if annotations:
            metadata["annotations"] = dict(annotations)
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": metadata,
            "involvedObject": target,
            "type": event_type,
            "reason": reason,
            "action": action,
            "message": message,
            "source": {"component": CONTROLLER_COMPONENT},
            "reportingComponent": CONTROLLER_COMPONENT,
            "reportingInstance": self.instance[:128],
            "firstTimestamp": rfc3339_seconds(now),
            "lastTimestamp": rfc3339_seconds(now),
            "eventTime": rfc3339(now),
            "count": 1,
        }
        if len(self._pending) == self._pending.maxlen:
            self.dropped += 1
        self._pending.append(PendingEvent(namespace, body))
        self._wake.set()

    @property
    def pending(self) -> int:
        return len(self._pending)

    async def run(self) -> None:
        """Send queued Events until cancelled."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                event = self._pending.popleft()
                try:
                    await self.client.create(EVENTS, event.body, event.namespace)
                    self.sent += 1
                except KubeApiError as error:
                    self.failed += 1
                    log.warning(kv(component="events", event="send_failed", reason=event.body.get("reason"),
                                   error=repr(error)))

    async def flush(self, timeout: float = 10.0) -> None:
        """Wait until the queue is empty (for tests and a clean stop)."""
        deadline = time.monotonic() + timeout
        while self._pending and time.monotonic() < deadline:
            await asyncio.sleep(0.05)


class EventGate:
    """Whether a job's Queued event is due: when its reason key changed and its last Queued event is at least
    ``interval`` seconds old (or it never had one)."""

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self._clock = clock
        self._last: dict[str, tuple[str, float]] = {}

    def due(self, uid: str, key: str) -> bool:
        previous = self._last.get(uid)
        if previous is None:
            return True
        last_key, at = previous
        return last_key != key and self._clock() - at >= self.interval

    def mark(self, uid: str, key: str) -> None:
        self._last[uid] = (sys.intern(key), self._clock())  # thousands of waiting jobs share a few keys

    def seed(self, uid: str, key: str, age: float) -> None:
        """Remember a Queued event another leader sent ``age`` seconds ago (so a new leader does not send it
        again); a newer one already remembered wins."""
        at = self._clock() - max(0.0, age)
        previous = self._last.get(uid)
        if previous is None or previous[1] < at:
            self._last[uid] = (key, at)

    def forget(self, uid: str) -> None:
        """After an Admitted or Evicted event: the next Queued event is due at once."""
        self._last.pop(uid, None)

    def keep_only(self, uids: set[str]) -> None:
        for uid in [uid for uid in self._last if uid not in uids]:
            del self._last[uid]

    def reset(self) -> None:
        self._last.clear()
