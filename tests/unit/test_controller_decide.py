"""The controller's pure decisions: Queues in step with the tree, namespace labels, admission order under
Round and Block, reclaim as one step, positions, statuses."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from tests.builders import node, res, seed_tree, tree
from webhook.controller.decide import (
    Decisions,
    NamespaceAction,
    decide,
    desired_queues,
    leaf_policies,
    namespace_actions,
    queue_actions,
    queue_statuses,
    reason_key,
    tree_status,
)
from webhook.controller.model import TrackedJob, track
from webhook.controller.records import (
    ADMISSION_ANNOTATION,
    MANAGED_NAMESPACE_LABEL,
    QUEUE_LABEL,
    QUOTA_FULLNAME_ANNOTATION,
    STRICT_MARK_ANNOTATION,
)
from webhook.core.queueing import Policy
from webhook.core.quota import QuotaTree
from webhook.workloads.job import JobAdapter

JOB = JobAdapter()
SEED_QUEUES = {"root-department-a-user-a", "root-department-a-user-b", "root-department-b-user-c"}


def job_obj(
    name: str,
    namespace: str = "user-a",
    *,
    pods: int = 1,
    cpu: int = 10,
    memory: str = "10Gi",
    created: str = "2024-04-08T02:00:00Z",
    priority: int | None = None,
    admitted: bool = False,
    suspend: bool | None = None,
    admitted_at: str = "2024-04-08T02:10:00Z",
    status: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A batch/v1 Job as the API returns it: held unless ``admitted`` (then released with a record)."""
    annotations: dict[str, str] = {}
    if admitted:
        annotations[ADMISSION_ANNOTATION] = (
            f'{{"quota":"root/x","request":{{}},"admittedAt":"{admitted_at}","id":"{name}"}}'
        )
    template_spec: dict[str, Any] = {
        "containers": [{"name": "c", "resources": {"requests": {"cpu": str(cpu), "memory": memory}}}]
    }
    if priority is not None:
        template_spec["priority"] = priority
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "resourceVersion": "7",
            "creationTimestamp": created,
            "annotations": annotations,
        },
        "spec": {
            "suspend": (not admitted) if suspend is None else suspend,
            "parallelism": pods,
            "completions": pods,
            "template": {"spec": template_spec},
        },
        "status": status or {},
    }


def tracked(t: QuotaTree, *objs: dict[str, Any], priorities: dict[str, int] | None = None) -> list[TrackedJob]:
    out = []
    for obj in objs:
        leaf = t.leaf_for_namespace(obj["metadata"]["namespace"])
        assert leaf is not None
        out.append(track(JOB, obj, leaf, priorities or {}))
    return out


def names(jobs: tuple[TrackedJob, ...]) -> list[str]:
    return [job.workload.key.name for job in jobs]


def run(
    t: QuotaTree, *objs: dict[str, Any], rate: int = 1, strict: bool = False, queues: dict[str, Any] | None = None
) -> Decisions:
    return decide(t, tracked(t, *objs), queues or {}, oversell_rate=Fraction(rate), strict_priority=strict)


# Queues and namespaces ------------------------------------------------------------------------------------


def test_one_queue_per_namespace_of_each_leaf_named_as_the_seed() -> None:
    desired = desired_queues(seed_tree())
    assert set(desired) == SEED_QUEUES
    assert desired["root-department-a-user-b"].full_name == "root/Department-a"
    assert desired_queues(None) == {}


def test_missing_queues_are_created_with_label_annotation_and_round() -> None:
    actions = queue_actions(seed_tree(), {}, "kube-queue", strict=False)
    assert [(a.verb, a.name) for a in actions] == [("create", name) for name in sorted(SEED_QUEUES)]
    body = actions[0].body
    assert body["metadata"]["namespace"] == "kube-queue"
    assert body["metadata"]["labels"] == {QUEUE_LABEL: "true"}
    assert body["metadata"]["annotations"][QUOTA_FULLNAME_ANNOTATION] == "root/Department-a"
    assert body["spec"] == {"queuePolicy": "Round"}


def _queue(
    name: str, policy: str | None = "Round", labelled: bool = True, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {
            "name": name,
            "labels": {QUEUE_LABEL: "true"} if labelled else {},
            "annotations": dict(annotations or {}),
        },
        "spec": {} if policy is None else {"queuePolicy": policy},
    }
    return obj


def _seed_queues(policy: str | None = "Round", **annotations: str) -> dict[str, dict[str, Any]]:
    full = {"root-department-a-user-a": "root/Department-a", "root-department-a-user-b": "root/Department-a",
            "root-department-b-user-c": "root/Department-b"}
    return {
        name: _queue(name, policy, annotations={QUOTA_FULLNAME_ANNOTATION: quota, **annotations})
        for name, quota in full.items()
    }


def test_queues_in_step_need_no_action() -> None:
    assert queue_actions(seed_tree(), _seed_queues(), "kube-queue", strict=False) == []


def test_stale_queues_with_our_label_are_deleted_and_others_left_alone() -> None:
    existing = {**_seed_queues(), "root-gone-user-z": _queue("root-gone-user-z"),
                "hand-made": _queue("hand-made", labelled=False)}
    actions = queue_actions(seed_tree(), existing, "kube-queue", strict=False)
    assert [(a.verb, a.name) for a in actions] == [("delete", "root-gone-user-z")]


def test_no_tree_deletes_every_queue_we_own() -> None:
    actions = queue_actions(None, _seed_queues(), "kube-queue", strict=False)
    assert sorted(a.name for a in actions if a.verb == "delete") == sorted(SEED_QUEUES)


def test_a_renamed_quota_fixes_the_annotation_and_adopts_an_unlabelled_queue() -> None:
    existing = _seed_queues()
    existing["root-department-a-user-a"] = _queue(
        "root-department-a-user-a", labelled=False, annotations={QUOTA_FULLNAME_ANNOTATION: "root/old"}
    )
    (action,) = queue_actions(seed_tree(), existing, "kube-queue", strict=False)
    assert action.verb == "patch"
    assert action.body == {
        "metadata": {"labels": {QUEUE_LABEL: "true"}, "annotations": {QUOTA_FULLNAME_ANNOTATION: "root/Department-a"}}
    }


def test_strict_priority_turns_every_queue_to_block_and_back_only_where_it_did() -> None:
    actions = queue_actions(seed_tree(), _seed_queues(), "kube-queue", strict=True)
    assert len(actions) == 3
    for action in actions:
        assert action.body["spec"] == {"queuePolicy": "Block"}
        assert action.body["metadata"]["annotations"] == {STRICT_MARK_ANNOTATION: "true"}
    forced = _seed_queues("Block", **{STRICT_MARK_ANNOTATION: "true"})
    forced["root-department-b-user-c"] = _queue(
        "root-department-b-user-c", "Block", annotations={QUOTA_FULLNAME_ANNOTATION: "root/Department-b"}
    )
    back = queue_actions(seed_tree(), forced, "kube-queue", strict=False)
    assert sorted(a.name for a in back) == ["root-department-a-user-a", "root-department-a-user-b"]
    for action in back:
        assert action.body["spec"] == {"queuePolicy": "Round"}
        assert action.body["metadata"]["annotations"] == {STRICT_MARK_ANNOTATION: None}


def test_strict_priority_creates_block_queues() -> None:
    (first, *_) = queue_actions(seed_tree(), {}, "kube-queue", strict=True)
    assert first.body["spec"] == {"queuePolicy": "Block"}


def test_a_leaf_is_block_when_strict_or_when_any_of_its_queues_says_block() -> None:
    t = seed_tree()
    assert leaf_policies(t, _seed_queues(), strict=False) == {
        "department-a": Policy.ROUND, "department-b": Policy.ROUND
    }
    queues = _seed_queues()
    queues["root-department-a-user-b"]["spec"]["queuePolicy"] = "Block"
    assert leaf_policies(t, queues, strict=False)["department-a"] is Policy.BLOCK
    assert set(leaf_policies(t, {}, strict=True).values()) == {Policy.BLOCK}


def test_namespaces_of_the_tree_are_labelled_and_leavers_unlabelled() -> None:
    namespaces: dict[str, dict[str, Any]] = {
        "user-a": {"metadata": {"name": "user-a"}},
        "user-b": {"metadata": {"name": "user-b", "labels": {MANAGED_NAMESPACE_LABEL: "true"}}},
        "old": {"metadata": {"name": "old", "labels": {MANAGED_NAMESPACE_LABEL: "true"}}},
        "other": {"metadata": {"name": "other"}},
    }
    assert namespace_actions(seed_tree(), namespaces) == [
        NamespaceAction("old", None),
        NamespaceAction("user-a", "true"),
    ]
    assert namespace_actions(None, namespaces) == [NamespaceAction("old", None), NamespaceAction("user-b", None)]


# Admission --------------------------------------------------------------------------------------------------


def test_scenario_1_with_oversellrate_1_the_second_job_waits_at_position_1() -> None:
    t = seed_tree()
    first = job_obj("pi-1", pods=6, created="2024-04-08T02:00:00Z")
    second = job_obj("pi-2", pods=6, created="2024-04-08T02:00:01Z")
    decisions = run(t, first, second)
    assert names(decisions.admissions) == ["pi-1"]
    assert names(decisions.waiting) == ["pi-2"]
    (waiting,) = decisions.waiting
    assert decisions.positions[waiting.workload.key] == 1
    assert "quota root/Department-a: cpu request 60 + used 60 > limit 100" in decisions.reasons[
        waiting.workload.key
    ].explain()


def test_oversellrate_2_admits_both() -> None:
    decisions = run(seed_tree(), job_obj("pi-1", pods=6), job_obj("pi-2", pods=6), rate=2)
    assert names(decisions.admissions) == ["pi-1", "pi-2"]


def test_admitted_jobs_are_rebuilt_from_their_records_not_memory() -> None:
    t = seed_tree()
    running = job_obj("pi-1", pods=6, admitted=True)
    decisions = run(t, running, job_obj("pi-2", pods=6))
    assert decisions.admissions == ()
    status = tree_status(t, decisions)["root"]
    assert status["used"] == {"cpu": "60", "kube-queue/max-jobs": "1", "memory": "60Gi"}
    assert status["request"] == {"cpu": "120", "kube-queue/max-jobs": "2", "memory": "120Gi"}


def test_round_skips_a_job_that_does_not_fit_block_holds_everything_behind_it() -> None:
    t = seed_tree()
    running = job_obj("running", pods=6, admitted=True)
    big = job_obj("big", pods=6, created="2024-04-08T02:00:01Z")
    small = job_obj("small", pods=1, created="2024-04-08T02:00:02Z")
    assert names(run(t, running, big, small).admissions) == ["small"]
    blocked = run(t, running, big, small, strict=True)
    assert blocked.admissions == ()
    small_key = blocked.waiting[1].workload.key
    assert blocked.reasons[small_key].blocked_behind == blocked.waiting[0].workload.key
    assert reason_key(blocked.reasons[small_key]).startswith("behind:")


def test_scenario_2_priority_class_values_order_the_queue() -> None:
    t = seed_tree()
    running = job_obj("pi-1", pods=6, admitted=True)
    early = job_obj("pi-2", pods=6, created="2024-04-08T02:00:01Z")
    urgent = job_obj("pi-3", pods=6, created="2024-04-08T02:05:00Z")
    urgent["spec"]["template"]["spec"]["priorityClassName"] = "priority-2"
    jobs = tracked(t, running, early, urgent, priorities={"priority-2": 2})
    decisions = decide(t, jobs, {}, oversell_rate=Fraction(1), strict_priority=True)
    assert [(job.workload.key.name, decisions.positions[job.workload.key]) for job in decisions.waiting] == [
        ("pi-3", 1),
        ("pi-2", 2),
    ]
    statuses = queue_statuses(t, decisions, cap=200)
    assert statuses["root-department-a-user-a"]["queueItemDetails"] == {
        "active": [
            {"name": "pi-3", "namespace": "user-a", "priority": 2, "position": 1},
            {"name": "pi-2", "namespace": "user-a", "priority": 0, "position": 2},
        ],
        "backoff": [],
    }
    assert statuses["root-department-b-user-c"]["queueItemDetails"] == {"active": [], "backoff": []}


def test_scenario_3_user_c_reclaims_by_evicting_the_most_recent_borrower() -> None:
    t = seed_tree()
    a1 = job_obj("a1", pods=6, admitted=True, admitted_at="2024-04-08T02:10:00Z")
    b1 = job_obj("b1", "user-b", pods=4, admitted=True, admitted_at="2024-04-08T02:11:00Z")
    c1 = job_obj("c1", "user-c", pods=1, created="2024-04-08T02:12:00Z", priority=3)
    decisions = run(t, a1, b1, c1, strict=True)
    assert decisions.admissions == ()
    (plan,) = decisions.reclaims
    assert plan.preemptor.workload.key.name == "c1"
    assert names(plan.victims) == ["b1"]
    assert "root/Department-b reclaims" in plan.reason
    assert [(job.workload.key.name, decisions.positions[job.workload.key]) for job in decisions.waiting] == [
        ("b1", 1)
    ]
    used = tree_status(t, decisions)["root"]["used"]
    assert used["cpu"] == "70"


def test_no_reclaim_beyond_min_the_borrower_only_waits() -> None:
    t = seed_tree()
    a1 = job_obj("a1", pods=6, admitted=True)
    b1 = job_obj("b1", "user-b", pods=4, admitted=True)
    greedy = job_obj("c1", "user-c", pods=5, created="2024-04-08T02:12:00Z")
    decisions = run(t, a1, b1, greedy)
    assert decisions.reclaims == ()
    assert names(decisions.waiting) == ["c1"]


def test_after_a_reclaim_leftover_capacity_goes_to_the_next_fitting_job_in_a_second_pass() -> None:
    total = res(cpu=10)
    t = tree(node("root", min=total, max=total, children=(
        node("a", min=res(cpu=5), max=total, namespaces=("ns-a",)),
        node("b", min=res(cpu=5), max=total, namespaces=("ns-b",)),
    )))
    a1 = job_obj("a1", "ns-a", cpu=5, memory="1Gi", admitted=True, admitted_at="2024-04-08T02:10:00Z")
    a2 = job_obj("a2", "ns-a", cpu=5, memory="1Gi", admitted=True, admitted_at="2024-04-08T02:11:00Z")
    b1 = job_obj("b1", "ns-b", cpu=2, memory="1Gi", created="2024-04-08T02:12:00Z")
    b2 = job_obj("b2", "ns-b", cpu=3, memory="1Gi", created="2024-04-08T02:13:00Z")
    decisions = run(t, a1, a2, b1, b2)
    assert [names(plan.victims) for plan in decisions.reclaims] == [["a2"]]
    assert decisions.reclaims[0].preemptor.workload.key.name == "b1"
    assert names(decisions.late_admissions) == ["b2"]
    assert names(decisions.waiting) == ["a2"]


def test_a_held_job_with_a_leftover_record_is_queued_and_its_record_is_cleared() -> None:
    stale = job_obj("pi-1", admitted=True, suspend=True)
    decisions = run(seed_tree(), stale)
    assert names(decisions.stale_records) == ["pi-1"]


def test_a_released_job_without_record_still_uses_its_quota() -> None:
    t = seed_tree()
    outside = job_obj("outside", pods=6, suspend=False)
    decisions = run(t, outside, job_obj("pi-2", pods=6))
    assert decisions.admissions == ()


def test_a_jobs_finished_pods_free_their_share() -> None:
    t = seed_tree()
    half_done = job_obj("pi-1", pods=6, admitted=True, status={"succeeded": 3, "active": 3})
    decisions = run(t, half_done, job_obj("pi-2", pods=4))
    assert names(decisions.admissions) == ["pi-2"]


def test_finished_jobs_count_nowhere() -> None:
    t = seed_tree()
    done = job_obj("pi-1", pods=6, admitted=True,
                   status={"conditions": [{"type": "Complete", "status": "True"}], "succeeded": 6})
    decisions = run(t, done, job_obj("pi-2", pods=6))
    assert names(decisions.admissions) == ["pi-2"]


def test_queue_status_is_capped_with_a_count_of_the_rest() -> None:
    t = seed_tree()
    jobs = [job_obj(f"j{i:03d}", pods=11, created=f"2024-04-08T02:{i // 60:02d}:{i % 60:02d}Z") for i in range(7)]
    decisions = run(t, *jobs)
    details = queue_statuses(t, decisions, cap=3)["root-department-a-user-a"]["queueItemDetails"]
    assert [item["position"] for item in details["active"]] == [1, 2, 3]
    assert details["activeOmitted"] == 4


@pytest.mark.parametrize("strict", [False, True])
def test_positions_are_per_quota_across_its_namespaces(strict: bool) -> None:
    t = seed_tree()
    running = job_obj("running", pods=10, admitted=True)
    a = job_obj("a", "user-a", created="2024-04-08T02:00:01Z")
    b = job_obj("b", "user-b", created="2024-04-08T02:00:02Z")
    decisions = run(t, running, a, b, strict=strict)
    statuses = queue_statuses(t, decisions, cap=10)
    assert statuses["root-department-a-user-a"]["queueItemDetails"]["active"][0]["position"] == 1
    assert statuses["root-department-a-user-b"]["queueItemDetails"]["active"][0]["position"] == 2
