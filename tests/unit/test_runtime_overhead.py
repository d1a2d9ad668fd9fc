"""RuntimeClass overhead, the pure part (docs/queueing.md, "RuntimeClass overhead"): which classes count, which
template names one, the record read back, and the spec the API server will admit."""

from __future__ import annotations

import json

from webhook.api.names import POD_OVERHEAD_ANNOTATION
from webhook.api.objects import PodSpec
from webhook.workloads.overhead import class_overheads, recorded, runtime_class, with_overhead

KATA = {"cpu": "250m", "memory": "160Mi"}


def test_only_classes_that_declare_an_overhead_count() -> None:
    classes: list[dict[str, object]] = [{"metadata": {"name": "kata"}, "overhead": {"podFixed": KATA}},
               {"metadata": {"name": "runc"}},
               {"metadata": {"name": "empty"}, "overhead": {"podFixed": {}}},
               {"metadata": {"name": "odd"}, "overhead": "1"}]
    assert class_overheads(classes) == {"kata": KATA}


def test_a_spec_names_a_class_the_api_server_adds_overhead_for_only_without_its_own() -> None:
    assert runtime_class({"runtimeClassName": "kata"}) == "kata"
    assert runtime_class({"runtimeClassName": "kata", "overhead": KATA}) is None  # checked, not added, by the API
    assert runtime_class({"runtimeClassName": ""}) is None
    assert runtime_class({}) is None


def test_the_record_reads_back_and_a_broken_one_reads_as_none() -> None:
    def job(text: str) -> dict[str, object]:
        return {"metadata": {"annotations": {POD_OVERHEAD_ANNOTATION: text}}}

    assert recorded(job(json.dumps({"kata": KATA}))) == {"kata": KATA}
    for broken in ("{", "[]", '"x"', json.dumps({"kata": 1})):
        assert recorded(job(broken)) == {}
    assert recorded({"metadata": {}}) == {}


def test_the_spec_gets_the_recorded_overhead_of_its_class_only() -> None:
    spec: PodSpec = {"runtimeClassName": "kata", "containers": []}
    assert with_overhead(spec, {"kata": KATA}) == {**spec, "overhead": KATA}
    assert with_overhead(spec, {"gvisor": KATA}) == spec
    assert with_overhead({"containers": []}, {"kata": KATA}) == {"containers": []}
    own: PodSpec = {"runtimeClassName": "kata", "overhead": {"cpu": "1"}}
    assert with_overhead(own, {"kata": KATA}) == own
    assert "overhead" not in spec  # never changes its argument
