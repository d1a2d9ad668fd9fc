"""Queue policies, dequeue order, positions and the admission pass (webhook.core.queueing)."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import job, node, res, seed_tree, tree
from webhook.api.names import MAX_JOBS
from webhook.core.decisions import PlainJob
from webhook.core.fit import add_usage
from webhook.core.queue_views import LazyReasons
from webhook.core.queueing import (
    PassResult,
    Policy,
    PolicyLookup,
    QueuePolicyError,
    admission_pass,
    order,
    positions_only,
    resolve_policy,
    sort_in_order,
)
from webhook.core.quota import QuotaTree
from webhook.core.resources import Resources
from webhook.core.workload import Workload

SEED = seed_tree()


def names(workloads: tuple[Workload, ...] | list[Workload]) -> list[str]:
    return [w.key.name for w in workloads]


def by_name(result: PassResult) -> dict[str, int]:
    return {key.name: place for key, place in result.positions.items()}


def run(
    waiting: list[Workload],
    policy: PolicyLookup = Policy.ROUND,
    used: Mapping[str, Resources] | None = None,
    rate: int | Fraction = 1,
    quota_tree: QuotaTree = SEED,
) -> PassResult:
    return admission_pass(quota_tree, used or {}, waiting, policy, rate)


def a(name: str, cpu: int, created: float, priority: int = 0, namespace: str = "user-a") -> Workload:
    return job(name, namespace=namespace, cpu=cpu, created=created, priority=priority)


def b(name: str, cpu: int, created: float, priority: int = 0) -> Workload:
    return job(name, namespace="user-c", quota="department-b", cpu=cpu, created=created, priority=priority)


# Policy -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "policy"),
    [
        ("Round", Policy.ROUND),
        ("Priority", Policy.ROUND),
        ("Block", Policy.BLOCK),
        ("block", Policy.BLOCK),
        (" Round ", Policy.ROUND),
        (None, Policy.ROUND),
        ("", Policy.ROUND),
    ],
)
def test_policy_parse(text: str | None, policy: Policy) -> None:
    assert Policy.parse(text) is policy


@pytest.mark.parametrize("text", ["Fifo", "Blocked", "Strict", "round-robin"])
def test_policy_parse_rejects_unknown_values_naming_them_and_the_choices(text: str) -> None:
    with pytest.raises(QueuePolicyError) as error:
        Policy.parse(text)
    message = str(error.value)
    assert repr(text) in message
    for choice in ("Round", "Priority", "Block"):
        assert choice in message


@pytest.mark.parametrize(
    ("text", "strict", "policy"),
    [("Round", False, Policy.ROUND), ("Round", True, Policy.BLOCK), (None, True, Policy.BLOCK),
     ("Block", False, Policy.BLOCK)],
)
def test_strict_priority_turns_every_queue_to_block(text: str | None, strict: bool, policy: Policy) -> None:
    assert resolve_policy(text, strict_priority=strict) is policy


# order and positions ------------------------------------------------------------------------------------------


def test_order_is_priority_then_creation_then_namespace_and_name() -> None:
    jobs = [
        a("old-low", 1, created=1),
        a("new-high", 1, created=9, priority=2),
        a("old-high", 1, created=5, priority=2),
        a("tie-b", 1, created=3, namespace="user-b"),
        a("tie-a", 1, created=3, namespace="user-b"),
        a("tie-ns", 1, created=3, namespace="user-a"),
        a("negative", 1, created=0, priority=-1),
    ]
    assert names(order(jobs)) == ["old-high", "new-high", "old-low", "tie-ns", "tie-a", "tie-b", "negative"]


def test_positions_only_counts_per_quota_across_namespaces() -> None:
    jobs = [
        a("a1", 1, created=1),
        a("b1", 1, created=2, namespace="user-b"),
        b("c1", 1, created=0),
        a("a0", 1, created=3, priority=1),
    ]
    positions = {key.name: place for key, place in positions_only(jobs).items()}
    assert positions == {"a0": 1, "a1": 2, "b1": 3, "c1": 1}


# admission_pass: policies inside one quota --------------------------------------------------------------------

POLICY_CASES = [
    # (case, policy, jobs (name, cpu, created, priority), admitted, positions)
    (
        "Round skips a job that does not fit",
        Policy.ROUND,
        [("big1", 60, 1, 0), ("big2", 60, 2, 0), ("small", 30, 3, 0)],
        ["big1", "small"],
        {"big2": 1},
    ),
    (
        "Block holds everything behind the first job that does not fit",
        Policy.BLOCK,
        [("big1", 60, 1, 0), ("big2", 60, 2, 0), ("small", 30, 3, 0)],
        ["big1"],
        {"big2": 1, "small": 2},
    ),
    (
        "priority beats creation time",
        Policy.ROUND,
        [("early", 60, 1, 0), ("urgent", 60, 2, 5)],
        ["urgent"],
        {"early": 1},
    ),
    (
        "Round admits every job that fits in queue order",
        Policy.ROUND,
        [("j1", 40, 1, 0), ("j2", 70, 2, 0), ("j3", 40, 3, 0), ("j4", 30, 4, 0), ("j5", 20, 5, 0)],
        ["j1", "j3", "j5"],
        {"j2": 1, "j4": 2},
    ),
    (
        "Block admits the head run that fits",
        Policy.BLOCK,
        [("j3", 70, 3, 0), ("j1", 40, 1, 0), ("j4", 10, 4, 0), ("j2", 40, 2, 0)],
        ["j1", "j2"],
        {"j3": 1, "j4": 2},
    ),
    ("nothing waiting", Policy.ROUND, [], [], {}),
]


@pytest.mark.parametrize(
    ("policy", "specs", "admitted", "positions"),
    [case[1:] for case in POLICY_CASES],
    ids=[case[0] for case in POLICY_CASES],
)
def test_policies_inside_one_quota(
    policy: Policy,
    specs: list[tuple[str, int, float, int]],
    admitted: list[str],
    positions: dict[str, int],
) -> None:
    result = run([a(name, cpu, created, priority) for name, cpu, created, priority in specs], policy)
    assert names(result.admitted) == admitted
    assert by_name(result) == positions


def test_round_waiting_job_reason_names_quota_and_resource() -> None:
    result = run([a("big1", 60, 1), a("big2", 60, 2)])
    reason = result.reasons[a("big2", 60, 2).key]
    assert not reason.fits
    assert {(blocker.quota, blocker.resource) for blocker in reason.blockers} == {
        ("root/Department-a", "cpu"),
        ("root", "cpu"),
    }
    assert "cpu request 60 + used 60 > limit 100" in reason.explain()


def test_block_reason_says_which_job_blocks_and_why() -> None:
    result = run([a("big1", 60, 1), a("big2", 60, 2), a("small", 30, 3)], Policy.BLOCK)
    blocked = result.reasons[a("small", 30, 3).key]
    assert blocked.blocked_behind == a("big2", 60, 2).key
    assert blocked.explain().startswith("blocked behind Job/user-a/big2 (queue policy Block), which waits: ")
    assert "quota root/Department-a: cpu request 60 + used 60" in blocked.explain()
    head = result.reasons[a("big2", 60, 2).key]
    assert head.blocked_behind is None
    assert head.blockers
    assert result.reasons[a("small", 30, 3).key] is blocked  # cached


def test_forgotten_reasons_are_built_again_the_same() -> None:
    # The controller keeps its last pass for the read API and drops what its events read (docs/queueing.md,
    # "Why a job waits, from the controller"): a later read must give the same reasons.
    result = run([a("big1", 60, 1), a("big2", 60, 2), a("small", 30, 3), a("big3", 60, 4)], Policy.BLOCK)
    reasons = result.reasons
    assert isinstance(reasons, LazyReasons)
    before = {key: reason.explain() for key, reason in reasons.items()}
    reasons.forget()
    assert {key: reason.explain() for key, reason in reasons.items()} == before
    assert set(reasons) == set(result.positions)


def test_reasons_cover_exactly_the_waiting_jobs() -> None:
    result = run([a("big1", 60, 1), a("big2", 60, 2), a("small", 30, 3), a("big3", 60, 4)], Policy.BLOCK)
    assert set(result.reasons) == set(result.positions)
    assert len(result.reasons) == 3
    assert set(result.queues) == {"department-a"}
    assert names(result.queues["department-a"]) == ["big2", "small", "big3"]


def test_block_stops_checking_after_the_blocking_job() -> None:
    waiting = [a("big", 200, 0)] + [a(f"j{i}", 1, i + 1) for i in range(50)]
    result = run(waiting, Policy.BLOCK)
    assert result.admitted == ()
    assert result.checks == 1
    assert by_name(result)["j49"] == 51


def test_round_checks_each_failing_job_once() -> None:
    waiting = [a(f"j{i}", 200, i) for i in range(49)] + [a("small", 1, 49)]
    result = run(waiting, Policy.ROUND)
    assert names(result.admitted) == ["small"]
    assert result.checks <= 51  # each big one once, the small one when looked ahead at and at its turn


def test_round_settles_the_rest_of_a_queue_at_once_when_none_of_it_can_fit() -> None:
    waiting = [a(f"j{i}", 200 - i, i) for i in range(50)]
    result = run(waiting, Policy.ROUND)
    assert result.admitted == ()
    assert result.checks == 1  # j0 misses; every later job asks for more CPU than is left
    assert by_name(result)["j49"] == 50
    assert "cpu" in result.reasons[waiting[-1].key].explain()


# admission_pass: across quotas --------------------------------------------------------------------------------

CROSS_CASES = [
    # (case, jobs, admitted)
    ("earlier created wins the shared root", [a("a1", 60, 2), b("b1", 60, 1)], ["b1"]),
    ("the other way round", [a("a1", 60, 1), b("b1", 60, 2)], ["a1"]),
    ("same creation: higher priority first", [a("a1", 60, 1), b("b1", 60, 1, priority=1)], ["b1"]),
    ("both fit together", [a("a1", 50, 2), b("b1", 50, 1)], ["b1", "a1"]),
    (
        "merged by creation time, usage updated between checks",
        [a("a1", 30, 1), a("a2", 30, 3), b("b1", 30, 2), b("b2", 30, 4), a("a3", 10, 5)],
        ["a1", "b1", "a2", "a3"],
    ),
]


@pytest.mark.parametrize(
    ("jobs", "admitted"), [case[1:] for case in CROSS_CASES], ids=[case[0] for case in CROSS_CASES]
)
def test_across_quotas(jobs: list[Workload], admitted: list[str]) -> None:
    assert names(run(jobs).admitted) == admitted


def test_a_job_that_fitted_when_queued_can_lose_its_turn() -> None:
    # a2 fits when it becomes Department-a's candidate, but b1 (created earlier) takes the root first.
    jobs = [a("a1", 50, 1), b("b1", 50, 2), a("a2", 50, 3), a("a3", 0, 4)]
    round_result = run(jobs, Policy.ROUND)
    assert names(round_result.admitted) == ["a1", "b1", "a3"]
    assert by_name(round_result) == {"a2": 1}
    assert [b.quota for b in round_result.reasons[jobs[2].key].blockers] == ["root"]
    block_result = run(jobs, Policy.BLOCK)
    assert names(block_result.admitted) == ["a1", "b1"]
    assert by_name(block_result) == {"a2": 1, "a3": 2}


def test_used_after_the_pass_adds_every_admitted_job() -> None:
    start = {"root": res(cpu=10, max_jobs=1), "department-b": res(cpu=10, max_jobs=1)}
    jobs = [a("a1", 30, 1), b("b1", 20, 2), a("a2", 80, 3)]
    result = run(jobs, used=start)
    assert names(result.admitted) == ["a1", "b1"]
    assert dict(result.used) == add_usage(SEED, start, *result.admitted)
    assert start == {"root": res(cpu=10, max_jobs=1), "department-b": res(cpu=10, max_jobs=1)}


def test_oversell_rate_applies_to_admission() -> None:
    jobs = [a("big1", 60, 1), a("big2", 60, 2), a("big3", 60, 3)]
    assert names(run(jobs, rate=2).admitted) == ["big1", "big2", "big3"]
    assert names(run(jobs, rate=Fraction(3, 2)).admitted) == ["big1", "big2"]


@pytest.mark.parametrize(
    "lookup",
    [
        {"department-a": Policy.BLOCK},
        {"Department-a": Policy.BLOCK},
        lambda quota: Policy.BLOCK if quota == "department-a" else Policy.ROUND,
    ],
    ids=["mapping", "mapping by name", "callable"],
)
def test_policy_per_quota(lookup: PolicyLookup) -> None:
    jobs = [a("a1", 60, 1), a("a2", 60, 2), a("a3", 10, 3), b("b1", 50, 4), b("b2", 5, 5)]
    result = run(jobs, lookup)
    # Department-a blocks behind a2; Department-b (absent from the mapping: Round) skips b1.
    assert names(result.admitted) == ["a1", "b2"]
    assert by_name(result) == {"a2": 1, "a3": 2, "b1": 1}


def test_unknown_quota_waits_with_a_reason_and_a_position() -> None:
    lost = job("lost", namespace="gone", quota="department-z", cpu=1, created=1)
    lost2 = job("lost2", namespace="gone", quota="Department-Z", cpu=1, created=2)
    result = run([lost, lost2, a("a1", 10, 3)])
    assert names(result.admitted) == ["a1"]
    assert by_name(result) == {"lost": 1, "lost2": 2}
    assert "not in the ElasticQuotaTree" in result.reasons[lost.key].explain()


def test_max_jobs_caps_admissions_per_quota() -> None:
    total = res(cpu=100, max_jobs=100)
    capped = tree(
        node(
            "root",
            min=total,
            max=total,
            children=(
                node("team", max=res(max_jobs=2), namespaces=("t",)),
                node("free", namespaces=("f",)),
            ),
        )
    )
    team = [job(f"t{i}", namespace="t", quota="team", cpu=1, created=i) for i in range(5)]
    free = [job(f"f{i}", namespace="f", quota="free", cpu=1, created=i + 0.5) for i in range(3)]
    result = admission_pass(capped, {"team": res(max_jobs=1), "root": res(max_jobs=1)}, team + free,
                            Policy.ROUND, 1)
    assert names(result.admitted) == ["t0", "f0", "f1", "f2"]
    assert by_name(result) == {"t1": 1, "t2": 2, "t3": 3, "t4": 4}
    # At the seed's default rate of 2 the cap is 4 jobs, as ACK's kube-queue counts it.
    oversold = admission_pass(capped, {"team": res(max_jobs=1), "root": res(max_jobs=1)}, team + free,
                              Policy.ROUND, 2)
    assert sorted(names(oversold.admitted)) == ["f0", "f1", "f2", "t0", "t1", "t2"]
    assert by_name(oversold) == {"t3": 1, "t4": 2}
    reason = result.reasons[team[1].key]
    assert [(blocker.quota, blocker.resource) for blocker in reason.blockers] == [("root/team", MAX_JOBS)]
    # Once the cap is reached no later job of the quota is checked again.
    assert result.checks <= len(team) + len(free) + 2


def test_zero_requests_never_block_even_where_usage_is_over_the_limit() -> None:
    over = {"root": res(cpu=150), "department-a": res(cpu=150)}
    memory_only = job("mem", cpu=0, memory="1Gi", created=2)
    cpu_job = a("cpu", 1, 1)
    result = run([cpu_job, memory_only, a("cpu2", 1, 3)], used=over)
    assert names(result.admitted) == ["mem"]
    assert by_name(result) == {"cpu": 1, "cpu2": 2}


def test_many_quotas_settle_failing_jobs_without_rechecking() -> None:
    leaves = tuple(node(f"q{i}", max=res(cpu=10), namespaces=(f"ns{i}",)) for i in range(20))
    total = res(cpu=1000)
    many = tree(node("root", min=total, max=total, children=leaves))
    waiting = [
        job(f"j{i}-{k}", namespace=f"ns{i}", quota=f"q{i}", cpu=4, created=k * 20 + i)
        for i in range(20)
        for k in range(30)
    ]
    result = admission_pass(many, {}, waiting, Policy.ROUND, 1)
    assert len(result.admitted) == 40  # two 4-CPU jobs per 10-CPU quota
    assert result.checks <= len(waiting) + 20
    for i in range(20):
        still = [w for w in waiting if w.quota == f"q{i}" and w.key in result.positions]
        assert sorted(result.positions[w.key] for w in still) == list(range(1, 29))


def test_a_quotas_candidates_take_turns_in_queue_order() -> None:
    # Department-a's queue: a0 and a1 (high priority, never fit) then a2 (created first of all).
    # a2's turn comes after a1's (created 5), so b1 (created 3) takes the shared root first.
    jobs = [
        a("a0", 200, 0, priority=9),
        a("a1", 200, 5, priority=5),
        a("a2", 60, 1),
        b("b1", 60, 3),
    ]
    result = run(jobs)
    assert names(result.admitted) == ["b1"]
    assert by_name(result) == {"a0": 1, "a1": 2, "a2": 3}


@settings(max_examples=300, deadline=None, database=None)
@given(st.lists(st.tuples(st.integers(-2, 2), st.sampled_from([0.0, 1.0, 1.5, 2]), st.sampled_from(["a", "b"]),
                          st.sampled_from(["x", "y", "z"]), st.sampled_from(["Job", "RayJob"])), max_size=40))
def test_sort_in_order_is_the_stable_sort_on_the_order_key(
    fields: list[tuple[int, float, str, str, str]],
) -> None:
    """One sort per field must give the order (and, among equal keys, the input order) of one stable sort on
    ``order_key``, with and without equal creation times, for workloads and for jobs carrying them."""
    workloads = [job(name, namespace=namespace, priority=priority, created=created, kind=kind)
                 for priority, created, namespace, name, kind in fields]
    expected = sorted(workloads, key=lambda workload: workload.order_key)
    mine = list(workloads)
    sort_in_order(mine)
    assert [id(workload) for workload in mine] == [id(workload) for workload in expected]
    jobs = [PlainJob(workload) for workload in workloads]
    sort_in_order(jobs, "workload.")
    assert [id(item.workload) for item in jobs] == [id(workload) for workload in expected]


def test_a_job_listed_twice_under_the_blockers_key_does_not_wait_behind_itself() -> None:
    """A snapshot may list one job twice (a stale copy beside the fresh one); the reasons must not recurse."""
    head = a("head", cpu=500, created=1)
    copy = a("head", cpu=500, created=1)  # the same key, another object
    behind = a("behind", cpu=1, created=2)
    assert copy.key == head.key and copy is not head
    reasons = LazyReasons(SEED, {}, Fraction(1), [([head, copy, behind], head)])
    assert not reasons[head.key].fits
    assert reasons[head.key].blocked_behind is None
    assert reasons[behind.key].blocked_behind == head.key


def test_jobs_of_one_shape_get_the_reason_each_would_get_alone() -> None:
    """Reasons are kept per quota and request: a job reads the one a job of its shape got, never another's."""
    used = {"root": Resources.of(cpu=99), "department-a": Resources.of(cpu=60)}
    jobs = [a("small-1", cpu=2, created=1), a("big", cpu=50, created=2), a("small-2", cpu=2, created=3),
            b("other-quota", cpu=2, created=4)]
    lost = job("lost", namespace="gone", quota="no-such-quota", cpu=2, created=5)
    lost_too = job("lost-too", namespace="gone", quota="no-such-quota", cpu=2, created=6)
    reasons = LazyReasons(SEED, used, Fraction(1), [([*jobs, lost, lost_too], None)])
    alone = {workload.key: LazyReasons(SEED, used, Fraction(1), [([workload], None)])[workload.key]
             for workload in [*jobs, lost, lost_too]}
    assert {key: reasons[key] for key in alone} == alone
    assert reasons[jobs[0].key] is reasons[jobs[2].key]  # one shape, one answer
    assert reasons[jobs[0].key] != reasons[jobs[1].key]
    assert "lost-too" in (reasons[lost_too.key].note or "") and "lost-too" not in (reasons[lost.key].note or "")
