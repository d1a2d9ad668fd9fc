"""Write the namespace's LimitRange default requests into a job's pod templates (see
:mod:`webhook.core.limitrange`), so the queue sizes a pod set written without requests as its pods will be
sized. Bare Pods need nothing: the API server's ``LimitRanger`` has filled them before any webhook sees them.
"""

from __future__ import annotations

from collections.abc import Mapping

from webhook.api.objects import Obj
from webhook.core.limitrange import ContainerDefaults, container_lists, missing_requests
from webhook.workloads.base import Adapter, JSONPatch, PodTemplate, pointer, set_value_patch

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
