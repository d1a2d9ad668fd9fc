"""What every job-kind adapter shares: pod templates, the suspend switch, priority and JSON patches.

An adapter reads a raw Kubernetes object (the ``dict`` that JSON decoding gives) and never mutates it:
changes are expressed as JSON Patch (RFC 6902) operations, as an admission webhook returns them and as the
controller sends them (``application/json-patch+json``).

Objects come from the wire, so every accessor tolerates absent fields and raises :class:`WorkloadError`
(naming the field) for fields of the wrong shape, never ``KeyError``/``TypeError``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal, NotRequired, TypedDict, TypeVar, cast

from webhook.api.names import QUOTA_FULLNAME_ANNOTATION, QUOTA_LABEL, SUBMITTED_ANNOTATION
from webhook.api.objects import Doc, Obj, PodSpec, parse_time, rfc3339
from webhook.core.placement import VIRTUAL_NODE_TOLERATION
from webhook.core.workload import Phase, PodSet, Workload, WorkloadError, WorkloadKey, pod_set
from webhook.workloads.overhead import recorded, with_overhead
from webhook.workloads.patch import PatchError as PatchError  # noqa: PLC0414 - re-exported (it lived here)
from webhook.workloads.patch import apply_patch as apply_patch  # noqa: PLC0414
from webhook.workloads.patch import escape_pointer as escape_pointer  # noqa: PLC0414
from webhook.workloads.patch import pointer as pointer  # noqa: PLC0414
from webhook.workloads.patch import unescape_pointer as unescape_pointer  # noqa: PLC0414


class JSONPatch(TypedDict):
    """One JSON Patch operation: ``{"op": "add", "path": "/spec/suspend", "value": True}`` (``value`` for all
    but ``remove``)."""

    op: Literal["add", "remove", "replace", "test"]
    path: str
    value: NotRequired[object]


T = TypeVar("T")

ECI_TOLERATION: dict[str, str] = dict(VIRTUAL_NODE_TOLERATION)
"""The toleration for the virtual (ECI) node's taint ``virtual-kubelet.io/provider=alibabacloud:NoSchedule``."""


def mapping_at(obj: Obj, *path: str | int) -> Obj | None:
    """The mapping at ``path`` (``None`` when a step is absent or null); :class:`WorkloadError` when a step
    exists but is not of the expected kind."""
    return _typed_at(obj, path, Mapping, "an object")  # type: ignore[type-abstract]  # isinstance takes it


def _typed_at(obj: Obj, path: tuple[str | int, ...], kind: type[T], what: str) -> T | None:
    """The value at ``path`` if it is a ``kind`` (``None`` when absent); :class:`WorkloadError` naming ``what``
    was expected otherwise."""
    value = value_at(obj, *path)
    if value is None or isinstance(value, kind):
        return value
    got = type(value).__name__ if kind is Mapping else repr(value)
    raise WorkloadError(f"{pointer(*path)}: expected {what}, got {got}")


def value_at(obj: Obj, *path: str | int) -> object:
    """The value at ``path``; ``None`` when a step is absent or null."""
    current: object = obj
    for depth, step in enumerate(path):
        if current is None:
            return None
        if type(current) is dict and type(step) is str:  # the common case, without the ABC checks below
            current = current.get(step)
            continue
        if isinstance(step, int):
            if not isinstance(current, list):
                where = pointer(*path[:depth]) or "/"
                raise WorkloadError(f"{where}: expected a list, got {type(current).__name__}")
            if step >= len(current):
                return None
            current = current[step]
        else:
            if not isinstance(current, Mapping):
                where = pointer(*path[:depth]) or "/"
                raise WorkloadError(f"{where}: expected an object, got {type(current).__name__}")
            current = current.get(step)
    return current


def int_at(obj: Obj, default: int | None, *path: str | int) -> int | None:
    """A non-negative integer field (``default`` when absent)."""
    value = value_at(obj, *path)
    if value is None:
        return default
    if type(value) is not int:  # bool is a subclass of int: refused here too
        raise WorkloadError(f"{pointer(*path)}: expected an integer, got {value!r}")
    if value < 0:
        raise WorkloadError(f"{pointer(*path)}: must not be negative, got {value}")
    return value


def str_at(obj: Obj, *path: str | int) -> str | None:
    """A string field (``None`` when absent or empty)."""
    return _typed_at(obj, path, str, "a string") or None


def bool_at(obj: Obj, *path: str | int) -> bool:
    """A boolean field (``False`` when absent)."""
    return _typed_at(obj, path, bool, "true or false") or False


def set_value_patch(obj: Obj, path: Sequence[str | int], value: object) -> list[JSONPatch]:
    """Operations that set ``path`` to ``value``, creating absent parent objects on the way.

    ``add`` on an existing member replaces it (RFC 6902 4.1), so the result applies whether or not the
    field is present. Returns no operation when the field already holds ``value``.
    """
    if value_at(obj, *path) == value and value_at(obj, *path) is not None:
        return []
    for depth in range(len(path) - 1):
        parent = value_at(obj, *path[: depth + 1])
        if parent is None:
            nested: object = value
            for step in reversed(path[depth + 1 :]):
                nested = {step: nested}
            return [{"op": "add", "path": pointer(*path[: depth + 1]), "value": nested}]
        following = path[depth + 1]
        if not isinstance(parent, list if isinstance(following, int) else Mapping):
            expected = "a list" if isinstance(following, int) else "an object"
            raise WorkloadError(f"{pointer(*path[: depth + 1])}: expected {expected}")
    return [{"op": "add", "path": pointer(*path), "value": value}]


def annotation_removal(obj: Obj, keys: Sequence[str]) -> list[JSONPatch]:
    """Operations that remove those of ``keys`` the object's annotations carry."""
    current = mapping_at(obj, "metadata", "annotations") or {}
    return [{"op": "remove", "path": pointer("metadata", "annotations", key)} for key in keys if key in current]


def metadata_patch(
    obj: Obj, base: Sequence[str | int], labels: Mapping[str, str], annotations: Mapping[str, str]
) -> list[JSONPatch]:
    """Set labels and annotations on the object metadata at ``base + ["metadata"]``."""
    ops: list[JSONPatch] = []
    meta_path: list[str | int] = [*base, "metadata"]
    metadata = mapping_at(obj, *meta_path)
    if metadata is None:
        value: Doc = {}
        if labels:
            value["labels"] = dict(labels)
        if annotations:
            value["annotations"] = dict(annotations)
        if value:
            ops.extend(set_value_patch(obj, meta_path, value))
        return ops
    for field, wanted in (("labels", labels), ("annotations", annotations)):
        if not wanted:
            continue
        current = mapping_at(obj, *meta_path, field)
        if current is None:
            ops.append({"op": "add", "path": pointer(*meta_path, field), "value": dict(wanted)})
            continue
        for key, text in wanted.items():
            if current.get(key) != text:
                ops.append({"op": "add", "path": pointer(*meta_path, field, key), "value": text})
    return ops


def toleration_patch(
    obj: Obj, spec_path: Sequence[str | int], toleration: Mapping[str, str]
) -> list[JSONPatch]:
    """Add ``toleration`` to the pod spec at ``spec_path`` unless an identical one is there."""
    tolerations = value_at(obj, *spec_path, "tolerations")
    if tolerations is None:
        return set_value_patch(obj, [*spec_path, "tolerations"], [dict(toleration)])
    if not isinstance(tolerations, list):
        raise WorkloadError(f"{pointer(*spec_path, 'tolerations')}: expected a list")
    if any(_same_toleration(existing, toleration) for existing in tolerations):
        return []
    return [{"op": "add", "path": pointer(*spec_path, "tolerations", "-"), "value": dict(toleration)}]


def _same_toleration(existing: object, wanted: Mapping[str, str]) -> bool:
    if not isinstance(existing, Mapping):
        return False
    operator = existing.get("operator") or "Equal"
    return (
        existing.get("key") == wanted["key"]
        and operator == wanted["operator"]
        and (operator == "Exists" or existing.get("value") == wanted["value"])
        and existing.get("effect") in (wanted["effect"], None, "")
    )


def creation_seconds(obj: Obj) -> float:
    """When the job was submitted, in seconds since the epoch (0.0 when the object has no creation time).

    ``metadata.creationTimestamp`` has whole seconds; the webhook's :data:`SUBMITTED_ANNOTATION` refines it to
    the microsecond so jobs created in the same second keep their submission order. The annotation only
    orders jobs *within* their creation second (it is clamped into it), so a hand-written or stale value can
    never move a job ahead of one created in an earlier second; an unreadable one is ignored.
    """
    text = str_at(obj, "metadata", "creationTimestamp")
    if text is None:
        return 0.0
    created = parse_time(text)
    if created is None:
        raise WorkloadError(f"/metadata/creationTimestamp: not an RFC 3339 time: {text!r}")
    annotations = mapping_at(obj, "metadata", "annotations") or {}
    submitted_text = annotations.get(SUBMITTED_ANNOTATION)
    submitted = parse_time(submitted_text)
    if submitted is None:
        return created
    second = float(int(created))
    return min(max(submitted, second), second + 0.999999)


RESTAMP_AFTER = 30.0
"""A submission stamp older than this (or in the future) when the webhook sees the object is replaced."""


def submitted_patch(obj: Obj, now: float) -> list[JSONPatch]:
    """Stamp the job's submission time (``now``). A stamp that could be the webhook's own from a moment ago
    (within :data:`RESTAMP_AFTER` seconds before ``now``; the API server may call the webhook again) is kept,
    so mutation stays idempotent; any other value is overwritten: the submitter never chooses its place."""
    annotations = mapping_at(obj, "metadata", "annotations") or {}
    current = annotations.get(SUBMITTED_ANNOTATION)
    seconds = parse_time(current)
    if seconds is not None and now - RESTAMP_AFTER <= seconds <= now:
        return []
    return metadata_patch(obj, (), {}, {SUBMITTED_ANNOTATION: rfc3339(now)})


@dataclass(frozen=True, slots=True)
class PodTemplate:
    """One group of identical pods inside a job.

    ``path`` locates the template object (the thing holding ``metadata`` and ``spec``) inside the job;
    for a plain Pod it is empty (the pod is its own template).
    """

    name: str
    count: int
    path: tuple[str | int, ...]
    template: Obj

    @property
    def spec(self) -> PodSpec:
        """The pod spec (empty when absent)."""
        spec = mapping_at(self.template, "spec")
        return cast(PodSpec, spec) if spec is not None else {}

    @property
    def labels(self) -> Mapping[str, str]:
        """The template's pod labels (empty when absent)."""
        labels = mapping_at(self.template, "metadata", "labels")
        return {str(k): str(v) for k, v in labels.items()} if labels else {}


class Adapter(ABC):
    """One job kind. Subclasses set the identity class variables and implement :meth:`pod_templates`,
    :meth:`is_suspended`, :meth:`suspend_patch`, :meth:`resume_patch` and :meth:`is_finished`."""

    group: ClassVar[str]
    """API group (``""`` for the core group, as in an AdmissionRequest's ``kind.group``)."""
    versions: ClassVar[tuple[str, ...]]
    """Served versions this adapter reads, preferred first."""
    kind: ClassVar[str]
    plural: ClassVar[str]
    """The resource name (``jobs``), as in webhook rules and API paths."""
    priority_class_path: ClassVar[tuple[str, ...]] = ()
    """Where the job itself names a PriorityClass that wins over its pod templates' (``()``: nowhere)."""
    extra_class_fields: ClassVar[tuple[tuple[str, ...], ...]] = ()
    """More fields that name a PriorityClass of the job's pods where it has no pod templates (a
    SparkApplication's ``spec.driver.priorityClassName``): users may not change them once it is queued."""
    extra_label_fields: ClassVar[tuple[tuple[str, ...], ...]] = ()
    """Label maps the operator copies onto the job's pods where it has no pod templates (a Workflow's
    ``spec.podMetadata.labels``): the quota label there is the webhook's."""
    children: ClassVar[frozenset[str]] = frozenset()
    """Kinds of the objects its operator creates for it and owns (a RayJob's RayCluster and submitter Job):
    queued with it, not on their own, and their pods are its pods (:meth:`pod_owners` names them)."""
    spawned_pod_set: ClassVar[str | None] = None
    """The pod set whose pods the job's own pods create (a SparkApplication's executors): webhook/core/spawned.py."""

    @property
    def version(self) -> str:
        """The preferred version."""
        return self.versions[0]

    @property
    def api_version(self) -> str:
        """``group/version`` (just ``version`` for the core group)."""
        return f"{self.group}/{self.version}" if self.group else self.version

    # Reading -----------------------------------------------------------------------------------------------
    @abstractmethod
    def pod_templates(self, obj: Obj) -> tuple[PodTemplate, ...]:
        """Every pod template of the job with its pod count, in a stable order."""

    def pod_sets(self, obj: Obj) -> tuple[PodSet, ...]:
        """The job's pod sets (count × per-pod request of :meth:`created_spec` with its RuntimeClass's recorded
        overhead, :mod:`~webhook.workloads.overhead`), via the core's request rules; an error names the
        template's pod spec (``/spec/template/spec: pod set 'main': ...``)."""
        out = []
        overheads = recorded(obj)
        for t in self.pod_templates(obj):
            try:
                out.append(pod_set(t.name, t.count, with_overhead(self.created_spec(obj, t), overheads)))
            except WorkloadError as error:
                raise WorkloadError(f"{pointer(*t.path, 'spec')}: {error}") from None
        return tuple(out)

    def created_spec(self, obj: Obj, template: PodTemplate) -> PodSpec:
        """The spec of each pod of ``template`` as the kind's operator creates it: the template's, plus what
        the operator adds (an init container, a sidecar), so the job is sized as its pods will be."""
        return template.spec

    def priority_class_name(self, obj: Obj) -> str | None:
        """The PriorityClass the job names: the first pod template that names one."""
        for template in self.pod_templates(obj):
            name = str_at(template.template, "spec", "priorityClassName")
            if name is not None:
                return name
        return None

    def explicit_priority(self, obj: Obj) -> int | None:
        """A literal ``priority`` on the first pod template that carries one."""
        for template in self.pod_templates(obj):
            value = value_at(template.template, "spec", "priority")
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, int):
                    raise WorkloadError(f"{pointer(*template.path, 'spec', 'priority')}: expected an integer")
                return value
        return None

    def priority(self, obj: Obj, priority_classes: Mapping[str, int]) -> int:
        """The value of the PriorityClass the job names, else 0. A literal ``priority`` in a pod template is
        never read: the API server refuses pods that carry one, and the webhook refuses it at submission."""
        name = self.priority_class_name(obj)
        return priority_classes.get(name, 0) if name is not None else 0

    @abstractmethod
    def is_suspended(self, obj: Obj) -> bool:
        """Whether the job is held (suspend switch on / scheduling gate present)."""

    @abstractmethod
    def is_finished(self, obj: Obj) -> bool:
        """Whether the job has succeeded or failed for good (its quota is free again)."""

    def quota_label(self, obj: Obj) -> str | None:
        """The job's quota label value (``None`` when absent)."""
        value = value_at(obj, "metadata", "labels", QUOTA_LABEL)
        return value if isinstance(value, str) else None

    # Writing -----------------------------------------------------------------------------------------------
    @abstractmethod
    def suspend_patch(self, obj: Obj) -> list[JSONPatch]:
        """Operations that hold the job (empty when already held)."""

    @abstractmethod
    def resume_patch(self, obj: Obj) -> list[JSONPatch]:
        """Operations that release the job (empty when not held)."""

    @property
    def gates_at_creation_only(self) -> bool:
        """Whether the hold can only be set when the object is created (Pods' scheduling gates)."""
        return False

    def manages(self, obj: Obj) -> bool:
        """Whether the queue holds this object at all (a Pod owned by a Job is queued with its Job)."""
        return True

    def needs_all_pods(self, obj: Obj) -> bool:
        """Whether the job needs all its pods at once (a gang): started only when all run (docs/start-timeout.md)."""
        return True

    def pod_owners(self, obj: Obj) -> tuple[tuple[str, str], ...]:
        """``(kind, name)`` of each controller ownerReference the job's pods carry (empty: not known yet)."""
        name = value_at(obj, "metadata", "name")
        return ((self.kind, name),) if isinstance(name, str) else ()

    def queueing_problems(self, obj: Obj) -> list[str]:
        """Why a job of this kind cannot be held and released by the queue as written (``[]`` when it can);
        each problem says what to change."""
        return []

    def pod_spec_patches(self, obj: Obj) -> dict[str, Obj]:
        """Field -> the pod spec a patch the operator applies to the pods gives them, outside their templates."""
        return {}

    def tag_patch(self, obj: Obj, leaf_name: str, full_name: str) -> list[JSONPatch]:
        """Label and annotate the job and every pod template with its quota."""
        labels = {QUOTA_LABEL: leaf_name}
        annotations = {QUOTA_FULLNAME_ANNOTATION: full_name}
        ops = metadata_patch(obj, (), labels, annotations)
        for template in self.pod_templates(obj):
            if template.path:
                ops.extend(metadata_patch(obj, template.path, labels, annotations))
        return ops

    def toleration_patch(
        self, obj: Obj, template: PodTemplate, toleration: Mapping[str, str] = ECI_TOLERATION
    ) -> list[JSONPatch]:
        """Add a toleration to one pod template's spec."""
        return toleration_patch(obj, (*template.path, "spec"), toleration)

    def to_workload(self, obj: Obj, quota_leaf: str, priority_classes: Mapping[str, int]) -> Workload:
        """The kind-agnostic view the decision core works on."""
        metadata = mapping_at(obj, "metadata") or {}
        name = metadata.get("name")
        namespace = metadata.get("namespace")
        if not isinstance(name, str) or not name:
            raise WorkloadError("/metadata/name: a job needs a name")
        if not isinstance(namespace, str) or not namespace:
            raise WorkloadError("/metadata/namespace: a job needs a namespace")
        uid = metadata.get("uid")
        if self.is_finished(obj):
            phase = Phase.FINISHED
        elif self.is_suspended(obj):
            phase = Phase.QUEUED
        else:
            phase = Phase.ADMITTED
        return Workload(
            key=WorkloadKey(kind=self.kind, namespace=namespace, name=name),
            quota=quota_leaf,
            pod_sets=self.pod_sets(obj),
            priority=self.priority(obj, priority_classes),
            created=creation_seconds(obj),
            uid=uid if isinstance(uid, str) else "",
            phase=phase,
        )


def condition_true(obj: Obj, *types: str) -> bool:
    """Whether ``status.conditions`` has one of ``types`` with status ``"True"``."""
    conditions = value_at(obj, "status", "conditions")
    if not isinstance(conditions, list):
        return False
    return any(isinstance(c, Mapping) and c.get("type") in types and c.get("status") == "True" for c in conditions)


class SpecSuspendAdapter(Adapter):
    """A kind whose hold is a boolean at :attr:`suspend_path` (``spec.suspend``, ``spec.runPolicy.suspend``)."""

    suspend_path: ClassVar[tuple[str, ...]] = ("spec", "suspend")

    def is_suspended(self, obj: Obj) -> bool:
        return bool_at(obj, *self.suspend_path)

    def suspend_patch(self, obj: Obj) -> list[JSONPatch]:
        if self.is_suspended(obj):
            return []
        return set_value_patch(obj, self.suspend_path, True)

    def resume_patch(self, obj: Obj) -> list[JSONPatch]:
        if not self.is_suspended(obj):
            return []
        return [{"op": "replace", "path": pointer(*self.suspend_path), "value": False}]


class ReplicaSpecsAdapter(SpecSuspendAdapter):
    """Kubeflow-style jobs: ``spec.<replicaSpecsField>.<Role>.{replicas, template}``, held by
    ``spec.runPolicy.suspend``, with an optional ``spec.runPolicy.schedulingPolicy.priorityClass``."""

    suspend_path = ("spec", "runPolicy", "suspend")
    priority_class_path = ("spec", "runPolicy", "schedulingPolicy", "priorityClass")
    replica_specs_field: ClassVar[str]
    role_order: ClassVar[tuple[str, ...]] = ("chief", "master", "launcher", "ps", "worker", "evaluator")
    """Roles sorted first (lower-cased); others follow by name."""

    def pod_templates(self, obj: Obj) -> tuple[PodTemplate, ...]:
        specs = mapping_at(obj, "spec", self.replica_specs_field)
        if not specs:
            return ()
        out: list[PodTemplate] = []
        for role in sorted(specs, key=self._role_rank):
            replica = mapping_at(obj, "spec", self.replica_specs_field, role)
            if replica is None:
                continue
            count = int_at(obj, 1, "spec", self.replica_specs_field, role, "replicas")
            template = mapping_at(obj, "spec", self.replica_specs_field, role, "template") or {}
            out.append(
                PodTemplate(
                    name=role.lower(),
                    count=count if count is not None else 1,
                    path=("spec", self.replica_specs_field, role, "template"),
                    template=template,
                )
            )
        return tuple(out)

    def _role_rank(self, role: str) -> tuple[int, str]:
        lowered = role.lower()
        rank = self.role_order.index(lowered) if lowered in self.role_order else len(self.role_order)
        return (rank, role)

    def priority_class_name(self, obj: Obj) -> str | None:
        name = str_at(obj, *self.priority_class_path)
        return name if name is not None else super().priority_class_name(obj)

    def is_finished(self, obj: Obj) -> bool:
        return condition_true(obj, "Succeeded", "Failed")
