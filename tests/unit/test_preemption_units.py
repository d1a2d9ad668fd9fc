"""Preemption by a pod a ResourcePolicy governs: a node's victims may go only if the pod could then use the node
under the policy's units (docs/pod-quota.md, "Preemption"). kube-scheduler picks its candidate nodes among those
its own filters refused for room, which the extender's filter never saw, so the rule is checked here."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.api.names import ECI_OPT_IN_LABEL
from webhook.core.placement import NodeView, PodView, Taint, parse_policy
from webhook.core.unitplacement import preemption_refusal

NS = "team"
T0 = 1_700_000_000.0


def policy(units: list[dict[str, Any]], **spec: Any) -> Any:
    return parse_policy({
        "apiVersion": "scheduling.alibabacloud.com/v1alpha1",
        "kind": "ResourcePolicy",
        "metadata": {"name": "rp", "namespace": NS, "creationTimestamp": "2024-01-01T00:00:00Z"},
        "spec": {"units": units, **spec},
    })


def ecs(pool: str, max: int | None = None) -> dict[str, Any]:
    return {"resource": "ecs", "nodeSelector": {"pool": pool}, **({} if max is None else {"max": max})}


def eci(max: int | None = None) -> dict[str, Any]:
    return {"resource": "eci", **({} if max is None else {"max": max})}


def pod(name: str, node: str | None = None, *, namespace: str = NS, created: float | None = T0) -> PodView:
    return PodView(namespace=namespace, name=name, uid=f"uid-{name}", labels={}, annotations={}, node_name=node,
                   created=created)


A1 = NodeView(name="a1", labels={"pool": "a"})
B1 = NodeView(name="b1", labels={"pool": "b"})
NOWHERE = NodeView(name="x1", labels={"pool": "x"})
VIRTUAL = NodeView(name="v1", labels={"type": "virtual-kubelet"},
                   taints=(Taint("virtual-kubelet.io/provider", "alibabacloud", "NoSchedule"),))
PREEMPTOR = pod("urgent")


def test_a_node_of_the_first_unit_with_room_after_the_victims_may_be_preempted() -> None:
    rp = policy([ecs("a"), ecs("b")], whenTryNextUnits={"policy": "ExceedMax"})
    assert preemption_refusal(rp, PREEMPTOR, A1, [pod("batch", "a1")], (3, 0), now=T0) == ""


@pytest.mark.parametrize("rule", [{"policy": "LackResourceOrExceedMax"}, {}])
def test_by_default_a_later_unit_is_fair_game_once_the_earlier_one_has_no_room(rule: dict[str, str]) -> None:
    rp = policy([ecs("a"), ecs("b")], **({"whenTryNextUnits": rule} if rule else {}))
    assert preemption_refusal(rp, PREEMPTOR, B1, [pod("batch", "b1")], (3, 0), now=T0) == ""


def test_exceed_max_keeps_the_victims_of_a_later_unit_while_the_first_is_under_its_max() -> None:
    # The pod waits for unit 1 (its next filter says so): evicting on unit 2 would be in vain.
    rp = policy([ecs("a"), ecs("b")], whenTryNextUnits={"policy": "ExceedMax"})
    refusal = preemption_refusal(rp, PREEMPTOR, B1, [pod("batch", "b1")], (3, 0), now=T0)
    assert refusal == (f"ResourcePolicy {NS}/rp: unit 1 (ecs) has no node with room (no max); whenTryNextUnits "
                       "ExceedMax moves on only at max")
    # Once unit 1 is at its max, unit 2 is the pod's: its victims may go.
    capped = policy([ecs("a", max=3), ecs("b")], whenTryNextUnits={"policy": "ExceedMax"})
    assert preemption_refusal(capped, PREEMPTOR, B1, [pod("batch", "b1")], (3, 0), now=T0) == ""


def test_a_timeout_not_reached_keeps_them_and_one_reached_lets_them_go() -> None:
    rp = policy([ecs("a"), eci()], whenTryNextUnits={"policy": "TimeoutOrExceedMax", "timeout": "1m"})
    early = preemption_refusal(rp, PREEMPTOR, VIRTUAL, [pod("batch", "v1")], (2, 0), now=T0 + 20)
    assert "whenTryNextUnits TimeoutOrExceedMax moves on after 1m" in early
    assert "waited" not in early  # worded as the scheduler shows it: the same on every attempt
    assert preemption_refusal(rp, PREEMPTOR, VIRTUAL, [pod("batch", "v1")], (2, 0), now=T0 + 60) == ""
    # Measured from when the extender first saw the pod when it has no creation time.
    fresh = pod("urgent", created=None)
    assert preemption_refusal(rp, fresh, VIRTUAL, [], (2, 0), now=T0 + 60, pod_first_seen=T0 + 30) != ""


def test_a_node_in_no_unit_never_helps() -> None:
    rp = policy([ecs("a")])
    assert preemption_refusal(rp, PREEMPTOR, NOWHERE, [pod("batch", "x1")], (0,), now=T0) == (
        f"node belongs to no unit of ResourcePolicy {NS}/rp")


def test_a_unit_at_its_max_helps_only_when_victims_of_the_policy_free_a_slot() -> None:
    rp = policy([ecs("a"), ecs("b", max=2)])
    outsider = pod("other", "b1", namespace="elsewhere")  # not the policy's: frees no slot
    assert preemption_refusal(rp, PREEMPTOR, B1, [outsider], (5, 2), now=T0) == (
        f"ResourcePolicy {NS}/rp: unit 2 (ecs) is at its max of 2 pods")
    # A pod of the policy in unit 2 leaves with the victims: the unit is under its max again.
    assert preemption_refusal(rp, PREEMPTOR, B1, [outsider, pod("mine", "b1")], (5, 2), now=T0) == ""
    # The preemptor itself never counts (it is not on the node), nor does a finished pod of the policy.
    done = PodView(namespace=NS, name="done", uid="uid-done", labels={}, annotations={}, node_name="b1",
                   finished=True)
    assert preemption_refusal(rp, PREEMPTOR, B1, [done], (5, 2), now=T0) != ""


def test_a_pod_no_policy_governs_preempts_on_a_virtual_node_only_when_it_opted_in() -> None:
    # Tolerating every taint gets it past kube-scheduler's own filters, not past the extender's.
    refusal = preemption_refusal(None, PREEMPTOR, VIRTUAL, [pod("batch", "v1")], (), now=T0)
    assert refusal.startswith("virtual node (type=virtual-kubelet): only pods of a ResourcePolicy with an eci unit")
    opted_in = PodView(namespace=NS, name="burst", uid="uid-burst", labels={ECI_OPT_IN_LABEL: "true"},
                       annotations={}, created=T0)
    assert preemption_refusal(None, opted_in, VIRTUAL, [pod("batch", "v1")], (), now=T0) == ""
    assert preemption_refusal(None, PREEMPTOR, A1, [pod("batch", "a1")], (), now=T0) == ""
