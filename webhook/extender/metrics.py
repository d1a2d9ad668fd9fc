"""The extender's metrics about placements that end without a binding and the pods woken for the room they
free (the request metrics are :mod:`webhook.extender.app`'s). Bounded labels only."""

from __future__ import annotations

from prometheus_client import Counter

FORGOTTEN = Counter(
    "kube_queue_extender_assumptions_forgotten",
    "Placements the extender counted (assumed) and stopped counting without seeing the pod bound, by reason: "
    "deleted (the pod is gone), unscheduled (the scheduler gave up on it), expired (--assume-ttl passed).",
    ["reason"],
)
WOKEN = Counter(
    "kube_queue_extender_pods_woken",
    "Pods refused for pod-level quota that the extender sent back to the scheduler when room appeared, by result "
    "(sent, gone: the pod no longer exists, failed).",
    ["result"],
)
