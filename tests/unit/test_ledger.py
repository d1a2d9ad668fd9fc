"""The usage ledger: per-node used/request along each job's chain, cheap immutable updates, and the status."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import job, node, res, seed_tree, tree
from tests.strategies import examples
from webhook.api.names import MAX_JOBS
from webhook.core.chain_usage import ChainTally, chain_keys, shift_usage
from webhook.core.ledger import Ledger, NodeUsage, build_ledger
from webhook.core.quota import QuotaTree
from webhook.core.resources import EMPTY
from webhook.core.tree_status import status_tree
from webhook.core.workload import Phase, Workload

A, Q, F = Phase.ADMITTED, Phase.QUEUED, Phase.FINISHED


def three_level() -> QuotaTree:
    total = res(cpu=100)
    return tree(node("root", min=total, max=total, children=(
        node("dept", min=res(cpu=60), max=total, children=(
            node("team-1", min=res(cpu=30), max=total, namespaces=("t1",)),
            node("team-2", min=res(cpu=30), max=total, namespaces=("t2",)),
        )),
        node("other", min=res(cpu=40), max=total, namespaces=("o",)),
    )))


def test_an_empty_ledger_uses_nothing() -> None:
    ledger = Ledger(seed_tree())
    for key in ("root", "department-a", "department-b"):
        assert ledger.usage(key) == NodeUsage(EMPTY, EMPTY)
    assert ledger.unknown == ()
    assert build_ledger(seed_tree(), []) == ledger


def test_build_ledger_counts_by_phase_at_the_leaf_and_every_ancestor() -> None:
    workloads = [
        job("running", pods=6, cpu=10, memory="10Gi", phase=A, admitted_at=1.0),
        job("waiting", pods=6, cpu=10, memory="10Gi", phase=Q),
        job("done", pods=2, cpu=10, phase=F),
        job("other", namespace="user-c", quota="Department-b", cpu=5, gpu=1, phase=A),
    ]
    ledger = build_ledger(seed_tree(), workloads)
    assert ledger.used("department-a") == res(cpu=60, memory="60Gi", max_jobs=1)
    assert ledger.request("department-a") == res(cpu=120, memory="120Gi", max_jobs=2)
    assert ledger.used("Department-B") == res(cpu=5, gpu=1, max_jobs=1)
    assert ledger.request("department-b") == res(cpu=5, gpu=1, max_jobs=1)
    assert ledger.used("root") == res(cpu=65, memory="60Gi", gpu=1, max_jobs=2)
    assert ledger.request("root") == res(cpu=125, memory="120Gi", gpu=1, max_jobs=3)


def test_usage_flows_to_ancestors_only_never_to_siblings() -> None:
    ledger = build_ledger(three_level(), [job("j", namespace="t1", quota="team-1", cpu=7, phase=A)])
    assert ledger.used("team-1") == res(cpu=7, max_jobs=1)
    assert ledger.used("dept") == res(cpu=7, max_jobs=1)
    assert ledger.used("root") == res(cpu=7, max_jobs=1)
    assert ledger.used("team-2") == EMPTY
    assert ledger.used("other") == EMPTY


def test_unknown_quotas_are_ignored_but_listed() -> None:
    lost = job("lost", quota="department-z", phase=Q)
    lost_done = job("lost-done", quota="department-z", phase=F)
    ledger = build_ledger(seed_tree(), [lost, lost_done, job("ok", phase=A)])
    assert ledger.unknown == (lost,)
    assert ledger.used("root") == res(cpu=1, max_jobs=1)
    assert ledger.with_admitted(lost) is ledger
    assert ledger.without(lost) is ledger


def test_reading_an_unknown_node_names_it() -> None:
    with pytest.raises(KeyError, match="'nowhere'"):
        Ledger(seed_tree()).used("nowhere")


# Moving one workload between phases: the result must equal a ledger built from scratch -------------------

OTHERS = [
    job("a-run", cpu=3, phase=A),
    job("a-wait", cpu=4, phase=Q),
    job("c-run", namespace="user-c", quota="department-b", cpu=5, phase=A),
]


def _as(workload: Workload, phase: Phase) -> Workload:
    return dataclasses.replace(workload, phase=phase)


@pytest.mark.parametrize(
    ("operation", "before", "after"),
    [
        ("with_admitted", Q, A),
        ("with_admitted", F, A),  # a job not counted yet
        ("with_admitted", A, A),  # already admitted: nothing changes
        ("with_queued", A, Q),  # eviction back to the queue
        ("with_queued", F, Q),
        ("with_queued", Q, Q),
        ("without", A, F),
        ("without", Q, F),
        ("without", F, F),
        ("add", A, A),
        ("add", Q, Q),
    ],
)
def test_phase_moves_match_a_fresh_build(operation: str, before: Phase, after: Phase) -> None:
    moving = job("mover", pods=2, cpu=10, gpu=1)
    t = seed_tree()
    # ``add`` counts a workload the ledger does not hold yet; the others move one it holds as ``before``.
    start = build_ledger(t, OTHERS if operation == "add" else [*OTHERS, _as(moving, before)])
    moved = getattr(start, operation)(_as(moving, before))
    expected = build_ledger(t, [*OTHERS, _as(moving, after)])
    assert moved == expected
    assert moved.snapshot() == expected.snapshot()


def test_with_admitted_moves_a_queued_job_into_used_only() -> None:
    waiting = job("w", pods=6, cpu=10, phase=Q)
    before = build_ledger(seed_tree(), [waiting])
    after = before.with_admitted(waiting)
    assert after.used("department-a") == res(cpu=60, max_jobs=1)
    assert after.request("department-a") == before.request("department-a") == res(cpu=60, max_jobs=1)
    assert before.used("department-a") == EMPTY  # the old ledger is untouched


def test_removing_everything_leaves_no_zero_entries() -> None:
    running = job("r", cpu=10, memory="1Gi", phase=A)
    emptied = build_ledger(seed_tree(), [running]).without(running)
    assert emptied.used("root") == EMPTY
    assert dict(emptied.request("department-a")) == {}
    assert emptied == Ledger(seed_tree())


def test_updates_copy_only_the_touched_chain() -> None:
    t = three_level()
    before = build_ledger(t, [job("x", namespace="o", quota="other", cpu=1, phase=A),
                              job("y", namespace="t2", quota="team-2", cpu=1, phase=A)])
    after = before.with_admitted(job("j", namespace="t1", quota="team-1", cpu=2, phase=Q))
    # untouched subtrees are shared, not copied
    assert after.usage("other") is before.usage("other")
    assert after.usage("team-2") is before.usage("team-2")
    # the chain is new
    for key in ("team-1", "dept", "root"):
        assert after.usage(key) is not before.usage(key)
    assert after.used("dept") == res(cpu=3, max_jobs=2)


def test_used_view_is_a_read_only_mapping_over_every_node() -> None:
    ledger = build_ledger(seed_tree(), [job("r", cpu=2, phase=A)])
    view = ledger.used_view()
    assert sorted(view) == ["department-a", "department-b", "root"]
    assert len(view) == 3
    assert view["department-a"] == res(cpu=2, max_jobs=1)
    assert view["DEPARTMENT-B"] == EMPTY
    assert view.get("nowhere") is None
    assert dict(view) == {key: usage.used for key, usage in ledger.snapshot().items()}


def test_equality_hash_and_repr() -> None:
    t = seed_tree()
    one = build_ledger(t, [job("r", cpu=2, phase=A)])
    same = Ledger(t).add(job("r", cpu=2, phase=A))
    assert one == same
    assert hash(one) == hash(same)
    assert one != Ledger(t)
    assert one != "ledger"
    assert "department-a" in repr(one)
    assert "department-b" not in repr(one)


def test_status_tree_mirrors_the_tree_with_canonical_quantities() -> None:
    workloads = [
        job("pi-1", pods=6, cpu=10, memory="10Gi", phase=A),
        job("pi-2", pods=6, cpu=10, memory="10Gi", phase=Q),
        job("half", namespace="user-c", quota="department-b", cpu="500m", memory="1536Mi", phase=Q),
    ]
    t = seed_tree()
    status = status_tree(t, build_ledger(t, workloads))
    assert status == {
        "root": {
            "name": "root",
            "used": {"cpu": "60", "kube-queue/max-jobs": "1", "memory": "60Gi"},
            "request": {"cpu": "120500m", "kube-queue/max-jobs": "3", "memory": "124416Mi"},
            "children": [
                {
                    "name": "Department-a",
                    "used": {"cpu": "60", "kube-queue/max-jobs": "1", "memory": "60Gi"},
                    "request": {"cpu": "120", "kube-queue/max-jobs": "2", "memory": "120Gi"},
                    "children": [],
                },
                {
                    "name": "Department-b",
                    "used": {},
                    "request": {"cpu": "500m", "kube-queue/max-jobs": "1", "memory": "1536Mi"},
                    "children": [],
                },
            ],
        }
    }


# Properties -------------------------------------------------------------------------------------------------

LEAVES = [("t1", "team-1"), ("t2", "team-2"), ("o", "other"), ("x", "missing")]
workload_strategy = st.builds(
    lambda i, leaf, cpu, pods, phase: job(f"j{i}", namespace=leaf[0], quota=leaf[1], cpu=cpu, pods=pods,
                                          phase=phase),
    st.integers(min_value=0, max_value=10**6),
    st.sampled_from(LEAVES),
    st.integers(min_value=0, max_value=50),
    st.integers(min_value=0, max_value=4),
    st.sampled_from([A, Q, F]),
)


@settings(max_examples=examples(60), deadline=None)
@given(workloads=st.lists(workload_strategy, max_size=12))
def test_incremental_adds_equal_the_batch_build(workloads: list[Workload]) -> None:
    t = three_level()
    incremental = Ledger(t)
    for workload in workloads:
        incremental = incremental.add(workload)
    batch = build_ledger(t, workloads)
    assert incremental.snapshot() == batch.snapshot()
    assert batch.unknown == tuple(w for w in workloads if w.quota == "missing" and w.phase is not F)
    # the root sees every known job exactly once
    known = [w for w in workloads if w.quota != "missing"]
    assert batch.used("root").get_or_zero("cpu") == sum(w.request.get_or_zero("cpu") for w in known
                                                          if w.phase is A)
    # and removing them all leaves nothing
    for workload in workloads:
        batch = batch.without(workload)
    assert batch.snapshot() == Ledger(t).snapshot()


@settings(max_examples=examples(60), deadline=None)
@given(workloads=st.lists(workload_strategy, min_size=1, max_size=8))
def test_admit_then_evict_is_the_identity_for_queued_jobs(workloads: list[Workload]) -> None:
    t = three_level()
    start = build_ledger(t, workloads)
    ledger = start
    for workload in workloads:
        if workload.phase is Q:
            ledger = ledger.with_admitted(workload)
    for workload in workloads:
        if workload.phase is Q:
            ledger = ledger.with_queued(_as(workload, A))
    assert ledger == start


@settings(max_examples=examples(60), deadline=None)
@given(admitted=st.lists(workload_strategy, max_size=8), queued=st.lists(workload_strategy, max_size=6),
       removed=st.lists(workload_strategy, max_size=6))
def test_moving_many_at_once_equals_moving_one_by_one(
    admitted: list[Workload], queued: list[Workload], removed: list[Workload]
) -> None:
    t = three_level()
    start = build_ledger(t, [*admitted, *queued, *removed])
    one_by_one = start
    for workload in admitted:
        one_by_one = one_by_one.with_admitted(workload)
    for workload in queued:
        one_by_one = one_by_one.with_queued(workload)
    for workload in removed:
        one_by_one = one_by_one.without(workload)
    at_once = start.moved(admitted=admitted, queued=queued, removed=removed)
    assert at_once == one_by_one
    assert at_once.snapshot() == one_by_one.snapshot()
    assert start.moved() is start


# The chain arithmetic: one place that adds usage up a quota chain --------------------------------------------


def test_chain_keys_run_from_the_leaf_to_the_root_in_any_case() -> None:
    assert chain_keys(three_level(), "Team-1") == ("team-1", "dept", "root")
    assert chain_keys(three_level(), "root") == ("root",)
    assert chain_keys(three_level(), "nowhere") is None


def test_shift_usage_adds_and_removes_along_the_chain_without_touching_its_input() -> None:
    big = job("big", "t1", "team-1", cpu=10, phase=A)
    small = job("small", "o", "other", cpu=3, phase=A)
    before = {"root": res(cpu=1)}
    after = shift_usage(three_level(), before, (big, small), +1)
    assert before == {"root": res(cpu=1)}
    assert after["team-1"].get_or_zero("cpu") == res(cpu=10).get_or_zero("cpu")
    assert after["dept"] == after["team-1"]
    assert after["other"].get_or_zero(MAX_JOBS) == res(**{MAX_JOBS: 1}).get_or_zero(MAX_JOBS)
    assert after["root"].get_or_zero("cpu") == res(cpu=14).get_or_zero("cpu")
    assert after["root"].get_or_zero(MAX_JOBS) == res(**{MAX_JOBS: 2}).get_or_zero(MAX_JOBS)
    back = shift_usage(three_level(), after, (big, small), -1)
    assert all(not amount for usage in back.values() for name, amount in usage.items() if name != "cpu")
    assert back["root"].get_or_zero("cpu") == res(cpu=1).get_or_zero("cpu")
    with pytest.raises(KeyError, match="nowhere"):
        shift_usage(three_level(), {}, (job("lost", "x", "nowhere"),), +1)


def test_a_chain_tally_counts_and_uncounts_in_place() -> None:
    tally = ChainTally()
    workload = job("big", "t1", "team-1", cpu=10, phase=A)
    tally.shift_workload(three_level(), workload, +1, ((MAX_JOBS, 7),))
    cpu = res(cpu=10).get_or_zero("cpu")
    assert tally == {key: {"cpu": cpu, MAX_JOBS: 7} for key in ("team-1", "dept", "root")}
    tally.shift(("dept", "root"), {"cpu": cpu}, -1)
    assert tally["team-1"]["cpu"] == cpu
    assert tally["dept"]["cpu"] == tally["root"]["cpu"] == 0
    tally.shift_workload(three_level(), workload, -1, ((MAX_JOBS, 7),))
    assert tally["team-1"] == {"cpu": 0, MAX_JOBS: 0}
    assert tally["root"]["cpu"] == -cpu  # never clamped: a double removal shows
    with pytest.raises(KeyError, match="nowhere"):
        tally.shift_workload(three_level(), job("lost", "x", "nowhere"), +1)


def test_a_chain_tally_reports_max_and_min_blockers_leaf_first() -> None:
    cpu, gpu = res(cpu=1).get_or_zero("cpu"), res(gpu=1).get_or_zero("nvidia.com/gpu")
    tally = ChainTally({"team-1": {"cpu": 15 * cpu}, "dept": {"cpu": 55 * cpu}, "root": {"cpu": 90 * cpu}})
    keys = ("team-1", "dept", "root")
    limits = {"team-1": {"cpu": 30 * cpu}, "dept": {"cpu": 100 * cpu}, "root": {"cpu": 100 * cpu, "nvidia.com/gpu": 0}}
    wanted = [("cpu", 20 * cpu), ("nvidia.com/gpu", gpu)]
    assert tally.over(keys, wanted, limits) == [
        (0, "cpu", 5 * cpu), (2, "cpu", 10 * cpu), (2, "nvidia.com/gpu", gpu)
    ]
    assert not tally.fits(keys, wanted, limits)
    assert tally.over(keys, [("cpu", 5 * cpu)], limits) == []
    assert tally.fits(keys, [("cpu", 5 * cpu)], limits)
    guaranteed = {"team-1": {"cpu": 30 * cpu}, "dept": {"cpu": 60 * cpu}, "root": {}}
    # Within min at the team for 5 CPU; the department (55 + 10 > 60) is the first level over for 10.
    assert tally.within(keys, 2, [("cpu", 5 * cpu)], guaranteed) == len(keys)
    assert tally.within(keys, 2, [("cpu", 10 * cpu), ("memory", 0)], guaranteed) == 1
    assert tally.within(keys, 2, [("cpu", 6 * cpu)], guaranteed) == 1
    assert tally.within(keys, 2, [("cpu", 50 * cpu)], guaranteed) == 0
    assert tally.within(keys, 2, [("nvidia.com/gpu", gpu)], guaranteed) == len(keys), "not governed: no min"
