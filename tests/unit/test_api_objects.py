"""Typed views of raw objects: absent or malformed fields read as empty, never raise."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.api import kinds
from webhook.api.objects import (
    annotations_of,
    controller_of,
    created_of,
    deleting,
    labels_of,
    meta,
    name_of,
    namespace_of,
    owner_references_of,
    parse_time,
    resource_version_of,
    uid_of,
)

CRDS = Path(__file__).resolve().parents[2] / "manifests" / "crds"
JOB: dict[str, Any] = {
    "metadata": {
        "name": "pi",
        "namespace": "user-a",
        "uid": "u1",
        "resourceVersion": "7",
        "creationTimestamp": "2024-04-08T02:04:17Z",
        "labels": {"a": "b"},
        "annotations": {"c": "d"},
        "ownerReferences": [{"kind": "CronJob", "name": "x"}, "junk", {"kind": "Job", "controller": True}],
    }
}


def test_a_well_formed_object_reads_as_written() -> None:
    assert (name_of(JOB), namespace_of(JOB), uid_of(JOB), resource_version_of(JOB)) == ("pi", "user-a", "u1", "7")
    assert labels_of(JOB) == {"a": "b"} and annotations_of(JOB) == {"c": "d"}
    assert created_of(JOB) == 1712541857.0
    assert [ref.get("kind") for ref in owner_references_of(JOB)] == ["CronJob", "Job"], "junk entries are skipped"
    assert controller_of(JOB) == {"kind": "Job", "controller": True}
    assert not deleting(JOB)
    assert deleting({"metadata": {"deletionTimestamp": "2024-04-08T02:04:17Z"}})


@pytest.mark.parametrize(
    "obj",
    [{}, {"metadata": None}, {"metadata": "x"}, {"metadata": {"name": 3, "labels": [1], "annotations": "a",
                                                              "ownerReferences": {}, "creationTimestamp": "soon"}}],
)
def test_absent_or_malformed_fields_read_as_empty(obj: dict[str, Any]) -> None:
    assert name_of(obj) == namespace_of(obj) == uid_of(obj) == resource_version_of(obj) == ""
    assert labels_of(obj) == {} and annotations_of(obj) == {}
    assert owner_references_of(obj) == [] and controller_of(obj) is None
    assert created_of(obj) == 0.0
    assert meta(obj) == {} or obj["metadata"] is meta(obj)


def test_times_are_rfc3339_and_naive_times_are_utc() -> None:
    assert parse_time("2024-05-01T12:00:00Z") == parse_time("2024-05-01T12:00:00") == 1714564800.0
    assert parse_time("2024-05-01T14:00:00+02:00") == 1714564800.0
    assert parse_time("") is None and parse_time(None) is None and parse_time("yesterday") is None


def test_our_kinds_are_the_shipped_crds() -> None:
    crds = [yaml.safe_load(path.read_text()) for path in sorted(CRDS.glob("*.yaml"))]
    shipped = {
        (crd["spec"]["group"], version["name"], crd["spec"]["names"]["plural"], crd["spec"]["names"]["kind"],
         crd["spec"]["scope"] == "Namespaced")
        for crd in crds
        for version in crd["spec"]["versions"]
        if version.get("storage")
    }
    assert len(crds) == 3
    assert {(k.group, k.version, k.plural, k.kind, k.namespaced) for k in kinds.OUR_KINDS} == shipped
    assert kinds.QUEUE.api_version == "scheduling.x-k8s.io/v1alpha1" and kinds.POD.api_version == "v1"
