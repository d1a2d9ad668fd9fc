"""Argo Workflow (``argoproj.io/v1alpha1``): held as a whole by ``spec.suspend``.

A workflow runs its steps one group after another, so its size is not the sum of its pods. It is, in this
order (docs/job-kinds.md):

* the size its submitter declares in the annotation ``kube-queue/min-resources`` (ACK kube-queue's name), a
  resource list as YAML or JSON (``{"cpu": "10", "memory": "20Gi"}``), the most its steps run at once;
* else the widest point of its entrypoint: a ``steps`` template runs its groups one after another, each group's
  steps at once, so it is its largest group; a ``dag`` template may run every task at once, so it is their sum;
  ``withItems`` lists and ``withSequence`` counts multiply a step; a ``container``, ``script`` or
  ``containerSet`` template is one pod of its containers' request, as Argo's ``podSpecPatch`` makes it (the
  workflow's, then the template's own or its defaults'); templates it names through ``templateRef``
  (other WorkflowTemplates) and loops over ``withParam`` count as one pod of nothing and one iteration;
* at most ``spec.parallelism`` times its largest pod when the workflow sets it.

Its pods belong to it (Argo owns each step's pod by the Workflow) and count as it runs them; the quota label
goes into ``spec.podMetadata.labels``, which Argo copies onto every pod. A suspended workflow starts no new
step; Argo lets the steps already running finish (it does not delete their pods).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence

import yaml

from webhook.api.names import QUOTA_FULLNAME_ANNOTATION, QUOTA_LABEL, WORKFLOW_SIZE_ANNOTATION
from webhook.api.objects import Obj, mappings
from webhook.core.resources import ResourceError, Resources
from webhook.core.workload import PodSet, WorkloadError, pod_request
from webhook.workloads.base import (
    JSONPatch,
    PodTemplate,
    SpecSuspendAdapter,
    apply_patch,
    int_at,
    metadata_patch,
    set_value_patch,
    str_at,
    value_at,
)
from webhook.workloads.overhead import Overheads, overhead_of, recorded

MAX_DEPTH = 20
"""Nested templates followed at most (a deeper or recursive workflow is sized by what was reached)."""
LEAVES = ("container", "script", "containerSet")


def declared_size(text: str) -> Resources:
    """The resource list of the size annotation; :class:`WorkloadError` naming it when it does not parse."""
    where = f"metadata.annotations[{WORKFLOW_SIZE_ANNOTATION}]"
    try:
        loaded = json.loads(text) if text.lstrip().startswith("{") else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError):
        loaded = None
    if not isinstance(loaded, Mapping) or not loaded:
        raise WorkloadError(f"{where}: expected a resource list such as {{\"cpu\": \"10\", \"memory\": \"20Gi\"}}")
    try:
        return Resources.parse({str(key): value for key, value in loaded.items()})
    except ResourceError as error:
        raise WorkloadError(f"{where}: {error}") from None


def _read_patch(where: str, text: object) -> Obj | None:
    """A ``podSpecPatch`` (YAML or JSON) as the pod spec fields it sets, ``None`` when there is none; a
    :class:`WorkloadError` naming ``where`` when it is not a pod spec before Argo fills its variables."""
    if not isinstance(text, str) or not text.strip():
        return None
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError:
        loaded = None
    if isinstance(loaded, Mapping):
        return loaded
    if "{{" in text:
        raise WorkloadError(f"{where}: reads as a pod spec only once Argo fills its variables, so the queue cannot "
                            f"size the pods it patches; write it without them, or declare the workflow's size in "
                            f"metadata.annotations[{WORKFLOW_SIZE_ANNOTATION}]")
    raise WorkloadError(f"{where}: expected a pod spec in YAML or JSON, such as "
                        "{\"containers\": [{\"name\": \"main\", \"resources\": {\"requests\": {\"cpu\": \"2\"}}}]}")


MERGED_BY_NAME = frozenset(("containers", "initContainers"))
"""The pod spec lists a strategic merge patch merges item by item, by ``name``."""


def _merged(base: object, patch: object, key: str = "") -> object:
    """``patch`` applied to ``base`` as Kubernetes' strategic merge does it for what sizes a pod: maps key by key
    (``null`` removes a key), containers and init containers by name, anything else replaced."""
    if isinstance(base, Mapping) and isinstance(patch, Mapping):
        out = dict(base)
        for name, value in patch.items():
            if value is None:
                out.pop(name, None)
            else:
                out[name] = _merged(base.get(name), value, str(name))
        return out
    if key in MERGED_BY_NAME and isinstance(base, list) and isinstance(patch, list):
        items = list(base)
        for item in patch:
            name = item.get("name") if isinstance(item, Mapping) else None
            at = next((i for i, old in enumerate(items) if isinstance(old, Mapping) and old.get("name") == name), None)
            if at is None:
                items.append(item)
            else:
                items[at] = _merged(items[at], item)
        return items
    return patch


class _Sizer:
    """The widest point of a workflow's templates (module notes)."""

    def __init__(self, spec: Obj, overheads: Overheads) -> None:
        templates = spec.get("templates")
        self.index: dict[str, int] = {}
        self.by_name: dict[str, Obj] = {}
        for index, template in enumerate(templates if isinstance(templates, list) else []):
            if isinstance(template, Mapping) and isinstance(template.get("name"), str):
                self.index[template["name"]] = index
                self.by_name[template["name"]] = template
        self.largest_pod = Resources()
        self.overheads = overheads
        """The RuntimeClass overheads recorded on the workflow, for the classes its patches name."""
        self.patch = _read_patch("spec.podSpecPatch", spec.get("podSpecPatch"))
        defaults = spec.get("templateDefaults")
        self.default_patch = defaults.get("podSpecPatch") if isinstance(defaults, Mapping) else None

    def width(self, name: str | None, depth: int = 0) -> Resources:
        template = self.by_name.get(name or "")
        if template is None or depth > MAX_DEPTH:
            return Resources()
        if any(key in template for key in LEAVES):
            pod = self._pod(template)
            self.largest_pod = _most(self.largest_pod, pod)
            return pod
        steps = template.get("steps")
        if isinstance(steps, list):
            widest = Resources()
            for group in steps:
                members = group if isinstance(group, list) else [group]
                widest = _most(widest, self._sum(members, depth))
            return widest
        dag = template.get("dag")
        tasks = dag.get("tasks") if isinstance(dag, Mapping) else None
        if isinstance(tasks, list):
            return self._sum(tasks, depth)
        return Resources()

    def _sum(self, members: Sequence[object], depth: int) -> Resources:
        total = Resources()
        for member in members:
            if isinstance(member, Mapping):
                name = member.get("template")
                total = total + self.width(name if isinstance(name, str) else None, depth + 1) * _fan_out(member)
        return total

    def _pod(self, template: Obj) -> Resources:
        name = template.get("name")
        containers: object
        if "containerSet" in template:
            container_set = template.get("containerSet") or {}
            if not isinstance(container_set, Mapping):
                raise WorkloadError(f"spec.templates[{name}].containerSet: expected an object")
            containers = container_set.get("containers") or []
        else:
            key = "container" if "container" in template else "script"
            main = template.get(key)
            # Argo names it "main" whatever the template says (its controller writes back an empty name).
            containers = [{**(main if isinstance(main, Mapping) else {}), "name": "main"}]
        if not isinstance(containers, Iterable):
            raise WorkloadError(f"spec.templates[{name}].containerSet.containers: expected a list")
        pod: dict[str, object] = {"containers": [c for c in containers if isinstance(c, Mapping)]}
        inits = template.get("initContainers")
        if isinstance(inits, list):
            pod["initContainers"] = mappings(inits)
        # Argo applies the workflow's patch, then the template's own (or its defaults').
        where = f"spec.templates[{self.index[str(name)]}].podSpecPatch"
        own = template.get("podSpecPatch")
        if own is None:
            where, own = "spec.templateDefaults.podSpecPatch", self.default_patch
        for patch in (self.patch, _read_patch(where, own)):
            merged = _merged(pod, patch) if patch is not None else pod
            pod = dict(merged) if isinstance(merged, Mapping) else pod
        fixed = overhead_of(pod, self.overheads)
        if fixed:
            pod["overhead"] = dict(fixed)
        try:
            return pod_request(pod)
        except WorkloadError as error:
            raise WorkloadError(f"spec.templates[{name}]: {error}") from None


def _fan_out(member: Obj) -> int:
    items = member.get("withItems")
    if isinstance(items, list):
        return len(items)
    sequence = member.get("withSequence")
    if isinstance(sequence, Mapping):
        count = sequence.get("count")
        if isinstance(count, int) and not isinstance(count, bool):
            return max(0, count)
        if isinstance(count, str) and count.isdigit():
            return int(count)
    return 1


def _most(a: Resources, b: Resources) -> Resources:
    return Resources({name: max(a.get_or_zero(name), b.get_or_zero(name)) for name in {*a, *b}})


def _least(a: Resources, b: Resources) -> Resources:
    return Resources({name: min(a.get_or_zero(name), b.get_or_zero(name)) for name in {*a, *b}}).without_zeros()


class WorkflowAdapter(SpecSuspendAdapter):
    """``argoproj.io/v1alpha1`` ``Workflow``."""

    group = "argoproj.io"
    versions = ("v1alpha1",)
    kind = "Workflow"
    plural = "workflows"
    priority_class_path = ("spec", "podPriorityClassName")
    extra_label_fields = (("spec", "podMetadata", "labels"),)

    def pod_templates(self, obj: Obj) -> tuple[PodTemplate, ...]:
        """None as pod templates: Argo builds each step's pod from its template (sized in :meth:`pod_sets`)."""
        return ()

    def pod_spec_patches(self, obj: Obj) -> dict[str, Obj]:
        """Each ``podSpecPatch`` Argo applies to the step pods: the workflow's, its template defaults' and each
        template's. One that parses only once Argo fills its variables is left out: the workflow is refused at
        submission unless its size is declared, and the pod guard refuses the pods such a patch binds to a node."""
        spec = value_at(obj, "spec")
        if not isinstance(spec, Mapping):
            return {}
        holders: list[tuple[str, object]] = [("spec", spec), ("spec.templateDefaults", spec.get("templateDefaults"))]
        templates = spec.get("templates")
        if isinstance(templates, list):
            holders += [(f"spec.templates[{index}]", template) for index, template in enumerate(templates)]
        patches = {}
        for where, holder in holders:
            field = f"{where}.podSpecPatch"
            try:
                patch = _read_patch(field, holder.get("podSpecPatch") if isinstance(holder, Mapping) else None)
            except WorkloadError:
                continue
            if patch is not None:
                patches[field] = patch
        return patches

    def pod_sets(self, obj: Obj) -> tuple[PodSet, ...]:
        """One pod set: the declared size, or the widest point of the workflow (module notes)."""
        declared = str_at(obj, "metadata", "annotations", WORKFLOW_SIZE_ANNOTATION)
        if declared is not None:
            return (PodSet("declared", 1, declared_size(declared)),)
        spec = value_at(obj, "spec")
        sizer = _Sizer(spec if isinstance(spec, Mapping) else {}, recorded(obj))
        widest = sizer.width(str_at(obj, "spec", "entrypoint"))
        parallelism = int_at(obj, None, "spec", "parallelism")
        if parallelism:
            widest = _least(widest, sizer.largest_pod * parallelism)
        return (PodSet("widest", 1, widest),)

    def needs_all_pods(self, obj: Obj) -> bool:
        """A workflow makes progress step by step: it has started once one of its pods runs."""
        return False

    def explicit_priority(self, obj: Obj) -> int | None:
        return None

    def tag_patch(self, obj: Obj, leaf_name: str, full_name: str) -> list[JSONPatch]:
        """The workflow, and ``spec.podMetadata`` (Argo copies it onto every pod)."""
        ops = metadata_patch(obj, (), {QUOTA_LABEL: leaf_name}, {QUOTA_FULLNAME_ANNOTATION: full_name})
        current = obj
        for field, key, value in (("labels", QUOTA_LABEL, leaf_name),
                                  ("annotations", QUOTA_FULLNAME_ANNOTATION, full_name)):
            step = set_value_patch(current, ("spec", "podMetadata", field, key), value)
            if step:
                current = apply_patch(current, step)
                ops += step
        return ops

    def is_finished(self, obj: Obj) -> bool:
        return value_at(obj, "status", "phase") in ("Succeeded", "Failed", "Error")


ADAPTERS = (WorkflowAdapter(),)
