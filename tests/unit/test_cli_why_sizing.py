"""``kq why`` sizes a job as the controller does when the job was written before what the API server's admission
will give its pods (docs/queueing.md, "LimitRange defaults", "RuntimeClass overhead"): the namespace's LimitRange
defaults for a container without requests, a RuntimeClass's overhead declared after the job was held. Over the
seed's fake cluster (``tests/clirun.py``): Department-a runs pi1 (60 CPU) of its 100."""

from __future__ import annotations

import json
from typing import Any

from tests.clirun import T0, run, seed_api
from tests.fakeapi import FakeApi, batch_job


def _held(api: FakeApi, name: str, **spec: Any) -> None:
    obj = batch_job(name, "user-a", created=T0 + 200, leaf="Department-a", suspended=True)
    container = obj["spec"]["template"]["spec"]["containers"][0]
    del container["resources"]
    obj["spec"]["template"]["spec"].update(spec)
    api.add(obj)


def _blockers(api: FakeApi, name: str) -> str:
    result = run(["why", name, "--direct", "-o", "json"], api)
    assert result.code == 0, result.err
    body = json.loads(result.out)
    return " ".join(body.get("blockers", []))


def test_a_job_without_requests_is_sized_by_its_namespaces_limit_range() -> None:
    api = seed_api()
    _held(api, "bare")
    assert "cpu request" not in _blockers(api, "bare")  # nothing to count: it fits
    api.add({"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "defaults", "namespace": "user-a"},
             "spec": {"limits": [{"type": "Container", "defaultRequest": {"cpu": "50"}}]}})
    assert "quota root/Department-a: cpu request 50 + used 60 > limit 100" in _blockers(api, "bare")


def test_a_runtime_class_overhead_declared_later_is_counted() -> None:
    api = seed_api()
    _held(api, "sandboxed", runtimeClassName="kata")
    api.add({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "kata"},
             "handler": "kata", "overhead": {"podFixed": {"cpu": "45"}}})
    assert "quota root/Department-a: cpu request 45 + used 60 > limit 100" in _blockers(api, "sandboxed")
