"""Seeding, settings and stepping for the controller's service tests against the in-memory apiserver."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from fractions import Fraction
from typing import Any

from tests.builders import SEED_TREE_SPEC
from tests.service.kubeclient_fake import JOBS, FakeApi, Kind
from webhook.api.names import ADMISSION_ANNOTATION
from webhook.controller.controller import Controller
from webhook.controller.settings import ControllerSettings
from webhook.kube.cache import WatchCache

NAMESPACES: Kind = ("", "v1", "namespaces")
TREES: Kind = ("scheduling.sigs.k8s.io", "v1beta1", "elasticquotatrees")
QUEUES: Kind = ("scheduling.x-k8s.io", "v1alpha1", "queues")
EVENTS: Kind = ("", "v1", "events")
PRIORITY_CLASSES: Kind = ("scheduling.k8s.io", "v1", "priorityclasses")
PODS: Kind = ("", "v1", "pods")
BUDGETS: Kind = ("policy", "v1", "poddisruptionbudgets")


def seed_api(make: Callable[[], FakeApi] = FakeApi) -> FakeApi:
    """The seed's tree, its namespaces and PriorityClasses, in a fake API (``make``: a subclass of the fake)."""
    api = make()
    for name in ("user-a", "user-b", "user-c", "kube-queue", "kube-system"):
        api.put(NAMESPACES, {"metadata": {"name": name}})
    api.put(PRIORITY_CLASSES, {"metadata": {"name": "priority-2"}, "value": 2})
    api.put(PRIORITY_CLASSES, {"metadata": {"name": "priority-3"}, "value": 3})
    api.put(
        TREES,
        {
            "metadata": {"name": "elasticquotatree", "namespace": "kube-system"},
            "spec": json.loads(json.dumps(SEED_TREE_SPEC)),
        },
    )
    return api


def pi(name: str, namespace: str = "user-a", pods: int = 6, priority_class: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "pi", "resources": {"requests": {"cpu": "10", "memory": "10Gi"}}}],
        "restartPolicy": "Never",
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"suspend": True, "parallelism": pods, "completions": pods, "template": {"spec": spec}},
    }


def bound_pod(
    name: str, namespace: str, cpu: str, owner: tuple[str, str] | None, *, labels: dict[str, str] | None = None,
    created: str = "2024-04-08T02:00:00Z",
) -> dict[str, Any]:
    """A pod bound to ``ecs-0``, Running, requesting ``cpu``, controlled by ``owner`` ``(kind, name)``."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}",
                                "creationTimestamp": created}
    if labels:
        metadata["labels"] = dict(labels)
    if owner is not None:
        metadata["ownerReferences"] = [{"apiVersion": "v1", "kind": owner[0], "name": owner[1], "uid": "x",
                                        "controller": True}]
    return {
        "metadata": metadata,
        "spec": {"nodeName": "ecs-0", "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
        "status": {"phase": "Running"},
    }


def settings(**overrides: Any) -> ControllerSettings:
    values: dict[str, Any] = {
        "oversell_rate": Fraction(1),
        "leader_elect": False,
        "identity": "test",
        "status_interval": 0.0001,
        "debounce": 0.001,
        "resync_period": 0.2,
        "event_interval": 0.0,
    }
    values.update(overrides)
    return ControllerSettings(**values)


def caches(controller: Controller) -> list[WatchCache]:
    return [
        controller.cache.trees,
        controller.cache.queues,
        controller.cache.namespaces,
        controller.cache.priority_classes,
        controller.cache.pods,
        controller.cache.policies,
        controller.cache.budgets,
        controller.cache.limit_ranges,
        controller.cache.runtime_classes,
        *controller.cache.devices.caches,
        *(cache for _, _, cache in controller.cache.job_caches.values()),
    ]


async def catch_up(api: FakeApi, controller: Controller) -> None:
    """Until every cache has seen every change of its resource."""
    for _ in range(1000):
        behind = False
        for cache in caches(controller):
            source: Any = cache.source
            source = getattr(source, "inner", source)  # a slim cache's underlying source
            kind = (source.ref.group, source.ref.version, source.ref.plural)
            selector = getattr(source, "label_selector", None)
            newest = max(
                (version for version, changed, _, obj in api.log
                 if changed == kind and api._selected(source.ref, obj, selector)),
                default=0,
            )
            if int(cache.resource_version or 0) < newest:
                behind = True
        if not behind:
            return
        await asyncio.sleep(0.001)
    raise AssertionError("caches did not catch up")


@asynccontextmanager
async def driven(api: FakeApi, **overrides: Any) -> AsyncIterator[Controller]:
    """A controller whose caches run but whose passes the test drives with ``reconcile()``."""
    controller = Controller(api, settings(**overrides))
    await controller.cache.discover()
    tasks = [asyncio.ensure_future(cache.run()) for cache in caches(controller)[:9]]
    tasks.append(asyncio.ensure_future(controller.events.run()))
    try:
        await asyncio.gather(*(cache.synced.wait() for cache in caches(controller)))
        controller.ready.set()
        yield controller
    finally:
        for task in [*tasks, *controller._tasks]:
            task.cancel()
        await asyncio.gather(*tasks, *controller._tasks, return_exceptions=True)


async def step(api: FakeApi, controller: Controller, passes: int = 1) -> None:
    for _ in range(passes):
        await catch_up(api, controller)
        await controller.reconcile()
    await catch_up(api, controller)


def job(api: FakeApi, name: str, namespace: str = "user-a") -> dict[str, Any]:
    return api.obj(JOBS, name, namespace)


def admitted(api: FakeApi, name: str, namespace: str = "user-a") -> bool:
    obj = job(api, name, namespace)
    return obj["spec"]["suspend"] is False and ADMISSION_ANNOTATION in obj["metadata"].get("annotations", {})


def events(api: FakeApi, reason: str) -> list[str]:
    return [e["involvedObject"]["name"] for e in api.objects(EVENTS) if e["reason"] == reason]


def job_writes(api: FakeApi) -> int:
    return sum(1 for method, path in api.calls if method == "PATCH" and "/jobs/" in path)
