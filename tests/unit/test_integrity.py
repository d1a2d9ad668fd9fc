"""The queue's integrity rules (webhook/core/integrity.py), table-driven over JobFacts."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tests.builders import res
from webhook.core.integrity import PRIORITY_REFUSED_BY_API, JobFacts, submission_problems, update_problems
from webhook.core.workload import PodSet

CLASSES = {"high": 1000}
LABEL = "metadata.labels[q]"


def facts(**changes: Any) -> JobFacts:
    base = JobFacts(
        kind="Job",
        hold_field="spec.suspend",
        gated=False,
        held=True,
        finished=False,
        quota_labels={LABEL: "a"},
        stamp="t1",
        stamp_field="metadata.annotations[s]",
        priority_classes={"spec.template.spec.priorityClassName": None},
        literal_priorities={},
        pod_sets=(PodSet("main", 2, res(cpu=1)),),
        pod_set_fields={"main": "spec.template"},
    )
    return dataclasses.replace(base, **changes)


@pytest.mark.parametrize(
    ("job", "expected"),
    [
        (facts(), []),
        (facts(literal_priorities={"spec.template.spec.priority": 7}), [PRIORITY_REFUSED_BY_API]),
        (facts(priority_is_resolved=True, literal_priorities={"spec.priority": 0}), []),
        (facts(priority_is_resolved=True, literal_priorities={"spec.priority": 9}), ["no PriorityClass (0)"]),
        (
            facts(
                priority_is_resolved=True,
                literal_priorities={"spec.priority": 9},
                priority_classes={"spec.priorityClassName": "high"},
            ),
            ["PriorityClass 'high' (1000)"],
        ),
        (
            facts(
                priority_is_resolved=True,
                literal_priorities={"spec.priority": 1000},
                priority_classes={"spec.priorityClassName": "high"},
            ),
            [],
        ),
        (  # a class the cache does not know yet: the API server resolved it, nothing to compare with
            facts(
                priority_is_resolved=True,
                literal_priorities={"spec.priority": 5},
                priority_classes={"spec.priorityClassName": "new"},
            ),
            [],
        ),
    ],
)
def test_submission_problems(job: JobFacts, expected: list[str]) -> None:
    problems = submission_problems(job, CLASSES)
    assert len(problems) == len(expected)
    for problem, words in zip(problems, expected, strict=True):
        assert words in problem
        assert problem.startswith("spec.")


RUNNING = facts(held=False)


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (facts(), facts(), []),
        (facts(), facts(held=False), ["spec.suspend: only kube-queue may un-suspend it"]),
        (facts(gated=True), facts(gated=True, held=False), ["remove its scheduling gate"]),
        (facts(), facts(quota_labels={LABEL: None}), [f"{LABEL}: the quota label (a) may not be removed"]),
        (facts(quota_labels={LABEL: None}), facts(), [f"{LABEL}: the quota label is set by kube-queue only"]),
        (facts(), facts(quota_labels={LABEL: "b"}), [f"{LABEL}: the quota label may not change (a -> b)"]),
        (facts(), facts(stamp="t2"), ["metadata.annotations[s]: the submission stamp"]),
        (
            facts(),
            facts(priority_classes={"spec.template.spec.priorityClassName": "high"}),
            ["spec.template.spec.priorityClassName: the priority class", "(none -> high)"],
        ),
        (facts(), facts(literal_priorities={"spec.template.spec.priority": 1}), [PRIORITY_REFUSED_BY_API]),
        (  # an old literal kept as it was is not a new problem
            facts(literal_priorities={"spec.template.spec.priority": 1}),
            facts(literal_priorities={"spec.template.spec.priority": 1}),
            [],
        ),
        (facts(), facts(pod_sets=(PodSet("main", 9, res(cpu=1)),)), []),  # held: may change
        (RUNNING, dataclasses.replace(RUNNING, pod_sets=(PodSet("main", 9, res(cpu=1)),)), ["2 pod(s)", "9 pod(s)"]),
        (RUNNING, dataclasses.replace(RUNNING, pod_sets=(PodSet("main", 2, res(cpu=2)),)), ["cpu=2"]),
        (RUNNING, dataclasses.replace(RUNNING, pod_sets=(PodSet("other", 2, res(cpu=1)),)), ["'main'", "'other'"]),
        (RUNNING, dataclasses.replace(RUNNING, pod_sets=None), ["to none"]),
        (RUNNING, dataclasses.replace(RUNNING, pod_sets=(PodSet("main", 9, res(cpu=1)),), held=True), []),
        (dataclasses.replace(RUNNING, finished=True), dataclasses.replace(RUNNING, pod_sets=()), []),
        (dataclasses.replace(RUNNING, pod_sets=None), RUNNING, []),  # an unreadable old size: nothing to keep
        (  # a request the LimitRange defaults, written in at submission, taken out again
            facts(),
            facts(unrequested=frozenset({"spec.template.spec.containers[0].resources.requests.cpu"})),
            ["spec.template.spec.containers[0].resources.requests.cpu: may not be removed", "LimitRange"],
        ),
        (facts(unrequested=frozenset({"a"})), facts(unrequested=frozenset({"a"})), []),  # already missing: kept
        (  # a user removing the backoff note would skip the wait (docs/start-timeout.md)
            facts(controller_notes={"metadata.annotations[kube-queue.x-k8s.io/backoff]": "{...}"}),
            facts(controller_notes={}),
            ["metadata.annotations[kube-queue.x-k8s.io/backoff]: written by kube-queue only"],
        ),
        (  # nor may one be forged
            facts(),
            facts(controller_notes={"metadata.annotations[kube-queue.x-k8s.io/admission]": "{}"}),
            ["metadata.annotations[kube-queue.x-k8s.io/admission]: written by kube-queue only"],
        ),
        (
            facts(controller_notes={"metadata.annotations[kube-queue.x-k8s.io/evicted]": "x"}),
            facts(controller_notes={"metadata.annotations[kube-queue.x-k8s.io/evicted]": "x"}),
            [],
        ),
        (
            dataclasses.replace(RUNNING, gated=True),
            dataclasses.replace(RUNNING, gated=True, pod_sets=(PodSet("main", 2, res(cpu=2)),)),
            ["delete and resubmit it"],
        ),
    ],
)
def test_update_problems(old: JobFacts, new: JobFacts, expected: list[str]) -> None:
    problems = update_problems(old, new, CLASSES)
    text = "; ".join(problems)
    if not expected:
        assert problems == []
    for words in expected:
        assert words in text
    for problem in problems:
        assert problem.split(":")[0].startswith(("spec", "metadata", "a"))  # every problem names its field


def test_a_size_change_of_an_admitted_job_says_how_to_proceed() -> None:
    (problem,) = update_problems(RUNNING, dataclasses.replace(RUNNING, pod_sets=(PodSet("main", 9, res(cpu=1)),)), {})
    assert problem.startswith("spec.template: pod set 'main'")
    assert "cannot change its size or requests" in problem
    assert "suspend it first (spec.suspend: true" in problem and "resubmit" in problem


def test_a_priority_class_that_does_not_exist_is_refused_at_submission() -> None:
    job = facts(priority_classes={"spec.template.spec.priorityClassName": "gone"})
    (problem,) = submission_problems(job, CLASSES)
    assert problem.startswith("spec.template.spec.priorityClassName: PriorityClass 'gone' does not exist")
    assert submission_problems(facts(priority_classes={"spec.template.spec.priorityClassName": "high"}), CLASSES) == []


def test_workload_controllers_are_matched_exactly_or_by_prefix() -> None:
    from webhook.core.integrity import is_workload_controller  # noqa: PLC0415

    assert is_workload_controller("system:serviceaccount:kube-system:job-controller")
    assert is_workload_controller("system:kube-controller-manager")
    assert is_workload_controller("system:node:ecs-3")
    assert not is_workload_controller("alice")
    assert not is_workload_controller("system:kube-controller-manager-impostor")
    assert is_workload_controller("system:serviceaccount:ops:operator", ("system:serviceaccount:ops:*",))


def test_a_bound_pod_is_refused_unless_a_kubelet_creates_it() -> None:
    from webhook.core.integrity import (  # noqa: PLC0415
        is_workload_controller,
        may_bind_at_creation,
        pod_creation_problems,
    )

    (problem,) = pod_creation_problems("ecs-3", binder=False, quota="root/Team")
    assert problem.startswith("spec.nodeName: a Pod in a namespace under quota root/Team must go through")
    assert "kubernetes.io/hostname: ecs-3" in problem
    assert pod_creation_problems("ecs-3", binder=True, quota="root/Team") == []
    assert pod_creation_problems(None, binder=False, quota="root/Team") == []
    assert may_bind_at_creation("system:node:ecs-3")  # a kubelet's mirror pod
    # Workload controllers copy a nodeName from what users wrote (a template, an Argo podSpecPatch).
    for creator in ("system:kube-controller-manager", "system:serviceaccount:kubeflow:training-operator",
                    "system:serviceaccount:kube-system:job-controller", "alice"):
        assert is_workload_controller(creator) == (creator != "alice")
        assert not may_bind_at_creation(creator), creator
