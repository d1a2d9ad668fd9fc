"""What the controller writes on jobs: the admission record, the eviction note, guarded patches, settings,
structured log lines, the Queued-event gate and the job view."""

from __future__ import annotations

import argparse
import json
from fractions import Fraction
from typing import Any

import pytest

from tests.builders import seed_tree
from webhook.api.names import ADMISSION_ANNOTATION, EVICTION_ANNOTATION
from webhook.api.objects import parse_time, rfc3339
from webhook.controller.events import EventGate
from webhook.controller.model import remaining_job_pods, track
from webhook.controller.records import (
    AdmissionRecord,
    EvictionNote,
    admit_patch,
    annotation_ops,
    clear_record_patch,
    evict_patch,
    kv,
    read_record,
)
from webhook.controller.settings import (
    ControllerSettings,
    add_controller_args,
    rate_flag,
    settings_from_args,
    strict_priority_from_env,
)
from webhook.core.resources import Resources
from webhook.core.workload import Phase, WorkloadError
from webhook.kube.events import involved
from webhook.workloads.base import PatchError, apply_patch, value_at
from webhook.workloads.job import JobAdapter
from webhook.workloads.kubeflow import PyTorchJobAdapter
from webhook.workloads.pod import PodAdapter

JOB = JobAdapter()


def held_job(annotations: dict[str, str] | None = None, version: str = "42") -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "pi", "namespace": "user-a", "resourceVersion": version}
    if annotations is not None:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {"suspend": True, "template": {"spec": {"containers": [{"name": "c"}]}}},
    }


# Records and patches --------------------------------------------------------------------------------------


def test_the_admission_record_round_trips() -> None:
    record = AdmissionRecord.new("root/Department-a", Resources.of(cpu=60, memory="60Gi"), 1712541857.25)
    obj = held_job({ADMISSION_ANNOTATION: record.encode()})
    read = read_record(obj)
    assert read == record
    assert json.loads(record.encode())["admittedAt"] == "2024-04-08T02:04:17.250000Z"
    assert read_record(held_job()) is None


def test_an_unreadable_record_still_counts_as_a_record() -> None:
    read = read_record(held_job({ADMISSION_ANNOTATION: "not json"}))
    assert read is not None and read.admitted_at == 0.0


def test_the_admit_patch_releases_and_records_in_one_guarded_patch() -> None:
    record = AdmissionRecord.new("root/Department-a", Resources.of(cpu=1), 0.0)
    obj = held_job()
    ops = admit_patch(JOB, obj, record)
    assert ops[0] == {"op": "test", "path": "/spec", "value": obj["spec"]}
    patched = apply_patch(obj, ops)
    assert value_at(patched, "spec", "suspend") is False
    assert read_record(patched) == record


def test_a_stale_snapshot_makes_the_guarded_patch_fail_but_a_status_update_does_not() -> None:
    snapshot = held_job(version="41")
    ops = admit_patch(JOB, snapshot, AdmissionRecord.new("q", Resources.of(cpu=1), 0.0))
    released = apply_patch(snapshot, [{"op": "replace", "path": "/spec/suspend", "value": False}])
    with pytest.raises(PatchError):
        apply_patch(released, ops)
    resized = apply_patch(snapshot, [{"op": "add", "path": "/spec/parallelism", "value": 9}])
    with pytest.raises(PatchError):
        apply_patch(resized, ops)
    status_only = {**held_job(version="42"), "status": {"conditions": [{"type": "Suspended", "status": "True"}]}}
    assert value_at(apply_patch(status_only, ops), "spec", "suspend") is False


def test_an_eviction_only_ends_the_admission_it_was_planned_for() -> None:
    first = AdmissionRecord.new("q", Resources.of(cpu=1), 0.0)
    running = apply_patch(held_job(), admit_patch(JOB, held_job(), first))
    note = EvictionNote(by="Job/user-c/pi-c", quota="root/Department-b", reason="r", at=0.0)
    ops = evict_patch(JOB, running, note)
    evicted = apply_patch(running, ops)
    second = apply_patch(evicted, admit_patch(JOB, evicted, AdmissionRecord.new("q", Resources.of(cpu=1), 1.0)))
    with pytest.raises(PatchError):
        apply_patch(second, ops)


def test_the_evict_patch_holds_drops_the_record_and_says_who() -> None:
    record = AdmissionRecord.new("root/Department-a", Resources.of(cpu=1), 0.0)
    running = apply_patch(held_job(), admit_patch(JOB, held_job(), record))
    note = EvictionNote(by="Job/user-c/pi-c", quota="root/Department-b", reason="reclaims cpu=10", at=0.0)
    evicted: dict[str, Any] = apply_patch(running, evict_patch(JOB, running, note))
    assert evicted["spec"]["suspend"] is True
    assert ADMISSION_ANNOTATION not in evicted["metadata"]["annotations"]
    assert json.loads(evicted["metadata"]["annotations"][EVICTION_ANNOTATION])["by"] == "Job/user-c/pi-c"
    readmitted: dict[str, Any] = apply_patch(evicted, admit_patch(JOB, evicted, record))
    assert EVICTION_ANNOTATION not in readmitted["metadata"]["annotations"]


def test_kubeflow_and_pod_patches_use_their_own_hold() -> None:
    tf = {
        "metadata": {"name": "t", "namespace": "n", "resourceVersion": "1"},
        "spec": {"runPolicy": {"suspend": True}, "pytorchReplicaSpecs": {}},
    }
    record = AdmissionRecord.new("q", Resources.of(cpu=1), 0.0)
    released = apply_patch(tf, admit_patch(PyTorchJobAdapter(), tf, record))
    assert value_at(released, "spec", "runPolicy", "suspend") is False
    pod = {
        "metadata": {"name": "p", "namespace": "n", "resourceVersion": "1"},
        "spec": {"schedulingGates": [{"name": "kube-queue.x-k8s.io/admission"}], "containers": []},
    }
    assert value_at(apply_patch(pod, admit_patch(PodAdapter(), pod, record)), "spec", "schedulingGates") == []


def test_clearing_a_stale_record() -> None:
    obj = held_job({ADMISSION_ANNOTATION: "{}", "keep": "me"})
    assert value_at(apply_patch(obj, clear_record_patch(obj)), "metadata", "annotations") == {"keep": "me"}
    assert clear_record_patch(held_job()) == []


def test_annotation_ops_escape_slashes_and_create_the_map() -> None:
    assert annotation_ops(held_job(), {"a/b": "1"}) == [
        {"op": "add", "path": "/metadata/annotations", "value": {"a/b": "1"}}
    ]
    assert annotation_ops(held_job({}), {"a/b": "1"}) == [
        {"op": "add", "path": "/metadata/annotations/a~1b", "value": "1"}
    ]


def test_times() -> None:
    assert parse_time(rfc3339(1712541857.5)) == 1712541857.5
    assert parse_time("2024-04-08T02:04:17Z") == 1712541857.0
    assert parse_time("junk") is None
    assert parse_time(None) is None


def test_log_lines_are_key_value_with_quoted_values() -> None:
    assert kv(job="Job/user-a/pi", quota="root/Department-a", reason="does not fit", skip=None) == (
        'job=Job/user-a/pi quota=root/Department-a reason="does not fit"'
    )
    assert kv(reason="100 × 1", empty="") == 'reason="100 × 1" empty=""'


# Job view -------------------------------------------------------------------------------------------------


def _job(**spec: Any) -> dict[str, Any]:
    status = spec.pop("status", {})
    return {"metadata": {"name": "j", "namespace": "user-a"}, "spec": spec, "status": status}


@pytest.mark.parametrize(
    ("spec", "remaining"),
    [
        ({"parallelism": 6, "completions": 6}, 6),
        ({"parallelism": 6, "completions": 6, "status": {"succeeded": 2}}, 4),
        ({"parallelism": 2, "completions": 6, "status": {"succeeded": 5}}, 1),
        ({"parallelism": 2, "completions": 6, "status": {"succeeded": 6}}, 0),
        ({"parallelism": 3}, 3),
        ({"parallelism": 3, "status": {"succeeded": 1, "active": 2}}, 2),
        ({}, 1),
    ],
)
def test_a_job_needs_only_its_remaining_pods(spec: dict[str, Any], remaining: int) -> None:
    assert remaining_job_pods(_job(**spec)) == remaining


def _obj(suspend: bool, annotations: dict[str, str] | None = None, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "j", "namespace": "user-a", "uid": "u", "annotations": annotations or {},
                     "creationTimestamp": "2024-04-08T02:00:00Z"},
        "spec": {"suspend": suspend, "parallelism": 2, "completions": 2,
                 "template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "3"}}}]}}},
        "status": status,
    }


def test_phases_come_from_the_object() -> None:
    leaf = seed_tree().node("Department-a")
    record = AdmissionRecord.new("root/Department-a", Resources.of(cpu=6), 1712541900.0).encode()
    queued = track(JOB, _obj(True), leaf, {})
    assert queued.workload.phase is Phase.QUEUED and not queued.stale_record
    admitted = track(JOB, _obj(False, {ADMISSION_ANNOTATION: record}), leaf, {})
    assert admitted.workload.phase is Phase.ADMITTED
    assert admitted.workload.admitted_at == 1712541900.0
    outside = track(JOB, _obj(False), leaf, {})
    assert outside.workload.phase is Phase.ADMITTED
    assert outside.workload.admitted_at == outside.workload.created
    stale = track(JOB, _obj(True, {ADMISSION_ANNOTATION: record}), leaf, {})
    assert stale.workload.phase is Phase.QUEUED and stale.stale_record
    done = track(JOB, _obj(False, conditions=[{"type": "Complete", "status": "True"}], succeeded=2), leaf, {})
    assert done.workload.phase is Phase.FINISHED
    half = track(JOB, _obj(False, {ADMISSION_ANNOTATION: record}, succeeded=1), leaf, {})
    assert half.workload.request.get_or_zero("cpu") == Resources.of(cpu=3)["cpu"]
    assert track(PodAdapter(), {"metadata": {"name": "p", "namespace": "user-a"}, "spec": {}}, leaf, {}).evictable is (
        False
    )


def test_a_job_that_cannot_be_sized_raises() -> None:
    leaf = seed_tree().node("Department-a")
    bad = _obj(True)
    bad["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    with pytest.raises(WorkloadError):
        track(JOB, bad, leaf, {})


# Settings -------------------------------------------------------------------------------------------------


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_controller_args(parser)
    return parser.parse_args(argv)


def test_flags_and_defaults() -> None:
    settings = settings_from_args(_parse(), env={})
    assert settings.oversell_rate == 2
    assert settings.enabled and settings.leader_elect and not settings.strict_priority
    assert settings.lease_namespace == "kube-queue"
    assert settings.identity
    custom = settings_from_args(
        _parse("--oversellrate=1.5", "--no-controller", "--status-interval=2", "--no-leader-elect",
               "--lease-name=x", "--lease-namespace=y", "--identity=me"),
        env={"StrictPriority": "true"},
    )
    assert custom.oversell_rate == Fraction(3, 2)
    assert not custom.enabled and not custom.leader_elect and custom.strict_priority
    assert (custom.status_interval, custom.lease_name, custom.lease_namespace, custom.identity) == (2.0, "x", "y", "me")


def test_the_positive_duration_flags_take_seconds_or_a_go_duration_and_refuse_zero() -> None:
    settings = settings_from_args(_parse("--status-interval=1m30s", "--lease-duration=0.5m", "--renew-deadline=20"),
                                  env={})
    assert (settings.status_interval, settings.lease_duration, settings.renew_deadline) == (90.0, 30.0, 20.0)
    for flag in ("--status-interval=0", "--lease-duration=0s", "--retry-period=-1", "--status-interval=soon"):
        with pytest.raises(SystemExit):
            _parse(flag)


@pytest.mark.parametrize("text", ["0", "-1", "two", "1/0"])
def test_a_bad_rate_is_refused_with_a_message(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        rate_flag(text)


def test_strict_priority_env() -> None:
    assert strict_priority_from_env({"StrictPriority": "True"})
    assert not strict_priority_from_env({"StrictPriority": "1"})
    assert not strict_priority_from_env({})


def test_settings_check_themselves() -> None:
    with pytest.raises(ValueError, match="positive"):
        ControllerSettings(oversell_rate=Fraction(0))
    with pytest.raises(ValueError, match="renew deadline"):
        ControllerSettings(lease_duration=5, renew_deadline=5)


# Events ---------------------------------------------------------------------------------------------------


def test_the_queued_event_gate_fires_on_a_new_reason_at_most_every_interval() -> None:
    now = [100.0]
    gate = EventGate(30.0, clock=lambda: now[0])
    assert gate.due("u", "cpu")
    gate.mark("u", "cpu")
    assert not gate.due("u", "cpu")
    assert not gate.due("u", "memory"), "a changed reason waits for the interval"
    now[0] += 30
    assert gate.due("u", "memory")
    gate.forget("u")
    assert gate.due("u", "cpu")
    gate.mark("v", "x")
    gate.keep_only({"u"})
    assert gate.due("v", "x")


def test_events_name_the_involved_object() -> None:
    obj = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "pi", "namespace": "n", "uid": "u"}}
    assert involved(obj) == {"apiVersion": "batch/v1", "kind": "Job", "name": "pi", "namespace": "n", "uid": "u"}
