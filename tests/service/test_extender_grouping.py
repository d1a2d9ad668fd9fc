"""The grouping of a request's node names by unit is kept per list of names (the scheduler sends the same list
pod after pod); it must never outlive what it was computed from: the nodes' labels, the node set, the policy."""

from __future__ import annotations

from tests.service.test_extender_objects import ALL_NODES, Cluster, eci, ecs, node, pod, policy
from webhook.extender.state import GROUPINGS_PER_POLICY, UNKNOWN_NODE


def pool_a_then_eci() -> Cluster:
    return Cluster(policy(units=[ecs(pool="a"), eci(max=4)]))


def test_the_same_list_asked_again_gets_the_same_answer() -> None:
    cluster = pool_a_then_eci()
    first = cluster.filter(pod("p1"))
    again = cluster.filter(pod("p2"), list(ALL_NODES))  # equal names, another list object
    assert first.passing == again.passing == ("ecs-0", "ecs-1")
    assert first.unresolvable == again.unresolvable


def test_a_node_relabelled_into_the_unit_counts_at_once_for_a_list_seen_before() -> None:
    cluster = pool_a_then_eci()
    assert cluster.filter(pod("p1")).passing == ("ecs-0", "ecs-1")
    cluster.state.upsert_node(node("ecs-2", pool="a"))
    assert cluster.filter(pod("p2")).passing == ("ecs-0", "ecs-1", "ecs-2")
    cluster.state.upsert_node(node("ecs-0", pool="b"))
    assert cluster.filter(pod("p3")).passing == ("ecs-1", "ecs-2")


def test_a_deleted_node_is_unknown_for_a_list_seen_before() -> None:
    cluster = pool_a_then_eci()
    assert cluster.filter(pod("p1")).passing == ("ecs-0", "ecs-1")
    cluster.state.delete_node(node("ecs-1", pool="a"))
    decision = cluster.filter(pod("p2"))
    assert decision.passing == ("ecs-0",)
    assert decision.failed["ecs-1"] == UNKNOWN_NODE


def test_a_node_unknown_at_first_joins_its_unit_once_it_arrives() -> None:
    cluster = pool_a_then_eci()
    names = [*ALL_NODES, "ecs-new"]
    assert cluster.filter(pod("p1"), names).failed["ecs-new"] == UNKNOWN_NODE
    cluster.state.upsert_node(node("ecs-new", pool="a"))
    assert cluster.filter(pod("p2"), names).passing == ("ecs-0", "ecs-1", "ecs-new")


def test_a_changed_policy_regroups_a_list_seen_before() -> None:
    cluster = pool_a_then_eci()
    assert cluster.filter(pod("p1")).passing == ("ecs-0", "ecs-1")
    cluster.state.set_policies([policy(units=[ecs(pool="b"), eci(max=4)])])
    assert cluster.filter(pod("p2")).passing == ("ecs-2", "ecs-3")


def test_the_groupings_kept_stay_bounded_when_every_list_differs() -> None:
    cluster = pool_a_then_eci()
    subsets = [tuple(name for bit, name in enumerate(ALL_NODES) if mask >> bit & 1) for mask in range(1, 32)]
    for index, names in enumerate(subsets):  # 31 lists of known nodes: each one is kept when first seen
        expected = tuple(name for name in names if name in ("ecs-0", "ecs-1")) or (
            ("virtual-kubelet",) if "virtual-kubelet" in names else ()
        )
        assert cluster.filter(pod(f"p{index}"), names).passing == expected
    kept = [len(entry.groupings) for entry in cluster.state._unit_cache.values()]
    assert kept and 0 < max(kept) <= GROUPINGS_PER_POLICY
