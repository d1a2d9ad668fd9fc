"""Issue 17 hole 4: a pod set without requests is sized by the namespace's LimitRange defaults, as its pods will
be, not as zero. The mutating webhook writes the default requests into the job's pod templates."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest

from tests.builders import res
from tests.service.helpers import JOB_BUILDERS, batch_job, patched, pod, review
from webhook.admission.mutate import mutate
from webhook.admission.state import AdmissionState, Settings, StateStore
from webhook.admission.validate import validate
from webhook.api.names import EXTENDER_RESOURCE
from webhook.core.resources import EMPTY
from webhook.core.workload import pod_set as sized_set
from webhook.workloads.registry import adapter_for

LIMIT_RANGE = {
    "apiVersion": "v1",
    "kind": "LimitRange",
    "metadata": {"name": "defaults", "namespace": "user-a"},
    "spec": {
        "limits": [{"type": "Container", "default": {"cpu": "2"}, "defaultRequest": {"cpu": "1", "memory": "1Gi"}}]
    },
}


@pytest.fixture
def limited(state: AdmissionState) -> AdmissionState:
    store = StateStore(state)
    store.set_limit_ranges([LIMIT_RANGE, {**LIMIT_RANGE, "metadata": {"name": "x", "namespace": "elsewhere"}}])
    return store.current


def without_requests(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` with every container of every pod template stripped of its resources."""
    kind_adapter = adapter_for(obj["apiVersion"].split("/")[0] if "/" in obj["apiVersion"] else "", obj["kind"])
    assert kind_adapter is not None
    for template in kind_adapter.pod_templates(obj):
        for container in template.spec["containers"]:
            container.pop("resources", None)
    return obj


def sized(obj: dict[str, Any]) -> Any:
    """The pod sets of the templates as written (what an operator adds to the pods is not the LimitRange's)."""
    kind_adapter = adapter_for(obj["apiVersion"].split("/")[0] if "/" in obj["apiVersion"] else "", obj["kind"])
    assert kind_adapter is not None
    return [sized_set(t.name, t.count, t.spec) for t in kind_adapter.pod_templates(obj)]


@pytest.mark.parametrize("kind", sorted(kind for kind in JOB_BUILDERS if kind != "Pod"))
def test_a_pod_set_without_requests_is_sized_by_the_limit_range(
    kind: str, limited: AdmissionState, settings: Settings
) -> None:
    obj = without_requests(JOB_BUILDERS[kind]())
    assert all(pod_set.per_pod == EMPTY for pod_set in sized(obj))  # the hole: sized as zero
    held = patched(obj, mutate(review(obj), limited, settings))
    for pod_set in sized(held):
        assert pod_set.per_pod == res(cpu=1, memory="1Gi"), pod_set


def test_own_requests_and_limits_win_and_init_containers_get_defaults(
    limited: AdmissionState, settings: Settings
) -> None:
    job = batch_job(cpu="10", memory=None, parallelism=2)
    spec = job["spec"]["template"]["spec"]
    spec["containers"].append({"name": "sidecar", "image": "x", "resources": {"limits": {"memory": "4Gi"}}})
    spec["initContainers"] = [{"name": "init", "image": "x"}]
    held = patched(job, mutate(review(job), limited, settings))
    containers = held["spec"]["template"]["spec"]["containers"]
    assert containers[0]["resources"]["requests"] == {"cpu": "10", "memory": "1Gi"}
    assert containers[1]["resources"] == {"limits": {"memory": "4Gi"}, "requests": {"cpu": "1"}}
    assert held["spec"]["template"]["spec"]["initContainers"][0]["resources"] == {
        "requests": {"cpu": "1", "memory": "1Gi"}
    }
    (pod_set,) = sized(held)
    assert pod_set.per_pod == res(cpu=11, memory="5Gi")


def test_no_defaults_elsewhere_and_bare_pods_are_left_to_the_api_server(
    limited: AdmissionState, state: AdmissionState, settings: Settings
) -> None:
    obj = without_requests(batch_job())
    assert "resources" not in patched(obj, mutate(review(obj), state, settings))["spec"]["template"]["spec"][
        "containers"
    ][0]
    bare = pod()
    del bare["spec"]["containers"][0]["resources"]
    marker = {EXTENDER_RESOURCE: "1"}  # the extender's marker only: no default request is written in
    assert patched(bare, mutate(review(bare), limited, settings))["spec"]["containers"][0]["resources"] == {
        "requests": marker, "limits": marker}


def test_the_store_keeps_only_namespaces_with_defaults(state: AdmissionState) -> None:
    store = StateStore(dataclasses.replace(state))
    store.set_limit_ranges([{"metadata": {"name": "m", "namespace": "user-b"}, "spec": {"limits": [{"type": "Pod"}]}}])
    assert dict(store.current.limit_defaults) == {}
    store.set_limit_ranges([LIMIT_RANGE])
    assert dict(store.current.defaults_in("user-a").requests) == {"cpu": "1", "memory": "1Gi"}


def test_a_user_cannot_take_the_written_requests_out_again(limited: AdmissionState, settings: Settings) -> None:
    obj = without_requests(JOB_BUILDERS["TFJob"]())
    held = patched(obj, mutate(review(obj), limited, settings))
    stripped = without_requests(copy.deepcopy(held))
    out = validate(review(stripped, operation="UPDATE", old=held), limited, settings)
    assert not out["response"]["allowed"]
    text = out["response"]["status"]["message"]
    assert "spec.tfReplicaSpecs.Worker.template.spec.containers[0].resources.requests.cpu: may not be removed" in text
    changed = copy.deepcopy(held)
    worker = changed["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]
    worker["containers"][0]["resources"]["requests"]["cpu"] = "3"
    assert validate(review(changed, operation="UPDATE", old=held), limited, settings)["response"]["allowed"]
