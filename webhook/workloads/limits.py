"""What the API server's admission gives a job's pods that their templates do not say, written on the job when
the webhook holds it, so the queue sizes it as its pods will be sized: the namespace's LimitRange default
requests, into the templates (see :mod:`webhook.core.limitrange`), and the overhead of each RuntimeClass the
templates name, into :data:`~webhook.api.names.POD_OVERHEAD_ANNOTATION` (see :mod:`webhook.workloads.overhead`).
Bare Pods need neither: the API server's ``LimitRanger`` and ``RuntimeClass`` admission have filled them before
any webhook sees them. A job written before its namespace's LimitRange, or before the RuntimeClass it names
declared its overhead, is sized with what they say now by the controller (:func:`as_admitted`), since its pods
are created after it is admitted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from webhook.api.names import POD_OVERHEAD_ANNOTATION
from webhook.api.objects import Obj
from webhook.core.limitrange import ContainerDefaults, container_lists, missing_requests
from webhook.workloads.base import Adapter, JSONPatch, PodTemplate, metadata_patch, pointer, set_value_patch
from webhook.workloads.overhead import Overheads, runtime_class
from webhook.workloads.patch import apply_patch

Gap = tuple[tuple[str | int, ...], Obj, dict[str, str]]
"""``(container path, container, the default requests it lacks)``."""


def request_gaps(templates: tuple[PodTemplate, ...], defaults: ContainerDefaults) -> list[Gap]:
    """Each job template container that lacks some of the namespace's default requests."""
    out: list[Gap] = []
    if not defaults.requests:
        return out
    for template in templates:
        if not template.path:
            continue
        for field, containers in container_lists(template.spec):
            for index, container in enumerate(containers):
                if isinstance(container, Mapping):
                    missing = missing_requests(container, defaults)
                    if missing:
                        out.append(((*template.path, "spec", field, index), container, missing))
    return out


def limit_range_patch(adapter: Adapter, obj: Obj, defaults: ContainerDefaults) -> list[JSONPatch]:
    """Operations that add each template container's missing default requests (``[]`` when none)."""
    ops: list[JSONPatch] = []
    for path, container, missing in request_gaps(adapter.pod_templates(obj), defaults):
        resources = container.get("resources")
        requests = resources.get("requests") if isinstance(resources, Mapping) else None
        if isinstance(requests, Mapping):
            ops += [
                {"op": "add", "path": pointer(*path, "resources", "requests", name), "value": value}
                for name, value in missing.items()
            ]
        else:
            ops += set_value_patch(obj, (*path, "resources", "requests"), missing)
    return ops


def as_admitted(adapter: Adapter, obj: Obj, defaults: ContainerDefaults, overheads: Overheads) -> Obj:
    """``obj`` as the API server's admission will size its pods now (a copy; ``obj`` itself when nothing is
    missing): the default requests its templates lack written in, and the overhead of each RuntimeClass they
    name as the class declares it now, recorded as the webhook records it. The controller sizes a job so,
    since its pods are created after it is admitted: one held before its namespace's LimitRange, or before the
    class it names got (or changed) its overhead, is sized as its pods will be."""
    ops = limit_range_patch(adapter, obj, defaults) + overhead_patch(adapter, obj, overheads)
    return apply_patch(obj, ops) if ops else obj


def named_classes(templates: tuple[PodTemplate, ...], overheads: Overheads) -> list[tuple[PodTemplate, str]]:
    """Each job template whose pods the API server will give a RuntimeClass's overhead, with the class's name
    (:func:`~webhook.workloads.overhead.runtime_class`)."""
    out: list[tuple[PodTemplate, str]] = []
    if not overheads:
        return out
    for template in templates:
        name = runtime_class(template.spec) if template.path else None
        if name is not None and name in overheads:
            out.append((template, name))
    return out


def patched_classes(patches: Mapping[str, Obj], overheads: Overheads) -> dict[str, str]:
    """Patch field -> the RuntimeClass with an overhead it gives the pods (an Argo ``podSpecPatch``'s)."""
    named = {field: runtime_class(patch) for field, patch in patches.items()} if overheads else {}
    return {field: name for field, name in named.items() if name is not None and name in overheads}


def overhead_patch(adapter: Adapter, obj: Obj, overheads: Overheads) -> list[JSONPatch]:
    """The annotation that records the overhead of each RuntimeClass the job's templates name (``[]`` when none
    names a class with one)."""
    if not overheads:  # no RuntimeClass declares one: the usual case costs nothing
        return []
    classes = sorted({name for _, name in named_classes(adapter.pod_templates(obj), overheads)}
                     | set(patched_classes(adapter.pod_spec_patches(obj), overheads).values()))
    if not classes:
        return []
    record = json.dumps({name: dict(overheads[name]) for name in classes}, sort_keys=True, separators=(",", ":"))
    return metadata_patch(obj, (), {}, {POD_OVERHEAD_ANNOTATION: record})
