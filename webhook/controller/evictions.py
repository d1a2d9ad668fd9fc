"""Evicting the pods reclaim takes: pods no queued job accounts for, and released Pods (docs/reclaim.md, "Pods").

A pod cannot be held again, so it goes through the Eviction API (``POST .../pods/NAME/eviction``), which
honours its PodDisruptionBudgets: the API server refuses an eviction the budget forbids (429), and the
controller then leaves the pod alone for :data:`REFUSAL_HOLD_SECONDS` (the pass after takes the next
victim, and ``kq why`` names the budget). The decision pass already leaves out pods whose budget allows no
disruption now; a refusal covers the race (two victims of one budget that allowed one disruption).

The eviction names the pod's uid as a precondition, so a StatefulSet's pod re-created under the same name
is never evicted for a decision taken about its predecessor.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from webhook.api import kinds
from webhook.api.names import REASON_EVICTED
from webhook.controller import metrics
from webhook.controller.records import kv
from webhook.core.workload import WorkloadKey
from webhook.kube.client import KubeApiError, KubeClient, ResourceRef
from webhook.kube.events import EventRecorder

log = logging.getLogger("webhook.controller")

PODS = ResourceRef.of(kinds.POD)

REFUSAL_HOLD_SECONDS = 30.0
"""How long a pod whose eviction was refused is left out of reclaim (its budget may allow it later)."""


@dataclass(frozen=True, slots=True)
class PodVictim:
    """A pod reclaim takes: its key, uid (``""`` when unknown), quota and the preemptor it makes room for."""

    key: WorkloadKey
    uid: str
    quota: str
    by: str
    reason: str


class PodEvictions:
    """Sends evictions and remembers the refused ones (see the module)."""

    def __init__(
        self, client: KubeClient, events: EventRecorder, *, clock: Callable[[], float],
        hold_seconds: float = REFUSAL_HOLD_SECONDS,
    ) -> None:
        self._client = client
        self._events = events
        self._clock = clock
        self._hold = hold_seconds
        self._refused: dict[WorkloadKey, tuple[float, str]] = {}
        self.evicted = 0
        """Pods evicted (for tests and the stats)."""

    def protected(self) -> dict[WorkloadKey, str]:
        """The pods whose eviction was refused a moment ago, and why (for the next pass's ``protected``)."""
        now = self._clock()
        for key in [key for key, (until, _) in self._refused.items() if until <= now]:
            del self._refused[key]
        return {key: why for key, (_, why) in self._refused.items()}

    async def evict(self, victim: PodVictim) -> bool:
        """Evict one pod; whether it is gone or going (a pod already gone counts as evicted)."""
        key = victim.key
        body: dict[str, object] = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": key.name, "namespace": key.namespace},
        }
        if victim.uid:
            body["deleteOptions"] = {"preconditions": {"uid": victim.uid}}
        try:
            await self._client.request("POST", PODS.path(key.name, key.namespace, "eviction"), body=body)
        except KubeApiError as error:
            if error.not_found:
                return True
            why = _refusal(error)
            self._refused[key] = (self._clock() + self._hold, why)
            metrics.FAILED.labels("evict-pod", "refused" if error.status in (409, 429) else "api_error").inc()
            log.info(kv(component="controller", decision="evict-refused", pod=str(key), quota=victim.quota,
                        by=victim.by, status=error.status, reason=why))
            return False
        self.evicted += 1
        metrics.EVICTIONS.labels(victim.quota).inc()
        log.info(kv(component="controller", decision="evict", pod=str(key), quota=victim.quota, by=victim.by,
                    reason=victim.reason))
        target = {"apiVersion": "v1", "kind": "Pod",
                  "metadata": {"name": key.name, "namespace": key.namespace, "uid": victim.uid}}
        self._events.emit(target, "Warning", REASON_EVICTED, "Reclaim",
                          f"Evicted by reclaim (its controller, if any, creates a replacement that waits for room): "
                          f"{victim.reason}; reclaimed for {victim.by}")
        return True


def _refusal(error: KubeApiError) -> str:
    """Why the API server refused an eviction, in words for ``kq why`` and the logs."""
    if error.status == 429:
        return f"the Eviction API refused it: {error.message[:300]}"
    if error.status == 409:
        return "it was replaced by a new pod of the same name"
    return f"the Eviction API failed ({error.status}): {error.message[:300]}"
