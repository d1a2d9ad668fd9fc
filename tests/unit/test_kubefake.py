"""The tests' one in-memory API store (:mod:`tests.kubefake`) pins its own behaviour: generation, selectors,
conflicts, the status subresource, and the change log watches read."""

from __future__ import annotations

import pytest

from tests.kubefake import ByGroupPlural, Kind, ObjectStore

JOBS: Kind = ("batch", "v1", "jobs")
QUEUES: Kind = ("scheduling.x-k8s.io", "v1alpha1", "queues")


class Refused(Exception):
    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status, self.reason = status, reason


def test_generation_moves_with_the_spec_only_and_resource_version_with_every_write() -> None:
    store = ObjectStore(Refused)
    created = store.create(JOBS, {"metadata": {"name": "a", "namespace": "ns"}, "spec": {"suspend": True}})
    assert created["metadata"]["generation"] == 1
    labelled = store.merge_patch(JOBS, "a", "ns", {"metadata": {"labels": {"x": "1"}}})
    assert labelled["metadata"]["generation"] == 1
    assert int(labelled["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    resumed = store.json_patch(JOBS, "a", "ns", [{"op": "replace", "path": "/spec/suspend", "value": False}])
    assert resumed["metadata"]["generation"] == 2
    assert [event for _, _, event, _ in store.log] == ["ADDED", "MODIFIED", "MODIFIED"]


def test_lists_filter_by_label_and_field_selectors() -> None:
    store = ObjectStore(Refused)
    store.create(JOBS, {"metadata": {"name": "a", "namespace": "x", "labels": {"team": "a"}}, "spec": {"n": 1}})
    store.create(JOBS, {"metadata": {"name": "b", "namespace": "x", "labels": {"team": "b"}}, "spec": {"n": 2}})
    store.create(JOBS, {"metadata": {"name": "c", "namespace": "y"}, "spec": {"n": 1}})

    def names(**selectors: str) -> list[str]:
        return [obj["metadata"]["name"] for obj in store.select(JOBS, **selectors)]

    assert names() == ["a", "b", "c"]
    assert names(namespace="x") == ["a", "b"]
    assert names(label_selector="team=a") == ["a"]
    assert names(label_selector="team!=a") == ["b", "c"]
    assert names(label_selector="team") == ["a", "b"]
    assert names(label_selector="!team") == ["c"]
    assert names(field_selector="spec.n=1") == ["a", "c"]
    assert names(field_selector="metadata.name=b,spec.n=1") == []


def test_stale_replaces_duplicates_and_missing_objects_are_refused() -> None:
    store = ObjectStore(Refused)
    old = store.create(JOBS, {"metadata": {"name": "a", "namespace": "ns"}})
    store.merge_patch(JOBS, "a", "ns", {"spec": {"x": 1}})
    with pytest.raises(Refused) as stale:
        store.replace(JOBS, "a", "ns", old)
    assert stale.value.status == 409
    with pytest.raises(Refused) as duplicate:
        store.create(JOBS, {"metadata": {"name": "a", "namespace": "ns"}})
    assert duplicate.value.reason == "AlreadyExists"
    with pytest.raises(Refused) as missing:
        store.delete(JOBS, "b", "ns")
    assert missing.value.status == 404
    with pytest.raises(Refused) as invalid:
        store.json_patch(JOBS, "a", "ns", [{"op": "test", "path": "/spec/x", "value": 2}])
    assert invalid.value.status == 422


def test_the_status_subresource_is_written_only_through_status() -> None:
    store = ObjectStore(Refused)
    store.create(QUEUES, {"metadata": {"name": "q"}, "spec": {"a": 1}, "status": {"s": 1}})
    main = store.merge_patch(QUEUES, "q", None, {"spec": {"a": 2}, "status": {"s": 2}})
    assert (main["spec"], main["status"]) == ({"a": 2}, {"s": 1})
    status = store.merge_patch(QUEUES, "q", None, {"spec": {"a": 3}, "status": {"s": 3}}, subresource="status")
    assert (status["spec"], status["status"]) == ({"a": 2}, {"s": 3})


def test_objects_by_group_and_plural_are_the_live_objects_and_deleting_one_is_logged() -> None:
    store = ObjectStore(Refused)
    store.create(JOBS, {"metadata": {"name": "a", "namespace": "ns"}})
    view = ByGroupPlural(store)
    assert list(view) == [("batch", "jobs", "ns", "a")]
    view[("batch", "jobs", "ns", "a")]["status"] = {"active": 1}
    assert store.obj(JOBS, "a", "ns")["status"] == {"active": 1}
    del view[("batch", "jobs", "ns", "a")]
    assert len(view) == 0
    assert store.log[-1][2] == "DELETED"
