"""Which held Pods a job's own pod created (a SparkApplication's driver its executors): they belong to that
job, which releases them within its admission (:mod:`webhook.core.spawned`), and are not queued on their own.

A job whose adapter names a ``spawned_pod_set`` spawns through the pods its ``pod_owners`` name as ``Pod``
(the driver). A Pod whose controller owner is such a pod is that job's, whoever created it: trusting no
creator, the count and size the job was admitted with bound what its pods may add.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TypeVar

from webhook.api.objects import Obj, controller_of, name_of, namespace_of
from webhook.workloads.base import Adapter

J = TypeVar("J")

DriverKey = tuple[str, str]
"""``(namespace, pod name)`` of a pod that creates pods for its job."""


def spawning_pods(jobs: Iterable[tuple[J, Adapter, Obj]]) -> dict[DriverKey, J]:
    """The pods that create pods for their job (``spawned_pod_set``), and that job."""
    out: dict[DriverKey, J] = {}
    for job, adapter, obj in jobs:
        if adapter.spawned_pod_set is None:
            continue
        namespace = namespace_of(obj)
        for kind, name in adapter.pod_owners(obj):
            if kind == "Pod":
                out[(namespace, name)] = job
    return out


def spawner_of(pod: Obj, spawners: Mapping[DriverKey, J]) -> tuple[DriverKey, J] | None:
    """The pod that created ``pod`` and its job, when ``pod``'s controller owner is one of ``spawners``."""
    if not spawners:
        return None
    owner = controller_of(pod)
    if owner is None or owner.get("kind") != "Pod" or owner.get("apiVersion") != "v1":
        return None
    key = (namespace_of(pod), str(owner.get("name") or ""))
    return (key, spawners[key]) if key in spawners else None


def separate_spawned(
    jobs: Sequence[tuple[J, Adapter, Obj]],
) -> tuple[list[tuple[J, Adapter, Obj]], dict[DriverKey, J]]:
    """``jobs`` without the Pods another of them spawned (they show as that job's pods), and those Pods'
    ``(namespace, name)`` with the job that spawned each."""
    spawners = spawning_pods(jobs)
    if not spawners:
        return list(jobs), {}
    kept: list[tuple[J, Adapter, Obj]] = []
    spawned: dict[DriverKey, J] = {}
    for item in jobs:
        spawner = spawner_of(item[2], spawners) if item[1].kind == "Pod" else None
        if spawner is None:
            kept.append(item)
        else:
            spawned[(namespace_of(item[2]), name_of(item[2]))] = spawner[1]
    return kept, spawned
