"""The controller's Events on jobs (``kubectl describe job`` shows them): Queued, Admitted, Evicted, sent by
:class:`~webhook.kube.events.EventRecorder`. :class:`EventGate` decides whether a waiting job's Queued event is
due: only when its reason changed, and at most every ``interval`` seconds per job.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence

from webhook.api import names
from webhook.api.names import CONTROLLER_COMPONENT
from webhook.api.objects import Obj, mapping, mappings, parse_time, text
from webhook.kube.client import KubeClient
from webhook.kube.events import EVENTS


async def read_queued_events(client: KubeClient, pages: int, seen: list[Obj]) -> None:
    """Add the controller's Queued Events to ``seen``, at most ``pages`` pages of 500; a failure raises
    :class:`~webhook.kube.client.KubeApiError` and leaves what was read in ``seen``."""
    selector = f"source={CONTROLLER_COMPONENT},reason={names.REASON_QUEUED}"
    token: str | None = None
    for _ in range(pages):
        page = await client.list_page(EVENTS, limit=500, continue_token=token, field_selector=selector)
        seen.extend(mappings(page.get("items")))
        token = text(mapping(page.get("metadata")).get("continue")) or None
        if token is None:
            return


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
