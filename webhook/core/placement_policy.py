"""A ResourcePolicy as :mod:`webhook.core.placement` reads it: its names, the parsed :class:`ResourcePolicy`
with its :class:`Unit` list, and the validation that lists every defect of one (the webhook refuses such a
policy; the extender ignores it). Also the durations and timestamps a policy carries.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from webhook.api.kinds import RESOURCE_POLICY
from webhook.api.objects import Obj, name_of, namespace_of, read_time
from webhook.core import duration
from webhook.core.selectors import (
    EMPTY_LABELS,
    FrozenLabels,
    label_key_problem,
    matches_labels,
    validate_label_map,
)

if TYPE_CHECKING:
    from webhook.core.placement import NodeView, PodView

API_VERSION = RESOURCE_POLICY.api_version
KIND = RESOURCE_POLICY.kind
VIRTUAL_NODE_LABEL_KEY = "type"
VIRTUAL_NODE_LABEL_VALUE = "virtual-kubelet"
VIRTUAL_NODE_TAINT_KEY = "virtual-kubelet.io/provider"
VIRTUAL_NODE_TAINT_VALUE = "alibabacloud"
VIRTUAL_NODE_TOLERATION: Mapping[str, str] = FrozenLabels(
    {"key": VIRTUAL_NODE_TAINT_KEY, "operator": "Equal", "value": VIRTUAL_NODE_TAINT_VALUE, "effect": "NoSchedule"}
)
"""The toleration the webhook adds to pods whose policy has an ``eci`` unit."""
DEFAULT_TIMEOUT_SECONDS = 15 * 60.0
"""``whenTryNextUnits.timeout`` when ``TimeoutOrExceedMax`` gives none."""
MAX_UNITS = 100
"""Most units a policy may list. Validation (the unreachable-unit check) and every placement walk the units,
so the limit bounds the work one policy can cause on the webhook and extender event loops; real policies list
a handful (an ECS pool or two, then ECI)."""


class PolicyError(ValueError):
    """A ResourcePolicy that cannot be used; ``problems`` lists every defect with its field path."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("invalid ResourcePolicy: " + "; ".join(self.problems))


class UnitResource(StrEnum):
    """What a unit's nodes are: ECS (real) nodes or the ECI virtual node."""

    ECS = "ecs"
    ECI = "eci"


class TryNextPolicy(StrEnum):
    """``whenTryNextUnits.policy``: when a pod may move on from a unit that has no candidate node."""

    LACK_RESOURCE_OR_EXCEED_MAX = "LackResourceOrExceedMax"
    EXCEED_MAX = "ExceedMax"
    TIMEOUT_OR_EXCEED_MAX = "TimeoutOrExceedMax"


# Durations and timestamps -----------------------------------------------------------------------------------

def parse_duration(text: object) -> float:
    """Seconds in a Go duration string (``"30s"``, ``"1m"``, ``"1h30m"``, ``"1.5h"``, ``"0"``).

    Raises ``ValueError`` for anything else, including negative durations and non-strings. The grammar is
    :data:`webhook.core.duration.GO`; this keeps the policy's messages and float seconds.
    """
    if not isinstance(text, str):
        raise ValueError(f"expected a duration string such as 30s, 1m or 1h30m, got {type(text).__name__}")
    try:
        exact = duration.parse_duration(text, duration.GO)
    except duration.DurationError:
        if text.startswith("-"):
            raise  # "must not be negative"
        raise ValueError(
            f"duration {text!r} is not a number with a unit (ns, us, ms, s, m, h), like 30s or 1m"
        ) from None
    try:
        return float(exact)
    except OverflowError:
        raise ValueError(f"duration {text!r} is out of range") from None


def format_duration(seconds: float) -> str:
    """Short text of a duration for messages: ``"45s"``, ``"1m30s"``, ``"2h"``, ``"0.5s"``."""
    if seconds < 60:
        return f"{seconds:.3g}s" if seconds != int(seconds) else f"{int(seconds)}s"
    whole = round(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{hours}h" if hours else "", f"{minutes}m" if minutes else "", f"{secs}s" if secs else ""]
    return "".join(parts)


# The policy -----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Unit:
    """One ordered unit of a policy. ``max`` is ``None`` for "unlimited"."""

    resource: UnitResource
    node_selector: FrozenLabels = EMPTY_LABELS
    max: int | None = None
    pod_labels: FrozenLabels = EMPTY_LABELS
    pod_annotations: FrozenLabels = EMPTY_LABELS

    def contains(self, node: NodeView) -> bool:
        """Whether the node is of this unit's kind and matches its ``nodeSelector``."""
        if node.is_virtual != (self.resource is UnitResource.ECI):
            return False
        return matches_labels(self.node_selector, node.labels)

    def carries_marks(self, pod: PodView) -> bool:
        """Whether the pod carries every ``podLabels`` and ``podAnnotations`` entry of this unit."""
        return matches_labels(self.pod_labels, pod.labels) and matches_labels(self.pod_annotations, pod.annotations)

    def at_max(self, count: int) -> bool:
        """Whether ``count`` pods fill this unit."""
        return self.max is not None and count >= self.max


@dataclass(frozen=True, slots=True)
class ResourcePolicy:
    """A parsed, valid ResourcePolicy (see :func:`parse_policy`)."""

    namespace: str
    name: str
    units: tuple[Unit, ...]
    selector: FrozenLabels = EMPTY_LABELS
    strategy: str = "prefer"
    when_try_next: TryNextPolicy = TryNextPolicy.LACK_RESOURCE_OR_EXCEED_MAX
    timeout: float = DEFAULT_TIMEOUT_SECONDS
    """Seconds; used by ``TimeoutOrExceedMax`` only."""
    ignore_previous_pod: bool = False
    ignore_terminating_pod: bool = True
    match_label_keys: tuple[str, ...] = ()
    created: float | None = None
    uid: str = ""

    @property
    def key(self) -> str:
        """``namespace/name``."""
        return f"{self.namespace}/{self.name}"

    @property
    def has_eci_unit(self) -> bool:
        """Whether some unit is ``eci`` (its pods then need :data:`VIRTUAL_NODE_TOLERATION`)."""
        return any(unit.resource is UnitResource.ECI for unit in self.units)

    def selects(self, pod: PodView) -> bool:
        """Whether the policy's namespace and selector take in the pod."""
        return pod.namespace == self.namespace and matches_labels(self.selector, pod.labels)

    def describe_unit(self, index: int) -> str:
        """``unit 2 (eci)`` for the 0-based ``index``."""
        return f"unit {index + 1} ({self.units[index].resource})"


_RESOURCES = ", ".join(resource.value for resource in UnitResource)
_POLICIES = ", ".join(policy.value for policy in TryNextPolicy)


class _Reader:
    """Reads a policy object, collecting every problem instead of stopping at the first."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def problem(self, text: str) -> None:
        self.problems.append(text)

    def mapping(self, obj: object, path: str, required: bool = False) -> Mapping[str, object] | None:
        if obj is None:
            if required:
                self.problem(f"{path}: required")
            return None
        if not isinstance(obj, Mapping):
            self.problem(f"{path}: expected a map, got {type(obj).__name__}")
            return None
        return obj

    def boolean(self, obj: object, path: str, default: bool) -> bool:
        if obj is None:
            return default
        if not isinstance(obj, bool):
            self.problem(f"{path}: expected true or false, got {obj!r}")
            return default
        return obj

    def string(self, obj: object, path: str) -> str:
        if obj is None:
            return ""
        if not isinstance(obj, str):
            self.problem(f"{path}: expected a string, got {type(obj).__name__}")
            return ""
        return obj

    def labels(self, obj: object, path: str, values_are_labels: bool = True) -> FrozenLabels:
        problems = validate_label_map(obj, path, values_are_labels=values_are_labels)
        if problems:
            self.problems.extend(problems)
            return EMPTY_LABELS
        return FrozenLabels.of(obj) if isinstance(obj, Mapping) and obj else EMPTY_LABELS

    def unit(self, obj: object, path: str) -> Unit | None:
        spec = self.mapping(obj, path, required=True)
        if spec is None:
            return None
        raw_resource = spec.get("resource")
        resource: UnitResource | None = None
        if raw_resource is None:
            self.problem(f"{path}.resource: required, one of {_RESOURCES}")
        elif not isinstance(raw_resource, str) or raw_resource not in _RESOURCE_NAMES:
            self.problem(f"{path}.resource: {raw_resource!r} is not a known unit resource (one of {_RESOURCES})")
        else:
            resource = UnitResource(raw_resource)
        raw_max = spec.get("max")
        cap: int | None = None
        if raw_max is not None:
            if isinstance(raw_max, bool) or not isinstance(raw_max, int):
                self.problem(f"{path}.max: expected a whole number of pods >= 0, got {raw_max!r}")
            elif raw_max < 0:
                self.problem(f"{path}.max: must be >= 0 (a count of pods), got {raw_max}")
            else:
                cap = raw_max
        node_selector = self.labels(spec.get("nodeSelector"), f"{path}.nodeSelector")
        pod_labels = self.labels(spec.get("podLabels"), f"{path}.podLabels")
        pod_annotations = self.labels(spec.get("podAnnotations"), f"{path}.podAnnotations", False)
        if resource is None:
            return None
        return Unit(resource, node_selector, cap, pod_labels, pod_annotations)

    def units(self, obj: object, path: str) -> tuple[Unit, ...]:
        if obj is None:
            self.problem(f"{path}: required, a list of at least one unit")
            return ()
        if not isinstance(obj, list):
            self.problem(f"{path}: expected a list of units, got {type(obj).__name__}")
            return ()
        if not obj:
            self.problem(f"{path}: needs at least one unit")
            return ()
        if len(obj) > MAX_UNITS:
            self.problem(
                f"{path}: {len(obj)} units; at most {MAX_UNITS} are allowed (every pod tries the units in "
                "order): merge units with the same nodes, or split the pods among policies by selector"
            )
            return ()
        read = [self.unit(item, f"{path}[{index}]") for index, item in enumerate(obj)]
        self.unreachable_units(read, path)
        return tuple(unit for unit in read if unit is not None)

    def unreachable_units(self, units: list[Unit | None], path: str) -> None:
        """Report each unit whose nodes an earlier unit of the same resource always takes first.

        A unit is compared only with the earlier *reachable* units (one that an earlier unit shadows adds
        nothing: whatever it would shadow, its own shadow does too), with the first one reported, as a
        node picks its unit. At most :data:`MAX_UNITS` units reach here, so this is at most
        ``MAX_UNITS**2 / 2`` selector comparisons, each stopping at the first label that differs."""
        reachable: dict[UnitResource, list[tuple[int, FrozenLabels]]] = {}
        for later, unit in enumerate(units):
            if unit is None:
                continue
            earlier = reachable.setdefault(unit.resource, [])
            shadow = next((index for index, sel in earlier if matches_labels(sel, unit.node_selector)), None)
            if shadow is None:
                earlier.append((later, unit.node_selector))
                continue
            self.problem(
                f"{path}[{later}]: can never be used: every {unit.resource} node it selects is "
                f"taken first by {path}[{shadow}] (a node belongs to the first unit that matches)"
            )

    def try_next(self, obj: object, path: str) -> tuple[TryNextPolicy, float]:
        spec = self.mapping(obj, path)
        if spec is None:
            return TryNextPolicy.LACK_RESOURCE_OR_EXCEED_MAX, DEFAULT_TIMEOUT_SECONDS
        raw_policy = spec.get("policy")
        policy = TryNextPolicy.LACK_RESOURCE_OR_EXCEED_MAX
        if raw_policy is not None:
            if not isinstance(raw_policy, str) or raw_policy not in _POLICY_NAMES:
                self.problem(f"{path}.policy: {raw_policy!r} is not one of {_POLICIES}")
            else:
                policy = TryNextPolicy(raw_policy)
        timeout = DEFAULT_TIMEOUT_SECONDS
        raw_timeout = spec.get("timeout")
        if raw_timeout is not None:
            try:
                timeout = parse_duration(raw_timeout)
            except ValueError as error:
                self.problem(f"{path}.timeout: {error}")
        return policy, timeout

    def label_keys(self, obj: object, path: str) -> tuple[str, ...]:
        if obj is None:
            return ()
        if not isinstance(obj, list):
            self.problem(f"{path}: expected a list of label keys, got {type(obj).__name__}")
            return ()
        keys: list[str] = []
        for index, key in enumerate(obj):
            why = label_key_problem(key)
            if why is not None:
                self.problem(f"{path}[{index}]: {why}")
            else:
                keys.append(key)
        return tuple(keys)

    def policy(self, obj: object) -> ResourcePolicy | None:
        if not isinstance(obj, Mapping):
            self.problem(f"<object>: expected a ResourcePolicy (a map), got {type(obj).__name__}")
            return None
        api_version = obj.get("apiVersion")
        if api_version is not None and api_version != API_VERSION:
            self.problem(f"apiVersion: expected {API_VERSION}, got {api_version!r}")
        kind = obj.get("kind")
        if kind is not None and kind != KIND:
            self.problem(f"kind: expected {KIND}, got {kind!r}")
        metadata = self.mapping(obj.get("metadata"), "metadata") or {}
        namespace = self.string(metadata.get("namespace"), "metadata.namespace")
        name = self.string(metadata.get("name"), "metadata.name")
        uid = self.string(metadata.get("uid"), "metadata.uid")
        created: float | None = None
        if metadata.get("creationTimestamp") is not None:
            try:
                created = read_time(metadata.get("creationTimestamp"))
            except ValueError as error:
                self.problem(f"metadata.creationTimestamp: {error}")
        spec = self.mapping(obj.get("spec"), "spec", required=True)
        if spec is None:
            return None
        selector = self.labels(spec.get("selector"), "spec.selector")
        strategy = spec.get("strategy")
        if strategy is not None and strategy != "prefer":
            self.problem(f"spec.strategy: {strategy!r} is not supported: the only strategy is prefer")
        units = self.units(spec.get("units"), "spec.units")
        when_try_next, timeout = self.try_next(spec.get("whenTryNextUnits"), "spec.whenTryNextUnits")
        ignore_previous = self.boolean(spec.get("ignorePreviousPod"), "spec.ignorePreviousPod", False)
        ignore_terminating = self.boolean(spec.get("ignoreTerminatingPod"), "spec.ignoreTerminatingPod", True)
        match_label_keys = self.label_keys(spec.get("matchLabelKeys"), "spec.matchLabelKeys")
        if self.problems:
            return None
        return ResourcePolicy(
            namespace=namespace,
            name=name,
            units=units,
            selector=selector,
            when_try_next=when_try_next,
            timeout=timeout,
            ignore_previous_pod=ignore_previous,
            ignore_terminating_pod=ignore_terminating,
            match_label_keys=match_label_keys,
            created=created,
            uid=uid,
        )


_RESOURCE_NAMES = frozenset(resource.value for resource in UnitResource)
_POLICY_NAMES = frozenset(policy.value for policy in TryNextPolicy)


def validate_policy(obj: object) -> list[str]:
    """Every problem of a ResourcePolicy object, each starting with its field path; ``[]`` when valid.

    Never raises, whatever ``obj`` is. Unknown fields are ignored (newer ACK fields such as ``preemptPolicy``).
    """
    reader = _Reader()
    reader.policy(obj)
    return reader.problems


def parse_policy(obj: object) -> ResourcePolicy:
    """The immutable :class:`ResourcePolicy` of a JSON object; raises :class:`PolicyError` listing every
    problem (the same list :func:`validate_policy` returns)."""
    reader = _Reader()
    policy = reader.policy(obj)
    if policy is None:
        raise PolicyError(reader.problems)
    return policy


@dataclass(frozen=True, slots=True)
class PolicySet:
    """The cluster's ResourcePolicies: the valid ones by namespace, and each other one with why
    (``(namespace, name, problem)``), for the shell to log."""

    by_namespace: Mapping[str, tuple[ResourcePolicy, ...]]
    refused: tuple[tuple[str, str, str], ...] = ()


def policy_set(objects: Iterable[Obj]) -> PolicySet:
    """Every ResourcePolicy object parsed once (:func:`parse_policy`), grouped by namespace."""
    grouped: dict[str, list[ResourcePolicy]] = {}
    refused: list[tuple[str, str, str]] = []
    for obj in objects:
        try:
            policy = parse_policy(obj)
        except PolicyError as error:
            refused.append((namespace_of(obj), name_of(obj), str(error)))
            continue
        grouped.setdefault(policy.namespace, []).append(policy)
    return PolicySet({namespace: tuple(policies) for namespace, policies in grouped.items()}, tuple(refused))
