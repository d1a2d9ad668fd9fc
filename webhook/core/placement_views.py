"""What placement reads: frozen views of pods and nodes (:class:`PodView`, :class:`NodeView`, their
:class:`Taint`), the placements the extender made but has not yet seen bound (:class:`AssumedPod`), which
policy governs a pod and which unit a node is in. Built by the extender from its watch caches; read by
:func:`webhook.core.placement.place` (docs/placement.md)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from webhook.api.names import (
    VIRTUAL_NODE_LABEL_KEY,
    VIRTUAL_NODE_LABEL_VALUE,
)
from webhook.api.objects import mapping, read_time
from webhook.core.placement_policy import ResourcePolicy
from webhook.core.selectors import (
    EMPTY_LABELS,
    FrozenLabels,
)


@dataclass(frozen=True, slots=True)
class Taint:
    """One node taint."""

    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True, slots=True)
class NodeView:
    """What placement needs of a node. ``labels`` may be given as any mapping; it is stored frozen."""

    name: str
    labels: Mapping[str, str] = EMPTY_LABELS
    taints: tuple[Taint, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", FrozenLabels.of(self.labels))

    @property
    def is_virtual(self) -> bool:
        """Whether this is a virtual (ECI) node: label ``type: virtual-kubelet``."""
        return self.labels.get(VIRTUAL_NODE_LABEL_KEY) == VIRTUAL_NODE_LABEL_VALUE


@dataclass(frozen=True, slots=True)
class PodView:
    """What placement needs of a pod.

    ``node_name`` is ``spec.nodeName`` (``None`` until bound); ``terminating`` is "has a deletionTimestamp";
    ``finished`` is phase ``Succeeded`` or ``Failed``; ``created`` is the creation time (epoch seconds).
    """

    namespace: str
    name: str
    uid: str = ""
    labels: Mapping[str, str] = EMPTY_LABELS
    annotations: Mapping[str, str] = EMPTY_LABELS
    node_name: str | None = None
    terminating: bool = False
    finished: bool = False
    created: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", FrozenLabels.of(self.labels))
        object.__setattr__(self, "annotations", FrozenLabels.of(self.annotations))

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"

    def same_pod(self, other: PodView) -> bool:
        """Whether both views are of one pod (same uid, or same namespace/name when a uid is missing)."""
        if self.uid and other.uid:
            return self.uid == other.uid
        return self.namespace == other.namespace and self.name == other.name


@dataclass(frozen=True, slots=True)
class AssumedPod:
    """The extender let pod ``uid`` onto ``node_name`` and has not yet seen it bound; void from ``expires_at``.

    With only a filter verb the extender does not learn the chosen node, but every node it passes lies in one
    unit, so recording any passing node counts the pod in the right unit.
    """

    uid: str
    node_name: str
    expires_at: float


def _string_map(obj: object) -> FrozenLabels:
    if not isinstance(obj, Mapping) or not obj:
        return EMPTY_LABELS
    strings = {key: value for key, value in obj.items() if isinstance(key, str) and isinstance(value, str)}
    return FrozenLabels.adopt(strings)  # frozen once: the view keeps it as it is


def _text(obj: object) -> str:
    return obj if isinstance(obj, str) else ""


def _timestamp_or_none(obj: object) -> float | None:
    try:
        return read_time(obj)
    except ValueError:
        return None


def pod_view(obj: Mapping[str, object]) -> PodView:
    """A :class:`PodView` of a Pod's JSON; tolerant: missing or malformed fields read as empty."""
    metadata = mapping(obj.get("metadata"))
    spec = mapping(obj.get("spec"))
    status = mapping(obj.get("status"))
    node_name = spec.get("nodeName")
    return PodView(
        namespace=_text(metadata.get("namespace")),
        name=_text(metadata.get("name")),
        uid=_text(metadata.get("uid")),
        labels=_string_map(metadata.get("labels")),
        annotations=_string_map(metadata.get("annotations")),
        node_name=node_name if isinstance(node_name, str) and node_name else None,
        terminating=metadata.get("deletionTimestamp") is not None,
        finished=status.get("phase") in ("Succeeded", "Failed"),
        created=_timestamp_or_none(metadata.get("creationTimestamp")),
    )


def node_view(obj: Mapping[str, object]) -> NodeView:
    """A :class:`NodeView` of a Node's JSON; tolerant: missing or malformed fields read as empty."""
    metadata = mapping(obj.get("metadata"))
    raw_taints = mapping(obj.get("spec")).get("taints")
    taints = tuple(
        Taint(key=_text(taint.get("key")), value=_text(taint.get("value")), effect=_text(taint.get("effect")))
        for taint in (raw_taints if isinstance(raw_taints, list) else [])
        if isinstance(taint, Mapping)
    )
    return NodeView(name=_text(metadata.get("name")), labels=_string_map(metadata.get("labels")), taints=taints)


def policy_for_pod(policies: Iterable[ResourcePolicy], pod: PodView) -> ResourcePolicy | None:
    """The policy governing ``pod``: of its namespace, selector matching its labels; the oldest when several
    match (``created``, then name; a policy without ``created`` counts as newest)."""
    matching = [policy for policy in policies if policy.selects(pod)]
    if not matching:
        return None
    return min(
        matching,
        key=lambda policy: (policy.created is None, policy.created or 0.0, policy.name),
    )


def unit_of_node(policy: ResourcePolicy, node: NodeView) -> int | None:
    """The 0-based index of the first unit the node belongs to, or ``None``."""
    for index, unit in enumerate(policy.units):
        if unit.contains(node):
            return index
    return None
