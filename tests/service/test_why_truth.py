"""``kq why`` tells the truth: what it says of a waiting job is what the controller's next pass does with it.

Hypothesis makes clusters of the seed's tree at oversell rate 1: held and admitted Jobs of every namespace with
random sizes and PriorityClasses, their pods, and pods no job accounts for (a Deployment's, a StatefulSet's,
a DaemonSet's, orphans of deleted jobs), some of them under PodDisruptionBudgets. The same objects go to the
controller (its watch caches, on the in-memory API server) and to ``kq`` (its reads, on the CLI's fake API).
For every QUEUING job, ``kq why``'s verdict must match the controller's pass: "fits now" exactly when the pass
admits it, "admitted by reclaim" exactly when the pass reclaims for it (naming the same victims), and
otherwise the job waits at the position ``kq why`` gives.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.builders import batch_job_object, tree_object
from tests.fakeapi import FakeApi as CliApi
from tests.fakeapi import priority_class
from tests.service.controller_support import BUDGETS, PODS, catch_up, driven, seed_api
from tests.service.kubeclient_fake import JOBS
from webhook.api.names import QUOTA_LABEL
from webhook.api.statuses import JobStatus
from webhook.cli import readapi
from webhook.controller.decide import JobDecisions
from webhook.readmodel.explain import WaitSources, answer_json, answer_waiting
from webhook.readmodel.explained import WhyInputs, explain_served, served_estimate
from webhook.readmodel.fetch import load_snapshot
from webhook.readmodel.served import NOT_WAITING
from webhook.readmodel.view import job_views
from webhook.readmodel.waiting import WaitReport, explain_wait
from webhook.workloads.base import value_at

NAMESPACES = ("user-a", "user-b", "user-c")
LEAF = {"user-a": "Department-a", "user-b": "Department-a", "user-c": "Department-b"}
CLASSES = (None, "priority-2", "priority-3")


@st.composite
def clusters(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Jobs, their pods and loose pods: the objects of one cluster (without the tree and classes)."""
    objects: list[dict[str, Any]] = []
    minute = iter(range(60))
    for index in range(draw(st.integers(1, 7))):
        namespace = draw(st.sampled_from(NAMESPACES))
        pods = draw(st.integers(1, 4))
        cpu = draw(st.sampled_from((10, 20)))
        created = f"2024-04-08T02:{next(minute):02d}:00Z"
        admitted = draw(st.booleans())
        job = batch_job_object(f"j{index}", namespace, pods=pods, cpu=cpu, created=created,
                               admitted_at="2024-04-08T03:00:00Z" if admitted else None)
        job["metadata"]["uid"] = f"uid-j{index}"
        job["metadata"].setdefault("labels", {})[QUOTA_LABEL] = LEAF[namespace]
        job["spec"]["template"]["metadata"] = {"labels": {QUOTA_LABEL: LEAF[namespace]}}
        klass = draw(st.sampled_from(CLASSES))
        if klass is not None:
            job["spec"]["template"]["spec"]["priorityClassName"] = klass
        objects.append(job)
        if admitted and draw(st.booleans()):
            for pod in range(pods):
                objects.append(_pod(f"j{index}-{pod}", namespace, cpu, ("Job", f"j{index}"), created))
    for index in range(draw(st.integers(0, 8))):
        namespace = draw(st.sampled_from(NAMESPACES))
        owner = draw(st.sampled_from([("ReplicaSet", "web-1"), ("StatefulSet", "db"), ("DaemonSet", "agent"),
                                      None]))
        app = draw(st.sampled_from(("web", "db")))
        created = f"2024-04-08T01:{next(minute):02d}:00Z"
        objects.append(_pod(f"loose-{index}", namespace, draw(st.sampled_from((10, 20))), owner, created,
                            labels={"app": app}, priority=draw(st.sampled_from((0, 2)))))
    if draw(st.booleans()):
        # Department-a borrows through pods no job accounts for, so Department-b's jobs may reclaim.
        for index in range(draw(st.integers(6, 10))):
            namespace = draw(st.sampled_from(("user-a", "user-b")))
            created = f"2024-04-08T00:{next(minute):02d}:00Z"
            objects.append(_pod(f"borrow-{index}", namespace, 10, ("ReplicaSet", "big-1"), created,
                                labels={"app": draw(st.sampled_from(("web", "db")))}))
        carol = batch_job_object("carol", "user-c", pods=1, cpu=10, created="2024-04-08T04:00:00Z")
        carol["metadata"]["uid"] = "uid-carol"
        carol["metadata"].setdefault("labels", {})[QUOTA_LABEL] = LEAF["user-c"]
        objects.append(carol)
    for namespace in draw(st.lists(st.sampled_from(NAMESPACES), unique=True, max_size=2)):
        objects.append({
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": namespace, "uid": f"pdb-{namespace}"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}},
            "status": {"disruptionsAllowed": draw(st.integers(0, 1))},
        })
    return objects


def _pod(name: str, namespace: str, cpu: int, owner: tuple[str, str] | None, created: str, *,
         labels: dict[str, str] | None = None, priority: int = 0) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-{name}",
                                "creationTimestamp": created,
                                "labels": {QUOTA_LABEL: LEAF[namespace], **(labels or {})}}
    if owner is not None:
        metadata["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner[0], "name": owner[1],
                                        "uid": f"uid-{owner[1]}", "controller": True}]
    spec: dict[str, Any] = {"nodeName": "ecs-0",
                            "containers": [{"name": "c", "resources": {"requests": {"cpu": str(cpu)}}}]}
    if priority:
        spec["priority"] = priority
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": {"phase": "Running"}}


async def _controller_pass(objects: list[dict[str, Any]]) -> JobDecisions:
    decisions, _ = await _served_pass(objects)
    return decisions


async def _served_pass(objects: list[dict[str, Any]]) -> tuple[JobDecisions, dict[str, WhyInputs]]:
    """The controller's pass over ``objects``, and what its read API reads for each Job right after it."""
    api = seed_api()
    for obj in objects:
        kind = {"Job": JOBS, "Pod": PODS, "PodDisruptionBudget": BUDGETS}[obj["kind"]]
        api.put(kind, obj)
    # No start check: the generated admissions are old and their pods may be missing, which the controller
    # would back off first (kq why shows such a job as BACKOFF once it is).
    async with driven(api, start_timeout=0) as controller:
        await catch_up(api, controller)
        decisions = await controller.reconcile()
        assert controller.eta is not None
        controller.eta.refresh_now()  # the start estimates of the jobs the pass left waiting
        taken = {}
        for obj in objects:
            if obj["kind"] == "Job":
                namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
                inputs = await readapi._collect_one(controller, namespace, name)
                assert inputs is not None
                taken[f"{namespace}/{name}"] = inputs
    assert decisions is not None
    return decisions, taken


def _reports(objects: list[dict[str, Any]]) -> dict[str, WaitReport]:
    base = [tree_object(), priority_class("priority-2", 2), priority_class("priority-3", 3)]
    api = CliApi([*base, *objects], webhook=False)
    snapshot = load_snapshot(api, list(NAMESPACES), now=0.0, complete=True)
    assert snapshot.complete and snapshot.tree_pods is not None, "kq why must read every job and pod"
    views = job_views(snapshot)
    return {
        f"{view.namespace}/{view.name}": explain_wait(snapshot, views, view, Fraction(1), "--oversellrate")
        for view in views
        if view.status == JobStatus.QUEUING and view.workload is not None and view.leaf is not None
    }


SEEN: dict[str, int] = {"fits": 0, "reclaim": 0, "waits": 0}


def _borrowed() -> list[dict[str, Any]]:
    """Department-a borrows 40 CPU through a Deployment's pods; a user-c job of 10 CPU waits, one fits."""
    pods = [_pod(f"web-{index}", "user-a", 10, ("ReplicaSet", "web-1"), f"2024-04-08T01:{index:02d}:00Z")
            for index in range(10)]
    jobs = []
    for name in ("carol", "dave"):
        job = batch_job_object(name, "user-c", pods=1, cpu=10 if name == "carol" else 50,
                               created="2024-04-08T04:00:00Z")
        job["metadata"]["uid"] = f"uid-{name}"
        jobs.append(job)
    return [*pods, *jobs]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(objects=_borrowed())
@given(objects=clusters())
def test_kq_why_says_what_the_next_pass_does(objects: list[dict[str, Any]]) -> None:
    decisions = asyncio.run(_controller_pass(objects))
    reports = _reports(objects)
    admitted = {f"{job.workload.key.namespace}/{job.workload.key.name}"
                for job in (*decisions.admissions, *decisions.late_admissions)}
    reclaims = {f"{plan.preemptor.workload.key.namespace}/{plan.preemptor.workload.key.name}": plan
                for plan in decisions.reclaims}
    for name, report in reports.items():
        if report.by_reclaim:
            SEEN["reclaim"] += 1
            assert name in reclaims, f"kq why says {name} is admitted by reclaim; the pass does not reclaim for it"
            assert report.reclaim == reclaims[name].reason
        elif report.fits_now:
            SEEN["fits"] += 1
            assert name in admitted, f"kq why says {name} fits now; the pass does not admit it"
        else:
            SEEN["waits"] += 1
            assert name not in admitted and name not in reclaims, f"kq why says {name} waits; the pass admits it"
            waiting = {f"{job.workload.key.namespace}/{job.workload.key.name}": job for job in decisions.waiting}
            assert report.position == decisions.positions.get(waiting[name].workload.key)
    for name in (*admitted, *reclaims):
        assert name in reports, f"the pass admits {name}, which kq why does not show as QUEUING"


def test_the_property_reached_every_verdict() -> None:
    # Runs after the property (same module, in order): it must not pass by never reaching a verdict.
    if sum(SEEN.values()) == 0:
        test_kq_why_says_what_the_next_pass_does()
    assert all(count > 0 for count in SEEN.values()), SEEN


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(objects=_borrowed())
@given(objects=clusters())
def test_the_controllers_answer_is_the_one_kq_why_computes(objects: list[dict[str, Any]]) -> None:
    """The read API's answer (docs/queueing.md, "Why a job waits, from the controller"), made from the
    controller's caches and its last pass, is to the letter what ``kq why`` computes from every job it reads,
    for every job that still waits after that pass (with the start estimate the controller's refresh made: a
    packed estimate reads back as ``kq`` would say it is checked in ``tests/unit/test_eta_pack.py``)."""
    decisions, taken = asyncio.run(_served_pass(objects))
    base = [tree_object(), priority_class("priority-2", 2), priority_class("priority-3", 3)]
    snapshot = load_snapshot(CliApi([*base, *objects], webhook=False), list(NAMESPACES), now=0.0, complete=True)
    views = {f"{view.namespace}/{view.name}": view for view in job_views(snapshot)}
    waiting = {f"{job.workload.key.namespace}/{job.workload.key.name}" for job in decisions.waiting}
    for name, inputs in taken.items():
        namespace, _, job_name = name.partition("/")
        served = explain_served(inputs, namespace, job_name, width=100)
        assert served.code == 200, served.body
        view = views[name]
        if name not in waiting or view.status != JobStatus.QUEUING:
            # Admitted by this pass (the controller's caches already show it released), or released before
            # it and held again by it.
            continue
        assert value_at(served.body, "unexplained", "reason") != NOT_WAITING
        report = explain_wait(snapshot, list(views.values()), view, inputs.rate, inputs.rate_source)
        direct = answer_waiting(view, inputs.context.now, 100, WaitSources(
            classes=snapshot.priority_classes, tree_known=True, wait=_given(report),
            eta=functools.partial(served_estimate, inputs, view.key), events=()))
        assert direct is not None
        assert served.body["why"] == answer_json(direct, view), name
        SERVED["waits"] += 1


SERVED = {"waits": 0}


def _given(report: WaitReport) -> Callable[[], WaitReport]:
    return lambda: report


def test_the_served_property_compared_waiting_jobs() -> None:
    if SERVED["waits"] == 0:
        test_the_controllers_answer_is_the_one_kq_why_computes()
    assert SERVED["waits"] > 0
