"""Pod-level elastic quota in the filter: a pod that would take its quota over ``max`` at any level - counting
bound pods and pods placed but not yet bound - is refused on every node, with the level and resource named."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

import webhook.extender.pods as pods_module
from tests.service.test_extender_objects import (
    NAMESPACE,
    Cluster,
    bound,
    eci,
    ecs,
    pod,
    policy,
    quota_tree,
    seed_quota_tree,
)
from webhook.api.names import QUOTA_LABEL
from webhook.core.resources import EMPTY, Resources
from webhook.core.workload import pod_request
from webhook.extender.pods import RequestCache

ECS = ("ecs-0", "ecs-1", "ecs-2", "ecs-3")


def with_tree(*policies: dict[str, object]) -> Cluster:
    cluster = Cluster(*policies)
    cluster.state.set_trees([seed_quota_tree()])
    return cluster


def test_a_pod_within_its_quota_passes() -> None:
    cluster = with_tree()
    cluster.add(pod("running", "20", node_name="ecs-0"))
    assert cluster.filter(pod("p", "10"), ECS).passing == ECS


def test_a_pod_over_its_leaf_max_is_refused_everywhere_naming_the_quota_and_resource() -> None:
    cluster = with_tree()
    cluster.add(pod("running", "25", node_name="ecs-0"))
    decision = cluster.filter(pod("p", "10"), ECS)
    assert decision.passing == ()
    assert decision.failed == {}
    reason = "pod-level quota (bound and placed pods): quota root/Department-b/Team: cpu request 10 + used 25 > max 30"
    assert decision.unresolvable == dict.fromkeys(ECS, reason)
    assert decision.quota == "root/Department-b/Team"


def test_an_ancestor_over_its_max_is_named_too() -> None:
    cluster = with_tree()
    cluster.add(pod("c-1", "45", namespace="user-c", node_name="ecs-1"))
    decision = cluster.filter(pod("p", "10"), ECS)
    assert decision.passing == ()
    assert decision.quota == "root/Department-b"
    assert "quota root/Department-b: cpu request 10 + used 45 > max 50" in decision.summary


def test_pods_placed_but_not_yet_bound_count() -> None:
    cluster = with_tree()
    assert cluster.filter(pod("a", "20"), ECS).passing == ECS
    decision = cluster.filter(pod("b", "20"), ECS)
    assert decision.passing == ()
    assert "used 20 > max 30" in decision.summary


def test_a_quota_label_naming_another_leaf_does_not_move_the_pod_out_of_its_namespaces_quota() -> None:
    # docs/accounting.md: the namespace's leaf now, as the controller counts; a user's label changes nothing.
    cluster = with_tree()
    cluster.add(pod("running", "25", node_name="ecs-0"))
    labelled = pod("p", "10", labels={QUOTA_LABEL: "user-c"})
    assert cluster.filter(labelled, ECS).passing == ()


def test_finished_and_deleted_pods_free_their_quota() -> None:
    cluster = with_tree()
    done = pod("done", "25", node_name="ecs-0")
    cluster.add(done)
    assert cluster.filter(pod("p", "10"), ECS).passing == ()
    cluster.add(bound(done, "ecs-0") | {"status": {"phase": "Succeeded"}})
    assert cluster.filter(pod("p", "10"), ECS).passing == ECS
    gone = pod("gone", "25", node_name="ecs-1")
    cluster.add(gone)
    assert cluster.filter(pod("q", "10"), ECS).passing == ()
    cluster.state.delete_pod(gone)
    assert cluster.filter(pod("q", "10"), ECS).passing == ECS


def test_resources_absent_from_max_are_unlimited() -> None:
    cluster = with_tree()
    assert cluster.filter(pod("p", "1", gpu=8), ECS).passing == ECS


def test_a_namespace_outside_the_tree_is_not_under_quota() -> None:
    cluster = with_tree()
    assert cluster.filter(pod("p", "500", namespace="free"), ECS).passing == ECS


def test_the_oversell_rate_does_not_matter_here_max_is_max() -> None:
    cluster = Cluster()
    cluster.state.set_trees(
        [quota_tree({"name": "root", "min": {"cpu": "10"}, "max": {"cpu": "10"}, "namespaces": [NAMESPACE]})]
    )
    assert cluster.filter(pod("p", "10"), ECS).passing == ECS
    decision = cluster.filter(pod("q", "1"), ECS)
    assert decision.unresolvable["ecs-0"].endswith("quota root: cpu request 1 + used 10 > max 10")


def test_a_tree_change_recounts_every_bound_pod() -> None:
    cluster = Cluster()
    cluster.add(pod("running", "25", node_name="ecs-0"))
    assert cluster.filter(pod("p", "10"), ECS).passing == ECS
    cluster.state.set_trees([seed_quota_tree()])
    assert cluster.state.used("Team").get("cpu") == 25 * 10**9
    assert cluster.filter(pod("q", "10"), ECS).passing == ()
    cluster.state.set_trees([])
    assert cluster.filter(pod("r", "10"), ECS).passing == ECS


def test_an_invalid_tree_is_ignored_and_reported() -> None:
    cluster = Cluster()
    cluster.state.set_trees([quota_tree({"name": "root", "min": {"cpu": "1"}, "max": {"cpu": "2"}})])
    assert cluster.state.tree is None
    assert "root-min-eq-max" in cluster.state.tree_problem


def test_quota_is_checked_before_the_policy_and_takes_no_slot() -> None:
    cluster = with_tree(policy(units=[ecs(pool="a"), eci(max=1)]))
    cluster.add(pod("running", "25", node_name="ecs-0"))
    refused = cluster.filter(pod("big", "10"), ("ecs-2", "virtual-kubelet"))
    assert refused.passing == ()
    assert refused.quota is not None
    assert cluster.state.assumed == {}
    assert cluster.filter(pod("small", "5"), ("ecs-2", "virtual-kubelet")).passing == ("virtual-kubelet",)


def test_a_pod_shape_is_parsed_once_and_reads_as_the_core_reads_it(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed: list[object] = []

    def counting(spec: Mapping[str, object]) -> Resources:
        parsed.append(spec)
        return pod_request(spec)

    monkeypatch.setattr(pods_module, "pod_request", counting)
    cache = RequestCache(size=2)
    first, second = pod("a", "2", memory="1Gi"), pod("b", "2", memory="1Gi")
    assert cache.request(first, "team/a") == pod_request(first["spec"])
    assert cache.request(second, "team/b") is cache.request(first, "team/a")
    assert len(parsed) == 1
    assert cache.request(pod("c", "3"), "team/c") == pod_request(pod("c", "3")["spec"])
    assert cache.request(pod("d", "4"), "team/d").get("cpu") == 4 * 10**9  # full: emptied, then kept
    assert len(parsed) == 3
    bad = pod("e", "lots")
    assert cache.request(bad, "team/e") == EMPTY  # logged, not kept
    assert cache.request(bad, "team/e") == EMPTY
    assert len(parsed) == 5


def test_a_namespace_moved_to_another_leaf_takes_its_running_pods_along() -> None:
    # As the controller counts them (docs/accounting.md): no double count, nothing left behind in the old leaf.
    cluster = with_tree()
    cluster.add(pod("running", "25", node_name="ecs-0", labels={QUOTA_LABEL: "Team"}))
    assert cluster.state.used("team").get_or_zero("cpu") == 25 * 10**9
    moved = seed_quota_tree()
    department_b = moved["spec"]["root"]["children"][1]
    team = department_b["children"][1]
    team["namespaces"] = []
    moved["spec"]["root"]["children"][0]["namespaces"].append(NAMESPACE)
    cluster.state.set_trees([moved])
    assert cluster.state.used("team").get_or_zero("cpu") == 0
    assert cluster.state.used("department-a").get_or_zero("cpu") == 25 * 10**9
    assert cluster.filter(pod("p", "10"), ECS).passing == ECS  # Team's 30 is free; Department-a has room
