"""Pods refused for pod-level quota, and which of them to send back to the scheduler when room appears.

kube-scheduler retries a pod an extender refused when the cluster changes, or after five minutes
(``podMaxInUnschedulablePodsDuration``). Room in a quota can appear without any change the scheduler sees:
a placement the extender counted (an assumed pod) ends without a binding - it expires, or the pod was
deleted before it was bound (:mod:`webhook.core.assumed`). The extender then wakes the waiting pods itself
(an update of the pod requeues it), and only as many as the room can take (:func:`pods_to_wake`): a burst of
refusals must not turn into a burst of API writes.

Order: highest priority first - kube-scheduler's own queue takes pods in that order, and waking a
lower-priority pod for room a higher-priority one waits for would hand the room past it - then the oldest pod
(creation time), then namespace and name.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from webhook.core.podquota import MutableUsage, Usage, charge, pod_quota_blockers, quota_key
from webhook.core.quota import QuotaTree
from webhook.core.resources import Resources

__all__ = ["WaitingPod", "pods_to_wake", "wake_order"]


@dataclass(frozen=True, slots=True)
class WaitingPod:
    """A pod the extender refused for pod-level quota: who it is, what it asks, its place in the order."""

    key: str
    """The extender's key of the pod (its uid, else ``namespace/name``)."""
    namespace: str
    name: str
    uid: str
    request: Resources
    priority: int = 0
    created: float = 0.0


def wake_order(pod: WaitingPod) -> tuple[int, float, str, str]:
    """Highest priority first, then the oldest, then namespace and name."""
    return (-pod.priority, pod.created, pod.namespace, pod.name)


def pods_to_wake(tree: QuotaTree | None, waiting: Iterable[WaitingPod], *usages: Usage, limit: int) -> list[WaitingPod]:
    """At most ``limit`` of ``waiting``, in :func:`wake_order`, each of which fits its quota (the leaf that lists
    its namespace now) at every level over ``usages`` plus the pods chosen before it; a pod that does not fit
    is passed over (a smaller one behind it may). Without a tree every waiting pod fits (nothing is checked
    then); a pod whose namespace no leaf lists fits too."""
    chosen: list[WaitingPod] = []
    if limit <= 0:
        return chosen
    taken: MutableUsage = {}
    for pod in sorted(waiting, key=wake_order):
        leaf = quota_key(tree, pod.namespace)
        if tree is not None and leaf is not None:
            if pod_quota_blockers(tree, leaf, pod.request, *usages, taken, first=True):
                continue
            charge(taken, tree, leaf, pod.request.items())
        chosen.append(pod)
        if len(chosen) >= limit:
            break
    return chosen
