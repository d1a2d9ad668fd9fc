"""Admission fit, the guaranteed-min check, "why not" messages and usage arithmetic (webhook.core.fit)."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

import pytest

from tests.builders import job, node, res, seed_tree, tree
from webhook.api.names import MAX_JOBS
from webhook.core.fit import (
    FIT,
    Blocker,
    BlockerKind,
    FitResult,
    add_usage,
    check_fit,
    check_min,
    competing_chain,
    limits_of,
    quota_chain,
    remove_usage,
    within_min,
)
from webhook.core.quantity import NANO
from webhook.core.quota import QuotaTree
from webhook.core.rate import format_rate, validate_rate
from webhook.core.resources import Resources
from webhook.core.workload import WorkloadKey

SEED = seed_tree()


def usage(**per_node: Resources) -> dict[str, Resources]:
    """``usage(root=res(cpu=60), department_a=res(cpu=60))``: node keys with ``_`` for ``-``."""
    return {key.replace("_", "-"): value for key, value in per_node.items()}


def dept_a_using(amount: Resources) -> dict[str, Resources]:
    return usage(root=amount, department_a=amount)


def capped_tree(jobs: int = 1) -> QuotaTree:
    """Root with a job cap of 10 and one leaf capped at ``jobs`` admitted jobs."""
    total = res(cpu=100, max_jobs=10)
    return tree(
        node(
            "root",
            min=total,
            max=total,
            children=(node("team", max=res(cpu=100, max_jobs=jobs), namespaces=("user-a",)),),
        )
    )


# check_fit ----------------------------------------------------------------------------------------------------

FIT_CASES = [
    # (case, used, job kwargs, rate, expected blockers as (quota, resource))
    ("empty cluster, 6 x 10 CPU", {}, {"pods": 6, "cpu": 10, "memory": "10Gi"}, 1, []),
    (
        "second 60 CPU job over department and root",
        dept_a_using(res(cpu=60, memory="60Gi")),
        {"pods": 6, "cpu": 10, "memory": "10Gi"},
        1,
        [
            ("root/Department-a", "cpu"),
            ("root/Department-a", "memory"),
            ("root", "cpu"),
            ("root", "memory"),
        ],
    ),
    (
        "oversell 2 admits the second job",
        dept_a_using(res(cpu=60, memory="60Gi")),
        {"pods": 6, "cpu": 10, "memory": "10Gi"},
        2,
        [],
    ),
    ("exactly at the limit fits", dept_a_using(res(cpu=40)), {"pods": 6, "cpu": 10}, 1, []),
    (
        "one nano-unit over the limit does not fit",
        dept_a_using(res(cpu=40)),
        {"pods": 6, "cpu": "10000000001n"},
        1,
        [("root/Department-a", "cpu"), ("root", "cpu")],
    ),
    (
        "only the root is full (borrowed by the other department)",
        usage(root=res(cpu=95), department_b=res(cpu=95)),
        {"cpu": 10},
        1,
        [("root", "cpu")],
    ),
    (
        "a resource absent from max is unlimited",
        {},
        {"cpu": 1, "extra": {"ephemeral-storage": "1Ti"}},
        1,
        [],
    ),
    (
        "a resource the job does not request never blocks, even over the limit",
        dept_a_using(res(gpu=5)),
        {"cpu": 1},
        1,
        [],
    ),
    (
        "GPU asked beyond the whole tree",
        {},
        {"cpu": 1, "gpu": 5},
        1,
        [("root/Department-a", "nvidia.com/gpu"), ("root", "nvidia.com/gpu")],
    ),
    ("rate 3/2 allows 150 CPU", dept_a_using(res(cpu=140)), {"cpu": 10}, Fraction(3, 2), []),
    (
        "rate 3/2 refuses 151 CPU",
        dept_a_using(res(cpu=141)),
        {"cpu": 10},
        Fraction(3, 2),
        [("root/Department-a", "cpu"), ("root", "cpu")],
    ),
]


@pytest.mark.parametrize(
    ("used", "spec", "rate", "expected"),
    [case[1:] for case in FIT_CASES],
    ids=[case[0] for case in FIT_CASES],
)
def test_check_fit(
    used: Mapping[str, Resources], spec: dict[str, object], rate: int | Fraction, expected: list[tuple[str, str]]
) -> None:
    workload = job("j", **spec)  # type: ignore[arg-type]
    result = check_fit(SEED, used, workload, rate)
    assert result.fits is (not expected)
    assert [(b.quota, b.resource) for b in result.blockers] == expected


def test_blocker_amounts_are_nano_units() -> None:
    result = check_fit(SEED, dept_a_using(res(cpu=60)), job("j", pods=6, cpu=10), 1)
    assert result.blockers[0] == Blocker(
        quota="root/Department-a",
        resource="cpu",
        request=60 * NANO,
        used=60 * NANO,
        limit=100 * NANO,
        kind=BlockerKind.MAX,
        max=100 * NANO,
        oversell_rate=Fraction(1),
    )


@pytest.mark.parametrize(
    ("jobs_used", "rate", "fits", "limit"),
    [(0, 1, True, 1), (1, 1, False, 1), (1, 2, True, 2), (2, 2, False, 2), (1, Fraction(3, 2), False, 1),
     (14, 15, True, 15), (15, 15, False, 15)],
    ids=["under the cap", "at the cap", "oversold like every limit", "at the oversold cap", "whole jobs only",
         "far oversold", "at the far oversold cap"],
)
def test_max_jobs_counts_jobs_and_is_oversold_in_whole_jobs(
    jobs_used: int, rate: int | Fraction, fits: bool, limit: int
) -> None:
    # ACK's kube-queue scales the job cap by the oversell rate like every other limit: floor(max-jobs × rate).
    capped = capped_tree(jobs=1)
    used = {"root": res(cpu=1, max_jobs=jobs_used), "team": res(cpu=1, max_jobs=jobs_used)}
    result = check_fit(capped, used, job("j", quota="team", cpu=1), rate)
    assert result.fits is fits
    if not fits:
        assert [(b.quota, b.resource, b.limit) for b in result.blockers] == [("root/team", MAX_JOBS, limit * NANO)]


def test_unknown_quota_does_not_fit_and_says_why() -> None:
    result = check_fit(SEED, {}, job("j", quota="department-z"), 1)
    assert not result.fits
    assert result.blockers == ()
    assert "'department-z'" in result.explain()
    assert "not in the ElasticQuotaTree" in result.explain()


def test_quota_names_match_ignoring_case() -> None:
    result = check_fit(SEED, dept_a_using(res(cpu=100)), job("j", quota="DEPARTMENT-A"), 1)
    assert [b.quota for b in result.blockers] == ["root/Department-a", "root"]


def test_input_usage_is_not_modified() -> None:
    used = dept_a_using(res(cpu=60))
    before = dict(used)
    check_fit(SEED, used, job("j", pods=6, cpu=10), 1)
    add_usage(SEED, used, job("j", pods=6, cpu=10))
    assert used == before


# explain ------------------------------------------------------------------------------------------------------

EXPLAIN_CASES = [
    (
        "cpu",
        Blocker("root/Department-a", "cpu", 60 * NANO, 60 * NANO, 100 * NANO, max=100 * NANO),
        "quota root/Department-a: cpu request 60 + used 60 > limit 100 (max 100 × oversell 1)",
    ),
    (
        "memory uses binary suffixes",
        Blocker(
            "root",
            "memory",
            60 * 2**30 * NANO,
            60 * 2**30 * NANO,
            100 * 2**30 * NANO,
            max=100 * 2**30 * NANO,
        ),
        "quota root: memory request 60Gi + used 60Gi > limit 100Gi (max 100Gi × oversell 1)",
    ),
    (
        "oversold limit",
        Blocker(
            "root", "cpu", 500 * 10**6, 149 * NANO, 150 * NANO, max=100 * NANO, oversell_rate=Fraction(3, 2)
        ),
        "quota root: cpu request 500m + used 149 > limit 150 (max 100 × oversell 1.5)",
    ),
    (
        "max-jobs",
        Blocker("root/team", MAX_JOBS, NANO, 3 * NANO, 3 * NANO, max=3 * NANO, oversell_rate=Fraction(2)),
        "quota root/team: kube-queue/max-jobs request 1 + used 3 > limit 3 (a count of admitted jobs: max 3 × "
        "oversell 2, whole jobs)",
    ),
    (
        "a request that can never fit says so",
        Blocker("root", "nvidia.com/gpu", 5 * NANO, 0, 4 * NANO, max=4 * NANO),
        "quota root: nvidia.com/gpu request 5 + used 0 > limit 4 (max 4 × oversell 1); the request alone "
        "is over the limit, so it can never be admitted under this tree",
    ),
    (
        "guaranteed min",
        Blocker("root/Department-b", "cpu", 10 * NANO, 35 * NANO, 40 * NANO, kind=BlockerKind.MIN),
        "quota root/Department-b: cpu request 10 + used 35 > limit 40 (guaranteed min)",
    ),
]


@pytest.mark.parametrize(
    ("blocker", "text"), [case[1:] for case in EXPLAIN_CASES], ids=[case[0] for case in EXPLAIN_CASES]
)
def test_blocker_explain(blocker: Blocker, text: str) -> None:
    assert blocker.explain() == text


def test_fit_result_explain_joins_every_blocker_leaf_first() -> None:
    result = check_fit(SEED, dept_a_using(res(cpu=60)), job("j", pods=6, cpu=10), 1)
    assert result.explain() == (
        "quota root/Department-a: cpu request 60 + used 60 > limit 100 (max 100 × oversell 1); "
        "quota root: cpu request 60 + used 60 > limit 100 (max 100 × oversell 1)"
    )


@pytest.mark.parametrize(
    ("result", "text"),
    [
        (FIT, "fits"),
        (FitResult(fits=False), "does not fit"),
        (
            FitResult(fits=False, blocked_behind=WorkloadKey("Job", "user-a", "a"), note="blocked behind a"),
            "blocked behind a",
        ),
    ],
    ids=["fits", "bare", "note"],
)
def test_fit_result_explain_without_blockers(result: FitResult, text: str) -> None:
    assert result.explain() == text


# rates and limits ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rate", "text"),
    [(Fraction(1), "1"), (Fraction(2), "2"), (Fraction(3, 2), "1.5"), (Fraction(5, 4), "1.25"),
     (Fraction(21, 20), "1.05"), (Fraction(1, 3), "1/3"), (Fraction(201, 100), "2.01")],
)
def test_format_rate(rate: Fraction, text: str) -> None:
    assert format_rate(rate) == text


@pytest.mark.parametrize("bad", [0, -1, Fraction(-1, 2), True, 1.5, "2"])
def test_validate_rate_refuses_non_positive_or_inexact(bad: object) -> None:
    with pytest.raises(ValueError, match="oversell rate"):
        validate_rate(bad)  # type: ignore[arg-type]


def test_check_fit_validates_the_rate() -> None:
    with pytest.raises(ValueError, match="positive"):
        check_fit(SEED, {}, job("j"), 0)


def test_limits_round_down_and_max_jobs_to_whole_jobs() -> None:
    leaf = node("leaf", max=res(cpu=1, max_jobs=3))
    assert limits_of(leaf, Fraction(1, 3)) == {"cpu": 333_333_333, MAX_JOBS: NANO}
    assert limits_of(leaf, Fraction(2)) == {"cpu": 2 * NANO, MAX_JOBS: 6 * NANO}
    assert limits_of(leaf, Fraction(3, 2)) == {"cpu": 1_500_000_000, MAX_JOBS: 4 * NANO}  # 4.5 jobs: 4


def test_chains() -> None:
    chain = quota_chain(SEED, "Department-A")
    assert chain is not None
    assert [n.full_name for n in chain] == ["root/Department-a", "root"]
    assert [n.full_name for n in competing_chain(chain)] == ["root/Department-a"]
    assert quota_chain(SEED, "nowhere") is None
    root_only = quota_chain(SEED, "root")
    assert root_only is not None
    assert competing_chain(root_only) == root_only


# within_min / check_min ---------------------------------------------------------------------------------------


def deep_tree() -> QuotaTree:
    """root (100 CPU, 100Gi) > Dept (min 60 CPU, memory not named) > Team-x (min 30, max 60 CPU and 2 GPUs)
    and Team-y (min 30); Other (min 40)."""
    total = res(cpu=100, memory="100Gi")
    return tree(
        node(
            "root",
            min=total,
            max=total,
            children=(
                node(
                    "Dept",
                    min=res(cpu=60),
                    max=res(cpu=100),
                    children=(
                        node("Team-x", min=res(cpu=30), max=res(cpu=60, gpu=2), namespaces=("x",)),
                        node("Team-y", min=res(cpu=30), max=total, namespaces=("y",)),
                    ),
                ),
                node("Other", min=res(cpu=40), max=total, namespaces=("o",)),
            ),
        )
    )


DEEP = deep_tree()

MIN_CASES = [
    # (case, tree, used, job kwargs, within, blockers as (quota, resource))
    ("Department-b idle, 10 CPU", SEED, {}, {"quota": "department-b", "cpu": 10, "memory": "10Gi"}, True, []),
    (
        "Department-b exactly reaching min",
        SEED,
        usage(department_b=res(cpu=30, memory="30Gi")),
        {"quota": "department-b", "cpu": 10, "memory": "10Gi"},
        True,
        [],
    ),
    (
        "Department-b beyond min",
        SEED,
        usage(department_b=res(cpu=35)),
        {"quota": "department-b", "cpu": 10},
        False,
        [("root/Department-b", "cpu")],
    ),
    (
        "a full root does not matter (root is not competed for)",
        SEED,
        usage(root=res(cpu=100), department_a=res(cpu=100)),
        {"quota": "department-b", "cpu": 10},
        True,
        [],
    ),
    (
        "a resource only in max is guaranteed zero",
        DEEP,
        {},
        {"quota": "team-x", "cpu": 1, "gpu": 1},
        False,
        [("root/Dept/Team-x", "nvidia.com/gpu")],
    ),
    (
        "a resource the node names nowhere is not governed",
        DEEP,
        {},
        {"quota": "team-x", "cpu": 1, "memory": "1Gi"},
        True,
        [],
    ),
    (
        "every level below the root counts",
        DEEP,
        usage(dept=res(cpu=55), team_y=res(cpu=55)),
        {"quota": "team-x", "cpu": 10},
        False,
        [("root/Dept", "cpu")],
    ),
    ("unknown quota is not within min", SEED, {}, {"quota": "nowhere"}, False, []),
]


@pytest.mark.parametrize(
    ("quota_tree", "used", "spec", "within", "expected"),
    [case[1:] for case in MIN_CASES],
    ids=[case[0] for case in MIN_CASES],
)
def test_within_min(
    quota_tree: QuotaTree,
    used: Mapping[str, Resources],
    spec: dict[str, object],
    within: bool,
    expected: list[tuple[str, str]],
) -> None:
    workload = job("j", **spec)  # type: ignore[arg-type]
    assert within_min(quota_tree, used, workload) is within
    result = check_min(quota_tree, used, workload)
    assert [(b.quota, b.resource) for b in result.blockers] == expected
    assert all(b.kind == BlockerKind.MIN for b in result.blockers)


def test_within_min_ignores_max_jobs() -> None:
    capped = capped_tree(jobs=1)
    assert within_min(capped, {"team": res(max_jobs=1)}, job("j", quota="team", cpu=None))


# add_usage / remove_usage -------------------------------------------------------------------------------------


def test_add_usage_counts_request_and_one_job_along_the_chain() -> None:
    after = add_usage(SEED, {}, job("j", pods=6, cpu=10, memory="10Gi"))
    expected = res(cpu=60, memory="60Gi", max_jobs=1)
    assert after == {"department-a": expected, "root": expected}


def test_add_then_remove_is_identity_in_amounts() -> None:
    start = dept_a_using(res(cpu=30))
    first, second = job("a", cpu=10), job("b", quota="department-b", namespace="user-c", cpu=5)
    both = add_usage(SEED, start, first, second)
    assert both["root"] == res(cpu=45, max_jobs=2)
    assert both["department-b"] == res(cpu=5, max_jobs=1)
    back = remove_usage(SEED, both, first, second)
    assert back["root"].without_zeros() == res(cpu=30)
    assert back["department-b"].without_zeros() == res()


def test_remove_usage_does_not_hide_double_removal() -> None:
    once = remove_usage(SEED, {}, job("a", cpu=10))
    assert once["root"]["cpu"] == -10 * NANO


def test_usage_of_unknown_quota_is_an_error() -> None:
    with pytest.raises(KeyError, match="nowhere"):
        add_usage(SEED, {}, job("a", quota="nowhere"))
