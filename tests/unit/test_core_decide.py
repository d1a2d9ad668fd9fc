"""The core's decision pass over plain jobs (the simulator's): the jobs handed back are the ones passed in, an
evicted one comes back held again, and the pass reads nothing but the job's workload and the policies."""

from __future__ import annotations

from fractions import Fraction

from tests.builders import job, seed_tree
from webhook.core.decide import _without, decide, leaf_policies
from webhook.core.decisions import PlainJob, reason_key
from webhook.core.queueing import Policy
from webhook.core.startup import BackoffState
from webhook.core.workload import Phase

A, Q = Phase.ADMITTED, Phase.QUEUED


def test_a_pass_over_plain_jobs_admits_reclaims_and_hands_back_the_same_jobs() -> None:
    tree = seed_tree()
    borrowers = [PlainJob(job(f"b{index}", "user-c", "Department-b", cpu=20, phase=A, admitted_at=float(index)))
                 for index in range(4)]
    owner = PlainJob(job("owner", "user-a", "Department-a", cpu=40, created=10.0))
    small = PlainJob(job("small", "user-a", "Department-a", cpu=30, created=11.0))
    decisions = decide(tree, [*borrowers, owner, small], leaf_policies(tree, {}, strict=False),
                       oversell_rate=Fraction(1))
    assert decisions.admissions == ()
    assert [plan.preemptor for plan in decisions.reclaims] == [owner]
    (plan,) = decisions.reclaims
    # 20 CPU free: the most recently admitted borrower gives Department-a the other 20 of its 40.
    assert plan.victims == (borrowers[3],)
    assert plan.victims[0] is borrowers[3], "the very jobs passed in"
    # The evicted borrower waits again, held (copies: the jobs passed in are untouched), at their places.
    waiting = {job.workload.key: job for job in decisions.waiting}
    assert set(waiting) == {small.workload.key, borrowers[3].workload.key}
    assert all(job.workload.phase is Q for job in decisions.waiting)
    assert borrowers[3].workload.phase is A and waiting[borrowers[3].workload.key] is not borrowers[3]
    assert decisions.positions[small.workload.key] == 1
    assert decisions.positions[borrowers[3].workload.key] == 1
    assert decisions.late_admissions == ()
    assert reason_key(decisions.reasons[small.workload.key]) != "-"
    assert dict(decisions.policies) == {"department-a": Policy.ROUND, "department-b": Policy.ROUND}


def test_a_plain_job_is_only_its_workload() -> None:
    plain = PlainJob(job("a", phase=A))
    assert plain.backoff_state(1e9) is BackoffState.NONE
    assert plain.record is None and plain.backoff is None and plain.missing_class is None and plain.evictable
    held = plain.with_workload(job("a", phase=Q))
    assert held.workload.phase is Q and plain.workload.phase is A


def test_a_queue_drops_its_preemptors_by_place_even_among_equal_order_keys() -> None:
    # Same priority, creation time, namespace and name: only the kind tells the two "a" apart.
    first, twin, later = job("a", created=1), job("a", created=1, kind="TFJob"), job("b", created=2)
    stranger = job("c", created=1.5)
    queue = [first, twin, later]
    kept, kept_jobs = _without(queue, [PlainJob(w) for w in queue], [twin, twin, stranger])  # twin twice: once
    assert kept == [first, later]
    assert [plain.workload for plain in kept_jobs] == [first, later]
    plain = [PlainJob(w) for w in queue]
    assert _without(queue, plain, []) == (queue, plain)
