"""RuntimeClass overhead: what the API server adds to every pod of a class, so the queue sizes a job with it.

A pod that names a ``runtimeClassName`` whose RuntimeClass declares ``overhead.podFixed`` gets that overhead in
``spec.overhead`` from the API server's ``RuntimeClass`` admission, and the scheduler and the extender count it.
A job's pod templates do not carry it, and it may not be written into them (the admission refuses a pod whose
overhead differs from its class's, so a class changed later would leave the job unable to make pods). So the
webhook records each named class's overhead on the job when it holds it (:data:`POD_OVERHEAD_ANNOTATION`, which
only kube-queue writes), and every sizing of the job adds the recorded overhead to the templates that name the
class and set no overhead of their own (:func:`with_overhead`). A class created or changed later does not resize
a queued job, as a LimitRange does not (docs/queueing.md, "RuntimeClass overhead").
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from types import MappingProxyType

from webhook.api.names import POD_OVERHEAD_ANNOTATION
from webhook.api.objects import Obj, PodSpec, annotations_of, name_of

Overheads = Mapping[str, Mapping[str, str]]
"""RuntimeClass name -> its ``overhead.podFixed`` (resource -> quantity), only the classes that declare one."""
NO_OVERHEADS: Overheads = MappingProxyType({})


def class_overheads(objects: Iterable[Obj]) -> dict[str, dict[str, str]]:
    """The overhead of every RuntimeClass among ``objects`` that declares one."""
    out: dict[str, dict[str, str]] = {}
    for obj in objects:
        overhead = obj.get("overhead")
        fixed = overhead.get("podFixed") if isinstance(overhead, Mapping) else None
        if isinstance(fixed, Mapping) and fixed:
            out[name_of(obj)] = {str(name): str(amount) for name, amount in fixed.items()}
    return out


def runtime_class(spec: Mapping[str, object]) -> str | None:
    """The RuntimeClass a pod spec names when the API server will add that class's overhead to its pods: it
    names one and sets no ``overhead`` itself (the admission checks a written one against the class)."""
    name = spec.get("runtimeClassName")
    return name if isinstance(name, str) and name and "overhead" not in spec else None


def recorded(obj: Obj) -> Overheads:
    """The overheads recorded on a job (empty without the annotation, or with one that does not read)."""
    text = annotations_of(obj).get(POD_OVERHEAD_ANNOTATION)
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    if not isinstance(value, Mapping):
        return {}
    return {str(name): {str(k): str(v) for k, v in fixed.items()}
            for name, fixed in value.items() if isinstance(fixed, Mapping)}


def overhead_of(spec: Mapping[str, object], overheads: Overheads) -> Mapping[str, str] | None:
    """The overhead among ``overheads`` the API server will add to the pods of ``spec`` (``None``: none)."""
    name = runtime_class(spec) if overheads else None
    return overheads.get(name) if name is not None else None


def with_overhead(spec: PodSpec, overheads: Overheads) -> PodSpec:
    """``spec`` as the API server will admit its pods: with the recorded overhead of the class it names."""
    fixed = overhead_of(spec, overheads)
    if not fixed:
        return spec
    out: PodSpec = {**spec}
    out["overhead"] = dict(fixed)
    return out
