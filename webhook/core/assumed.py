"""Whether a pod the extender let through and counts (an *assumed* placement) is still on its way to a node.

The extender counts a pod it let through against its quota (and its ResourcePolicy unit) until it sees the
pod bound, so pods scheduled back to back cannot overrun ``max`` (docs/pod-quota.md). Its pod watch only
brings bound pods, so two endings are not brought to it: the pod deleted before its binding, and the
scheduler giving up on it (the binding failed, or a later step of the cycle did). Left alone, either keeps
counting until the assumption expires (``--assume-ttl``) - a *phantom charge* that can refuse other pods.
The extender therefore looks at an assumed pod it has not seen bound for a while and reads its fate from the
pod as the API server has it now (:func:`assumed_fate`).

What the filter saw of the pod is kept with the assumption as a *mark* (:func:`scheduling_mark`): the
scheduler's ``PodScheduled`` condition at that time. The scheduler writes a new ``PodScheduled=False`` when it
gives up on a pod (with the reason of that attempt); a different mark on an unbound pod therefore means the
attempt the filter took part in is over. The same mark means nothing was written since: the binding may
still be on its way, and the pod keeps counting.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from webhook.api.objects import Obj, mapping

__all__ = ["Fate", "assumed_fate", "scheduling_mark"]


class Fate(enum.Enum):
    """What became of an assumed pod."""

    BOUND = "bound"
    """Bound to a node: the pod watch brings it and it counts as bound (keep counting until then)."""
    DELETED = "deleted"
    """Gone (or re-created under its name with another uid, being deleted, or finished): forget it."""
    UNSCHEDULED = "unscheduled"
    """Unbound, and the scheduler wrote a new ``PodScheduled=False`` since the filter: it gave up, forget it."""
    PENDING = "pending"
    """Unbound, nothing written since the filter: the binding may be on its way, keep counting."""


def scheduling_mark(pod: Obj) -> str:
    """The pod's ``PodScheduled`` condition as one string (status, reason, message, last transition), ``""``
    when it has none."""
    conditions = mapping(pod.get("status")).get("conditions")
    if not isinstance(conditions, list):
        return ""
    for condition in conditions:
        if isinstance(condition, Mapping) and condition.get("type") == "PodScheduled":
            parts = (condition.get(name) for name in ("status", "reason", "message", "lastTransitionTime"))
            return "\x1f".join("" if part is None else str(part) for part in parts)
    return ""


def assumed_fate(uid: str, mark: str, current: Obj | None) -> Fate:
    """The fate of the assumed pod ``uid``, whose :func:`scheduling_mark` was ``mark`` when the filter let it
    through, given the pod of that name as the API server has it now (``None``: not found)."""
    if current is None:
        return Fate.DELETED
    metadata, spec = mapping(current.get("metadata")), mapping(current.get("spec"))
    if uid and metadata.get("uid") != uid:
        return Fate.DELETED
    if spec.get("nodeName"):
        return Fate.BOUND
    if metadata.get("deletionTimestamp") is not None or mapping(current.get("status")).get("phase") in (
        "Succeeded",
        "Failed",
    ):
        return Fate.DELETED  # the scheduler never binds a pod being deleted or finished
    now = scheduling_mark(current)
    if now != mark and now.startswith("False\x1f"):
        return Fate.UNSCHEDULED
    return Fate.PENDING
