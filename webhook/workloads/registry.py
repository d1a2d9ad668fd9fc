"""The adapter registry: every module of this package that defines ``ADAPTERS`` is loaded on first use.

Adding a job kind is one new module here with ``ADAPTERS = (MyKindAdapter(),)``; the webhook, the
controller and the webhook configurations pick it up by ``(group, kind)``.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

import webhook.workloads as _package
from webhook.api.names import ADMISSION_ANNOTATION
from webhook.api.objects import Obj, annotations_of, controller_of
from webhook.workloads.base import Adapter

_SKIP = frozenset({"base", "registry"})


@cache
def _load() -> dict[tuple[str, str], Adapter]:
    found: dict[tuple[str, str], Adapter] = {}
    for info in sorted(pkgutil.iter_modules(_package.__path__), key=lambda i: i.name):
        if info.name in _SKIP or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{_package.__name__}.{info.name}")
        for adapter in getattr(module, "ADAPTERS", ()):
            if not isinstance(adapter, Adapter):
                raise TypeError(f"{module.__name__}.ADAPTERS holds {adapter!r}, not an Adapter")
            key = (adapter.group, adapter.kind)
            if key in found:
                raise ValueError(f"two adapters for {adapter.kind}.{adapter.group or 'core'}")
            found[key] = adapter
    return found


def adapter_for(group: str, kind: str) -> Adapter | None:
    """The adapter for a kind (``group`` is ``""`` for core kinds such as Pod); ``None`` when unsupported."""
    return _load().get((group, kind))


def all_adapters() -> tuple[Adapter, ...]:
    """Every registered adapter, ordered by group then kind."""
    return tuple(adapter for _, adapter in sorted(_load().items()))


def is_its_own_job(pod: Obj) -> bool:
    """Whether ``pod`` is a bare Pod the queue released: the job it is queued as ends with it. A job's pod is
    made again by the job's operator when it goes, and its job keeps the room it holds."""
    return controller_of(pod) is None and ADMISSION_ANNOTATION in annotations_of(pod)


@cache
def job_owner_kinds() -> frozenset[str]:
    """The kinds that own the pods of a job the queue tracks: every job kind, and the kinds their adapters name
    as their pods' owners (a RayJob's RayCluster). A pod owned by anything else is no job's."""
    kinds = {adapter.kind for adapter in _load().values()}
    kinds.add("RayCluster")
    return frozenset(kinds)


def queued_by_a_job(pod: Obj) -> bool:
    """Whether a queued job accounts for ``pod``: its controller owner is of a job kind (:func:`job_owner_kinds`)
    or a Pod (only a job's pod owns pods: a SparkApplication's driver its executors), or it is a bare Pod the queue
    released (it carries the admission record). Every other pod is *loose*: it counts as it runs, and reclaim may
    evict it (docs/reclaim.md, "Pods")."""
    owner = controller_of(pod)
    if owner is not None and owner.get("kind") in {*job_owner_kinds(), "Pod"}:
        return True
    return ADMISSION_ANNOTATION in annotations_of(pod)
