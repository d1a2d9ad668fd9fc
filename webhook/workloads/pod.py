"""Plain Pods (``v1``): held by the scheduling gate ``kube-queue.x-k8s.io/admission``.

A gate can only be added when the Pod is created and only removed afterwards, so the hold is set by the
mutating webhook at creation and released by the controller removing the gate. Pods owned by a
controller (a Job's pods, a ReplicaSet's pods...) are not queued on their own: their owner is.
"""

from __future__ import annotations

from collections.abc import Mapping

from webhook.api.names import ADMISSION_ANNOTATION, ADMISSION_GATE, EXTENDER_RESOURCE
from webhook.api.objects import Obj
from webhook.core.workload import WorkloadError
from webhook.workloads.base import Adapter, JSONPatch, PodTemplate, pointer, set_value_patch, value_at


def _gate_index(obj: Obj) -> int | None:
    gates = value_at(obj, "spec", "schedulingGates")
    if gates is None:
        return None
    if not isinstance(gates, list):
        raise WorkloadError("/spec/schedulingGates: expected a list")
    for index, gate in enumerate(gates):
        if isinstance(gate, Mapping) and gate.get("name") == ADMISSION_GATE:
            return index
    return None


class PodAdapter(Adapter):
    """Core ``v1`` ``Pod``: one pod set of one pod; the pod is its own template."""

    group = ""
    versions = ("v1",)
    kind = "Pod"
    plural = "pods"

    def pod_templates(self, obj: Obj) -> tuple[PodTemplate, ...]:
        return (PodTemplate(name="main", count=1, path=(), template=obj),)

    @property
    def gates_at_creation_only(self) -> bool:
        return True

    def manages(self, obj: Obj) -> bool:
        """A Pod without a controller owner; or one the webhook held at creation although it names an owner
        (its creator was no workload controller: docs/security.md), known by the gate while held and by the
        admission record once released."""
        owners = value_at(obj, "metadata", "ownerReferences")
        if not isinstance(owners, list) or not any(
            isinstance(owner, Mapping) and owner.get("controller") is True for owner in owners
        ):
            return True
        try:
            gated = _gate_index(obj) is not None
        except WorkloadError:
            gated = False
        return gated or value_at(obj, "metadata", "annotations", ADMISSION_ANNOTATION) is not None

    def is_suspended(self, obj: Obj) -> bool:
        return _gate_index(obj) is not None

    def suspend_patch(self, obj: Obj) -> list[JSONPatch]:
        if self.is_suspended(obj):
            return []
        gate = {"name": ADMISSION_GATE}
        if value_at(obj, "spec", "schedulingGates") is None:
            return set_value_patch(obj, ("spec", "schedulingGates"), [gate])
        return [{"op": "add", "path": pointer("spec", "schedulingGates", "-"), "value": gate}]

    def resume_patch(self, obj: Obj) -> list[JSONPatch]:
        index = _gate_index(obj)
        if index is None:
            return []
        return [
            {"op": "test", "path": pointer("spec", "schedulingGates", index, "name"), "value": ADMISSION_GATE},
            {"op": "remove", "path": pointer("spec", "schedulingGates", index)},
        ]

    def priority(self, obj: Obj, priority_classes: Mapping[str, int]) -> int:
        """The PriorityClass value, else ``spec.priority``: on a Pod it is the value the API server's Priority
        admission resolved from the class (it refuses any other) before a webhook sees the Pod."""
        name = self.priority_class_name(obj)
        if name is not None and name in priority_classes:
            return priority_classes[name]
        resolved = self.explicit_priority(obj)
        return resolved if resolved is not None else 0

    def is_finished(self, obj: Obj) -> bool:
        return value_at(obj, "status", "phase") in ("Succeeded", "Failed")


def extender_marker_patch(obj: Obj) -> list[JSONPatch]:
    """Write one :data:`~webhook.api.names.EXTENDER_RESOURCE` as request and limit of the Pod's first container
    (an extended resource's request must equal its limit), so that kube-scheduler asks the extender about it;
    nothing where it is there already. A pod without containers gets nothing: the API server refuses it."""
    containers = value_at(obj, "spec", "containers")
    if not isinstance(containers, list) or not containers:
        return []
    base = ("spec", "containers", 0, "resources")
    resources = value_at(obj, *base)
    if resources is None:
        marker = {EXTENDER_RESOURCE: "1"}
        return set_value_patch(obj, base, {"requests": dict(marker), "limits": dict(marker)})
    if not isinstance(resources, Mapping):
        raise WorkloadError(f"{pointer(*base)}: expected an object")
    ops: list[JSONPatch] = []
    for field in ("requests", "limits"):
        current = resources.get(field)
        if current is not None and not isinstance(current, Mapping):
            raise WorkloadError(f"{pointer(*base, field)}: expected an object")
        ops += set_value_patch(obj, (*base, field, EXTENDER_RESOURCE), "1")
    return ops


ADAPTERS = (PodAdapter(),)
