"""The ``PreemptionRefused`` Event a pod gets when the extender refuses its preemption on every node
(``webhook/extender/refusals.py``; docs/pod-quota.md, "Preemption")."""

from __future__ import annotations

from webhook.api.objects import Obj, name_of
from webhook.extender.decision import PreemptDecision
from webhook.extender.protocol import NodeVictims
from webhook.extender.refusals import RefusalNotes, refusal_message

MIN = "taking them would leave quota root/Batch below its min in cpu"
HELD = "pod-level quota (room held by admitted jobs, for a pod no queued job accounts for): quota root: ..."
POD: Obj = {"metadata": {"name": "urgent", "namespace": "serve", "uid": "uid-urgent"}}


def refused(**reasons: str) -> PreemptDecision:
    return PreemptDecision("serve/urgent", {}, dict(reasons), "root/Serve", next(iter(reasons.values())))


class Sent:
    def __init__(self) -> None:
        self.events: list[tuple[Obj, str, str, str, str]] = []

    def __call__(self, obj: Obj, event_type: str, reason: str, action: str, message: str) -> None:
        self.events.append((obj, event_type, reason, action, message))


def test_each_reason_is_said_once_with_its_nodes() -> None:
    message = refusal_message(refused(**{"ecs-0": MIN, "ecs-1": MIN, "ecs-2": HELD, "ecs-3": MIN, "ecs-4": MIN}))
    assert message == (
        "kube-queue refused kube-scheduler's preemption on every candidate node, by the quota rules "
        f"(docs/pod-quota.md, \"Preemption\"): {MIN} (nodes ecs-0, ecs-1, ecs-3 and 1 more); {HELD} (node ecs-2)")


def test_a_refused_pod_is_told_once_a_minute_unless_the_words_change() -> None:
    now = [0.0]
    sent = Sent()
    notes = RefusalNotes(sent, clock=lambda: now[0])
    notes.preempted(POD, refused(**{"ecs-0": MIN}))
    ((target, event_type, reason, action, _),) = sent.events
    assert target == {"apiVersion": "v1", "kind": "Pod", "metadata": POD["metadata"]}  # kubectl describe finds it
    assert (event_type, reason, action) == ("Warning", "PreemptionRefused", "Preempt")
    now[0] = 30.0
    notes.preempted(POD, refused(**{"ecs-0": MIN}))  # the scheduler tries again: the same words
    assert len(sent.events) == 1
    notes.preempted(POD, refused(**{"ecs-0": HELD}))  # other words: told at once
    assert len(sent.events) == 2
    now[0] = 91.0
    notes.preempted(POD, refused(**{"ecs-0": HELD}))  # a minute on: told again
    assert len(sent.events) == 3


def test_a_preemption_that_keeps_a_node_goes_ahead_untold() -> None:
    sent = Sent()
    kept = PreemptDecision("serve/urgent", {"ecs-1": NodeVictims(("uid-x",))}, {"ecs-0": MIN}, None, "")
    RefusalNotes(sent).preempted(POD, kept)
    RefusalNotes(sent).preempted(POD, PreemptDecision("serve/urgent", {}, {}, None, "no candidate node"))
    assert sent.events == []


def test_the_notes_remember_a_bounded_number_of_pods() -> None:
    sent = Sent()
    notes = RefusalNotes(sent, clock=lambda: 0.0, remembered=2)
    for index in range(3):
        notes.preempted({"metadata": {"name": f"p{index}", "uid": f"u{index}"}}, refused(**{"ecs-0": MIN}))
    notes.preempted({"metadata": {"name": "p0", "uid": "u0"}}, refused(**{"ecs-0": MIN}))  # forgotten: told again
    notes.preempted({"metadata": {"name": "p2", "uid": "u2"}}, refused(**{"ecs-0": MIN}))  # remembered
    assert [name_of(event[0]) for event in sent.events] == ["p0", "p1", "p2", "p0"]


def test_a_victim_of_another_namespace_is_not_named_to_the_preemptors_users() -> None:
    reason = ("user-c/c0: taking it would leave root/Department-b with cpu 0 < min 40; user-c/c01 and "
              "serve/web-1 stay named")
    decision = PreemptDecision("serve/urgent", {}, {"ecs-1": reason}, "root/Serve", reason, ("user-c/c0",))
    message = refusal_message(decision)
    assert "a pod of another namespace: taking it would leave root/Department-b" in message
    assert "user-c/c01" in message and "serve/web-1" in message  # another name that begins alike; its own
