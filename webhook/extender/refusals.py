"""Telling a pod why kube-scheduler's preemption did not help it: a ``PreemptionRefused`` Event.

When the extender refuses the victims of every candidate node (docs/pod-quota.md, "Preemption"), the
scheduler writes only "No preemption victims found for incoming pod" on the pod, and the user who gave it a
high PriorityClass cannot tell why. The extender then puts its own reasons on the pod as a Warning Event
(``kubectl describe pod`` and ``kq why`` show it). The scheduler may try again every few seconds: a pod gets
the Event again only when the words change or a minute has passed, so a pod that waits long costs one Event
a minute at most. A preemption that keeps some node is not told: it goes ahead.
"""

from __future__ import annotations

import re
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Final, Protocol

from webhook.api.kinds import POD
from webhook.api.names import REASON_PREEMPTION_REFUSED
from webhook.api.objects import Obj, uid_of
from webhook.extender.decision import PreemptDecision

REPEAT_SECONDS: Final = 60.0
"""How often a pod refused with the same words is told again."""
REMEMBERED: Final = 10_000
"""How many pods' last Event the notes remember (the oldest are forgotten first)."""
ANOTHER_NAMESPACE: Final = "a pod of another namespace"
"""What the Event says in place of a victim outside the preemptor's namespace."""
NODES_NAMED: Final = 3
"""How many nodes a reason names before it says how many more."""


class Emit(Protocol):
    """:meth:`webhook.kube.events.EventRecorder.emit`'s shape."""

    def __call__(self, obj: Obj, event_type: str, reason: str, action: str, message: str) -> None: ...


def refusal_message(decision: PreemptDecision) -> str:
    """The Event's words: each distinct reason once, with the nodes it refused. The Event is read by the pod's
    namespace's users: a victim of another namespace is not named (the extender's log names it)."""
    hidden = re.compile("|".join(rf"(?<![\w./-]){re.escape(key)}(?![\w.-])" for key in decision.foreign)) \
        if decision.foreign else None
    nodes_by_reason: dict[str, list[str]] = {}
    for node, said in sorted(decision.refused.items()):
        reason = hidden.sub(ANOTHER_NAMESPACE, said) if hidden is not None else said
        nodes_by_reason.setdefault(reason, []).append(node)
    parts = []
    for reason, nodes in nodes_by_reason.items():
        named = ", ".join(nodes[:NODES_NAMED]) + (f" and {len(nodes) - NODES_NAMED} more"
                                                  if len(nodes) > NODES_NAMED else "")
        parts.append(f"{reason} (node{'s' if len(nodes) > 1 else ''} {named})")
    return ("kube-queue refused kube-scheduler's preemption on every candidate node, by the quota rules "
            f"(docs/pod-quota.md, \"Preemption\"): {'; '.join(parts)}")


class RefusalNotes:
    """Sends the ``PreemptionRefused`` Event of a refused preemption, at most once a minute per pod and words."""

    def __init__(self, emit: Emit, clock: Callable[[], float] = time.monotonic,
                 repeat: float = REPEAT_SECONDS, remembered: int = REMEMBERED) -> None:
        self._emit = emit
        self._clock = clock
        self._repeat = repeat
        self._remembered = remembered
        self._last: OrderedDict[str, tuple[str, float]] = OrderedDict()

    def preempted(self, pod: Obj, decision: PreemptDecision) -> None:
        """After a preempt answer: tell ``pod`` when no node is left and it was not just told the same."""
        if decision.kept or not decision.refused:
            return
        message = refusal_message(decision)
        key = uid_of(pod) or decision.pod
        now = self._clock()
        last = self._last.get(key)
        if last is not None and last[0] == message and now - last[1] < self._repeat:
            return
        self._last[key] = (message, now)
        self._last.move_to_end(key)
        while len(self._last) > self._remembered:
            self._last.popitem(last=False)
        # kube-scheduler sends the pod without its apiVersion and kind; the Event names them (kubectl describe
        # finds a pod's Events by kind).
        target = {"apiVersion": POD.api_version, "kind": POD.kind, "metadata": pod.get("metadata")}
        self._emit(target, "Warning", REASON_PREEMPTION_REFUSED, "Preempt", message)
