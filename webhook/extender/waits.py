"""The pods the extender refused for pod-level quota, kept until room appears for them (docs/pod-quota.md).

kube-scheduler retries a refused pod when the cluster changes, or after five minutes. Room in a quota can
appear without a change the scheduler sees - a placement the extender counted ends without a binding - so the
extender keeps the pods it refused for quota (:meth:`Waits.wait`) and, when room appears, wakes as many as the
room can take (:meth:`Waits.choose`, the rule in :mod:`webhook.core.waiting`); the shell
(:mod:`webhook.extender.wake`) touches them, which requeues them in the scheduler.

A woken pod holds its room (a *reservation*, counted only when choosing whom to wake, never by the filter)
until the scheduler filters it again or :data:`WOKEN_HOLD` seconds pass, so two wake passes do not hand the
same room to two pods. Bounded: at most :data:`MAX_WAITING` pods are kept (the longest unrefused go first),
and a pod not refused again for :data:`FORGET_AFTER` seconds is dropped (the scheduler itself retries every
unschedulable pod within five minutes, and a refusal then keeps it again). A pod deleted while it waits is
not seen (the pod watch only brings bound pods): touching it fails and it is dropped then.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from webhook.core.podquota import MutableUsage, Usage, charge, quota_key
from webhook.core.quota import QuotaTree
from webhook.core.waiting import WaitingPod, pods_to_wake

MAX_WAITING = 10_000
"""At most this many refused pods are kept."""
WOKEN_HOLD = 10.0
"""Seconds a woken pod holds the room it was woken for, unless the scheduler filters it again sooner."""
FORGET_AFTER = 600.0
"""Seconds after its last refusal a waiting pod is dropped."""


class Waits:
    """Waiting pods (refused for quota) and woken pods (touched, not yet filtered again). Not thread-safe."""

    def __init__(self) -> None:
        self.waiting: OrderedDict[str, tuple[WaitingPod, float]] = OrderedDict()
        """Pod key -> the pod and when it was last refused (oldest refusal first)."""
        self.woken: dict[str, tuple[WaitingPod, str | None, float]] = {}
        """Pod key -> the pod, the quota node its reservation is charged to, and when the reservation lapses."""
        self.reserved: MutableUsage = {}
        """The woken pods' requests up their quota chains."""
        self.room = False
        """Whether room may have appeared since the last :meth:`choose` that took every pod that fit (set by
        the cache when usage goes down); without it a pass has nothing to look at."""

    def __len__(self) -> int:
        return len(self.waiting)

    def wait(self, pod: WaitingPod, now: float, tree: QuotaTree | None) -> None:
        """The filter refused ``pod`` for pod-level quota: keep it (again) until room appears."""
        self._unwake(pod.key, tree)
        self.waiting.pop(pod.key, None)
        self.waiting[pod.key] = (pod, now)
        while len(self.waiting) > MAX_WAITING:
            self.waiting.popitem(last=False)

    def done(self, key: str, tree: QuotaTree | None) -> None:
        """Pod ``key`` no longer waits: it passed a filter, was refused for another reason, or is bound or gone."""
        if key in self.woken:
            self._unwake(key, tree)
        if key in self.waiting:
            del self.waiting[key]

    def _unwake(self, key: str, tree: QuotaTree | None) -> None:
        woken = self.woken.pop(key, None)
        if woken is not None and woken[1] is not None and tree is not None:
            charge(self.reserved, tree, woken[1], woken[0].request.items(), -1)

    def choose(self, tree: QuotaTree | None, now: float, usages: Iterable[Usage], limit: int) -> list[WaitingPod]:
        """The waiting pods to wake now (at most ``limit``, those the room left over ``usages`` and the
        reservations can take: :func:`~webhook.core.waiting.pods_to_wake`); they become woken, reserving
        their room for :data:`WOKEN_HOLD` seconds. Lapsed reservations and forgotten waits are dropped first."""
        for key in [key for key, (_, _, until) in self.woken.items() if until <= now]:
            self._unwake(key, tree)
            self.room = True  # its room is free for others again
        while self.waiting:
            key, (_, refused_at) = next(iter(self.waiting.items()))
            if now - refused_at < FORGET_AFTER:
                break
            del self.waiting[key]
        if not self.waiting or limit <= 0 or not self.room:
            return []
        chosen = pods_to_wake(tree, (pod for pod, _ in self.waiting.values()), *usages, self.reserved, limit=limit)
        if len(chosen) < limit:
            self.room = False  # every pod that fits was taken: the next pass waits for more room
        for pod in chosen:
            del self.waiting[pod.key]
            leaf = quota_key(tree, pod.namespace)
            if tree is not None and leaf is not None:
                charge(self.reserved, tree, leaf, pod.request.items())
            self.woken[pod.key] = (pod, leaf, now + WOKEN_HOLD)
        return chosen

    def retree(self, tree: QuotaTree | None) -> None:
        """The tree changed: charge the reservations to the leaves that list their namespaces now."""
        self.reserved = {}
        for key, (pod, _, until) in list(self.woken.items()):
            leaf = quota_key(tree, pod.namespace)
            if tree is not None and leaf is not None:
                charge(self.reserved, tree, leaf, pod.request.items())
            self.woken[key] = (pod, leaf, until)

    @property
    def pending(self) -> bool:
        """Whether any pod waits or holds a reservation (a wake pass may have work)."""
        return bool(self.waiting or self.woken)
