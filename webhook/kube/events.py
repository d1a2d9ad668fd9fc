"""Kubernetes Events (``kubectl describe`` shows them), sent by :class:`EventRecorder` from a bounded background
queue, so a slow or failing API never holds up a decision; when the queue is full the oldest pending Event is
dropped (and counted). The controller and the extender each send theirs, under their own component.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from webhook.api import kinds
from webhook.api.objects import Doc, Obj, rfc3339, rfc3339_seconds
from webhook.kube.client import KubeApiError, KubeClient, ResourceRef

log = logging.getLogger(__name__)

EVENTS = ResourceRef.of(kinds.EVENT)
MAX_MESSAGE = 1024
"""The apiserver refuses Event messages over 1 KiB."""


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


@dataclass(frozen=True, slots=True)
class PendingEvent:
    """An Event waiting in the queue: the namespace it goes to, and its body."""

    namespace: str
    body: Obj


class EventRecorder:
    """Queue Events of ``component`` and send them from :meth:`run`."""

    def __init__(
        self,
        client: KubeClient,
        instance: str,
        *,
        component: str,
        max_pending: int = 2000,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.instance = instance
        self.component = component
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
            "source": {"component": self.component},
            "reportingComponent": self.component,
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
                    log.warning("component=%s event=event_send_failed reason=%s error=%r", self.component,
                                event.body.get("reason"), str(error))

    async def flush(self, timeout: float = 10.0) -> None:
        """Wait until the queue is empty (for tests and a clean stop)."""
        deadline = time.monotonic() + timeout
        while self._pending and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
