"""The start estimate (docs/eta.md) on hand-made snapshots: ``webhook/core/eta.py`` and ``eta_replay.py``.

Each case is small enough to compute by hand; every case runs with the replay's default buckets and windows
and with them off (every event its own pass, every waiting job seen), which must agree here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from fractions import Fraction

import pytest

from tests.builders import job, node, res, seed_tree, tree
from webhook.core.decisions import PlainJob, QueueJob
from webhook.core.eta import Estimate, Why, estimate
from webhook.core.eta_replay import ReplayInput, ReplayLimits, ReplayResult, replay
from webhook.core.handoff import HANDOFF_LIMIT, Handoff, HandoffHistory
from webhook.core.queueing import Policy
from webhook.core.quota import QuotaTree
from webhook.core.runtimes import Runtime, Source
from webhook.core.startup import BackoffNote, BackoffState, backoff_state
from webhook.core.workload import Phase, Workload, WorkloadKey

NOW = 10_000.0
EXACT = ReplayLimits(max_passes=100_000, window=100_000, smallest=0, eps_time=0.0, min_width=0.0, short_share=0.0,
                      repass=True)
LIMITS = {"default": ReplayLimits(), "exact": EXACT}


def one_queue(cpu: int = 10, *, jobs: int | None = None) -> QuotaTree:
    """root (cpu) > team (namespace team): one queue owning everything."""
    cap = res(cpu=cpu, max_jobs=jobs) if jobs is not None else res(cpu=cpu)
    return tree(node("root", min=res(cpu=cpu), max=res(cpu=cpu), children=(
        node("team", min=res(cpu=cpu), max=cap, namespaces=("team",)),)))


def waiting(name: str, cpu: int, created: float, *, priority: int = 0, namespace: str = "team",
            quota: str = "team") -> Workload:
    return job(name, namespace, quota, cpu=cpu, created=created, priority=priority)


def running(name: str, cpu: int, *, namespace: str = "team", quota: str = "team", since: float = NOW) -> Workload:
    return job(name, namespace, quota, cpu=cpu, created=since - 10, phase=Phase.ADMITTED, admitted_at=since)


def declared(seconds: float) -> Runtime:
    return Runtime(seconds, seconds, Source.DECLARED)


def given(
    tree_: QuotaTree,
    jobs: Sequence[Workload | QueueJob],
    runtimes: Mapping[str, Runtime],
    *,
    rate: int = 1,
    policy: Policy = Policy.ROUND,
    since: Mapping[str, float] | None = None,
) -> ReplayInput:
    plain = [item if not isinstance(item, Workload) else PlainJob(item) for item in jobs]
    by_name = {item.workload.key.name: item.workload.key for item in plain}
    return ReplayInput(
        tree=tree_,
        jobs=plain,
        policies={leaf.key: policy for leaf in tree_.leaves()},
        rate=Fraction(rate),
        now=NOW,
        runtimes={by_name[name]: runtime for name, runtime in runtimes.items()},
        running_since={by_name[name]: at for name, at in (since or {}).items()},
    )


def starts(inputs: ReplayInput, limits: str) -> dict[str, Estimate]:
    found = estimate(inputs, LIMITS[limits])
    return {key.name: value for key, value in found.by_key.items()}


def ahead(estimate_: Estimate) -> float | None:
    return None if estimate_.start is None else estimate_.start - NOW


@pytest.mark.parametrize("limits", sorted(LIMITS))
def test_jobs_behind_a_running_one_start_as_the_ones_ahead_end(limits: str) -> None:
    inputs = given(one_queue(), [running("a", 10, since=NOW - 100), waiting("b", 10, 1), waiting("c", 10, 2)],
                   {"a": declared(300), "b": declared(600), "c": declared(60)})
    found = starts(inputs, limits)
    assert ahead(found["b"]) == 200  # a has 200 s left
    assert ahead(found["c"]) == 800  # then b runs 600 s
    assert found["b"].finish == NOW + 800
    assert found["c"].finish == NOW + 860
    assert found["b"].basis.declared == 1 and found["c"].basis.declared == 2


@pytest.mark.parametrize("limits", sorted(LIMITS))
def test_a_higher_priority_job_submitted_later_goes_first(limits: str) -> None:
    inputs = given(one_queue(), [running("a", 10), waiting("old", 10, 1), waiting("urgent", 10, 5, priority=100)],
                   {"a": declared(100), "old": declared(100), "urgent": declared(100)})
    found = starts(inputs, limits)
    assert ahead(found["urgent"]) == 100
    assert ahead(found["old"]) == 200


@pytest.mark.parametrize(("policy", "small_start"), [(Policy.ROUND, 0), (Policy.BLOCK, 400)])
@pytest.mark.parametrize("limits", sorted(LIMITS))
def test_round_lets_a_small_job_pass_a_big_one_block_does_not(policy: Policy, small_start: float, limits: str) -> None:
    inputs = given(one_queue(), [running("a", 6), waiting("big", 10, 1), waiting("small", 2, 2)],
                   {"a": declared(300), "big": declared(100), "small": declared(50)}, policy=policy)
    found = starts(inputs, limits)
    assert ahead(found["big"]) == 300
    assert ahead(found["small"]) == small_start


@pytest.mark.parametrize("limits", sorted(LIMITS))
def test_a_quota_owed_its_min_starts_at_the_next_pass_by_reclaim(limits: str) -> None:
    seed = seed_tree()
    borrowers = [running(f"a{i}", 10, namespace="user-a", quota="Department-a", since=NOW - i) for i in range(10)]
    inputs = given(seed, [*borrowers, waiting("c", 10, 1, namespace="user-c", quota="Department-b")],
                   {**{f"a{i}": declared(3600) for i in range(10)}, "c": declared(60)})
    found = starts(inputs, limits)
    assert ahead(found["c"]) == 0  # no job of Department-a ends before: reclaim makes the room


@pytest.mark.parametrize("limits", sorted(LIMITS))
def test_an_estimate_that_rests_on_unknown_run_times_says_so_instead_of_a_number(limits: str) -> None:
    inputs = given(one_queue(), [running("mystery", 10), waiting("b", 10, 1)],
                   {"b": declared(60)})
    found = starts(inputs, limits)
    assert found["b"].start is None
    assert found["b"].why is Why.UNKNOWN_RUNTIMES
    assert WorkloadKey("Job", "team", "mystery") in found["b"].unknown_jobs
    assert found["b"].latest is None


@pytest.mark.parametrize("limits", sorted(LIMITS))
def test_the_unknown_jobs_named_are_the_nearest_in_the_tree_the_same_for_a_quotas_jobs(limits: str) -> None:
    two = res(cpu=2)
    tree_ = tree(node("root", min=res(cpu=4), max=res(cpu=4), children=(
        node("d1", min=res(cpu=3), max=res(cpu=4), children=(
            node("t1", min=two, max=res(cpu=4), namespaces=("t1",)),
            node("t2", min=res(cpu=1), max=res(cpu=4), namespaces=("t2",)))),
        node("d2", min=res(cpu=1), max=res(cpu=4), children=(
            node("t3", min=res(cpu=1), max=res(cpu=4), namespaces=("t3",)),)))))
    holders = [running("u1", 1, namespace="t1", quota="t1"), running("u1b", 1, namespace="t1", quota="t1"),
               running("u2", 1, namespace="t2", quota="t2"), running("u3", 1, namespace="t3", quota="t3")]
    waiters = [waiting("w1", 1, 1, namespace="t1", quota="t1"), waiting("w1b", 1, 2, namespace="t1", quota="t1"),
               waiting("w3", 1, 3, namespace="t3", quota="t3")]
    found = starts(given(tree_, [*holders, *waiters], {}), limits)
    names = {name: [key.name for key in found[name].unknown_jobs] for name in ("w1", "w1b", "w3")}
    # Its own leaf first, then its department, then the rest of the tree (by name within each).
    assert names == {"w1": ["u1", "u1b", "u2"], "w1b": ["u1", "u1b", "u2"], "w3": ["u3", "u1", "u1b"]}
    assert all(found[name].why is Why.UNKNOWN_RUNTIMES for name in names)


@pytest.mark.parametrize("limits", sorted(LIMITS))
def test_a_deadline_alone_gives_a_latest_time_but_no_estimate(limits: str) -> None:
    bounded = Runtime(None, 900.0, Source.DEADLINE, deadline=900.0)
    inputs = given(one_queue(), [running("a", 10, since=NOW - 300), waiting("b", 10, 1)],
                   {"a": bounded, "b": declared(60)})
    found = starts(inputs, limits)
    assert found["b"].start is None and found["b"].why is Why.UNKNOWN_RUNTIMES
    assert found["b"].latest == NOW + 600  # a is stopped at its deadline, 900 s after it began


@pytest.mark.parametrize("limits", sorted(LIMITS))
def test_jobs_whose_run_time_is_unknown_but_irrelevant_do_not_hide_an_estimate(limits: str) -> None:
    two = tree(node("root", min=res(cpu=20), max=res(cpu=20), children=(
        node("team", min=res(cpu=10), max=res(cpu=10), namespaces=("team",)),
        node("other", min=res(cpu=10), max=res(cpu=10), namespaces=("other",)))))
    inputs = given(two, [running("mystery", 10, namespace="other", quota="other"), running("a", 10),
                         waiting("b", 10, 1)], {"a": declared(120), "b": declared(60)})
    found = starts(inputs, limits)
    assert ahead(found["b"]) == 120


@dataclasses.dataclass(frozen=True, slots=True)
class Backed:
    """A waiting job with a backoff note (it failed to start and waits for its retry time)."""

    workload: Workload
    backoff: BackoffNote
    evictable: bool = True
    record: None = None
    missing_class: None = None

    def backoff_state(self, now: float) -> BackoffState:
        return backoff_state(self.backoff, "spec", now)

    def with_workload(self, workload: Workload) -> Backed:
        return dataclasses.replace(self, workload=workload)


def note(retry_at: float, *, gave_up: bool = False) -> BackoffNote:
    return BackoffNote(attempts=2, reason="image cannot be pulled", category="ErrImagePull", retry_at=retry_at,
                       failed_at=NOW - 60, spec="spec", gave_up=gave_up)


@pytest.mark.parametrize("limits", sorted(LIMITS))
def test_a_job_in_backoff_starts_at_its_retry_time_and_one_that_gave_up_has_none(limits: str) -> None:
    retrying = Backed(waiting("retry", 4, 1), note(NOW + 300))
    given_up = Backed(waiting("done-trying", 4, 2), note(NOW - 10, gave_up=True))
    inputs = given(one_queue(), [running("a", 2), retrying, given_up, waiting("fresh", 4, 3)],
                   {"a": declared(1000), "retry": declared(60), "done-trying": declared(60), "fresh": declared(60)})
    found = starts(inputs, limits)
    assert ahead(found["fresh"]) == 0  # the job in backoff does not hold it back
    assert ahead(found["retry"]) == 300
    assert found["done-trying"].start is None and found["done-trying"].why is Why.GAVE_UP


@pytest.mark.parametrize("limits", sorted(LIMITS))
def test_with_an_oversell_rate_admitted_jobs_wait_for_the_pods_quota(limits: str) -> None:
    inputs = given(one_queue(), [running("a", 10, since=NOW - 50), running("b", 10, since=NOW), waiting("c", 10, 1)],
                   {"a": declared(150), "b": declared(200), "c": declared(60)}, rate=2, since={"a": NOW - 50})
    found = starts(inputs, limits)
    # a ends at +100: c is admitted (used 20 <= 10 x 2) and b's pods run; c's pods run when b ends, at +300.
    assert ahead(found["c"]) == 300


@pytest.mark.parametrize("limits", sorted(LIMITS))
def test_a_job_cap_is_respected(limits: str) -> None:
    inputs = given(one_queue(100, jobs=1), [running("a", 1), waiting("b", 1, 1), waiting("c", 1, 2)],
                   {"a": declared(100), "b": declared(100), "c": declared(100)})
    found = starts(inputs, limits)
    assert (ahead(found["b"]), ahead(found["c"])) == (100, 200)


def test_a_job_that_can_never_fit_says_so() -> None:
    found = starts(given(one_queue(), [waiting("huge", 11, 1)], {"huge": declared(60)}), "default")
    assert found["huge"].start is None and found["huge"].why is Why.NEVER_FITS


def test_the_replay_dates_each_job_by_the_end_that_let_it_in_so_a_long_queue_does_not_drift() -> None:
    # Four slots ending at staggered times, and 200 jobs of 61 s behind them: the buckets hold several ends
    # each; a job admitted at its bucket's pass would start up to a bucket late and push every later one
    # further. Dated by the end that freed its room, each starts when the exact replay starts it.
    jobs: list[Workload] = [running(f"head{slot}", 10) for slot in range(4)]
    runtimes = {f"head{slot}": declared(10 + 7 * slot) for slot in range(4)}
    for index in range(200):
        jobs.append(waiting(f"j{index:03d}", 10, index))
        runtimes[f"j{index:03d}"] = declared(61)
    inputs = given(one_queue(40), jobs, runtimes)
    bucketed = replay(inputs, ReplayLimits(max_passes=10_000))
    exact = replay(inputs, EXACT)
    def times(result: ReplayResult) -> dict[WorkloadKey, tuple[float | None, float | None]]:
        return {key: (outcome.admitted, outcome.started) for key, outcome in result.outcomes.items()}

    assert times(bucketed) == times(exact)
    assert exact.outcomes[WorkloadKey("Job", "team", "j199")].started == NOW + 10 + 7 * 3 + 49 * 61
    assert bucketed.passes < exact.passes / 2  # the buckets did batch the ends


def test_a_small_job_deep_in_a_round_queue_is_seen_and_starts_early() -> None:
    bigs = [waiting(f"big{index:03d}", 10, index) for index in range(100)]
    inputs = given(one_queue(), [running("a", 9), *bigs, waiting("tiny", 1, 1000)],
                   {"a": declared(600), **{f"big{i:03d}": declared(60) for i in range(100)}, "tiny": declared(60)})
    found = starts(inputs, "default")
    assert ahead(found["tiny"]) == 0


def test_a_queue_with_nothing_waiting_whose_jobs_reclaim_evicts_by_the_dozen_keeps_replaying() -> None:
    """A queue empty in the snapshot gets more waiting jobs than a pass's window when reclaim holds its borrowers
    again: the pass then looks past the window at its smallest shapes, which it must know."""
    tree_ = tree(node("root", min=res(cpu=40), max=res(cpu=40), children=(
        node("lender", min=res(cpu=30), max=res(cpu=40), namespaces=("lender",)),
        node("borrower", min=res(cpu=10), max=res(cpu=40), namespaces=("borrower",)))))
    borrowers = [running(f"b{i}", 1, namespace="borrower", quota="borrower", since=NOW - i) for i in range(40)]
    inputs = given(tree_, [*borrowers, waiting("owner", 30, 1, namespace="lender", quota="lender")],
                   {**{f"b{i}": declared(3600) for i in range(40)}, "owner": declared(60)})
    found = starts(inputs, "default")
    assert ahead(found["owner"]) == 0  # reclaim makes the room at once


# The control plane's time per turn (docs/eta.md, "The control plane's time per turn") ---------------------
LAG = Handoff(start=0.5, end=1.25)


@pytest.mark.parametrize("limits", sorted(LIMITS))
def test_every_turn_ahead_adds_the_control_planes_time(limits: str) -> None:
    inputs = given(one_queue(), [running("a", 10, since=NOW - 100), waiting("b", 10, 1), waiting("c", 10, 2)],
                   {"a": declared(300), "b": declared(600), "c": declared(60)}, since={"a": NOW - 100})
    found = starts(dataclasses.replace(inputs, handoff=LAG), limits)
    # a's room is handed on 1.25 s after its end, b's pods run 0.5 s after b's admission; then the same for b.
    assert ahead(found["b"]) == 200 + 1.25 + 0.5
    assert ahead(found["c"]) == 200 + 1.25 + 0.5 + 600 + 1.25 + 0.5
    assert found["c"].finish == NOW + 200 + 600 + 60 + 2 * 1.75
    without = starts(inputs, limits)
    assert (ahead(without["b"]), ahead(without["c"])) == (200, 800)


@pytest.mark.parametrize("limits", sorted(LIMITS))
def test_a_job_admitted_but_not_running_yet_runs_after_the_start_part(limits: str) -> None:
    # a was admitted 0.2 s ago and its pods do not run yet: they run 0.5 s after its admission, for 100 s.
    inputs = given(one_queue(), [running("a", 10, since=NOW - 0.2), waiting("b", 10, 1)],
                   {"a": declared(100), "b": declared(60)})
    found = starts(dataclasses.replace(inputs, handoff=LAG), limits)
    assert ahead(found["b"]) == pytest.approx(-0.2 + 0.5 + 100 + 1.25 + 0.5)


@pytest.mark.parametrize("limits", sorted(LIMITS))
def test_with_an_oversell_rate_the_pods_run_after_the_start_part_too(limits: str) -> None:
    inputs = given(one_queue(), [running("a", 10, since=NOW - 50), running("b", 10, since=NOW), waiting("c", 10, 1)],
                   {"a": declared(150), "b": declared(200), "c": declared(60)}, rate=2, since={"a": NOW - 50})
    found = starts(dataclasses.replace(inputs, handoff=LAG), limits)
    # a's room at +101.25: b's pods run at +101.75 for 200 s, their room at +303; c's pods run at +303.5.
    assert ahead(found["c"]) == pytest.approx(100 + 1.25 + 0.5 + 200 + 1.25 + 0.5)


def test_the_history_keeps_the_newest_samples_and_gives_their_medians() -> None:
    history = HandoffHistory(kept=3)
    assert history.figure() == Handoff(0.0, 0.0) and len(history) == 0
    for start, end in ((9.0, 9.0), (0.2, 1.0), (0.4, 1.2), (0.6, 1.4)):
        history.add(start, end)
    assert history.figure() == Handoff(0.4, 1.2)  # the first samples went
    history.add(None, 2.0)
    assert history.figure() == Handoff(0.4, 1.4)


def test_a_sample_no_handoff_explains_is_left_out() -> None:
    history = HandoffHistory()
    history.add(-0.5, HANDOFF_LIMIT + 1)  # a clock step back; a controller that was down
    history.add(0.3, 0.9)
    assert history.figure() == Handoff(0.3, 0.9)
    assert history.items() == {"startSeconds": [0.3], "endSeconds": [0.9]}


def test_the_status_round_trip_keeps_the_samples_and_skips_what_is_not_seconds() -> None:
    history = HandoffHistory()
    for start, end in ((0.1234, 1.0), (0.5, 1.5), (0.3, 2.0)):
        history.add(start, end)
    again = HandoffHistory()
    again.restore(history.items())
    assert again.items() == history.items() and again.figure() == Handoff(0.3, 1.5)
    from_tree = HandoffHistory()
    from_tree.restore_status({"root": {}, "handoff": history.items()})
    from_tree.restore_status(None)  # a tree without a status yet
    assert from_tree.items() == history.items()
    broken = HandoffHistory()
    broken.restore({"startSeconds": ["1", True, None, 0.25, 1e9], "endSeconds": "1.0"})
    broken.restore(["not", "a", "mapping"])
    assert broken.items() == {"startSeconds": [0.25], "endSeconds": []}
