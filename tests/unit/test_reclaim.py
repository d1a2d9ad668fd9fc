"""Reclaim of guaranteed min and in-quota priority preemption (webhook.core.reclaim)."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

import pytest

from tests.builders import job, node, res, seed_tree, tree
from webhook.core.fit import add_usage, check_fit, remove_usage
from webhook.core.quota import PREEMPT_LOWER_PRIORITY, PREEMPT_POLICY, QuotaTree
from webhook.core.reclaim import Reclaimer, ReclaimPlan, explain_reclaim, plan_reclaim
from webhook.core.resources import Resources
from webhook.core.workload import Phase, Workload

SEED = seed_tree()

Spec = tuple[str, int, int, float]
"""(name, cpu, priority, admitted_at) of a Department-a job; memory is the same number of Gi."""


def dept_a(name: str, cpu: int, priority: int, admitted_at: float, gpu: int | None = None) -> Workload:
    return job(
        name,
        cpu=cpu,
        memory=f"{cpu}Gi" if cpu else None,
        gpu=gpu,
        priority=priority,
        created=admitted_at - 0.5,
        phase=Phase.ADMITTED,
        admitted_at=admitted_at,
    )


def user_c(name: str = "c", cpu: int = 10, priority: int = 3, gpu: int | None = None) -> Workload:
    return job(name, namespace="user-c", quota="department-b", cpu=cpu, memory=f"{cpu}Gi", gpu=gpu,
               priority=priority, created=100)


def seeded(quota_tree: QuotaTree, admitted: list[Workload]) -> dict[str, Resources]:
    return add_usage(quota_tree, {}, *admitted)


def plan(
    admitted: list[Workload],
    preemptor: Workload,
    rate: int | Fraction = 1,
    quota_tree: QuotaTree = SEED,
) -> ReclaimPlan | None:
    return plan_reclaim(quota_tree, seeded(quota_tree, admitted), admitted, preemptor, rate)


def victims(result: ReclaimPlan | None) -> list[str] | None:
    return None if result is None else [w.key.name for w in result.victims]


CROSS_CASES = [
    # (case, admitted Department-a jobs, preemptor cpu, expected victims or None)
    (
        "lowest priority, then most recently admitted",
        [("a1", 60, 1, 1), ("a2", 20, 0, 2), ("a3", 10, 0, 3), ("a4", 10, 0, 4)],
        10,
        ["a4"],
    ),
    (
        "takes more victims until the preemptor fits",
        [("a1", 60, 1, 1), ("a2", 20, 0, 2), ("a3", 10, 0, 3), ("a4", 10, 0, 4)],
        20,
        ["a4", "a3"],
    ),
    (
        "no more than needed: a victim made unnecessary is given back",
        [("a1", 60, 1, 1), ("a2", 20, 0, 3), ("a4", 10, 0, 4), ("a5", 10, 1, 5)],
        20,
        ["a2"],
    ),
    (
        "priority comes before recency",
        [("a1", 60, 5, 1), ("a2", 20, 0, 2), ("a3", 20, 3, 3)],
        10,
        ["a2"],
    ),
    (
        "a victim that would take Department-a below min is skipped",
        [("a1", 25, 1, 1), ("a2", 30, 1, 2), ("a3", 45, 0, 3)],
        10,
        ["a2"],
    ),
    (
        "no allowed eviction makes it fit: nothing is evicted",
        [("a1", 50, 0, 1), ("a2", 50, 0, 2)],
        10,
        None,
    ),
    ("fits already: nothing to reclaim", [("a1", 60, 0, 1)], 10, None),
    (
        "beyond Department-b's min it may only use idle capacity",
        [("a1", 60, 0, 1), ("a2", 40, 0, 2)],
        41,
        None,
    ),
]


@pytest.mark.parametrize(
    ("admitted", "cpu", "expected"),
    [case[1:] for case in CROSS_CASES],
    ids=[case[0] for case in CROSS_CASES],
)
def test_cross_quota_reclaim(admitted: list[Spec], cpu: int, expected: list[str] | None) -> None:
    jobs = [dept_a(*spec) for spec in admitted]
    result = plan(jobs, user_c(cpu=cpu))
    assert victims(result) == expected
    if result is not None:
        after = remove_usage(SEED, seeded(SEED, jobs), *result.victims)
        assert check_fit(SEED, after, result.preemptor, 1).fits
        assert dict(result.used_after_eviction) == after
        assert dict(result.used_after) == add_usage(SEED, after, result.preemptor)
        assert after["department-a"]["cpu"] >= SEED.node("department-a").min["cpu"]


def test_reason_names_who_reclaims_what_from_whom() -> None:
    jobs = [dept_a("a1", 60, 1, 1), dept_a("a2", 30, 0, 2), dept_a("a4", 10, 0, 4)]
    result = plan(jobs, user_c(cpu=10))
    assert result is not None
    assert result.reason == (
        "root/Department-b reclaims cpu=10, memory=10Gi from root/Department-a by evicting "
        "Job/user-a/a4 (priority 0)"
    )
    assert explain_reclaim(SEED, seeded(SEED, jobs), jobs, user_c(cpu=10), 1) == result.reason


@pytest.mark.parametrize(
    ("admitted", "preemptor", "phrase"),
    [
        ([], user_c(cpu=10), "fits without evicting anything"),
        ([dept_a("a1", 60, 0, 1), dept_a("a2", 40, 0, 2)], user_c(cpu=41), "beyond the guaranteed min"),
        ([dept_a("a1", 50, 0, 1), dept_a("a2", 50, 0, 2)], user_c(cpu=10), "would not make Job/user-c/c fit"),
        ([], user_c(cpu=1, gpu=5), "can never be admitted"),
        ([], job("lost", quota="nowhere"), "not in the ElasticQuotaTree"),
    ],
    ids=["fits", "not entitled", "not enough", "never fits", "unknown quota"],
)
def test_explain_when_there_is_no_plan(admitted: list[Workload], preemptor: Workload, phrase: str) -> None:
    used = seeded(SEED, admitted)
    assert plan_reclaim(SEED, used, admitted, preemptor, 1) is None
    assert phrase in explain_reclaim(SEED, used, admitted, preemptor, 1)


def test_a_resource_nobody_contends_does_not_protect_a_borrower() -> None:
    # Department-a borrows CPU (100 of 60) but is under its min in GPU (1 of 3). The preemptor lacks CPU and
    # memory, not GPU: Department-a's GPU guarantee is not being reclaimed, so the job holding the GPU goes.
    jobs = [dept_a("a1", 60, 1, 1), dept_a("gpu", 40, 0, 2, gpu=1)]
    assert victims(plan(jobs, user_c(cpu=10))) == ["gpu"]


def gpu_tree() -> QuotaTree:
    """root 100 CPU / 4 GPU: ``a`` (min 60 CPU, 2 GPU), ``b`` (min 40 CPU, 2 GPU), ``c`` (no min)."""
    total = res(cpu=100, gpu=4)
    return tree(node("root", min=total, max=total, children=(
        node("a", min=res(cpu=60, gpu=2), max=total, namespaces=("ns-a",)),
        node("b", min=res(cpu=40, gpu=2), max=total, namespaces=("ns-b",)),
        node("c", max=total, namespaces=("ns-c",)),
    )))


def test_a_quota_under_its_min_in_a_contended_resource_keeps_the_jobs_that_hold_it() -> None:
    # b lacks CPU and a GPU. a borrows CPU (100 of 60) but holds only 1 of its 2 guaranteed GPUs: GPUs are
    # being reclaimed, so its GPU job stays although it is a's most evictable one; a CPU-only job goes, and
    # the GPUs come from c, which borrows all it holds.
    quota_tree = gpu_tree()

    def admitted(name: str, quota: str, cpu: int, gpu: int | None, at: float) -> Workload:
        return job(name, namespace=f"ns-{quota}", quota=quota, cpu=cpu, gpu=gpu, phase=Phase.ADMITTED,
                   created=at, admitted_at=at)

    jobs = [admitted("a1", "a", 50, None, 1), admitted("a2", "a", 10, None, 2), admitted("a-gpu", "a", 40, 1, 3),
            admitted("c-gpu", "c", 0, 3, 4)]
    preemptor = job("b", namespace="ns-b", quota="b", cpu=10, gpu=1, created=9)
    result = plan(jobs, preemptor, quota_tree=quota_tree)
    assert victims(result) == ["c-gpu", "a2"]
    assert result is not None
    assert result.used_after_eviction["a"] == res(cpu=90, gpu=1, max_jobs=2)


def test_only_jobs_that_relieve_the_blocking_resource_are_taken() -> None:
    gpu_only = dept_a("gpu-only", 0, 0, 9, gpu=1)
    jobs = [dept_a("a1", 60, 1, 1), dept_a("a2", 40, 1, 2), gpu_only]
    assert victims(plan(jobs, user_c(cpu=10))) == ["a2"]


def test_oversell_reclaims_against_max_times_rate() -> None:
    jobs = [dept_a("a1", 60, 0, 1), dept_a("a2", 60, 0, 2), dept_a("a3", 60, 0, 3), dept_a("a4", 20, 0, 4)]
    result = plan(jobs, user_c(cpu=10), rate=2)
    assert victims(result) == ["a4"]
    assert plan(jobs[:3], user_c(cpu=10), rate=2) is None  # 180 + 10 fits 200: nothing to reclaim


def test_the_preemptor_itself_and_jobs_of_unknown_quotas_are_never_victims() -> None:
    preemptor = user_c(cpu=10)
    stray = job("stray", namespace="gone", quota="nowhere", cpu=50, phase=Phase.ADMITTED, admitted_at=9)
    jobs = [dept_a("a1", 60, 1, 1), dept_a("a2", 40, 1, 2)]
    used = seeded(SEED, jobs)
    result = plan_reclaim(SEED, used, [*jobs, stray, preemptor], preemptor, 1)
    assert victims(result) == ["a2"]


# Priority preemption inside one quota -------------------------------------------------------------------------


def seed_with_policy(department: str) -> QuotaTree:
    total = res(cpu=100, memory="100Gi", gpu=4)
    attributes = {PREEMPT_POLICY: PREEMPT_LOWER_PRIORITY}
    return tree(
        node(
            "root",
            min=total,
            max=total,
            children=(
                node("Department-a", min=res(cpu=60, memory="60Gi", gpu=3), max=total,
                     namespaces=("user-a", "user-b"),
                     attributes=attributes if department == "a" else None),
                node("Department-b", min=res(cpu=40, memory="40Gi", gpu=1), max=total,
                     namespaces=("user-c",),
                     attributes=attributes if department == "b" else None),
            ),
        )
    )


INTRA_CASES = [
    # (case, policy on Department-a, preemptor priority, expected victims)
    ("off by default", False, 5, None),
    ("lowest priority first", True, 5, ["a1"]),
    ("only strictly lower priority", True, 1, ["a1"]),
    ("nothing lower", True, 0, None),
]


@pytest.mark.parametrize(
    ("enabled", "priority", "expected"),
    [case[1:] for case in INTRA_CASES],
    ids=[case[0] for case in INTRA_CASES],
)
def test_priority_preemption_inside_a_quota(enabled: bool, priority: int, expected: list[str] | None) -> None:
    quota_tree = seed_with_policy("a" if enabled else "")
    jobs = [dept_a("a1", 60, 0, 1), dept_a("a2", 40, 1, 2)]
    preemptor = job("urgent", cpu=30, memory="30Gi", priority=priority, created=50)
    result = plan(jobs, preemptor, quota_tree=quota_tree)
    assert victims(result) == expected
    if result is not None:
        assert result.reason == (
            "root/Department-a: Job/user-a/urgent (priority "
            f"{priority}) preempts lower-priority Job/user-a/a1 (priority 0), freeing cpu=60, memory=60Gi"
        )


def test_borrowers_go_before_the_quotas_own_jobs() -> None:
    quota_tree = seed_with_policy("b")
    own = job("b-low", namespace="user-c", quota="department-b", cpu=10, memory="10Gi",
              phase=Phase.ADMITTED, admitted_at=5)
    jobs = [dept_a("a1", 60, 1, 1), dept_a("a2", 30, 2, 2), own]
    result = plan(jobs, user_c(cpu=10), quota_tree=quota_tree)
    assert victims(result) == ["a2"]


def test_own_jobs_are_used_when_borrowers_are_not_enough() -> None:
    quota_tree = seed_with_policy("b")
    own = job("b-low", namespace="user-c", quota="department-b", cpu=10, memory="10Gi",
              phase=Phase.ADMITTED, admitted_at=5)
    # Department-a (min 60) may give back only a3: evicting a1 or a2 would take it below 60.
    jobs = [dept_a("a1", 55, 1, 1), dept_a("a2", 25, 2, 2), dept_a("a3", 10, 2, 3), own]
    result = plan(jobs, user_c(cpu=20), quota_tree=quota_tree)
    assert victims(result) == ["a3", "b-low"]
    assert result is not None
    assert result.reason == (
        "root/Department-b reclaims cpu=10, memory=10Gi from root/Department-a by evicting Job/user-a/a3 "
        "(priority 2); root/Department-b: Job/user-c/c (priority 3) preempts lower-priority Job/user-c/b-low "
        "(priority 0), freeing cpu=10, memory=10Gi"
    )


def test_beyond_min_only_own_lower_priority_jobs_may_go() -> None:
    quota_tree = seed_with_policy("b")
    own = job("b-low", namespace="user-c", quota="department-b", cpu=10, memory="10Gi",
              phase=Phase.ADMITTED, admitted_at=5)
    jobs = [dept_a("a1", 60, 1, 1), dept_a("a2", 30, 0, 2), own]
    # Department-b at 10 + 35 = 45 > min 40: no reclaim from Department-a, and b-low alone is not enough.
    used = seeded(quota_tree, jobs)
    assert plan_reclaim(quota_tree, used, jobs, user_c(cpu=35), 1) is None
    why = explain_reclaim(quota_tree, used, jobs, user_c(cpu=35), 1)
    assert "(lower-priority jobs of its own quota while the quota uses more than its min of what blocks it)" in why
    assert "quota root/Department-b: cpu request 35 + used 10 > limit 40 (guaranteed min)" in why


# Deeper trees -------------------------------------------------------------------------------------------------


def deep_tree() -> QuotaTree:
    total = res(cpu=100)
    return tree(
        node(
            "root",
            min=total,
            max=total,
            children=(
                node(
                    "Dept",
                    min=res(cpu=60),
                    max=total,
                    children=(
                        node("Team-x", min=res(cpu=30), max=total, namespaces=("x",)),
                        node("Team-y", min=res(cpu=20), max=total, namespaces=("y",)),
                    ),
                ),
                node("Other", min=res(cpu=40), max=total, namespaces=("o",)),
            ),
        )
    )


DEEP = deep_tree()


def deep_job(name: str, quota: str, cpu: int, admitted_at: float | None = None, priority: int = 0) -> Workload:
    namespace = {"team-x": "x", "team-y": "y", "other": "o"}[quota]
    phase = Phase.QUEUED if admitted_at is None else Phase.ADMITTED
    return job(name, namespace=namespace, quota=quota, cpu=cpu, priority=priority, created=admitted_at or 99,
               phase=phase, admitted_at=admitted_at)


DEEP_CASES: list[tuple[str, list[Workload], Workload, list[str] | None]] = [
    (
        "a sibling team borrowing inside the department (the department itself is over its min)",
        [deep_job("y1", "team-y", 50, 1), deep_job("y2", "team-y", 20, 2), deep_job("o1", "other", 30, 3)],
        deep_job("x", "team-x", 10),
        ["y2"],
    ),

    (
        "another department borrowing (most recent first)",
        [deep_job("y1", "team-y", 30, 1), deep_job("o1", "other", 50, 2), deep_job("o2", "other", 20, 3)],
        deep_job("x", "team-x", 10),
        ["o2"],
    ),
    (
        "the department's own min is guarded for a victim outside it",
        [deep_job("x1", "team-x", 20, 1), deep_job("y1", "team-y", 50, 2), deep_job("o1", "other", 30, 3)],
        deep_job("o", "other", 10),
        None,  # Other is within min, but Dept (70 used) may only give back 10 and y1 holds 50
    ),
]


@pytest.mark.parametrize(
    ("admitted", "preemptor", "expected"),
    [case[1:] for case in DEEP_CASES],
    ids=[case[0] for case in DEEP_CASES],
)
def test_deeper_trees(admitted: list[Workload], preemptor: Workload, expected: list[str] | None) -> None:
    used: Mapping[str, Resources] = seeded(DEEP, admitted)
    assert victims(plan_reclaim(DEEP, used, admitted, preemptor, 1)) == expected


def test_a_team_reclaims_from_another_department_only_while_its_department_is_within_min() -> None:
    # Oversell 2: the root admits 200 CPU. Other (min 40) borrows 70 - 40 = 30; o1 could be evicted.
    others = [deep_job("o1", "other", 30, 1), deep_job("o2", "other", 40, 2)]
    over = [deep_job("y1", "team-y", 130, 3), *others]  # Dept at 130 > its min 60; y1 is all of Team-y's
    assert plan_reclaim(DEEP, seeded(DEEP, over), over, deep_job("x", "team-x", 10), 2) is None
    # Dept at 20: Team-x + 30 stays within Dept's min, so Other's borrowers may go (y1 is at Team-y's min).
    within = [deep_job("y1", "team-y", 20, 3), *others, deep_job("o3", "other", 85, 0.5)]
    result = plan_reclaim(DEEP, seeded(DEEP, within), within, deep_job("x", "team-x", 30), 2)
    assert victims(result) == ["o2"]


def test_zero_amounts_in_a_victims_request_do_not_count_against_min() -> None:
    # Department-a is below its memory min (0 < 60Gi): a victim that asks for memory "0" may still go.
    jobs = [
        job("a1", cpu=60, memory=0, phase=Phase.ADMITTED, admitted_at=1),
        job("a2", cpu=40, memory=0, phase=Phase.ADMITTED, admitted_at=2),
    ]
    preemptor = job("c", namespace="user-c", quota="department-b", cpu=10, created=9)
    assert victims(plan(jobs, preemptor)) == ["a2"]


# Planning many reclaims over one pass (Reclaimer) ------------------------------------------------------------


def fresh_a(name: str, cpu: int, priority: int = 0, created: float = 50) -> Workload:
    """A Department-a job the same pass just admitted (still queued: nothing was written for it)."""
    return job(name, cpu=cpu, memory=f"{cpu}Gi", priority=priority, created=created)


def names_of(workloads: tuple[Workload, ...]) -> list[str]:
    return [w.key.name for w in workloads]


def test_a_job_admitted_by_the_same_pass_is_withheld_before_any_running_job_is_evicted() -> None:
    running = [dept_a("a1", 60, 0, 1), dept_a("a2", 30, 0, 2)]
    fresh = [fresh_a("f1", 10)]
    used = seeded(SEED, [*running, *fresh])
    reclaimer = Reclaimer(SEED, used, running, 1, fresh=fresh)
    result = reclaimer.plan(user_c(cpu=10))
    assert result is not None
    assert (names_of(result.victims), names_of(result.withheld)) == ([], ["f1"])
    assert result.reason == (
        "root/Department-b takes cpu=10, memory=10Gi from root/Department-a ahead of Job/user-a/f1 (priority 0), "
        "held back before they started"
    )
    assert dict(result.used_after_eviction) == remove_usage(SEED, used, *fresh)


def test_holding_back_a_fresh_job_never_takes_its_quota_below_min() -> None:
    # Department-a runs 55 (below its min of 60) and was just given f1 (10): holding f1 back would leave it
    # at 55, so f1 stays and a2 (5) goes; Department-a keeps its min.
    b = job("b", namespace="user-c", quota="department-b", cpu=35, memory="35Gi", phase=Phase.ADMITTED,
            admitted_at=3)
    running = [dept_a("a1", 50, 0, 1), dept_a("a2", 5, 0, 2), b]
    fresh = [fresh_a("f1", 10)]
    used = seeded(SEED, [*running, *fresh])
    result = Reclaimer(SEED, used, running, 1, fresh=fresh).plan(user_c(cpu=5))
    assert result is not None
    assert (names_of(result.victims), names_of(result.withheld)) == (["a2"], [])
    # At exactly its min (50 running + 10 just admitted), Department-a keeps everything.
    running[1] = dept_a("a2", 0, 0, 2)
    used = seeded(SEED, [*running, *fresh])
    assert used["department-a"]["cpu"] == SEED.node("department-a").min["cpu"]
    assert Reclaimer(SEED, used, running, 1, fresh=fresh).plan(user_c(cpu=5)) is None


def test_a_fresh_lower_priority_job_of_the_own_quota_gives_way_to_a_preempting_job() -> None:
    quota_tree = seed_with_policy("a")
    running = [dept_a("a1", 60, 1, 1)]
    fresh = [fresh_a("f1", 40, priority=0)]
    used = seeded(quota_tree, [*running, *fresh])
    urgent = job("urgent", cpu=30, memory="30Gi", priority=5, created=50)
    result = Reclaimer(quota_tree, used, running, 1, fresh=fresh).plan(urgent)
    assert result is not None
    assert (names_of(result.victims), names_of(result.withheld)) == ([], ["f1"])
    assert result.reason == (
        "root/Department-a: Job/user-a/urgent (priority 5) goes ahead of lower-priority Job/user-a/f1 (priority 0), "
        "held back before they started, freeing cpu=40, memory=40Gi"
    )


def test_a_quota_at_its_min_does_not_churn_its_own_jobs_for_a_job_that_would_take_it_beyond_min() -> None:
    # Department-a (min 60, PreemptLowerPriority) runs exactly its min in lower-priority jobs; Department-b
    # runs its own min. A large priority-5 job of Department-a would take it to 90: it waits for its jobs to
    # finish instead of evicting them (they would come back between two large jobs and be evicted again).
    quota_tree = seed_with_policy("a")
    b = job("b", namespace="user-c", quota="department-b", cpu=40, memory="40Gi", phase=Phase.ADMITTED,
            admitted_at=1)
    running = [dept_a("m1", 30, 1, 2), dept_a("m2", 30, 1, 3), b]
    large = job("large", cpu=30, memory="30Gi", priority=5, created=50)
    used = seeded(quota_tree, running)
    assert plan_reclaim(quota_tree, used, running, large, 1) is None
    why = explain_reclaim(quota_tree, used, running, large, 1)
    assert "lower-priority jobs of its own quota while the quota uses more than its min of what blocks it" in why
    # Borrowing (90 of min 60, Department-b nearly idle), it gives the borrowed room to the large job, but
    # only while it still borrows: a job of 40 would need m2 too, taken at the min already.
    running = [dept_a("m1", 30, 1, 2), dept_a("m2", 30, 1, 3), dept_a("m3", 30, 1, 4),
               job("b", namespace="user-c", quota="department-b", cpu=10, memory="10Gi", phase=Phase.ADMITTED,
                   admitted_at=1)]
    assert victims(plan(running, large, quota_tree=quota_tree)) == ["m3"]
    larger = job("larger", cpu=40, memory="40Gi", priority=5, created=50)
    assert plan(running, larger, quota_tree=quota_tree) is None


def test_plans_of_one_pass_see_each_other() -> None:
    running = [dept_a("a1", 60, 1, 1), dept_a("a2", 20, 0, 2), dept_a("a3", 10, 0, 3), dept_a("a4", 10, 0, 4)]
    reclaimer = Reclaimer(SEED, seeded(SEED, running), running, 1)
    first = reclaimer.plan(user_c("c1", cpu=10))
    assert first is not None
    assert names_of(first.victims) == ["a4"]
    assert reclaimer.plan(user_c("c1", cpu=10)) == first  # planning changes nothing until committed
    reclaimer.commit(first)
    assert dict(reclaimer.used) == dict(first.used_after)
    second = reclaimer.plan(user_c("c2", cpu=10))
    assert second is not None
    assert names_of(second.victims) == ["a3"]
    reclaimer.commit(second)
    # Department-a is at 80 now: a2 (20) may still go, a1 (60) never.
    third = reclaimer.plan(user_c("c3", cpu=20))
    assert third is not None
    assert names_of(third.victims) == ["a2"]
    reclaimer.commit(third)
    assert reclaimer.plan(user_c("c4", cpu=10)) is None  # Department-b at 40: beyond its min now


def test_own_jobs_taken_by_an_earlier_plan_are_not_counted_again() -> None:
    # Department-b (min 40, PreemptLowerPriority) borrows 10 of Department-a's min: its priority-3 jobs take
    # the borrowed room from its own lower-priority jobs, one plan after the other.
    quota_tree = seed_with_policy("b")
    own = [job(f"b{i}", namespace="user-c", quota="department-b", cpu=10, memory="10Gi", phase=Phase.ADMITTED,
               admitted_at=i) for i in range(1, 6)]
    running = [dept_a("a1", 50, 1, 1), *own]
    reclaimer = Reclaimer(quota_tree, seeded(quota_tree, running), running, 1)
    first = reclaimer.plan(user_c("c1", cpu=10))
    assert first is not None
    assert names_of(first.victims) == ["b5"]
    reclaimer.commit(first)
    second = reclaimer.plan(user_c("c2", cpu=10))
    assert second is not None
    assert names_of(second.victims) == ["b4"]
    # Lower-priority own jobs are taken only while the quota is above its min in what blocks the preemptor.
    reclaimer.commit(second)
    assert reclaimer.plan(user_c("c3", cpu=20)) is None


def test_a_preemptor_that_fits_left_over_room_within_its_min_gets_a_plan_without_victims() -> None:
    running = [dept_a("a1", 60, 1, 1), dept_a("a2", 30, 0, 2)]
    reclaimer = Reclaimer(SEED, seeded(SEED, running), running, 1)
    assert reclaimer.plan(user_c(cpu=10)) is None
    room = reclaimer.plan(user_c(cpu=10), take_room=True)
    assert room is not None
    assert (room.victims, room.withheld) == ((), ())
    assert room.reason == "root/Department-b takes room left over, within its min"
    assert dict(room.used_after) == add_usage(SEED, seeded(SEED, running), user_c(cpu=10))
    # Beyond its min it only waits for the next pass, like everybody else.
    idle: list[Workload] = []
    assert Reclaimer(SEED, {}, idle, 1).plan(user_c(cpu=41), take_room=True) is None


def test_the_budget_bounds_the_candidates_a_pass_looks_at() -> None:
    running = [dept_a("a1", 60, 1, 1), dept_a("a2", 20, 0, 2), dept_a("a3", 10, 0, 3), dept_a("a4", 10, 0, 4)]
    used = seeded(SEED, running)
    spent = Reclaimer(SEED, used, running, 1, budget=0)
    assert spent.exhausted
    assert spent.plan(user_c(cpu=10)) is None
    assert "reclaim budget is spent" in spent.explain(user_c(cpu=10))
    short = Reclaimer(SEED, used, running, 1, budget=1)
    assert short.plan(user_c(cpu=20)) is None  # needs a4 and a3: two candidates
    assert short.exhausted
    assert "reclaim budget is spent" in short.explain(user_c(cpu=20))
    assert Reclaimer(SEED, used, running, 1, budget=2).plan(user_c(cpu=20)) is not None


def test_victims_taken_and_given_back_when_the_rest_cannot_follow() -> None:
    # Department-a (min 60) runs 90: only a3 (10) may go without taking it below min; c needs 20.
    running = [dept_a("a1", 55, 1, 1), dept_a("a2", 25, 2, 2), dept_a("a3", 10, 2, 3),
               job("b0", namespace="user-c", quota="department-b", cpu=10, memory="10Gi", phase=Phase.ADMITTED,
                   admitted_at=1)]
    used = seeded(SEED, running)
    reclaimer = Reclaimer(SEED, used, running, 1)
    assert reclaimer.plan(user_c(cpu=20)) is None
    assert dict(reclaimer.used) == used


def test_a_level_without_min_does_not_guard_its_jobs() -> None:
    total = res(cpu=10)
    quota_tree = tree(node("root", min=total, max=total, children=(
        node("a", min=res(cpu=5), max=total, namespaces=("a",)),
        node("b", max=total, children=(node("b1", max=total, namespaces=("b1",)),)),
    )))
    borrower = job("b1", namespace="b1", quota="b1", cpu=10, phase=Phase.ADMITTED, admitted_at=1)
    preemptor = job("a", namespace="a", quota="a", cpu=5, created=2)
    result = plan_reclaim(quota_tree, seeded(quota_tree, [borrower]), [borrower], preemptor, 1)
    assert victims(result) == ["b1"]


def test_a_plan_leaves_the_guaranteed_share_of_an_untouched_quota_alone() -> None:
    running = [dept_a("a1", 60, 1, 1), dept_a("a2", 30, 0, 2),
               job("b0", namespace="user-c", quota="department-b", cpu=10, memory="10Gi", phase=Phase.ADMITTED,
                   admitted_at=1)]
    reclaimer = Reclaimer(SEED, seeded(SEED, running), running, 1)
    first = reclaimer.plan(user_c("c1", cpu=10))
    assert first is not None
    assert names_of(first.victims) == ["a2"]
    reclaimer.commit(first)
    assert reclaimer.plan(user_c("c2", cpu=10)) is None  # Department-a is at its min now


def test_own_jobs_are_taken_only_for_a_resource_the_quota_borrows() -> None:
    # Department-a borrows CPU (70 of 60) but not memory (30Gi of 60Gi). The urgent job lacks both: a job
    # holding only memory is not taken (its quota is not above min in memory), one holding CPU is, but that
    # does not free memory, so nothing is evicted.
    quota_tree = seed_with_policy("a")
    running = [
        job("a-cpu", cpu=70, memory=0, phase=Phase.ADMITTED, admitted_at=1),
        job("a-mem", cpu=0, memory="30Gi", phase=Phase.ADMITTED, admitted_at=2),
        job("a-top", cpu=0, memory=0, gpu=1, priority=9, phase=Phase.ADMITTED, admitted_at=3),
        job("b", namespace="user-c", quota="department-b", cpu=30, memory="70Gi", phase=Phase.ADMITTED,
            admitted_at=1),
    ]
    urgent = job("urgent", cpu=5, memory="5Gi", priority=5, created=9)
    assert plan(running, urgent, quota_tree=quota_tree) is None


def test_a_fresh_job_whose_quota_is_at_min_stays_a_borrower_is_evicted_instead() -> None:
    running = [deep_job("x1", "team-x", 10, 1), deep_job("y1", "team-y", 10, 1), deep_job("o1", "other", 40, 2),
               deep_job("o2", "other", 30, 3)]
    fresh = [deep_job("yf", "team-y", 10)]  # Team-y (min 20) is at its min with it
    used = seeded(DEEP, [*running, *fresh])
    result = Reclaimer(DEEP, used, running, 1, fresh=fresh).plan(deep_job("x", "team-x", 10))
    assert result is not None
    assert (names_of(result.victims), names_of(result.withheld)) == (["o2"], [])


def test_in_a_block_quota_only_the_back_of_what_the_pass_admitted_is_held_back() -> None:
    running = [dept_a("a1", 60, 1, 1), job("b0", namespace="user-c", quota="department-b", cpu=25, memory="10Gi",
                                           phase=Phase.ADMITTED, admitted_at=1)]
    # The pass admitted f1 then f2 in Department-a's queue; c lacks CPU only and f2 holds none.
    fresh = [fresh_a("f1", 10, created=10), job("f2", cpu=0, memory="5Gi", created=11)]
    used = seeded(SEED, [*running, *fresh])
    round_robin = Reclaimer(SEED, used, running, 1, fresh=fresh).plan(user_c(cpu=10))
    assert round_robin is not None
    assert names_of(round_robin.withheld) == ["f1"]
    assert Reclaimer(SEED, used, running, 1, fresh=fresh, ordered=["Department-a"]).plan(user_c(cpu=10)) is None
    # f2 (2) alone is not enough, f1 (10) alone would be: under Round f2 is given back, under Block it stays
    # held back with f1, which is ahead of it.
    fresh = [fresh_a("f1", 10, created=10), job("f2", cpu=2, memory="2Gi", created=11)]
    used = seeded(SEED, [*running, *fresh])
    round_robin = Reclaimer(SEED, used, running, 1, fresh=fresh).plan(user_c(cpu=10))
    assert round_robin is not None
    assert names_of(round_robin.withheld) == ["f1"]
    block = Reclaimer(SEED, used, running, 1, fresh=fresh, ordered=["Department-a"]).plan(user_c(cpu=10))
    assert block is not None
    assert names_of(block.withheld) == ["f2", "f1"]


def test_a_job_cap_is_not_a_guarantee_nobody_is_evicted_for_a_job_slot() -> None:
    # The root admits two jobs; a (no min) runs both. b is within its CPU min, and only the job cap blocks
    # it: nobody is owed a job slot, so nothing is evicted and why says so.
    total = res(cpu=10, max_jobs=2)
    quota_tree = tree(node("root", min=total, max=total, children=(
        node("a", max=res(cpu=10), namespaces=("ns-a",)),
        node("b", min=res(cpu=5), max=res(cpu=10), namespaces=("ns-b",)),
    )))
    running = [job(f"a{i}", namespace="ns-a", quota="a", cpu=1, phase=Phase.ADMITTED, admitted_at=i) for i in (1, 2)]
    preemptor = job("b", namespace="ns-b", quota="b", cpu=1, created=9)
    used = seeded(quota_tree, running)
    assert plan_reclaim(quota_tree, used, running, preemptor, 1) is None
    why = explain_reclaim(quota_tree, used, running, preemptor, 1)
    assert why.startswith("no reclaim: Job/ns-b/b waits for a job slot (")
    assert why.endswith("kube-queue/max-jobs is a cap, not a guarantee, so no job is evicted for a slot")
    # With CPU short too, the job taken for CPU frees the slot as well.
    busy = [*running, job("a3", namespace="ns-a", quota="a", cpu=0, phase=Phase.ADMITTED, admitted_at=3)]
    busy[0] = job("a1", namespace="ns-a", quota="a", cpu=9, phase=Phase.ADMITTED, admitted_at=1)
    quota_tree = tree(node("root", min=res(cpu=10, max_jobs=3), max=res(cpu=10, max_jobs=3), children=(
        node("a", max=res(cpu=10), namespaces=("ns-a",)),
        node("b", min=res(cpu=5), max=res(cpu=10), namespaces=("ns-b",)),
    )))
    assert victims(plan(busy, preemptor, quota_tree=quota_tree)) == ["a2"]


def test_the_explanation_names_the_rule_when_borrowers_are_not_enough() -> None:
    jobs = [dept_a("a1", 50, 0, 1), dept_a("a2", 50, 0, 2)]
    assert "none taken below its min in what is reclaimed" in explain_reclaim(SEED, seeded(SEED, jobs), jobs,
                                                                              user_c(cpu=10), 1)
