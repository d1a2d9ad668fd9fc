"""The controller's start estimates and run-time history (``webhook/controller/eta.py``, docs/eta.md): what a
refresh learns from finished jobs, what a restart keeps, what it publishes in the Queues' status."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from tests.builders import cluster_pod, seed_tree
from tests.fakeapi import batch_job
from tests.kubefake import stamp
from webhook.api.names import EXPECTED_RUNTIME_ANNOTATION
from webhook.api.objects import mapping, mappings
from webhook.controller.decide import decide, queue_statuses, with_published_estimates
from webhook.controller.eta import EtaInputs, EtaService, EtaStatus, _admission
from webhook.controller.model import TrackedJob, track
from webhook.controller.starts import PodIndex, pod_slim
from webhook.core.quota import QuotaTree
from webhook.core.workload import WorkloadKey
from webhook.kube.cache import CacheEvent
from webhook.workloads.registry import adapter_for

T0 = 1_780_000_000.0
JOB = adapter_for("batch", "Job")
DONE = [{"type": "Complete", "status": "True"}]


def tracked(tree: QuotaTree, obj: dict[str, Any]) -> TrackedJob:
    assert JOB is not None
    leaf = tree.leaf_for_namespace(obj["metadata"]["namespace"])
    assert leaf is not None
    return track(JOB, obj, leaf, {})


def finished(name: str, admitted: float, ended: float, *, namespace: str = "user-a") -> dict[str, Any]:
    obj = batch_job(name, namespace, workers=1, cpu="10", created=admitted - 5, leaf="Department-a",
                    admitted_at=admitted, conditions=DONE, succeeded=1)
    obj["status"]["completionTime"] = stamp(ended)
    return obj


def inputs(tree: QuotaTree, jobs: Sequence[TrackedJob], now: float, queues: dict[str, Any] | None = None) -> EtaInputs:
    return EtaInputs(tree, jobs, queues or {}, Fraction(1), False, now)


def service(pods: PodIndex | None = None) -> EtaService:
    return EtaService(5.0, pods or PodIndex(), wall=lambda: T0)


def test_a_succeeded_job_teaches_the_history_its_run_time_once() -> None:
    tree = seed_tree()
    jobs = [tracked(tree, finished("train-1", T0, T0 + 60)), tracked(tree, finished("train-2", T0, T0 + 90)),
            tracked(tree, batch_job("train-3", "user-a", created=T0, leaf="Department-a", admitted_at=T0,
                                    conditions=[{"type": "Failed", "status": "True"}]))]
    eta = service()
    eta.refresh(inputs(tree, jobs, T0 + 100), {})
    eta.refresh(inputs(tree, jobs, T0 + 105), {})
    assert eta.history.groups == {("user-a", "Job", "train"): [60.0, 90.0]}  # the failed one teaches nothing


def test_a_restart_reads_the_history_back_and_counts_only_what_finished_since() -> None:
    tree = seed_tree()
    first = service()
    old = tracked(tree, finished("train-1", T0, T0 + 60))
    status = first.refresh(inputs(tree, [old], T0 + 100), {})
    queue = {"root-department-a-user-a": {"status": {"runtimeHistory": status.history["user-a"]}}}
    again = service()
    new = tracked(tree, finished("train-2", T0 + 100, T0 + 190))
    again.refresh(inputs(tree, [old, new], T0 + 200, queue), {})
    assert again.history.groups == {("user-a", "Job", "train"): [60.0, 90.0]}


def test_waiting_jobs_get_their_estimate_and_it_stays_put_in_the_queue_while_it_moves_little() -> None:
    tree = seed_tree()
    running_job = batch_job("big-1", "user-a", workers=10, cpu="10", created=T0, leaf="Department-a",
                            admitted_at=T0, annotations={EXPECTED_RUNTIME_ANNOTATION: "10m"})
    waiting_job = batch_job("next-1", "user-b", workers=5, cpu="10", created=T0 + 1, leaf="Department-a",
                            suspended=True, annotations={EXPECTED_RUNTIME_ANNOTATION: "5m"})
    jobs = [tracked(tree, running_job), tracked(tree, waiting_job)]
    key = WorkloadKey("Job", "user-b", "next-1")
    eta = service()
    decisions = decide(tree, jobs, {}, oversell_rate=Fraction(1), now=T0 + 60)

    def status(running_since: float, now: float) -> Any:
        found = eta.refresh(inputs(tree, jobs, now), {jobs[0].workload.key: running_since})
        return queue_statuses(tree, decisions, 200, found)["root-department-a-user-b"], found.items[key]

    published, first = status(T0, T0 + 60)
    assert first == {"estimatedStart": stamp(T0 + 600), "estimatedStartLatest": stamp(T0 + 600)}
    # Its pods were seen running 20 s later: 20 s is less than a twentieth of the 550 s ahead, so the Queue's
    # status stays as published (no write for it).
    later, fresh = status(T0 + 20, T0 + 70)
    assert fresh["estimatedStart"] == stamp(T0 + 620)
    assert with_published_estimates(later, published, T0 + 70) == published
    # 100 s later than published: more than it may move unseen, and the status is rewritten.
    moved, fresh = status(T0 + 100, T0 + 110)
    assert fresh["estimatedStart"] == stamp(T0 + 700)
    assert with_published_estimates(moved, published, T0 + 110) != published


def test_a_status_rewritten_for_one_estimate_or_a_job_carries_every_fresh_figure() -> None:
    """What keeps published figures decides only whether a Queue's status is written; when it is, the writer
    writes the status with fresh figures (``tests/service/test_controller_eta.py`` holds it to that)."""
    def item(name: str, ahead: float) -> dict[str, Any]:
        return {"name": name, "namespace": "user-a", "priority": 0, "position": 1,
                "estimatedStart": stamp(T0 + ahead), "estimatedStartLatest": stamp(T0 + ahead)}

    def queue(*items: dict[str, Any]) -> dict[str, Any]:
        return {"queueItemDetails": {"active": list(items), "backoff": []}}

    published = queue(item("a-1", 600), item("a-2", 900))
    assert with_published_estimates(queue(item("a-1", 605), item("a-2", 905)), published, T0) == published
    far = with_published_estimates(queue(item("a-1", 605), item("a-2", 1000)), published, T0)
    kept = mappings(mapping(far["queueItemDetails"]).get("active"))[0]
    assert far != published and kept == item("a-1", 600)  # kept only in the comparison
    joined = queue(item("a-1", 605), item("a-2", 905), item("a-3", 1200))
    assert with_published_estimates(joined, published, T0) != published
    # An estimate that appears or goes is worth a write; none before and none now is not.
    gone = {key: value for key, value in item("a-1", 605).items() if not key.startswith("estimated")}
    assert with_published_estimates(queue(gone, item("a-2", 905)), published, T0) != published
    assert with_published_estimates(queue(gone), queue(gone), T0) == queue(gone)


def test_pods_seen_running_date_the_run_and_a_job_running_when_first_seen_counts_from_its_admission() -> None:
    tree = seed_tree()
    pods = PodIndex()
    early = batch_job("early-1", "user-a", created=T0, leaf="Department-a", admitted_at=T0)
    late = batch_job("late-1", "user-b", created=T0, leaf="Department-a", admitted_at=T0 + 10)
    pods.listener(None, CacheEvent("ADDED", pod_slim(cluster_pod("early-1-x", namespace="user-a", owner=early))))  # type: ignore[arg-type]
    jobs = [tracked(tree, early), tracked(tree, late)]
    eta = service(pods)
    assert eta._running(jobs, T0 + 50) == {jobs[0].workload.key: T0}
    pods.listener(None, CacheEvent("ADDED", pod_slim(cluster_pod("late-1-x", namespace="user-b", owner=late))))  # type: ignore[arg-type]
    assert eta._running(jobs, T0 + 80)[jobs[1].workload.key] == T0 + 80


def test_a_run_counts_from_its_pods_start_not_from_when_a_refresh_first_saw_it() -> None:
    """A refresh sees a pod run up to ``--eta-interval`` late: the history would learn run times that much short
    (a fifth of a 12 s job at 5 s). The pod's start dates it, never before the admission (a start is kept to the
    second, the admission to the microsecond)."""
    tree = seed_tree()
    pods = PodIndex()
    late = batch_job("late-1", "user-a", created=T0, leaf="Department-a", admitted_at=T0 + 10)
    quick = batch_job("quick-1", "user-b", created=T0, leaf="Department-a", admitted_at=T0 + 21)
    for name, namespace, owner, started in (("late-1-x", "user-a", late, T0 + 12),
                                            ("quick-1-x", "user-b", quick, T0 + 20)):
        pod = cluster_pod(name, namespace=namespace, owner=owner, status={"startTime": stamp(started)})
        pods.listener(None, CacheEvent("ADDED", pod_slim(pod)))  # type: ignore[arg-type]
    jobs = [tracked(tree, late), tracked(tree, quick)]
    eta = service(pods)
    eta._pending.update(_admission(job) for job in jobs)  # seen waiting for their pods before
    assert eta._running(jobs, T0 + 45) == {jobs[0].workload.key: T0 + 12, jobs[1].workload.key: T0 + 21}


def test_the_queue_status_carries_the_estimates_and_the_history() -> None:
    tree = seed_tree()
    waiting_job = tracked(tree, batch_job("next-1", "user-b", created=T0, leaf="Department-a", suspended=True,
                                          workers=20, cpu="10"))
    decisions = decide(tree, [waiting_job], {}, oversell_rate=Fraction(1))
    eta = EtaStatus({waiting_job.workload.key: {"estimatedStart": "2026-05-28T20:30:00Z"}},
                    {"user-b": [{"kind": "Job", "stem": "next", "seconds": [60], "lastFinished": "x"}]})
    statuses = queue_statuses(tree, decisions, 200, eta)
    status = statuses["root-department-a-user-b"]
    assert status["queueItemDetails"]["active"][0]["estimatedStart"] == "2026-05-28T20:30:00Z"
    assert status["runtimeHistory"][0]["stem"] == "next"
    assert "runtimeHistory" not in statuses["root-department-a-user-a"]
    without = queue_statuses(tree, decisions, 200)
    assert "runtimeHistory" not in without["root-department-a-user-b"]
    assert "estimatedStart" not in without["root-department-a-user-b"]["queueItemDetails"]["active"][0]


def test_the_control_planes_time_around_a_run_is_learned_kept_on_the_tree_and_added_to_each_turn() -> None:
    """docs/eta.md, "the control plane's time": admitted at T0, its pod starts at T0 + 1, its Job completes at
    T0 + 60 and the first pass to see it finished runs at T0 + 61.25: 1 s before the run, 1.25 s after it."""
    tree = seed_tree()
    pods = PodIndex()
    admitted = batch_job("train-1", "user-a", workers=1, cpu="10", created=T0 - 5, leaf="Department-a",
                         admitted_at=T0)
    pod = cluster_pod("train-1-x", namespace="user-a", owner=admitted, status={"startTime": stamp(T0 + 1)})
    pods.listener(None, CacheEvent("ADDED", pod_slim(pod)))  # type: ignore[arg-type]
    eta = service(pods)
    running_jobs = [tracked(tree, admitted)]
    eta.offer(inputs(tree, running_jobs, T0 + 30))
    assert eta._running(running_jobs, T0 + 30) == {running_jobs[0].workload.key: T0 + 1}
    done = [tracked(tree, finished("train-1", T0, T0 + 60))]
    eta.offer(inputs(tree, done, T0 + 61.25))
    eta.offer(inputs(tree, done, T0 + 64))  # a later pass does not move it
    eta._running(done, T0 + 65)
    status = eta.refresh(inputs(tree, done, T0 + 65), {})
    assert eta.history.groups == {("user-a", "Job", "train"): [59.0]}
    assert status.handoff == {"startSeconds": [1.0], "endSeconds": [1.25]}
    # A new leader reads it back from the tree's status and adds it to every turn: a job waiting behind one
    # running for another 100 s starts 1.25 s after that run's end and 1 s after its admission.
    again = service()
    holder = batch_job("big-1", "user-a", workers=10, cpu="10", created=T0, leaf="Department-a", admitted_at=T0,
                       annotations={EXPECTED_RUNTIME_ANNOTATION: "10m"})
    waiting_job = batch_job("next-1", "user-b", workers=5, cpu="10", created=T0 + 1, leaf="Department-a",
                            suspended=True, annotations={EXPECTED_RUNTIME_ANNOTATION: "5m"})
    jobs = [tracked(tree, holder), tracked(tree, waiting_job)]
    stored = EtaInputs(tree, jobs, {}, Fraction(1), False, T0 + 500, tree_status={"handoff": status.handoff})
    published = again.refresh(stored, {jobs[0].workload.key: T0})
    assert published.items[WorkloadKey("Job", "user-b", "next-1")]["estimatedStart"] == stamp(T0 + 600 + 2.25)
    assert published.handoff == status.handoff
    assert service().refresh(inputs(tree, jobs, T0 + 500), {}).handoff is None  # nothing measured, nothing written


def test_the_replay_waits_while_the_read_api_builds_an_answer() -> None:
    # docs/queueing.md, "Reading every job": an answer over every job does not share the interpreter with the
    # replay; the replay goes on once the answer is built.
    estimates = service()
    estimates.reading(True)
    stepped = threading.Event()

    def one_step() -> None:
        estimates._wait_for_pass()
        stepped.set()

    step = threading.Thread(target=one_step, daemon=True)
    step.start()
    assert not stepped.wait(0.3), "the replay stepped on while an answer was being built"
    estimates.reading(False)
    assert stepped.wait(5.0), "the replay did not go on once the answer was built"
    step.join(5.0)
