"""``kq why`` and ``kq list`` on when a waiting job should start (docs/eta.md), over the fake seed cluster of
``tests/clirun.py``: pi1 (60 CPU) runs in Department-a since T0 + 101; big (user-b, 40 CPU) and pi2 (user-a,
60 CPU) wait behind it; Department-b runs pend (10 CPU) and mnist (4 CPU); the root holds 100 CPU."""

from __future__ import annotations

import json
from typing import Any

from tests.clirun import NOW, T0, run, seed_objects
from tests.fakeapi import FakeApi
from tests.kubefake import stamp
from webhook.api.names import EXPECTED_RUNTIME_ANNOTATION, HANDOFF_STATUS
from webhook.readmodel.eta import about


def api(declared: dict[str, str], *, history: list[dict[str, Any]] | None = None,
        published: dict[str, dict[str, str]] | None = None, handoff: dict[str, list[float]] | None = None,
        **kwargs: Any) -> FakeApi:
    """The seed cluster with run times declared on some jobs (by name), a run-time history on user-a's Queue,
    estimates published on the Queues' items (by job name) and the control plane's time on the tree."""
    objects = seed_objects()
    for obj in objects:
        meta = obj.get("metadata", {})
        if meta.get("name") in declared and obj.get("kind") != "Pod":
            meta.setdefault("annotations", {})[EXPECTED_RUNTIME_ANNOTATION] = declared[meta["name"]]
        if obj.get("kind") == "ElasticQuotaTree" and handoff is not None:
            obj.setdefault("status", {})[HANDOFF_STATUS] = handoff
        if obj.get("kind") == "Queue":
            status = obj.setdefault("status", {})
            if history is not None and meta["name"] == "root-department-a-user-a":
                status["runtimeHistory"] = history
            for item in status.get("queueItemDetails", {}).get("active", []):
                item.update((published or {}).get(item["name"], {}))
    return FakeApi(objects, namespace="user-a", now=NOW, served={"kubeflow.org": ["v1"]}, **kwargs)


def why_json(fake: FakeApi, job: str = "pi2") -> dict[str, Any]:
    result = run(["why", job, "-o", "json"], fake)
    assert result.code == 0, result.err
    answer: dict[str, Any] = json.loads(result.out)
    return answer


def test_kq_why_replays_the_queue_with_the_declared_run_times() -> None:
    # pi1 (30m, running since T0 + 101) ends 901 s from now; big (10m) goes first, then pi2 fits the root's
    # room once big ends too (Department-b's 14 CPU run for hours).
    fake = api({"pi1": "30m", "big": "10m", "pi2": "20m", "pend": "5h", "mnist": "5h"})
    answer = why_json(fake)
    assert answer["status"] == "QUEUING" and answer["position"] == 2
    assert answer["estimatedStart"] == stamp(NOW + 901 + 600)
    assert answer["estimatedStartLatest"] == answer["estimatedStart"]
    assert answer["estimatedFinish"] == stamp(NOW + 901 + 600 + 1200)
    basis = answer["estimateBasis"]
    assert basis["source"] == "replay" and basis["declaredRuntimes"] == 2 and basis["finishedBefore"] == 2
    assert basis["ownRuntime"] == {"source": "declared", "p50Seconds": 1200, "p90Seconds": 1200}
    text = run(["why", "pi2"], fake).out
    assert "Expected to start in about 25 min, at about " in text
    assert "Expected to finish about 45 min from now: it declares a run time of 20 min." in text


def test_kq_why_adds_the_control_planes_time_the_tree_keeps_to_every_turn() -> None:
    # pi1 ends 901 s from now; its room is handed on 1.5 s later, big's pods run 0.5 s after it is admitted; big's
    # room is handed on 1.5 s after its 600 s, and pi2's pods run 0.5 s after that.
    fake = api({"pi1": "30m", "big": "10m", "pi2": "20m", "pend": "5h", "mnist": "5h"},
               handoff={"startSeconds": [0.5, 0.5, 3.0], "endSeconds": [1.5, 1.0, 2.0]})
    answer = why_json(fake)
    assert answer["estimatedStart"] == stamp(NOW + 901 + 2 + 600 + 2)
    assert answer["estimateBasis"]["controlPlaneSeconds"] == {"start": 0.5, "end": 1.5}
    assert "with 2.0 s of the control plane's time per turn" in run(["why", "pi2"], fake).out


def test_kq_why_learns_run_times_from_the_history_on_the_queue() -> None:
    history = [{"kind": "Job", "stem": "pi", "seconds": [600, 1200, 1800], "lastFinished": stamp(T0)}]
    answer = why_json(api({"big": "10m", "pend": "5h", "mnist": "5h"}, history=history))
    # pi1 has run 899 s: of the jobs like it, those longer than that are 1200 and 1800 s (median 1200): it ends
    # 301 s from now; big runs 600 s after; pi2 (a "pi" job of user-a too) then runs about 1200 s.
    assert answer["estimatedStart"] == stamp(NOW + 301 + 600)
    # The latest start: the wait scaled by what the jobs ahead (pi1 and big) run at their p90 over their median,
    # (1800 + 600) / (1200 + 600).
    assert answer["estimatedStartLatest"] == stamp(NOW + 901 * 4 / 3)
    basis = answer["estimateBasis"]
    assert basis["completedJobs"] == 3 and basis["historyRuntimes"] == 1
    assert basis["ownRuntime"] == {"source": "namespace", "p50Seconds": 1200, "p90Seconds": 1800, "samples": 3}


def test_kq_why_names_the_jobs_of_unknown_run_time_instead_of_guessing() -> None:
    answer = why_json(api({"big": "10m"}))
    assert "estimatedStart" not in answer and "estimatedStartLatest" not in answer
    assert answer["estimateBasis"]["unknown"] == "unknown-runtimes"
    assert "Job/user-a/pi1" in answer["estimateBasis"]["waitsFor"]
    assert "No estimate of when it starts" in answer["explanation"]


def test_a_declared_run_time_that_cannot_be_read_is_said_not_dropped() -> None:
    answer = why_json(api({"pi1": "30m", "big": "10m", "pi2": "soon", "pend": "5h", "mnist": "5h"}))
    assert answer["estimatedStart"] == stamp(NOW + 1501)
    problem = answer["estimateBasis"]["ownRuntime"]["problem"]
    assert EXPECTED_RUNTIME_ANNOTATION in problem and "'soon' is not a duration" in problem
    assert "Its own run time is unknown" in answer["explanation"]


def test_without_every_job_and_pod_kq_why_shows_the_controllers_estimate() -> None:
    published = {"pi2": {"estimatedStart": stamp(NOW + 720), "estimatedStartLatest": stamp(NOW + 1500)}}
    fake = api({}, published=published, forbidden=[("pods", None)])
    answer = why_json(fake)
    assert answer["estimatedStart"] == stamp(NOW + 720)
    assert answer["estimateBasis"] == {"source": "queue-status"}
    assert "Expected to start in about 12 min (12 min to 25 min)" in run(["why", "pi2"], fake).out
    unknown = why_json(api({}, forbidden=[("pods", None)]))
    assert unknown["estimateBasis"]["unknown"] == "not-computed" and "estimatedStart" not in unknown


def test_kq_list_shows_the_published_estimate_in_its_eta_column() -> None:
    published = {"pi2": {"estimatedStart": stamp(NOW + 720)}, "big": {"estimatedStartLatest": stamp(NOW + 300)}}
    fake = api({}, published=published)
    rows = {line.split()[1]: line.split() for line in run(["list", "-A"], fake).out.splitlines()[1:]}
    assert rows["pi2"][6] == "~12m" and rows["big"][6] == "<5m" and rows["pi1"][6] == "-"
    items = {item["name"]: item for item in json.loads(run(["list", "-o", "json"], fake).out)["items"]}
    assert items["pi2"]["estimatedStart"] == stamp(NOW + 720) and "estimatedStart" not in items["pi1"]


def test_times_ahead_read_as_people_say_them() -> None:


    assert [about(seconds) for seconds in (20, 89, 720, 3600, 12000, 40 * 3600, 2 * 86400 + 4 * 3600)] == [
        "20 s", "89 s", "12 min", "1 h", "3 h 20 min", "40 h", "2 d 4 h"]
