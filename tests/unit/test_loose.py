"""Loose pods (pods no queued job accounts for) in the decision pass: counted as admitted, never a job of
``kube-queue/max-jobs``, taken by reclaim like jobs and evicted through the API, unless something blocks
their eviction (docs/reclaim.md, "Pods")."""

from __future__ import annotations

from fractions import Fraction

import pytest

from tests.builders import job, res, seed_tree
from webhook.api.names import MAX_JOBS
from webhook.core.decide import decide, leaf_policies
from webhook.core.decisions import Decisions, PlainJob
from webhook.core.loose import DisruptionBudget, LoosePod, eviction_block, loose_inputs, loose_workload, parse_budget
from webhook.core.selectors import FrozenLabels
from webhook.core.workload import Phase, WorkloadKey

A, Q = Phase.ADMITTED, Phase.QUEUED


def _pod(name: str, namespace: str = "user-a", cpu: int = 10, *, priority: int = 0, created: float = 0.0,
         owner: str = "ReplicaSet", labels: dict[str, str] | None = None, deleting: bool = False) -> LoosePod:
    return LoosePod(namespace, name, res(cpu=cpu), priority=priority, created=created, owner_kind=owner,
                    labels=FrozenLabels(labels or {}), deleting=deleting)


def _decide(jobs: list[PlainJob], pods: list[LoosePod],
            budgets: dict[str, list[DisruptionBudget]] | None = None) -> Decisions[PlainJob]:
    tree = seed_tree()
    loose, protected = loose_inputs(tree, pods, budgets)
    return decide(tree, jobs, leaf_policies(tree, {}, strict=False), oversell_rate=Fraction(1), loose=loose,
                  protected=protected)


def test_a_loose_pod_is_admitted_and_no_job_of_max_jobs() -> None:
    workload = loose_workload(_pod("web-0", created=5.0, priority=2), "Department-a")
    assert workload.key == WorkloadKey("Pod", "user-a", "web-0")
    assert workload.phase is A and workload.admitted_at == 5.0 and workload.priority == 2
    assert workload.request_with_count.get_or_zero(MAX_JOBS) == 0
    assert workload.request_with_count.get_or_zero("cpu") == res(cpu=10).get_or_zero("cpu")


@pytest.mark.parametrize(
    ("pod", "why"),
    [
        (_pod("a"), None),
        (_pod("a", owner=""), None),
        (_pod("a", owner="StatefulSet"), None),
        (_pod("a", deleting=True), "it is being deleted already"),
        (_pod("a", owner="DaemonSet"), "a DaemonSet's pod comes back on its node at once"),
        (_pod("a", owner="Node"), "a Node's pod comes back on its node at once"),
        (_pod("a", labels={"app": "web"}), "its PodDisruptionBudget web allows no disruption now"),
        (_pod("a", labels={"app": "db"}), None),
        (_pod("a", "user-b", labels={"app": "web"}), None),
    ],
)
def test_what_blocks_an_eviction(pod: LoosePod, why: str | None) -> None:
    budget = parse_budget("user-a", "web", {"matchLabels": {"app": "web"}}, 0)
    assert budget is not None
    assert eviction_block(pod, [budget]) == why


def test_a_budget_is_read_as_the_api_server_enforces_it() -> None:
    allowing = parse_budget("ns", "b", {"matchLabels": {"app": "web"}}, 2)
    assert allowing is not None and not allowing.protects(_pod("a", "ns", labels={"app": "web"}))
    unknown = parse_budget("ns", "b", {}, None)  # no status yet: the API server refuses evictions
    assert unknown is not None and unknown.protects(_pod("a", "ns"))
    assert parse_budget("ns", "b", {"matchLabels": {"bad key!": "x"}}, 0) is None
    nothing = parse_budget("ns", "b", None, 0)  # a null selector selects no pod
    assert nothing is not None and not nothing.protects(_pod("a", "ns"))


def test_pods_outside_the_tree_are_left_out() -> None:
    loose, protected = loose_inputs(seed_tree(), [_pod("a", "elsewhere"), _pod("b", owner="DaemonSet")])
    assert [workload.key.name for workload in loose] == ["b"]
    assert protected == {WorkloadKey("Pod", "user-a", "b"): "a DaemonSet's pod comes back on its node at once"}


def test_loose_pods_count_against_their_leaf() -> None:
    # 100 CPU of pods in Department-a fill the root: a job of Department-a waits, it is not within its min.
    decisions = _decide([PlainJob(job("j", "user-a", "Department-a", cpu=10))],
                        [_pod(f"web-{i}") for i in range(10)])
    assert decisions.admissions == () and decisions.reclaims == ()
    assert decisions.ledger.used("department-a").get_or_zero("cpu") == res(cpu=100).get_or_zero("cpu")
    assert decisions.ledger.used("department-a").get_or_zero(MAX_JOBS) == 0


def test_reclaim_takes_the_lowest_priority_then_newest_pod_and_evicts_it_through_the_api() -> None:
    pods = [_pod(f"web-{i}", created=float(i), priority=1) for i in range(9)]
    pods.append(_pod("low", "user-b", created=0.0, priority=0))
    owner = PlainJob(job("carol", "user-c", "Department-b", cpu=20))
    decisions = _decide([owner], pods)
    (plan,) = decisions.reclaims
    assert plan.preemptor is owner and plan.victims == ()
    assert [workload.key.name for workload in plan.pods] == ["low", "web-8"]
    assert "by evicting Pod/user-b/low (priority 0), Pod/user-a/web-8 (priority 1)" in plan.reason
    # Evicted pods do not come back to a queue, and stop counting.
    assert decisions.waiting == ()
    assert decisions.ledger.used("department-a").get_or_zero("cpu") == res(cpu=80).get_or_zero("cpu")


def test_jobs_and_pods_are_one_list_of_victims() -> None:
    # A borrowing job admitted after the pods goes first (most recently admitted), then the pods.
    late_job = PlainJob(job("late", "user-b", "Department-a", cpu=10, phase=A, admitted_at=100.0))
    pods = [_pod(f"web-{i}", created=float(i)) for i in range(9)]
    owner = PlainJob(job("carol", "user-c", "Department-b", cpu=20))
    decisions = _decide([late_job, owner], pods)
    (plan,) = decisions.reclaims
    assert [victim.workload.key.name for victim in plan.victims] == ["late"]
    assert [workload.key.name for workload in plan.pods] == ["web-8"]
    assert {job.workload.key.name for job in decisions.waiting} == {"late"}


def test_protected_pods_are_passed_over_and_nothing_is_taken_below_min() -> None:
    budget = parse_budget("user-a", "web", {"matchLabels": {"app": "web"}}, 0)
    assert budget is not None
    pods = [_pod(f"web-{i}", created=float(i), labels={"app": "web"}) for i in range(7)]
    pods += [_pod(f"db-{i}", "user-b", created=float(i), owner="StatefulSet") for i in range(3)]
    owner = PlainJob(job("carol", "user-c", "Department-b", cpu=30))
    decisions = _decide([owner], pods, {"user-a": [budget]})
    (plan,) = decisions.reclaims
    assert [workload.key.name for workload in plan.pods] == ["db-2", "db-1", "db-0"]
    # 40 CPU more than Department-b's min could only come from the protected pods: nothing is evicted.
    greedy = PlainJob(job("greedy", "user-c", "Department-b", cpu=40))
    decisions = _decide([greedy], pods, {"user-a": [budget]})
    assert decisions.reclaims == ()


def test_an_admitted_pod_that_cannot_be_held_again_is_evicted_through_the_api() -> None:
    # A released bare Pod (its gate can only be set at creation) is a victim like a loose pod.
    bare = [PlainJob(job(f"bare-{i}", "user-a", "Department-a", cpu=10, phase=A, admitted_at=float(i),
                         kind="Pod"), evictable=False) for i in range(10)]
    owner = PlainJob(job("carol", "user-c", "Department-b", cpu=10))
    decisions = _decide([*bare, owner], [])
    (plan,) = decisions.reclaims
    assert plan.victims == () and [workload.key.name for workload in plan.pods] == ["bare-9"]
    assert decisions.waiting == ()
    assert decisions.ledger.used("department-a").get_or_zero(MAX_JOBS) == res(max_jobs=9).get_or_zero(MAX_JOBS)
