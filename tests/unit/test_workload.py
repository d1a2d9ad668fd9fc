"""Workloads: the effective pod request (kube-scheduler's rules), pod sets, totals and dequeue order."""

from __future__ import annotations

import copy
import dataclasses
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import job, res
from tests.strategies import examples
from webhook.api.names import MAX_JOBS
from webhook.core.quantity import NANO
from webhook.core.resources import EMPTY, Resources
from webhook.core.workload import (
    Phase,
    PodSet,
    Workload,
    WorkloadError,
    WorkloadKey,
    pod_request,
    pod_set,
)


def c(name: str, requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None,
      restart: str | None = None) -> dict[str, Any]:
    """A container object as it appears in a pod spec."""
    container: dict[str, Any] = {"name": name, "image": "busybox"}
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    if resources:
        container["resources"] = resources
    if restart is not None:
        container["restartPolicy"] = restart
    return container


SIDE = "Always"


@pytest.mark.parametrize(
    ("case", "spec", "expected"),
    [
        ("no containers", {}, EMPTY),
        ("no resources", {"containers": [c("a")]}, EMPTY),
        ("one container", {"containers": [c("a", {"cpu": "500m", "memory": "1Gi"})]},
         res(cpu="500m", memory="1Gi")),
        ("app containers add up", {"containers": [c("a", {"cpu": 1}), c("b", {"cpu": 2, "memory": "1Gi"})]},
         res(cpu=3, memory="1Gi")),
        ("limit stands in for a missing request",
         {"containers": [c("a", limits={"cpu": 2, "memory": "2Gi"})]}, res(cpu=2, memory="2Gi")),
        ("a request wins over the limit of the same resource",
         {"containers": [c("a", {"cpu": 1}, {"cpu": 4, "memory": "1Gi"})]}, res(cpu=1, memory="1Gi")),
        ("an explicit zero request is kept, not replaced by the limit",
         {"containers": [c("a", {"cpu": 0}, {"cpu": 4})]}, EMPTY),
        ("extended resources", {"containers": [c("a", limits={"nvidia.com/gpu": 2})]}, res(gpu=2)),
        ("init container larger than the app: init wins",
         {"initContainers": [c("i", {"cpu": 4})], "containers": [c("a", {"cpu": 1})]}, res(cpu=4)),
        ("init container smaller than the app: app wins",
         {"initContainers": [c("i", {"cpu": 1})], "containers": [c("a", {"cpu": 3})]}, res(cpu=3)),
        ("init containers run one at a time: max, not sum",
         {"initContainers": [c("i1", {"cpu": 2}), c("i2", {"cpu": 3})], "containers": [c("a", {"cpu": 1})]},
         res(cpu=3)),
        ("max is per resource",
         {"initContainers": [c("i", {"cpu": 4, "memory": "1Gi"})],
          "containers": [c("a", {"cpu": 1, "memory": "4Gi"})]},
         res(cpu=4, memory="4Gi")),
        ("init-only resource",
         {"initContainers": [c("i", {"ephemeral-storage": "1Gi"})], "containers": [c("a", {"cpu": 1})]},
         Resources.parse({"cpu": 1, "ephemeral-storage": "1Gi"})),
        ("a sidecar adds to the app containers",
         {"initContainers": [c("s", {"cpu": 1}, restart=SIDE)], "containers": [c("a", {"cpu": 2})]},
         res(cpu=3)),
        ("sidecars add up with each other",
         {"initContainers": [c("s1", {"cpu": 1}, restart=SIDE), c("s2", {"cpu": 1}, restart=SIDE)],
          "containers": [c("a", {"cpu": 2})]},
         res(cpu=4)),
        ("an init container after a sidecar needs its request plus the sidecar",
         {"initContainers": [c("s", {"cpu": 1}, restart=SIDE), c("i", {"cpu": 5})],
          "containers": [c("a", {"cpu": 1})]},
         res(cpu=6)),
        ("an init container before a sidecar does not count it",
         {"initContainers": [c("i", {"cpu": 5}), c("s", {"cpu": 1}, restart=SIDE)],
          "containers": [c("a", {"cpu": 1})]},
         res(cpu=5)),
        ("only the sidecars declared before count, in order",
         {"initContainers": [c("s1", {"cpu": 1}, restart=SIDE), c("i1", {"cpu": 4}),
                             c("s2", {"cpu": 2}, restart=SIDE), c("i2", {"cpu": 4})],
          "containers": [c("a", {"cpu": 1})]},
         res(cpu=7)),  # max(1+1+2, 4+1, 4+1+2) = 7
        ("restartPolicy other than Always is a plain init container",
         {"initContainers": [c("i", {"cpu": 1}, restart="OnFailure")], "containers": [c("a", {"cpu": 2})]},
         res(cpu=2)),
        ("a sidecar's limit stands in for its request",
         {"initContainers": [c("s", limits={"memory": "1Gi"}, restart=SIDE)],
          "containers": [c("a", {"memory": "1Gi"})]},
         res(memory="2Gi")),
        ("overhead is added",
         {"containers": [c("a", {"cpu": 1})], "overhead": {"cpu": "250m", "memory": "120Mi"}},
         res(cpu="1250m", memory="120Mi")),
        ("overhead is added after the init max",
         {"initContainers": [c("i", {"cpu": 4})], "containers": [c("a", {"cpu": 1})],
          "overhead": {"cpu": 1}},
         res(cpu=5)),
        ("pod-level requests override the containers' cpu and memory",
         {"resources": {"requests": {"cpu": 8, "memory": "8Gi"}},
          "containers": [c("a", {"cpu": 1, "memory": "1Gi", "nvidia.com/gpu": 1})]},
         res(cpu=8, memory="8Gi", gpu=1)),
        ("pod-level requests do not override extended resources",
         {"resources": {"requests": {"cpu": 2, "nvidia.com/gpu": 4}},
          "containers": [c("a", {"cpu": 1, "nvidia.com/gpu": 1})]},
         res(cpu=2, gpu=1)),
        ("a pod-level limit is the request when no container asks for the resource",
         {"resources": {"limits": {"cpu": 4, "memory": "4Gi"}}, "containers": [c("a")]},
         res(cpu=4, memory="4Gi")),
        ("with a pod-level limit, the containers' request of that resource wins",
         {"resources": {"limits": {"cpu": 4, "memory": "4Gi"}}, "containers": [c("a", {"cpu": 1})]},
         res(cpu=1, memory="4Gi")),
        ("pod-level hugepages override the containers'",
         {"resources": {"requests": {"hugepages-2Mi": "4Mi"}},
          "containers": [c("a", {"hugepages-2Mi": "2Mi", "cpu": 1})]},
         Resources.parse({"hugepages-2Mi": "4Mi", "cpu": 1})),
        ("pod-level overhead still adds",
         {"resources": {"requests": {"cpu": 2}}, "containers": [c("a", {"cpu": 1})], "overhead": {"cpu": 1}},
         res(cpu=3)),
        ("empty pod-level resources change nothing",
         {"resources": {}, "containers": [c("a", {"cpu": 1})]}, res(cpu=1)),
        ("the extender's marker is no request: it only routes the pod",
         {"containers": [c("a", {"cpu": 1, "kube-queue.x-k8s.io/extender": 1}),
                         c("b", {"kube-queue.x-k8s.io/extender": 1})]}, res(cpu=1)),
    ],
)
def test_pod_request_follows_kube_scheduler(case: str, spec: dict[str, Any], expected: Resources) -> None:
    assert pod_request(spec) == expected, case


@pytest.mark.parametrize(
    ("spec", "fragments"),
    [
        ({"containers": [c("main", {"cpu": "lots"})]}, ["container 'main'", "'cpu'", "'lots'"]),
        ({"containers": [c("main", limits={"memory": "1GB"})]}, ["container 'main' limits", "'memory'"]),
        ({"initContainers": [c("setup", {"cpu": "1.2.3"})]}, ["init container 'setup'", "'cpu'"]),
        ({"containers": [c("main", {"cpu": -1})]}, ["container 'main'", "'cpu'", "negative"]),
        ({"containers": [c("main", {"cpu": 0.5})]}, ["container 'main'", "'cpu'", "float"]),
        ({"containers": [{"image": "x", "resources": {"requests": {"cpu": "x"}}}]}, ["container #0"]),
        ({"containers": ["oops"]}, ["container #0", "container object"]),
        ({"containers": "main"}, ["containers", "list"]),
        ({"containers": [{"name": "m", "resources": ["cpu"]}]}, ["container 'm'", "requests and limits"]),
        ({"containers": [c("m", {"": 1})]}, ["container 'm'", "non-empty"]),
        ({"containers": [c("m")], "overhead": {"cpu": "x"}}, ["pod overhead", "'cpu'"]),
        ({"containers": [c("m")], "overhead": "cpu"}, ["pod overhead", "mapping"]),
        ({"resources": {"requests": {"cpu": "x"}}}, ["pod-level requests", "'cpu'"]),
        ({"resources": {"limits": {"memory": "x"}}}, ["pod-level limits", "'memory'"]),
        ({"resources": "big"}, ["pod spec resources"]),
    ],
)
def test_pod_request_names_the_container_and_resource_of_a_bad_quantity(
    spec: dict[str, Any], fragments: list[str]
) -> None:
    with pytest.raises(WorkloadError) as caught:
        pod_request(spec)
    for fragment in fragments:
        assert fragment in str(caught.value)


def test_pod_request_refuses_a_non_mapping_spec() -> None:
    with pytest.raises(WorkloadError, match="pod spec object"):
        pod_request(["containers"])  # type: ignore[arg-type]


def test_pod_set_multiplies_the_per_pod_request() -> None:
    ps = pod_set("worker", 6, {"containers": [c("pi", {"cpu": 10, "memory": "10Gi"})]})
    assert ps == PodSet("worker", 6, res(cpu=10, memory="10Gi"))
    assert ps.total == res(cpu=60, memory="60Gi")
    assert pod_set("none", 0, {"containers": [c("pi", {"cpu": 1})]}).total == res(cpu=0)


@pytest.mark.parametrize(
    ("count", "fragment"),
    [(-1, "must not be negative"), (True, "integer"), (1.5, "integer"), ("2", "integer")],
)
def test_pod_set_rejects_bad_counts(count: Any, fragment: str) -> None:
    with pytest.raises(WorkloadError, match=fragment) as caught:
        pod_set("worker", count, {})
    assert "'worker'" in str(caught.value)


def test_pod_set_names_itself_in_quantity_errors() -> None:
    with pytest.raises(WorkloadError, match=r"pod set 'launcher': container 'main'"):
        pod_set("launcher", 1, {"containers": [c("main", {"cpu": "x"})]})


def test_workload_request_sums_pod_sets_and_counts_itself_once() -> None:
    workload = Workload(
        key=WorkloadKey("PyTorchJob", "user-a", "train"),
        quota="department-a",
        pod_sets=(PodSet("master", 1, res(cpu=2)), PodSet("worker", 3, res(cpu=4, gpu=1))),
    )
    assert workload.request == res(cpu=14, gpu=3)
    assert workload.request_with_count == res(cpu=14, gpu=3, max_jobs=1)
    assert workload.request_with_count[MAX_JOBS] == NANO
    assert str(workload.key) == "PyTorchJob/user-a/train"


def test_builder_job_and_dequeue_order() -> None:
    early = job("b", created=1.0)
    late = job("a", created=2.0)
    urgent = job("z", priority=2, created=3.0)
    tie = job("a", created=1.0)
    ordered = sorted([late, early, urgent, tie], key=lambda w: w.order_key)
    assert [w.key.name for w in ordered] == ["z", "a", "b", "a"]
    assert ordered[1].created == 1.0
    assert job("six", pods=6, cpu=10, memory="10Gi").request == res(cpu=60, memory="60Gi")
    assert job("g", cpu=None, gpu=1).request == res(gpu=1)
    assert job("x", extra={"example.com/fpga": 1}).request == Resources.parse({"cpu": 1, "example.com/fpga": 1})
    assert job("p", phase=Phase.ADMITTED, admitted_at=5.0).admitted_at == 5.0


json_junk = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6)
    | st.sampled_from(["1", "100m", "1Gi", "Always", "x"]),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.sampled_from(["cpu", "memory", "name", "requests", "limits", "resources",
                                       "restartPolicy", "containers", "initContainers", "overhead", ""]),
                      inner, max_size=4),
    max_leaves=25,
)


@settings(max_examples=examples(200), deadline=None)
@given(spec=st.dictionaries(st.sampled_from(["containers", "initContainers", "overhead", "resources"]),
                            json_junk, max_size=4))
def test_junk_pod_specs_only_ever_raise_workload_error(spec: dict[str, Any]) -> None:
    try:
        request = pod_request(spec)
    except WorkloadError as error:
        assert str(error)
    else:
        assert not request.any_negative()


def test_a_workload_key_hashes_as_its_names_and_travels_without_its_hash() -> None:
    """The hash is cached, but a key pickled in another process (another string hash seed) is found here."""
    key = WorkloadKey("Job", "user-a", "a")
    assert hash(key) == hash(("Job", "user-a", "a"))
    assert {key: 1}[copy.deepcopy(key)] == 1
    assert {key: 1}[dataclasses.replace(key)] == 1
    script = ("import pickle, sys; from webhook.core.workload import WorkloadKey; "
              "sys.stdout.buffer.write(pickle.dumps(WorkloadKey('Job', 'user-a', 'a')))")
    sent = subprocess.run([sys.executable, "-c", script], capture_output=True, check=True,
                          cwd=Path(__file__).resolve().parents[2], env={**os.environ, "PYTHONHASHSEED": "7"}).stdout
    assert {key: 1}[pickle.loads(sent)] == 1


def test_the_order_key_follows_the_fields_it_is_made_of() -> None:
    """``order_key`` is made with the workload: a copy with other fields gets its own."""
    first = job("a", priority=1, created=5.0)
    changed = dataclasses.replace(first, priority=3, created=2.0)
    assert first.order_key == (-1, 5.0, first.key.namespace, "a")
    assert changed.order_key == (-3, 2.0, first.key.namespace, "a")


def test_jobs_of_one_shape_share_their_requests() -> None:
    """Tens of thousands of queued jobs ask for a few shapes: each shape's request is held once (issue 38)."""
    spec = {"containers": [c("pi", {"cpu": 10, "memory": "10Gi"})]}
    one, two = pod_set("worker", 6, copy.deepcopy(spec)), pod_set("worker", 6, copy.deepcopy(spec))
    assert one.per_pod is two.per_pod and one.per_pod == res(cpu=10, memory=10 * 2**30)
    first, second = job("a", pods=2), job("b", pods=2)
    assert first.request is second.request and first.request == res(cpu=2)
