"""The start check carries verdicts over between passes (:class:`StartMemo`): it must give exactly what a fresh
check gives, whatever changed in between: a pod, the job, the clock, the timeout, a re-list
(docs/start-timeout.md)."""

from __future__ import annotations

import functools
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests import builders
from tests.builders import batch_job_object, seed_tree
from webhook.controller.model import TrackedJob, track
from webhook.controller.starts import PodIndex, StartChecks, StartMemo, check_starts, pod_slim
from webhook.kube.cache import RELIST, CacheEvent, WatchCache
from webhook.workloads.job import JobAdapter

JOB = JobAdapter()
T0 = 1_712_541_600.0  # 2024-04-08T02:00:00Z, when the jobs below were admitted
NAMES = ("a", "b", "c")
PHASES = ("Pending", "Running", "Succeeded")
UNSCHEDULABLE = ("", "0/4 nodes are available",
                 "pod-level quota (bound and placed pods): quota root/x: cpu request 1 + used 9 > max 9")

_pod = functools.partial(builders.pod, phase="Pending")


class _Cache(WatchCache):
    def __init__(self, items: list[dict[str, object]]) -> None:
        self._items = items

    def items(self) -> list[object]:  # type: ignore[override]
        return list(self._items)


def _pod_obj(job: str, index: int, phase: str, unschedulable: str, version: int) -> dict[str, Any]:
    return pod_slim(_pod(f"{job}-{index}", owner={"kind": "Job", "metadata": {"name": job, "uid": "u"}},
                         resource_version=str(version), phase=phase, unschedulable=unschedulable or None))


def _job(name: str, pods: int, version: int) -> TrackedJob:
    leaf = seed_tree().leaf_for_namespace("user-a")
    assert leaf is not None
    obj = batch_job_object(name, pods=pods, completions=pods if version % 2 else pods + 1,
                           admitted_at="2024-04-08T02:00:00Z")
    obj["metadata"]["resourceVersion"] = str(version)
    return track(JOB, obj, leaf, {})


def _summary(checks: StartChecks) -> tuple[object, ...]:
    return (
        sorted((job.workload.key.name, verdict) for job, verdict in checks.failed),
        sorted(job.workload.key.name for job in checks.started_with_note),
        checks.next_deadline,
        sorted(checks.awaiting),
    )


step = st.one_of(
    st.tuples(st.just("pod"), st.sampled_from(NAMES), st.integers(0, 2), st.sampled_from(PHASES),
              st.sampled_from(UNSCHEDULABLE)),
    st.tuples(st.just("drop"), st.sampled_from(NAMES), st.integers(0, 2)),
    st.tuples(st.just("job"), st.sampled_from(NAMES), st.integers(1, 3)),
    st.tuples(st.just("clock"), st.floats(0, 200)),
    st.tuples(st.just("timeout"), st.sampled_from([60.0, 300.0])),
    st.tuples(st.just("relist")),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(step, max_size=30))
def test_a_carried_verdict_is_always_what_a_fresh_check_gives(steps: list[tuple[Any, ...]]) -> None:
    """Both worlds see the same pods, jobs and clock; one keeps its memo across passes, the other checks
    afresh every pass. Every pass must find the same."""
    index = PodIndex()
    pods: dict[tuple[str, int], dict[str, Any]] = {}
    jobs = {name: _job(name, 2, 1) for name in NAMES}
    memo = StartMemo()
    started_memo: set[str] = set()
    started_fresh: set[str] = set()
    now, timeout, version = T0, 300.0, 10
    for action in [*steps, ("clock", 0.0)]:
        version += 1
        kind = action[0]
        if kind == "pod":
            _, job, number, phase, unschedulable = action
            pods[(job, number)] = _pod_obj(job, number, phase, unschedulable, version)
            index.listener(_Cache([]), CacheEvent("MODIFIED", pods[(job, number)]))
        elif kind == "drop":
            gone = pods.pop((action[1], action[2]), None)
            if gone is not None:
                index.listener(_Cache([]), CacheEvent("DELETED", gone))
        elif kind == "job":
            jobs[action[1]] = _job(action[1], action[2], version)
        elif kind == "clock":
            now += action[1]
        elif kind == "timeout":
            timeout = action[1]
        else:
            index.listener(_Cache(list(pods.values())), CacheEvent(RELIST))
        listed = list(jobs.values())
        carried = check_starts(listed, index, started_memo, now=now, timeout=timeout, memo=memo)
        fresh = check_starts(listed, index, started_fresh, now=now, timeout=timeout)
        assert _summary(carried) == _summary(fresh)
        assert started_memo == started_fresh


def test_a_waiting_job_is_not_checked_again_until_something_it_reads_changes() -> None:
    index = PodIndex()
    pending = _pod_obj("a", 0, "Pending", "", 1)
    index.listener(_Cache([]), CacheEvent("ADDED", pending))
    job = _job("a", 1, 1)
    memo = StartMemo()
    started: set[str] = set()
    first = check_starts([job], index, started, now=T0 + 1, timeout=300, memo=memo)
    assert first.next_deadline == T0 + 300 and memo.reused == 0
    check_starts([job], index, started, now=T0 + 2, timeout=300, memo=memo)
    assert memo.reused == 1
    # The pod runs: the carried verdict is not used, the job has started.
    index.listener(_Cache([]), CacheEvent("MODIFIED", _pod_obj("a", 0, "Running", "", 2)))
    assert check_starts([job], index, started, now=T0 + 3, timeout=300, memo=memo).awaiting == set()
    assert started == {"a"} and memo.reused == 1


def test_an_edited_job_is_checked_again() -> None:
    """A gang of two with one pod running waits; edited to need one pod at a time, it has started."""
    index = PodIndex()
    index.listener(_Cache([]), CacheEvent("ADDED", _pod_obj("a", 0, "Running", "", 1)))
    memo = StartMemo()
    started: set[str] = set()
    gang = _job("a", 2, 1)
    assert check_starts([gang], index, started, now=T0 + 1, timeout=300, memo=memo).awaiting
    edited = _job("a", 1, 2)
    assert not JOB.needs_all_pods(edited.obj)
    check_starts([edited], index, started, now=T0 + 2, timeout=300, memo=memo)
    assert started == {"a"}


def test_the_deadline_ends_a_carried_verdict_without_any_change() -> None:
    index = PodIndex()
    index.listener(_Cache([]), CacheEvent("ADDED", _pod_obj("a", 0, "Pending", "", 1)))
    job = _job("a", 1, 1)
    memo = StartMemo()
    started: set[str] = set()
    assert check_starts([job], index, started, now=T0 + 299, timeout=300, memo=memo).failed == []
    late = check_starts([job], index, started, now=T0 + 300, timeout=300, memo=memo)
    assert [name.workload.key.name for name, _ in late.failed] == ["a"] and memo.reused == 0


def test_forgotten_admissions_leave_the_memo() -> None:
    index = PodIndex()
    memo = StartMemo()
    check_starts([_job("a", 1, 1), _job("b", 1, 1)], index, set(), now=T0, timeout=300, memo=memo)
    memo.keep_only({"b"})
    check_starts([_job("a", 1, 1), _job("b", 1, 1)], index, set(), now=T0 + 1, timeout=300, memo=memo)
    assert memo.reused == 1


def test_owners_whose_pods_are_gone_are_forgotten() -> None:
    """A long-running controller sees the pods of many finished jobs come and go: their versions must not pile
    up, and an owner with no pod left reads as one that never had any."""
    index = PodIndex()
    for number in range(50):
        pod = _pod_obj(f"job-{number}", 0, "Running", "", number + 1)
        index.listener(_Cache([]), CacheEvent("ADDED", pod))
        assert index.version(("user-a", "Job", f"job-{number}")) > 0
        index.listener(_Cache([]), CacheEvent("DELETED", pod))
        assert index.version(("user-a", "Job", f"job-{number}")) == 0
    assert index._versions == {}


def test_the_running_pods_of_some_owners_are_counted_as_of_all() -> None:
    # The read API counts one job's running pods by its owners only (docs/queueing.md, "Why a job waits, from the
    # controller"): the count must be the one the whole index gives.
    index = PodIndex()
    owners = {"a": batch_job_object("a", "user-a"), "b": batch_job_object("b", "user-a")}
    for name, owner, phase in (("a-0", "a", "Running"), ("a-1", "a", "Running"), ("a-2", "a", "Succeeded"),
                               ("b-0", "b", "Failed")):
        pod = builders.cluster_pod(name, namespace="user-a", owner=owners[owner], phase=phase)
        index.listener(None, CacheEvent("ADDED", pod_slim(pod)))  # type: ignore[arg-type]
    everything = index.running_by_owner()
    assert everything == {("user-a", "Job", "a"): 2}
    some = [("user-a", "Job", "a"), ("user-a", "Job", "b"), ("user-a", "Job", "gone")]
    assert index.running_by_owner(some) == everything
