"""The seed document's three scenarios, decided by the pure core on the seed's ElasticQuotaTree.

Department-a (user-a, user-b): min 60 CPU / 60Gi / 3 GPU, max 100 / 100Gi / 4.
Department-b (user-c): min 40 CPU / 40Gi / 1 GPU, max 100 / 100Gi / 4. Root: 100 CPU / 100Gi / 4 GPU.
"""

from __future__ import annotations

from fractions import Fraction

from tests.builders import job, seed_tree
from webhook.core.fit import add_usage, check_fit, remove_usage
from webhook.core.queueing import Policy, admission_pass, resolve_policy
from webhook.core.reclaim import plan_reclaim
from webhook.core.resources import Resources
from webhook.core.workload import Phase, Workload

SEED = seed_tree()
STRICT = Fraction(1)
"""``--oversellrate=1``: admit strictly by quota, as the seed configures before its scenarios."""


def pi(name: str, created: float, priority: int = 0, namespace: str = "user-a") -> Workload:
    """The seed's ``pi`` Job: completions = parallelism = 6, each pod requesting 10 CPU and 10Gi."""
    return job(name, namespace=namespace, pods=6, cpu=10, memory="10Gi", priority=priority, created=created)


def admitted(workload: Workload, at: float) -> Workload:
    return Workload(
        key=workload.key,
        quota=workload.quota,
        pod_sets=workload.pod_sets,
        priority=workload.priority,
        created=workload.created,
        phase=Phase.ADMITTED,
        admitted_at=at,
    )


def test_scenario_1_round_the_second_job_waits_at_position_1() -> None:
    first, second = pi("pi-8k5pn", created=1), pi("pi-2xtcj", created=2)
    result = admission_pass(SEED, {}, [first, second], resolve_policy("Round"), STRICT)

    assert result.admitted == (first,)
    assert first.request == Resources.of(cpu=60, memory="60Gi")  # all 6 pods at once
    assert dict(result.positions) == {second.key: 1}
    reason = result.reasons[second.key]
    assert {(blocker.quota, blocker.resource) for blocker in reason.blockers} >= {("root/Department-a", "cpu")}
    assert "quota root/Department-a: cpu request 60 + used 60 > limit 100" in reason.explain()
    assert result.used["department-a"] == Resources.of(cpu=60, memory="60Gi", max_jobs=1)
    assert result.used["root"] == result.used["department-a"]

    # The next pass, with the first job running, keeps the second one waiting where it was.
    again = admission_pass(SEED, result.used, [second], Policy.ROUND, STRICT)
    assert again.admitted == ()
    assert dict(again.positions) == {second.key: 1}


def test_scenario_2_strict_priority_a_priority_2_job_jumps_ahead() -> None:
    first, second = pi("pi-8k5pn", created=1), pi("pi-2xtcj", created=2)
    urgent = pi("pi-6nsc7", created=3, priority=2)
    policy = resolve_policy("Round", strict_priority=True)  # StrictPriority=true turns every queue to Block
    assert policy is Policy.BLOCK
    used = add_usage(SEED, {}, first)

    result = admission_pass(SEED, used, [second, urgent], policy, STRICT)

    assert result.admitted == ()
    assert dict(result.positions) == {urgent.key: 1, second.key: 2}
    assert result.reasons[second.key].blocked_behind == urgent.key
    assert "root/Department-a" in result.reasons[urgent.key].explain()


def scenario_3_department_a() -> list[Workload]:
    """Department-a uses all 100 CPU: the 60-CPU pi job and four 10-CPU jobs of user-b."""
    return [
        admitted(pi("pi-8k5pn", created=1), at=10),
        admitted(job("b-1", namespace="user-b", cpu=10, memory="10Gi", priority=1, created=11), at=20),
        admitted(job("b-2", namespace="user-b", cpu=10, memory="10Gi", created=12), at=21),
        admitted(job("b-3", namespace="user-b", cpu=10, memory="10Gi", created=13), at=22),
        admitted(job("b-4", namespace="user-b", cpu=10, memory="10Gi", priority=1, created=14), at=23),
    ]


def user_c_job(cpu: int = 10) -> Workload:
    return job("pi-c", namespace="user-c", quota="department-b", cpu=cpu, memory=f"{cpu}Gi", priority=3,
               created=30)


def test_scenario_3_department_b_reclaims_its_guaranteed_share() -> None:
    running = scenario_3_department_a()
    used = add_usage(SEED, {}, *running)
    assert used["department-a"]["cpu"] == Resources.of(cpu=100)["cpu"]
    preemptor = user_c_job()

    # It does not fit: the root is full.
    waiting = admission_pass(SEED, used, [preemptor], Policy.BLOCK, STRICT)
    assert waiting.admitted == ()
    assert [blocker.quota for blocker in waiting.reasons[preemptor.key].blockers] == ["root", "root"]

    plan = plan_reclaim(SEED, used, running, preemptor, STRICT)
    assert plan is not None
    # Lowest priority (0: pi-8k5pn, b-2, b-3), most recently admitted (b-3), and nothing more.
    assert [victim.key.name for victim in plan.victims] == ["b-3"]
    assert plan.reason == (
        "root/Department-b reclaims cpu=10, memory=10Gi from root/Department-a by evicting "
        "Job/user-b/b-3 (priority 0)"
    )

    after = remove_usage(SEED, used, *plan.victims)
    assert after["department-a"]["cpu"] >= SEED.node("department-a").min["cpu"]
    assert check_fit(SEED, after, preemptor, STRICT).fits
    assert dict(plan.used_after) == add_usage(SEED, after, preemptor)

    # The evicted job is back in its queue at its place, waiting behind the full root; nothing is lost.
    evicted = job("b-3", namespace="user-b", cpu=10, memory="10Gi", created=13)
    requeued = admission_pass(SEED, plan.used_after, [evicted], Policy.BLOCK, STRICT)
    assert requeued.admitted == ()
    assert dict(requeued.positions) == {evicted.key: 1}


def test_scenario_3_a_bigger_job_takes_the_next_borrowers_but_never_department_a_below_min() -> None:
    running = scenario_3_department_a()
    used = add_usage(SEED, {}, *running)
    plan = plan_reclaim(SEED, used, running, user_c_job(cpu=30), STRICT)
    assert plan is not None
    # Priority-0 jobs newest first: b-3 then b-2; pi-8k5pn (60 CPU) would leave 10 < min 60, so the
    # priority-1 b-4 (admitted last) goes next.
    assert [victim.key.name for victim in plan.victims] == ["b-3", "b-2", "b-4"]
    assert plan.used_after_eviction["department-a"]["cpu"] == Resources.of(cpu=70)["cpu"]
    # Department-b would pass its min with 45 CPU: no reclaim, it waits for idle capacity.
    assert plan_reclaim(SEED, used, running, user_c_job(cpu=45), STRICT) is None
