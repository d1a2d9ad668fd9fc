"""The room admitted jobs hold, published for the scheduler extender before they are released.

Pods no queued job accounts for (a Deployment's, a StatefulSet's) are not held by the queue: nothing stops
their controller from creating one the moment another goes. So when reclaim evicts such a pod for a job of
another quota, or the queue releases a job while a Deployment scales up, the new pod could take the room the
job was admitted into before the job's own pods get there, and the job would wait Pending until its start
timeout. The extender prevents it: a pod no job accounts for fits only within what the admitted jobs leave
(docs/pod-quota.md). The controller tells it what they hold, per quota node, in the ConfigMap
:data:`~webhook.api.names.RESERVATIONS`, written *before* the pass's releases and evictions (the extender's
watch sees it before the released jobs' pods or the evicted pods' replacements exist).

It is written when it changes and at least every :data:`HEARTBEAT_SECONDS`, with the time of writing: the
extender stops trusting a reservation older than :data:`~webhook.api.names.RESERVATIONS_TTL_SECONDS`
(the controller is down and jobs may have finished since), so a dead controller never keeps Deployments from
scaling for longer than that.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping

from webhook.api import kinds
from webhook.api.names import RESERVATIONS, RESERVATIONS_KEY, RESERVED_AT_KEY
from webhook.api.objects import rfc3339_seconds
from webhook.controller import metrics
from webhook.controller.records import kv
from webhook.core.resources import Resources
from webhook.kube.client import KubeApiError, KubeClient, ResourceRef

log = logging.getLogger("webhook.controller")

CONFIG_MAPS = ResourceRef.of(kinds.CONFIG_MAP)

HEARTBEAT_SECONDS = 60.0
"""The reservation is written again at least this often, changed or not."""


def reservation_payload(reserved: Mapping[str, Resources]) -> str:
    """The ConfigMap's :data:`~webhook.api.names.RESERVATIONS_KEY`: node key -> resource list, sorted."""
    return json.dumps({key: reserved[key].to_spec() for key in sorted(reserved)}, sort_keys=True,
                      separators=(",", ":"))


class ReservationWriter:
    """Writes the reservation ConfigMap when it changed or its heartbeat is due (see the module)."""

    def __init__(self, client: KubeClient, namespace: str, *, wall: Callable[[], float],
                 clock: Callable[[], float]) -> None:
        self._client = client
        self._namespace = namespace
        self._wall = wall
        self._clock = clock
        self._written: str | None = None
        self._at = float("-inf")
        self.writes = 0
        """Writes sent (for tests and the stats)."""

    def forget(self) -> None:
        """Write again at the next pass (another replica may have written since)."""
        self._written = None

    async def write(self, reserved: Mapping[str, Resources]) -> bool:
        """Publish ``reserved``; whether the ConfigMap says it now (``False``: the API refused the write)."""
        payload = reservation_payload(reserved)
        if payload == self._written and self._clock() - self._at < HEARTBEAT_SECONDS:
            return True
        data = {RESERVATIONS_KEY: payload, RESERVED_AT_KEY: rfc3339_seconds(self._wall())}
        try:
            try:
                await self._client.merge_patch(CONFIG_MAPS, RESERVATIONS, {"data": data}, self._namespace)
            except KubeApiError as error:
                if not error.not_found:
                    raise
                await self._client.create(CONFIG_MAPS, {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": RESERVATIONS, "namespace": self._namespace,
                                 "labels": {"app.kubernetes.io/name": "kube-queue",
                                            "app.kubernetes.io/component": "controller"}},
                    "data": data,
                }, self._namespace)
        except KubeApiError as error:
            metrics.FAILED.labels("reserve", "api_error").inc()
            log.warning(kv(component="controller", event="write_failed", action="reserve",
                           target=f"configmaps/{RESERVATIONS}", status=error.status,
                           error=error.message[:300] or error.reason))
            return False
        self._written = payload
        self._at = self._clock()
        self.writes += 1
        return True
