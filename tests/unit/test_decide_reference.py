"""The decision pass decides exactly as it did before it was made to scale (issue 21 part 4).

``tests/reference_core`` keeps the pass as it was at commit 8ee2269. On random snapshots (two- and three-level
trees with borrowing, job caps and own-quota preemption; running jobs beyond and below ``min``; Round, Block and
strict priority; oversell rates 1 and 3/2; small reclaim budgets and tries) both passes must admit, reclaim,
evict, withhold, place and word every job the same. A pass that skipped a job the old one admits, or stopped
a queue early, fails here.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.builders import job
from tests.reference_core.decide import decide as reference_decide
from tests.strategies import quota_trees
from webhook.core.decide import decide
from webhook.core.decisions import Decisions, PlainJob
from webhook.core.queueing import Policy
from webhook.core.quota import QuotaTree
from webhook.core.startup import BackoffState, backoff_state
from webhook.core.workload import Phase, Workload

SETTINGS = settings(
    max_examples=300,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@st.composite
def snapshots(draw: st.DrawFn) -> tuple[QuotaTree, list[PlainJob], dict[str, Policy]]:
    """A tree, its jobs and each leaf's policy. Leaves mostly run (borrowers), mostly wait (owed their min,
    with jobs that fit in it) or both, so that reclaim, withholding and late admissions have work."""
    quota_tree = draw(quota_trees())
    leaves = quota_tree.leaves()
    roles = {leaf.key: draw(st.sampled_from(["run", "wait", "both"])) for leaf in leaves}
    whole = 10**9
    jobs = []
    for index in range(draw(st.integers(0, 30))):
        leaf = draw(st.sampled_from(leaves))
        role = roles[leaf.key]
        running = role != "wait" and draw(st.integers(0, 3 if role == "run" else 1)) != 0
        sizes = quota_tree.root.max if running or role == "both" else leaf.min
        share = 3 if sizes is quota_tree.root.max else 1
        cpu_cap = sizes.get_or_zero("cpu") // whole // share + 1
        mem_cap = sizes.get_or_zero("memory") // whole // share + 1
        workload = job(f"j{index}", namespace=leaf.namespaces[0], quota=leaf.key, pods=draw(st.integers(1, 2)),
                       cpu=draw(st.integers(0, cpu_cap)), memory=draw(st.integers(0, mem_cap)),
                       priority=draw(st.integers(0, 3)), created=float(draw(st.integers(0, 8))))
        if running:
            admitted_at = draw(st.none() | st.floats(0, 20, allow_nan=False))
            workload = dataclasses.replace(workload, phase=Phase.ADMITTED, admitted_at=admitted_at)
        jobs.append(PlainJob(workload, evictable=index % 7 != 3))
    strict = draw(st.booleans())
    policies = {leaf.key: Policy.BLOCK if strict else draw(st.sampled_from(Policy)) for leaf in leaves}
    return quota_tree, jobs, policies


def _keys(jobs: tuple[PlainJob, ...]) -> list[str]:
    return [str(job.workload.key) for job in jobs]


def _summary(decisions: Decisions[PlainJob]) -> dict[str, object]:
    """Everything a pass decides, by job key (the jobs are the same objects or copies held again)."""
    return {
        "admissions": _keys(decisions.admissions),
        "reclaims": [
            (str(step.preemptor.workload.key), _keys(step.victims), step.reason) for step in decisions.reclaims
        ],
        "late": _keys(decisions.late_admissions),
        "positions": dict(decisions.positions),
        "reasons": {key: reason.explain() for key, reason in decisions.reasons.items()},
        "waiting": [(str(job.workload.key), job.workload.phase) for job in decisions.waiting],
        "stale": _keys(decisions.stale_records),
        "ledger": decisions.ledger.snapshot(),
        "policies": dict(decisions.policies),
    }


@SETTINGS
@given(snapshots(), st.sampled_from([Fraction(1), Fraction(3, 2)]), st.sampled_from([1, 2, 16]),
       st.sampled_from([None, 3, 50_000]))
def test_the_pass_decides_as_the_pass_before_it(
    snapshot: tuple[QuotaTree, list[PlainJob], dict[str, Policy]], rate: Fraction, tries: int, budget: int | None
) -> None:
    quota_tree, jobs, policies = snapshot
    new = decide(quota_tree, jobs, policies, oversell_rate=rate, reclaim_tries_per_quota=tries, reclaim_budget=budget)
    old = reference_decide(quota_tree, jobs, policies, oversell_rate=rate, reclaim_tries_per_quota=tries,
                           reclaim_budget=budget)
    assert _summary(new) == _summary(old)


def _moves(decisions: Decisions[PlainJob]) -> dict[str, object]:
    return {
        "admissions": _keys(decisions.admissions),
        "reclaims": [(str(step.preemptor.workload.key), _keys(step.victims), [str(pod.key) for pod in step.pods])
                     for step in decisions.reclaims],
        "late": _keys(decisions.late_admissions),
    }


@SETTINGS
@given(snapshots(), st.sampled_from([Fraction(1), Fraction(3, 2)]), st.sampled_from([1, 16]),
       st.sampled_from([None, 3]))
def test_a_pass_without_its_report_makes_the_same_moves(
    snapshot: tuple[QuotaTree, list[PlainJob], dict[str, Policy]], rate: Fraction, tries: int, budget: int | None
) -> None:
    """The start estimate's replay asks for the moves only (``report=False``): they are the pass's own."""
    quota_tree, jobs, policies = snapshot
    full = decide(quota_tree, jobs, policies, oversell_rate=rate, reclaim_tries_per_quota=tries, reclaim_budget=budget)
    moves = decide(quota_tree, jobs, policies, oversell_rate=rate, reclaim_tries_per_quota=tries,
                   reclaim_budget=budget, report=False)
    assert _moves(moves) == _moves(full)
    assert all(step.reason == "" for step in moves.reclaims)
    assert not moves.waiting and not moves.positions


def test_the_snapshots_reach_reclaim_block_and_caps() -> None:
    """Guard against a vacuous comparison: the generated snapshots admit, reclaim, evict, withhold or admit
    late, and hold jobs behind a Block head."""
    seen: dict[str, int] = {"admitted": 0, "reclaims": 0, "evicted": 0, "withheld or late": 0, "blocked": 0}

    @settings(max_examples=300, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(snapshots())
    def count(snapshot: tuple[QuotaTree, list[PlainJob], dict[str, Policy]]) -> None:
        quota_tree, jobs, policies = snapshot
        decisions = decide(quota_tree, jobs, policies, oversell_rate=Fraction(1))
        seen["admitted"] += len(decisions.admissions)
        seen["reclaims"] += len(decisions.reclaims)
        seen["evicted"] += sum(len(step.victims) for step in decisions.reclaims)
        seen["withheld or late"] += sum(1 for step in decisions.reclaims if not step.victims)
        seen["withheld or late"] += len(decisions.late_admissions)
        seen["blocked"] += sum(1 for reason in decisions.reasons.values() if reason.blocked_behind is not None)

    count()
    assert all(seen.values()), seen


@dataclasses.dataclass(frozen=True, slots=True)
class _Job:
    """A job with what :class:`PlainJob` never has: a stale record, a missing PriorityClass."""

    workload: Workload
    evictable: bool = True
    record: object | None = None
    backoff: None = None
    missing_class: str | None = None

    def backoff_state(self, now: float) -> BackoffState:
        return backoff_state(None, "", now)

    def with_workload(self, workload: Workload) -> _Job:
        return dataclasses.replace(self, workload=workload)


@st.composite
def untidy_snapshots(draw: st.DrawFn) -> tuple[QuotaTree, list[_Job], dict[str, Policy], frozenset[str]]:
    """:func:`snapshots` with what the pass must take as it comes: quota names in other cases, jobs of quotas
    not in the tree (waiting and running), a running job listed twice, held jobs with stale records or a
    missing PriorityClass, and a namespace being deleted (keys stay unique among waiting jobs, as the pass
    asks)."""
    quota_tree, plain, policies = draw(snapshots())
    jobs = []
    for index, plain_job in enumerate(plain):
        workload = plain_job.workload
        if draw(st.booleans()):
            workload = dataclasses.replace(workload, quota=workload.quota.upper())
        jobs.append(_Job(workload, plain_job.evictable, record=object() if index % 5 == 1 else None,
                         missing_class="gone" if index % 9 == 4 else None))
    extra = draw(st.sets(st.sampled_from(["unknown", "twice"])))
    if "unknown" in extra:
        jobs.insert(0, _Job(job("stray-run", quota="no-such-quota", phase=Phase.ADMITTED, admitted_at=1.0)))
        jobs.append(_Job(job("stray-wait", quota="No-Such-Quota")))
    running = [item for item in jobs if item.workload.phase is Phase.ADMITTED and item.workload.quota.lower()
               in quota_tree.nodes]
    if running and "twice" in extra:
        jobs.append(_Job(dataclasses.replace(running[0].workload, admitted_at=30.0)))
    namespaces = sorted({item.workload.key.namespace for item in jobs})
    closing = frozenset(draw(st.lists(st.sampled_from(namespaces), max_size=1))) if namespaces else frozenset()
    return quota_tree, jobs, policies, closing


@SETTINGS
@given(untidy_snapshots(), st.sampled_from([Fraction(1), Fraction(3, 2)]), st.sampled_from([2, 16]))
def test_the_pass_decides_as_before_on_untidy_snapshots(
    snapshot: tuple[QuotaTree, list[_Job], dict[str, Policy], frozenset[str]], rate: Fraction, tries: int
) -> None:
    """The snapshot walk groups jobs by quota name as spelled and takes running jobs to the reclaim index by
    leaf: other spellings, unknown quotas, duplicate keys and held jobs must come out as the walk over every
    job made them."""
    quota_tree, jobs, policies, closing = snapshot
    new = decide(quota_tree, jobs, policies, oversell_rate=rate, reclaim_tries_per_quota=tries, closing=closing)
    old = reference_decide(quota_tree, jobs, policies, oversell_rate=rate, reclaim_tries_per_quota=tries,
                           closing=closing)
    assert _summary(new) == _summary(old)  # type: ignore[arg-type]
    assert [job.workload for job in new.waiting] == [job.workload for job in old.waiting]
    assert new.ledger.unknown == old.ledger.unknown
