"""LimitRange defaults: the requests a container will get when its pod is created, as Kubernetes gives them.

A pod set written without requests used to be sized as zero, so 300 such pods ran "free" (issue 17, hole 4).
Kubernetes sizes those pods by the namespace's LimitRanges: when a pod is created, the ``LimitRanger``
admission plugin fills each container's missing request of a resource with the ``defaultRequest`` of a
``type: Container`` limit (the API server has already defaulted a missing ``defaultRequest`` to ``default``
when it stored the LimitRange). A container's own request wins, and so does its own limit (the API server
copies a limit into a missing request before admission).

:func:`missing_requests` gives, per container, what a pod created from a template would get; the webhook
writes exactly that into the job's pod templates at submission, so the queue, the controller and the pods
all count the same requests. A job written before its namespace got a LimitRange (or before it got a default
of some resource) lacks them; the controller sizes such a job with the namespace's defaults of now
(:func:`defaults_by_namespace`), as its pods will be created after it is admitted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from webhook.core.quantity import QuantityError, parse_quantity

CONTAINER = "Container"


@dataclass(frozen=True, slots=True)
class ContainerDefaults:
    """The default requests of one namespace (resource name -> quantity text, as written in the LimitRange)."""

    requests: Mapping[str, str]


NO_DEFAULTS = ContainerDefaults(MappingProxyType({}))


def _valid(value: object) -> bool:
    if not isinstance(value, str | int) or isinstance(value, bool):
        return False
    try:
        parse_quantity(value)
    except QuantityError:
        return False
    return True


def container_defaults(limit_ranges: Iterable[Mapping[str, object]]) -> ContainerDefaults:
    """The default requests of a namespace's LimitRange objects, in the order the API server lists them
    (``LimitRanger`` applies each in turn, so the first one that sets a resource wins; within one
    LimitRange a later ``type: Container`` item overwrites an earlier one). Unreadable entries are skipped."""
    merged: dict[str, str] = {}
    for limit_range in limit_ranges:
        spec = limit_range.get("spec")
        limits = spec.get("limits") if isinstance(spec, Mapping) else None
        own: dict[str, str] = {}
        for item in limits if isinstance(limits, list) else ():
            if not isinstance(item, Mapping) or item.get("type") != CONTAINER:
                continue
            for field in ("default", "defaultRequest"):  # defaultRequest defaults to default
                values = item.get(field)
                if isinstance(values, Mapping):
                    own.update({str(k): str(v) for k, v in values.items() if isinstance(k, str) and _valid(v)})
        for name, value in own.items():
            merged.setdefault(name, value)
    return ContainerDefaults(MappingProxyType(merged))


def defaults_by_namespace(limit_ranges: Iterable[Mapping[str, object]]) -> dict[str, ContainerDefaults]:
    """Namespace -> the default container requests of its LimitRanges (namespaces without defaults left out)."""
    grouped: dict[str, list[Mapping[str, object]]] = {}
    for obj in limit_ranges:
        metadata = obj.get("metadata")
        namespace = metadata.get("namespace") if isinstance(metadata, Mapping) else None
        if isinstance(namespace, str):
            grouped.setdefault(namespace, []).append(obj)
    out = {namespace: container_defaults(items) for namespace, items in grouped.items()}
    return {namespace: defaults for namespace, defaults in out.items() if defaults.requests}


def missing_requests(container: Mapping[str, object], defaults: ContainerDefaults) -> dict[str, str]:
    """The requests ``LimitRanger`` will add to ``container`` (``{}`` when none): each default resource the
    container neither requests nor limits."""
    if not defaults.requests:
        return {}
    resources = container.get("resources")
    resources = resources if isinstance(resources, Mapping) else {}
    present: set[str] = set()
    for field in ("requests", "limits"):
        values = resources.get(field)
        if isinstance(values, Mapping):
            present.update(str(name) for name in values)
    return {name: value for name, value in defaults.requests.items() if name not in present}


def container_lists(pod_spec: Mapping[str, object]) -> Sequence[tuple[str, Sequence[object]]]:
    """``(field, containers)`` for the containers and init containers of a pod spec that are lists."""
    out: list[tuple[str, Sequence[object]]] = []
    for field in ("initContainers", "containers"):
        value = pod_spec.get(field)
        if isinstance(value, list):
            out.append((field, value))
    return out
