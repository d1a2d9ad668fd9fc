"""A minimum run time before reclaim (docs/fair-sharing.md, docs/reclaim.md): a quota's
``kube-queue.x-k8s.io/reclaim-after`` keeps its admitted jobs from reclaim until they have run that long; other
victims go first; an owner that needs young jobs waits at most until they reach it, and the pass says when."""

from __future__ import annotations

from fractions import Fraction

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.builders import job, node, res, tree
from tests.strategies import examples
from webhook.api.names import RECLAIM_AFTER_ATTRIBUTE
from webhook.core.decide import decide, leaf_policies
from webhook.core.decisions import Decisions, PlainJob
from webhook.core.pass_snapshot import minimum_run_times
from webhook.core.quota import QuotaTree
from webhook.core.workload import Phase

NOW = 10_000.0


def _tree(grace: str | None, on_parent: bool = False) -> QuotaTree:
    attributes = {RECLAIM_AFTER_ATTRIBUTE: grace} if grace else {}
    borrower = node("Department-a", min=res(cpu=60), max=res(cpu=100), namespaces=("user-a",),
                    attributes=None if on_parent else attributes)
    owner = node("Department-b", min=res(cpu=40), max=res(cpu=100), namespaces=("user-c",))
    return tree(node("root", min=res(cpu=100), max=res(cpu=100), children=(borrower, owner),
                     attributes=attributes if on_parent else None))


def _running(ages: list[float]) -> list[PlainJob]:
    return [PlainJob(job(f"a{index}", "user-a", "Department-a", cpu=10, phase=Phase.ADMITTED,
                         admitted_at=NOW - age, created=NOW - age - 1)) for index, age in enumerate(ages)]


def _decide(quota_tree: QuotaTree, jobs: list[PlainJob], now: float = NOW) -> Decisions[PlainJob]:
    return decide(quota_tree, jobs, leaf_policies(quota_tree, {}, strict=False), oversell_rate=Fraction(1), now=now)


def _carol(cpu: int = 10) -> PlainJob:
    return PlainJob(job("carol", "user-c", "Department-b", cpu=cpu, created=NOW))


def test_young_borrowers_are_kept_and_the_owner_waits_until_the_first_may_go() -> None:
    jobs = [*_running([60.0] * 10), _carol()]
    decisions = _decide(_tree("10m"), jobs)
    assert decisions.reclaims == () and decisions.admissions == ()
    assert decisions.reclaimable_at == NOW - 60 + 600
    later = _decide(_tree("10m"), jobs, now=NOW - 60 + 600)
    (plan,) = later.reclaims
    assert plan.preemptor.workload.key.name == "carol" and len(plan.victims) == 1


def test_old_borrowers_go_first_and_young_ones_stay() -> None:
    # a9 is the most recently admitted, so without the rule it would go; it is young, a0 (old) goes instead.
    jobs = [*_running([3600.0, *[900.0 - index for index in range(8)], 30.0]), _carol()]
    (plan,) = _decide(_tree("10m"), jobs).reclaims
    assert [victim.workload.key.name for victim in plan.victims] == ["a8"]
    (plain,) = _decide(_tree(None), jobs).reclaims
    assert [victim.workload.key.name for victim in plain.victims] == ["a9"]


def test_an_ancestor_sets_it_for_its_leaves() -> None:
    assert minimum_run_times(_tree("90s", on_parent=True)) == {"department-a": 90, "department-b": 90}
    assert minimum_run_times(_tree(None)) == {}


@settings(max_examples=examples(200), deadline=None, database=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(st.lists(st.floats(0.0, 1200.0), min_size=5, max_size=10), st.integers(5, 40), st.integers(60, 900))
def test_nothing_young_is_taken_and_the_owner_waits_at_most_until_the_youngest_it_needs_is_old(
    ages: list[float], ask: int, grace: int
) -> None:
    jobs = [*_running(ages), _carol(ask)]
    protected, plain_tree = _tree(f"{grace}s"), _tree(None)
    now_plan = _decide(protected, jobs)
    for plan in now_plan.reclaims:
        for victim in plan.victims:
            assert NOW - (victim.workload.admitted_at or 0.0) >= grace, "a young job was taken"
    plain = _decide(plain_tree, jobs)
    if not plain.reclaims:
        return
    # The bound: once every borrower has run its minimum time, the owner gets what the plain rule gives it.
    all_old = max(NOW, *(NOW - age + grace for age in ages))
    later = _decide(protected, jobs, now=all_old)
    assert [p.preemptor.workload.key for p in later.reclaims] == [p.preemptor.workload.key for p in plain.reclaims]
    if not now_plan.reclaims:
        assert now_plan.reclaimable_at is not None and now_plan.reclaimable_at <= all_old
