"""`kq why` and `kq list` of a running SparkApplication whose driver made more executors than it was admitted
with (docs/job-kinds.md, "Spark"): the held ones show as the application's pods, with the controller's reason,
and `kq why` of one of them explains the application."""

from __future__ import annotations

import json
from typing import Any

from tests.clirun import NOW, T0, run, seed_objects
from tests.fakeapi import FakeApi, event
from tests.kubefake import stamp
from webhook.api.names import ADMISSION_GATE, QUOTA_LABEL, REASON_HELD

HELD = ("kube-queue holds this pod: SparkApplication etl was admitted with 2 executor pod(s), and 2 exist already; "
        "it is released when one of them is gone")


def _pod(name: str, owner: dict[str, Any], *, gated: bool = False, cpu: str = "2") -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "spark", "resources": {"requests": {"cpu": cpu}}}]}
    if gated:
        spec["schedulingGates"] = [{"name": ADMISSION_GATE}]
    else:
        spec["nodeName"] = "ecs-0"
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "user-a", "uid": f"uid-{name}", "creationTimestamp": stamp(T0),
                         "labels": {QUOTA_LABEL: "Department-a"},
                         "ownerReferences": [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                              "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
                                              "controller": True}]},
            "spec": spec, "status": {"phase": "Pending" if gated else "Running"}}


def _api() -> FakeApi:
    app = {"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
           "metadata": {"name": "etl", "namespace": "user-a", "uid": "uid-etl", "creationTimestamp": stamp(T0),
                        "labels": {QUOTA_LABEL: "Department-a"}},
           "spec": {"type": "Scala", "suspend": False, "driver": {"cores": 1, "memory": "512m"},
                    "executor": {"cores": 2, "memory": "2g", "instances": 2}}}
    driver = _pod("etl-driver", app, cpu="1")
    held = _pod("etl-exec-3", driver, gated=True)
    objects = [*seed_objects(), app, driver, _pod("etl-exec-1", driver), _pod("etl-exec-2", driver), held,
               event(held, REASON_HELD, HELD, T0 + 5, kind="Warning")]
    return FakeApi(objects, namespace="user-a", now=NOW, served={"sparkoperator.k8s.io": ["v1beta2"]})


def test_the_held_executor_shows_as_the_applications_pod_with_the_controllers_reason() -> None:
    text = run(["why", "etl", "-n", "user-a"], _api(), width=300).out
    assert "is RUNNING" in text and "3 of 3 pods run" in text, text
    assert "More pods of it are held by the queue, past its admission:" in text
    assert f"etl-exec-3: {HELD}" in text
    answer = json.loads(run(["why", "etl", "-n", "user-a", "-o", "json"], _api()).out)
    assert answer["podsWaiting"] == [{"reason": "held", "pods": 1, "message": HELD}]


def test_kq_why_of_a_held_executor_explains_its_application_and_kq_list_shows_no_such_job() -> None:
    result = run(["why", "etl-exec-3", "-n", "user-a"], _api(), width=300)
    assert result.code == 0, result.err
    assert "pod etl-exec-3 belongs to SparkApplication etl, whose driver created it" in result.err
    assert "is RUNNING" in result.out
    listed = run(["list", "-n", "user-a"], _api(), width=300).out
    assert "etl" in listed and "etl-exec-3" not in listed, listed
