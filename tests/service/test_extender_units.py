"""ResourcePolicy through the extender: every unit rule and each whenTryNextUnits policy.

Candidate node lists stand for what the scheduler's filter plugins left: a unit "lacks resources" when none
of its nodes is among the names the extender is asked about.
"""

from __future__ import annotations

import pytest

from tests.service.test_extender_objects import (
    ALL_NODES,
    Cluster,
    eci,
    ecs,
    pod,
    policy,
)

ECS_A = ("ecs-0", "ecs-1")
ONLY_OTHERS = ("ecs-2", "ecs-3", "virtual-kubelet")
"""Pool a is full: the ECS unit of ``[ecs(pool=a), eci]`` has no candidate."""


def ecs_then_eci(max_eci: int | None = 4, **spec: object) -> Cluster:
    return Cluster(policy(units=[ecs(pool="a"), eci(max=max_eci)], **spec))  # type: ignore[arg-type]


# Choice of unit --------------------------------------------------------------------------------------------


def test_the_first_unit_with_a_candidate_wins_and_later_units_are_refused_resolvably() -> None:
    cluster = ecs_then_eci()
    decision = cluster.filter(pod("p", "10"))
    assert decision.passing == ECS_A
    assert decision.failed == {
        "virtual-kubelet": "ResourcePolicy team/rp: unit 1 (ecs) is preferred and still has room"
    }
    assert decision.unresolvable == {
        "ecs-2": "node belongs to no unit of ResourcePolicy team/rp",
        "ecs-3": "node belongs to no unit of ResourcePolicy team/rp",
    }
    assert decision.unit == "unit 1 (ecs)"


def test_a_unit_without_a_candidate_hands_over_to_the_next() -> None:
    decision = ecs_then_eci().filter(pod("p", "10"), ONLY_OTHERS)
    assert decision.passing == ("virtual-kubelet",)
    assert decision.unit == "unit 2 (eci)"


def test_a_unit_at_its_max_hands_over_even_with_room_left() -> None:
    cluster = Cluster(policy(units=[ecs(max=2, pool="a"), eci()]))
    assert cluster.place(pod("p1")) == "ecs-0"
    assert cluster.place(pod("p2")) == "ecs-0"
    decision = cluster.filter(pod("p3"))
    assert decision.passing == ("virtual-kubelet",)
    assert decision.unresolvable["ecs-0"] == "ResourcePolicy team/rp: unit 1 (ecs) is at its max of 2 pods"


def test_every_unit_at_max_refuses_every_node_and_names_the_cap() -> None:
    cluster = ecs_then_eci(max_eci=2)
    for index in range(2):
        assert cluster.place(pod(f"v{index}"), ONLY_OTHERS) == "virtual-kubelet"
    decision = cluster.filter(pod("late"), ONLY_OTHERS)
    assert decision.passing == ()
    assert decision.unresolvable["virtual-kubelet"] == "ResourcePolicy team/rp: unit 2 (eci) is at its max of 2 pods"
    assert "no unit can take the pod" in decision.summary


def test_max_zero_closes_a_unit() -> None:
    decision = ecs_then_eci(max_eci=0).filter(pod("p"), ONLY_OTHERS)
    assert decision.passing == ()
    assert "is at its max of 0 pods" in decision.unresolvable["virtual-kubelet"]


def test_an_ecs_unit_never_holds_the_virtual_node_and_an_eci_unit_never_holds_ecs_nodes() -> None:
    cluster = Cluster(policy(units=[ecs(), eci(max=1)]))
    assert cluster.filter(pod("p")).passing == ("ecs-0", "ecs-1", "ecs-2", "ecs-3")
    only_eci = Cluster(policy(units=[eci()]))
    decision = only_eci.filter(pod("p"))
    assert decision.passing == ("virtual-kubelet",)
    assert set(decision.unresolvable) == {"ecs-0", "ecs-1", "ecs-2", "ecs-3"}


def test_a_node_belongs_to_the_first_unit_that_selects_it() -> None:
    cluster = Cluster(policy(units=[ecs(pool="a"), ecs(), eci()]))
    cluster.place(pod("p1"), ECS_A)
    decision = cluster.filter(pod("p2"), ("ecs-2", "ecs-3", "virtual-kubelet"))
    assert decision.unit == "unit 2 (ecs)"
    assert decision.passing == ("ecs-2", "ecs-3")


def test_prioritize_ranks_usable_units_10_9_and_the_rest_0() -> None:
    cluster = Cluster(policy(units=[ecs(pool="a"), ecs(pool="b", max=1), eci()]))
    scores = cluster.prioritize(pod("p")).scores
    assert scores == {"ecs-0": 10, "ecs-1": 10, "ecs-2": 9, "ecs-3": 9, "virtual-kubelet": 8}
    cluster.place(pod("b1"), ("ecs-2",))
    scores = cluster.prioritize(pod("p")).scores
    assert scores == {"ecs-0": 10, "ecs-1": 10, "virtual-kubelet": 9}


# Which pods count ------------------------------------------------------------------------------------------


def test_pods_outside_the_selector_neither_count_nor_follow_the_policy() -> None:
    cluster = Cluster(policy(units=[ecs(pool="a"), eci(max=1)], selector={"app": "web"}))
    cluster.add(pod("db-0", labels={"app": "db"}, node_name="virtual-kubelet"))
    assert cluster.filter(pod("web-0", labels={"app": "web"}), ONLY_OTHERS).passing == ("virtual-kubelet",)
    stranger = cluster.filter(pod("db-1", labels={"app": "db"}))
    assert stranger.policy is None
    assert "virtual-kubelet" in stranger.unresolvable


def test_finished_pods_do_not_count() -> None:
    cluster = ecs_then_eci(max_eci=1)
    cluster.add(pod("done", node_name="virtual-kubelet", phase="Succeeded"))
    cluster.add(pod("failed", node_name="virtual-kubelet", phase="Failed"))
    assert cluster.filter(pod("p"), ONLY_OTHERS).passing == ("virtual-kubelet",)


def test_terminating_pods_do_not_count_by_default() -> None:
    cluster = ecs_then_eci(max_eci=1)
    cluster.add(pod("going", node_name="virtual-kubelet", deleting=True))
    assert cluster.filter(pod("p"), ONLY_OTHERS).passing == ("virtual-kubelet",)


def test_ignore_terminating_pod_false_counts_them() -> None:
    cluster = ecs_then_eci(max_eci=1, ignoreTerminatingPod=False)
    cluster.add(pod("going", node_name="virtual-kubelet", deleting=True))
    assert cluster.filter(pod("p"), ONLY_OTHERS).passing == ()


def test_ignore_previous_pod_skips_pods_created_before_the_policy() -> None:
    old = pod("old", node_name="virtual-kubelet", created="2024-05-01T10:00:00Z")
    counting = ecs_then_eci(max_eci=1)
    counting.add(old)
    assert counting.filter(pod("p"), ONLY_OTHERS).passing == ()
    ignoring = ecs_then_eci(max_eci=1, ignorePreviousPod=True)
    ignoring.add(old)
    assert ignoring.filter(pod("p"), ONLY_OTHERS).passing == ("virtual-kubelet",)


def test_match_label_keys_counts_each_group_apart() -> None:
    cluster = ecs_then_eci(max_eci=1, matchLabelKeys=["version"])
    cluster.add(pod("v1-a", labels={"version": "1"}, node_name="virtual-kubelet"))
    assert cluster.filter(pod("v1-b", labels={"version": "1"}), ONLY_OTHERS).passing == ()
    assert cluster.filter(pod("v2-a", labels={"version": "2"}), ONLY_OTHERS).passing == ("virtual-kubelet",)


def test_pod_labels_decide_which_bound_pods_count() -> None:
    cluster = Cluster(policy(units=[ecs(pool="a"), {**eci(max=1), "podLabels": {"placed": "eci"}}]))
    cluster.add(pod("unmarked", node_name="virtual-kubelet"))
    assert cluster.filter(pod("p"), ONLY_OTHERS).passing == ("virtual-kubelet",)
    cluster2 = Cluster(policy(units=[ecs(pool="a"), {**eci(max=1), "podLabels": {"placed": "eci"}}]))
    cluster2.add(pod("marked", labels={"placed": "eci"}, node_name="virtual-kubelet"))
    assert cluster2.filter(pod("p"), ONLY_OTHERS).passing == ()


def test_pod_annotations_decide_which_bound_pods_count() -> None:
    unit = {**eci(max=1), "podAnnotations": {"placed-by": "rp"}}
    cluster = Cluster(policy(units=[ecs(pool="a"), unit]))
    cluster.add(pod("unmarked", node_name="virtual-kubelet"))
    assert cluster.filter(pod("p"), ONLY_OTHERS).passing == ("virtual-kubelet",)
    cluster2 = Cluster(policy(units=[ecs(pool="a"), unit]))
    cluster2.add(pod("marked", annotations={"placed-by": "rp"}, node_name="virtual-kubelet"))
    assert cluster2.filter(pod("q"), ONLY_OTHERS).passing == ()


def test_the_oldest_matching_policy_governs() -> None:
    newer = policy("newer", units=[eci()], created="2024-05-01T11:30:00Z")
    older = policy("older", units=[ecs(pool="a")], created="2024-05-01T10:00:00Z")
    decision = Cluster(newer, older).filter(pod("p"))
    assert decision.policy == "team/older"
    assert decision.passing == ECS_A


def test_an_invalid_policy_is_ignored_and_reported() -> None:
    bad = policy("bad", units=[{"resource": "gpu"}])
    cluster = Cluster(bad)
    assert "team/bad" in cluster.state.policy_problems
    assert cluster.filter(pod("p")).policy is None


# Pods without a policy -------------------------------------------------------------------------------------


def test_a_pod_without_a_policy_never_gets_the_virtual_node() -> None:
    cluster = Cluster()
    decision = cluster.filter(pod("p"))
    assert decision.passing == ("ecs-0", "ecs-1", "ecs-2", "ecs-3")
    assert "only pods of a ResourcePolicy with an eci unit" in decision.unresolvable["virtual-kubelet"]
    assert cluster.filter(pod("q"), ("virtual-kubelet",)).passing == ()


def test_a_pod_that_opted_into_eci_may_use_the_virtual_node() -> None:
    decision = Cluster().filter(pod("p", labels={"alibabacloud.com/eci": "true"}))
    assert decision.passing == ALL_NODES


# whenTryNextUnits --------------------------------------------------------------------------------------------


def test_lack_resource_or_exceed_max_is_the_default_and_moves_on_at_once() -> None:
    cluster = ecs_then_eci(when="LackResourceOrExceedMax")
    assert cluster.filter(pod("p"), ONLY_OTHERS).passing == ("virtual-kubelet",)


def test_exceed_max_waits_for_a_full_unit_instead_of_moving_on() -> None:
    cluster = Cluster(policy(units=[ecs(pool="a", max=1), eci()], when="ExceedMax"))
    waiting = cluster.filter(pod("p1"), ONLY_OTHERS)
    assert waiting.passing == ()
    assert "whenTryNextUnits ExceedMax moves on only at max" in waiting.unresolvable["virtual-kubelet"]
    assert cluster.place(pod("p1")) == "ecs-0"
    assert cluster.filter(pod("p2"), ONLY_OTHERS).passing == ("virtual-kubelet",)


@pytest.mark.parametrize(
    ("waited", "passing"),
    [(0.0, ()), (29.0, ()), (30.0, ("virtual-kubelet",)), (3600.0, ("virtual-kubelet",))],
)
def test_timeout_or_exceed_max_moves_on_once_the_pod_waited_long_enough(
    waited: float, passing: tuple[str, ...]
) -> None:
    cluster = ecs_then_eci(when="TimeoutOrExceedMax", timeout="30s")
    created = "2024-05-01T12:00:00Z"
    cluster.now = 1_714_564_800.0 + waited
    decision = cluster.filter(pod("p", created=created), ONLY_OTHERS)
    assert decision.passing == passing
    if not passing:
        reason = decision.unresolvable["virtual-kubelet"]
        assert reason.endswith("whenTryNextUnits TimeoutOrExceedMax moves on after 30s")  # stable: no "waited"
        assert "waited" in decision.summary


def test_timeout_or_exceed_max_still_moves_on_at_max() -> None:
    cluster = Cluster(policy(units=[ecs(pool="a", max=1), eci()], when="TimeoutOrExceedMax", timeout="1h"))
    cluster.place(pod("p1"), ECS_A)
    assert cluster.filter(pod("p2")).passing == ("virtual-kubelet",)


def test_timeout_counts_from_first_sight_for_a_pod_without_a_creation_time() -> None:
    cluster = ecs_then_eci(when="TimeoutOrExceedMax", timeout="10s")
    stray = pod("p", created=None, uid="uid-stray")
    assert cluster.filter(stray, ONLY_OTHERS).passing == ()
    cluster.now += 10
    assert cluster.filter(stray, ONLY_OTHERS).passing == ("virtual-kubelet",)


def test_prioritize_after_filter_scores_the_passing_nodes_from_that_verdict() -> None:
    cluster = Cluster(policy(units=[ecs(pool="a"), eci(max=1)]))
    obj = pod("p")
    assert cluster.filter(obj).passing == ECS_A
    answered = cluster.prioritize(obj, ECS_A)
    assert answered.scores == {"ecs-0": 10, "ecs-1": 10}
    assert answered.summary.startswith("as filtered: ")
    # Asked about other nodes (or a second time), it decides afresh - with the same result.
    fresh = cluster.prioritize(obj)
    assert not fresh.summary.startswith("as filtered")
    assert fresh.scores == {"ecs-0": 10, "ecs-1": 10, "virtual-kubelet": 9}


def test_prioritize_after_filter_of_a_pod_without_policy_scores_all_zero() -> None:
    cluster = Cluster()
    obj = pod("p")
    passing = cluster.filter(obj).passing
    answered = cluster.prioritize(obj, passing)
    assert answered.scores == {}
    assert answered.summary.startswith("as filtered: ")


# Kept verdicts -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("when", ["LackResourceOrExceedMax", "ExceedMax", "TimeoutOrExceedMax"])
def test_a_kept_unit_verdict_answers_as_a_fresh_one(when: str) -> None:
    """The filter keeps place()'s verdict per policy, units present and counts shown; a state that forgets
    it before every request decides the same, pod after pod, as units fill up and candidates change."""
    spec = policy(units=[ecs(max=3, pool="a"), ecs(pool="b"), eci(max=2)], when=when, timeout="10s")
    kept, fresh = Cluster(spec), Cluster(spec)
    candidates = [ALL_NODES, ONLY_OTHERS, ("ecs-2", "virtual-kubelet"), ("virtual-kubelet",), ECS_A, ("ecs-3",)]
    for index in range(18):
        names = candidates[index % len(candidates)]
        obj = pod(f"p{index}", created=None if index % 4 == 0 else "2024-05-01T12:00:00Z")
        fresh.state.verdicts.clear()
        decision = kept.filter(obj, names)
        assert decision == fresh.filter(obj, names)
        if decision.passing:
            kept.bind(obj, decision.passing[-1])
            fresh.bind(obj, decision.passing[-1])
        kept.now += 3
        fresh.now += 3


def test_a_policy_change_forgets_its_kept_verdicts() -> None:
    cluster = Cluster(policy(units=[ecs(pool="a"), eci()]))
    assert cluster.filter(pod("p")).passing == ECS_A
    cluster.state.set_policies([policy(units=[ecs(pool="b"), eci()])])
    assert cluster.filter(pod("q")).passing == ("ecs-2", "ecs-3")
