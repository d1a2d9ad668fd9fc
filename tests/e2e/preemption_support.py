"""What the end-to-end tests of kube-scheduler's preemption share: alice's and carol's quotas, pods, Deployments
and Jobs created as a user, and the extender's preempt answers read from its metrics."""

from __future__ import annotations

import contextlib
import json
import urllib.request
from collections.abc import Iterator
from typing import Any

from tests.e2e.conftest import DevCluster
from tests.e2e.harness import quotas, unique


class Spaces:
    """Alice's namespace (quota Serve) and carol's (quota Batch)."""

    def __init__(self, prefix: str) -> None:
        self.serve, self.batch = unique(f"{prefix}-serve"), unique(f"{prefix}-batch")


@contextlib.contextmanager
def serve_and_batch(dev: DevCluster, prefix: str, serve_min: int, batch_min: int) -> Iterator[Spaces]:
    """A root of 100 CPU over Serve (alice's namespace, ``serve_min`` CPU) and Batch (carol's, ``batch_min``),
    each user with ``edit`` in their own (:func:`tests.e2e.harness.quotas`)."""
    names = Spaces(prefix)
    children = [
        {"name": "Serve", "min": {"cpu": serve_min}, "max": {"cpu": 100}, "namespaces": [names.serve]},
        {"name": "Batch", "min": {"cpu": batch_min}, "max": {"cpu": 100}, "namespaces": [names.batch]},
    ]
    with quotas(dev, children, {names.serve: "alice", names.batch: "carol"}):
        yield names


def _pod_spec(cpu: int | None, node: str | None, priority_class: str | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": "busybox"}
    if cpu is not None:  # None: a container that asks for nothing
        container["resources"] = {"requests": {"cpu": str(cpu)}}
    spec: dict[str, Any] = {"terminationGracePeriodSeconds": 0, "containers": [container]}
    if node is not None:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    if priority_class is not None:
        spec["priorityClassName"] = priority_class
    return spec


def deployment(name: str, replicas: int, cpu: int, *, node: str | None = None,
               priority_class: str | None = None) -> dict[str, Any]:
    """A Deployment of ``replicas`` pods of ``cpu`` CPU (labelled ``app=NAME``), on ``node`` and at
    ``priority_class`` if given."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}}, "spec": _pod_spec(cpu, node, priority_class)}},
    }


def job(name: str, pods: int, cpu: int | None, node: str | None = None) -> dict[str, Any]:
    """A Job of ``pods`` parallel pods of ``cpu`` CPU (``None``: no request), on ``node`` if given."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"parallelism": pods, "completions": pods,
                 "template": {"spec": {"restartPolicy": "Never", **_pod_spec(cpu, node)}}},
    }


def pod(name: str, cpu: int, node: str, priority_class: str | None = None) -> dict[str, Any]:
    """A bare Pod of ``cpu`` CPU pinned to ``node``, at ``priority_class`` if given."""
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 0,
        "nodeSelector": {"kubernetes.io/hostname": node},
        "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": str(cpu)}}}],
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def create(dev: DevCluster, namespace: str, obj: dict[str, Any], user: str) -> None:
    result = dev.create({**obj, "metadata": {**obj["metadata"], "namespace": namespace}}, user=user)
    assert result.returncode == 0, result.stderr


def pod_state(dev: DevCluster, namespace: str, name: str) -> dict[str, Any] | None:
    result = dev.kubectl_result("get", "pod", name, "-n", namespace, "-o", "json")
    if result.returncode != 0:
        return None
    obj: dict[str, Any] = json.loads(result.stdout)
    return obj


def running(dev: DevCluster, namespace: str, name: str) -> bool:
    state = pod_state(dev, namespace, name)
    return state is not None and state["status"].get("phase") == "Running" and not state["metadata"].get(
        "deletionTimestamp")


def evicted(dev: DevCluster, namespace: str, name: str, uid: str) -> bool:
    """Gone, being deleted, or re-created: evicted."""
    state = pod_state(dev, namespace, name)
    return state is None or state["metadata"]["uid"] != uid or bool(state["metadata"].get("deletionTimestamp"))


def preempt_requests(dev: DevCluster, result: str) -> float:
    url = f"http://127.0.0.1:{dev.config.ports.extender}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    wanted = f'kube_queue_extender_requests_total{{result="{result}",verb="preempt"}}'
    for line in text.splitlines():
        if line.startswith(wanted):
            return float(line.split()[-1])
    return 0.0


def fill(dev: DevCluster, namespace: str, user: str, node: str, pods: list[tuple[str, int]]) -> dict[str, str]:
    """``pods`` (name, CPU) of priority 0 on ``node``, created as ``user`` and running; their uids."""
    for name, cpu in pods:
        create(dev, namespace, pod(name, cpu, node), user)
    uids: dict[str, str] = {}
    for name, _ in pods:

        def up(pod_name: str = name) -> bool:
            return running(dev, namespace, pod_name)

        dev.wait_until(up, 90, f"{namespace}/{name} running on {node}")
        state = pod_state(dev, namespace, name)
        assert state is not None
        uids[name] = state["metadata"]["uid"]
    return uids


def refused_preemption_keeps(dev: DevCluster, namespace: str, preemptor: str,
                             victims: dict[str, tuple[str, str]], *, before: float | None = None) -> None:
    """The scheduler tries to preempt for ``preemptor`` and the extender refuses: ``victims`` (name -> namespace,
    uid) keep running, and the preemptor waits. ``before``: the refusals counted before the preemptor was
    created, for one the scheduler may try at once (else they are counted now)."""
    if before is None:
        before = preempt_requests(dev, "refused")

    def asked_or_evicted() -> bool:
        gone = any(evicted(dev, ns, name, uid) for name, (ns, uid) in victims.items())
        return gone or preempt_requests(dev, "refused") > before

    dev.wait_until(asked_or_evicted, 90, f"the scheduler's preemption attempt for {namespace}/{preemptor}")
    # The extender's Event follows its refusal; a preemption it allowed anywhere would have no Event (and its
    # victims would be going): the Event, not a pause, says the attempt was decided. The pod is told why
    # where kubectl describe looks (docs/pod-quota.md, "Preemption").
    told: list[dict[str, Any]] = []

    def refusal_told() -> bool:
        selector = f"involvedObject.kind=Pod,involvedObject.name={preemptor},reason=PreemptionRefused"
        told[:] = dev.get_json("events", "-n", namespace, "--field-selector", selector)["items"]
        return bool(told)

    dev.wait_until(refusal_told, 30, f"the PreemptionRefused Event on {namespace}/{preemptor}")
    assert told[0]["type"] == "Warning" and told[0]["source"]["component"] == "kube-queue-extender", told[0]
    assert "refused kube-scheduler's preemption on every candidate node" in told[0]["message"], told[0]
    for name, (ns, uid) in victims.items():
        assert not evicted(dev, ns, name, uid), f"the scheduler's preemption evicted {ns}/{name}"
    assert not running(dev, namespace, preemptor)
    assert preempt_requests(dev, "refused") > before
