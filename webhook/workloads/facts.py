"""Read the queue's integrity facts of a job through its adapter, and apply the core's rules to raw objects.

The rules themselves live in :mod:`webhook.core.integrity`; this module only knows where each kind keeps
the fields they read (its hold, quota labels, submission stamp, priority class fields, pod sets).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from webhook.api.names import CONTROLLER_ANNOTATIONS, QUOTA_LABEL, SUBMITTED_ANNOTATION
from webhook.api.objects import Obj
from webhook.core import integrity
from webhook.core.integrity import JobFacts
from webhook.core.limitrange import NO_DEFAULTS, ContainerDefaults
from webhook.core.workload import PodSet, WorkloadError
from webhook.workloads.base import Adapter, PodTemplate, str_at, value_at
from webhook.workloads.limits import named_classes, patched_classes, request_gaps
from webhook.workloads.overhead import NO_OVERHEADS, Overheads, recorded


def field_name(*segments: str | int) -> str:
    """``spec.rayClusterSpec.workerGroupSpecs[0].template``: a field as users write it."""
    out = ""
    for segment in segments:
        out += f"[{segment}]" if isinstance(segment, int) else (f".{segment}" if out else segment)
    return out


def _hold_field(adapter: Adapter) -> str:
    path = getattr(adapter, "suspend_path", None)
    return field_name(*path) if isinstance(path, tuple) else "spec.schedulingGates"


def _label(obj: Obj, *base: str | int) -> str | None:
    labels = value_at(obj, *base, "metadata", "labels")
    value = labels.get(QUOTA_LABEL) if isinstance(labels, Mapping) else None
    return value if isinstance(value, str) else None


def _templates(adapter: Adapter, obj: Obj) -> tuple[PodTemplate, ...]:
    try:
        return adapter.pod_templates(obj)
    except WorkloadError:
        return ()


def job_facts(
    adapter: Adapter, obj: Obj, *, strict: bool = True, defaults: ContainerDefaults = NO_DEFAULTS,
    overheads: Overheads = NO_OVERHEADS,
) -> JobFacts:
    """The facts of ``obj``. ``strict``: a pod set that cannot be read raises :class:`WorkloadError` (naming the
    field); otherwise unreadable parts read as absent (an old version is judged by what can be read).
    ``defaults``: the namespace's LimitRange default requests; ``overheads``: the RuntimeClasses' pod overheads."""
    templates = adapter.pod_templates(obj) if strict else _templates(adapter, obj)
    pod_sets: tuple[PodSet, ...] | None
    try:
        pod_sets = adapter.pod_sets(obj)
    except WorkloadError:
        if strict:
            raise
        pod_sets = None
    labels: dict[str, str | None] = {field_name("metadata", "labels", QUOTA_LABEL): _label(obj)}
    classes: dict[str, str | None] = {}
    literals: dict[str, object] = {}
    for path in (adapter.priority_class_path, *adapter.extra_class_fields):
        if path:
            classes[field_name(*path)] = _text(obj, path)
    for path in adapter.extra_label_fields:
        labels[field_name(*path, QUOTA_LABEL)] = _text(obj, (*path, QUOTA_LABEL))
    patches = adapter.pod_spec_patches(obj)
    nodes = {field: str(patch["nodeName"]) for field, patch in patches.items() if patch.get("nodeName")}
    for template in templates:
        spec = (*template.path, "spec")
        if template.path:
            labels[field_name(*template.path, "metadata", "labels", QUOTA_LABEL)] = _label(obj, *template.path)
            node = _value(obj, (*spec, "nodeName"))
            if isinstance(node, str) and node:
                nodes[field_name(*spec, "nodeName")] = node
        classes[field_name(*spec, "priorityClassName")] = _text(obj, (*spec, "priorityClassName"))
        literal = _value(obj, (*spec, "priority"))
        if literal is not None:
            literals[field_name(*spec, "priority")] = literal
    annotations = _value(obj, ("metadata", "annotations"))
    sized_with = recorded(obj) if overheads else NO_OVERHEADS
    return JobFacts(
        kind=adapter.kind,
        hold_field=_hold_field(adapter),
        gated=adapter.gates_at_creation_only,
        held=_safe(adapter.is_suspended, obj),
        finished=_safe(adapter.is_finished, obj),
        quota_labels=labels,
        stamp=annotations.get(SUBMITTED_ANNOTATION) if isinstance(annotations, Mapping) else None,
        stamp_field=field_name("metadata", "annotations", SUBMITTED_ANNOTATION),
        controller_notes={
            field_name("metadata", "annotations", key): annotations.get(key)
            for key in CONTROLLER_ANNOTATIONS
            if isinstance(annotations, Mapping) and annotations.get(key) is not None
        },
        priority_classes=classes,
        literal_priorities=literals,
        pod_sets=pod_sets,
        pod_set_fields={template.name: field_name(*template.path) or "spec" for template in templates},
        priority_is_resolved=not any(template.path for template in templates) and bool(templates),
        unrequested=frozenset(
            field_name(*path, "resources", "requests", name)
            for path, _, missing in request_gaps(templates, defaults)
            for name in missing
        ),
        unsized={
            field_name(*template.path, "spec", "runtimeClassName"): name
            for template, name in named_classes(templates, overheads)
            if name not in sized_with
        } | {field: name for field, name in patched_classes(patches, overheads).items() if name not in sized_with},
        node_names=nodes,
    )


def _value(obj: Obj, path: tuple[str | int, ...]) -> object:
    try:
        return value_at(obj, *path)
    except WorkloadError:
        return None


def _text(obj: Obj, path: tuple[str | int, ...]) -> str | None:
    try:
        return str_at(obj, *path)
    except WorkloadError:
        value = _value(obj, path)
        return repr(value)


def _safe(check: Callable[[Obj], bool], obj: Obj) -> bool:
    try:
        return bool(check(obj))
    except WorkloadError:
        return False


def submission_problems(adapter: Adapter, obj: Obj, priority_classes: Mapping[str, int]) -> list[str]:
    """Why a new job cannot be queued as written (``[]`` when it can): the kind's own queueing problems and
    the core's submission rules. Raises :class:`WorkloadError` when its pod sets cannot be read."""
    problems = list(adapter.queueing_problems(obj))
    problems.extend(integrity.submission_problems(job_facts(adapter, obj), priority_classes))
    return problems


def update_problems(
    adapter: Adapter,
    old: Obj,
    new: Obj,
    priority_classes: Mapping[str, int],
    defaults: ContainerDefaults = NO_DEFAULTS,
    *,
    overheads: Overheads = NO_OVERHEADS,
) -> list[str]:
    """Why a user's update of a job is refused (``[]`` when allowed); see :mod:`webhook.core.integrity`.
    Raises :class:`WorkloadError` when the new version's hold or pod sets cannot be read."""
    adapter.is_suspended(new)
    return integrity.update_problems(
        job_facts(adapter, old, strict=False, defaults=defaults, overheads=overheads),
        job_facts(adapter, new, defaults=defaults, overheads=overheads),
        priority_classes,
    )
