"""A job cache's packed objects (webhook/kube/packed.py, issue 38): they read as the object they were, cost a
fraction of its memory, and are never written out in part."""

from __future__ import annotations

import copy
import json
import tracemalloc
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.builders import node, res, tree
from webhook.api.names import LAST_APPLIED_ANNOTATION
from webhook.api.objects import job_spec, labels_of, name_of, plain
from webhook.controller.model import track
from webhook.kube import packed as packing
from webhook.kube.packed import Codec, Packed, packed
from webhook.kube.slim import compacted
from webhook.workloads.patch import apply_patch
from webhook.workloads.registry import adapter_for

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=80),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=30,
)


def job(index: int) -> dict[str, Any]:
    """A queued Job as the API server sends it (the shape of the scale bench's)."""
    uid = f"{index:08d}-ca74-4a81-b525-c0d4e02bc9e2"
    labels = {"batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": f"q-{index}",
              "controller-uid": uid, "job-name": f"q-{index}", "quota.scheduling.alibabacloud.com/name": "team"}
    container = {"command": ["sh", "-c", "sleep 3600"], "image": "busybox", "imagePullPolicy": "Always",
                 "name": "work", "resources": {"requests": {"cpu": "1", "memory": "64Mi"}},
                 "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": f"q-{index}", "namespace": "team-ns", "uid": uid, "resourceVersion": str(index),
                     "annotations": {"kube-queue/quota-fullname": "root/dept/team"}, "labels": {"q": "team"},
                     "creationTimestamp": "2026-12-05T18:38:48Z", "generation": 1,
                     "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]},
        "spec": {"backoffLimit": 0, "completions": 1, "parallelism": 1, "suspend": True,
                 "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}},
                 "template": {"metadata": {"labels": labels}, "spec": {
                     "containers": [container], "dnsPolicy": "ClusterFirst", "restartPolicy": "Never",
                     "schedulerName": "default-scheduler", "securityContext": {},
                     "terminationGracePeriodSeconds": 30}}},
        "status": {},
    }


@given(body=st.dictionaries(st.text(max_size=8), _json, max_size=4), applied=st.booleans())
def test_a_packed_object_reads_as_the_compacted_one(body: dict[str, Any], applied: bool) -> None:
    obj: dict[str, Any] = {**body, "metadata": {"name": "j", "annotations": {"a": "b"}}}
    if applied:
        obj["metadata"]["annotations"][LAST_APPLIED_ANNOTATION] = '{"kind": "Job"}'
    expected = compacted(copy.deepcopy(obj))
    kept = packed(obj, Codec())
    assert kept == expected and dict(kept) == expected
    assert sorted(kept) == sorted(expected) and len(kept) == len(expected)
    for key, value in expected.items():
        assert key in kept and kept[key] == value and kept.get(key) == value
    assert "absent-key" not in kept and kept.get("absent-key", 7) == 7
    with pytest.raises(KeyError):
        kept["absent-key"]


def test_an_object_orjson_cannot_write_is_kept_as_dicts() -> None:
    obj = {"metadata": {"name": "j"}, "spec": {"big": 2**70}}
    kept = packed(obj, Codec())
    assert not isinstance(kept, Packed) and kept == {"metadata": {"name": "j"}, "spec": {"big": 2**70}}


def test_an_object_with_nothing_but_its_head_reads_the_same() -> None:
    kept = packed({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}, Codec())
    assert dict(kept) == {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}
    assert kept.get("spec") is None and "spec" not in kept and len(kept) == 3


def test_a_queued_job_costs_a_fraction_of_its_dicts() -> None:
    codec = Codec()
    decoded = [orjson.loads(orjson.dumps(job(index))) for index in range(2000)]
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        kept_dicts = [compacted(copy.deepcopy(obj)) for obj in decoded]
        as_dicts = tracemalloc.get_traced_memory()[0] - start
        start = tracemalloc.get_traced_memory()[0]
        kept_packed = [packed(copy.deepcopy(obj), codec) for obj in decoded]
        as_packed = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    assert kept_packed[7]["spec"] == kept_dicts[7]["spec"]
    assert as_packed < as_dicts / 2, (as_packed, as_dicts)


def test_a_packed_object_is_never_written_out_in_part() -> None:
    kept = packed(job(1), Codec())
    assert isinstance(kept, Packed)
    with pytest.raises(TypeError):
        orjson.dumps({"object": kept})
    with pytest.raises(TypeError):
        json.dumps(kept)
    whole = compacted(job(1))
    assert orjson.loads(orjson.dumps({"object": kept}, default=plain)) == {"object": whole}
    patched: dict[str, Any] = apply_patch(kept, [{"op": "replace", "path": "/spec/suspend", "value": False}])
    assert patched["spec"]["suspend"] is False and patched["metadata"] == whole["metadata"]


def test_the_decoded_rests_kept_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(packing, "DECODED_KEPT", 8)
    codec = Codec()
    objects = [packed(job(index), codec) for index in range(40)]
    for obj in objects:
        assert labels_of(job_spec(obj)["template"])["job-name"] == name_of(obj)
    assert len(packing._decoded) <= 8
    assert job_spec(objects[0])["parallelism"] == 1, "an object read again after its decoding was dropped"


def test_a_packed_job_is_modelled_as_its_dicts_and_kept_packed() -> None:
    """The controller models a job read through a plain dict of it (``webhook.api.objects.readable``) and keeps
    the object it was given, packed."""
    leaf = tree(node("root", min=res(cpu=4), max=res(cpu=4), children=(
        node("team", min=res(cpu=4), max=res(cpu=4), namespaces=("team-ns",)),))).nodes["team"]
    adapter = adapter_for("batch", "Job")
    assert adapter is not None
    whole = compacted(job(7))
    kept = packed(job(7), Codec())
    assert isinstance(kept, Packed)
    tracked, as_dicts = track(adapter, kept, leaf, {}), track(adapter, whole, leaf, {})
    assert tracked.obj is kept
    assert tracked.workload == as_dicts.workload and tracked.workload.request == as_dicts.workload.request
    assert (tracked.record, tracked.backoff, tracked.spec, tracked.missing_class) == (
        as_dicts.record, as_dicts.backoff, as_dicts.spec, as_dicts.missing_class)
