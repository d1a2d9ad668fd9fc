"""`kq why` of an admitted job whose operator cannot create its pods says what the operator was told (a
namespace's ResourceQuota, kube-queue's pod guard), instead of "its pods are being created": the controller
backs it off with the same words once the start timeout passes (docs/start-timeout.md)."""

from __future__ import annotations

import json
from typing import Any

from tests.clirun import NOW, T0, run, seed_objects
from tests.fakeapi import FakeApi, event

REFUSED = ('pods "pend-x7k2p" is forbidden: exceeded quota: no-pods, requested: pods=1, used: pods=1, '
           "limited: pods=1")


def _api(*, refused: bool, pods: int) -> FakeApi:
    """The seed's cluster with ``pend`` (2 pods, admitted at T0 + 301) down to ``pods`` of its pods."""
    objects: list[dict[str, Any]] = seed_objects()
    pend = next(obj for obj in objects if obj["metadata"]["name"] == "pend" and obj["kind"] == "Job")
    kept = {f"pend-{index}" for index in range(pods)}
    objects = [obj for obj in objects if obj["kind"] != "Pod" or not obj["metadata"]["name"].startswith("pend-")
               or obj["metadata"]["name"] in kept]
    if refused:
        objects += [
            event(pend, "FailedCreate", "an earlier admission's refusal", T0 + 200, kind="Warning",
                  component="job-controller"),
            event(pend, "FailedCreate", REFUSED, T0 + 320, kind="Warning", component="job-controller", index=1),
        ]
    return FakeApi(objects, namespace="user-c", now=NOW, served={"kubeflow.org": ["v1"]})


def test_a_pending_job_whose_pods_were_refused_says_what_its_operator_was_told() -> None:
    text = run(["why", "pend", "-n", "user-c"], _api(refused=True, pods=1), width=300).out
    assert f"Its operator could not create the others: {REFUSED}." in text, text
    assert "the start timeout holds it again" in text
    text = run(["why", "pend", "-n", "user-c"], _api(refused=True, pods=0), width=300).out
    assert f"Its operator could not create them: {REFUSED}." in text, text
    assert "being created" not in text
    answer = json.loads(run(["why", "pend", "-n", "user-c", "-o", "json"], _api(refused=True, pods=0)).out)
    assert answer["podsNotCreated"] == REFUSED and answer["pods"] == {"running": 0, "expected": 2}


def test_without_a_refusal_since_its_admission_nothing_is_said_of_one() -> None:
    text = run(["why", "pend", "-n", "user-c"], _api(refused=False, pods=0)).out
    assert "Its pods are being created." in text and "could not create" not in text
    whole = run(["why", "pend", "-n", "user-c"], _api(refused=True, pods=2)).out  # every pod is there
    assert "could not create" not in whole
    assert "podsNotCreated" not in json.loads(run(["why", "pend", "-n", "user-c", "-o", "json"],
                                                   _api(refused=True, pods=2)).out)
