"""Devices claimed through Dynamic Resource Allocation, counted against the quota (docs/accounting.md, "Devices").

Current GPU drivers hand out devices through ResourceClaims (``resource.k8s.io/v1``): a pod names claims in
``spec.resourceClaims``, each either made for it from a ResourceClaimTemplate (``resourceClaimTemplateName``:
one claim a pod) or shared by every pod that names it (``resourceClaimName``). A claim asks for devices of a
DeviceClass. An operator marks the DeviceClasses that count, with the annotation
:data:`~webhook.api.names.QUOTA_RESOURCE_ANNOTATION` naming the quota resource (``nvidia.com/gpu``): each device
such a claim asks for is one unit of it, exactly as ``nvidia.com/gpu: 1`` in a container's requests is.

What a claim asks for (:func:`claim_ask`), per device request:

* ``exactly`` (or the older top-level ``deviceClassName``): ``count`` devices (default 1) of the class;
* ``firstAvailable``: the largest of its alternatives (the scheduler may give any of them);
* ``allocationMode: All`` cannot be counted before the scheduler allocates: such a claim is refused when it
  is created in a namespace of the tree (:func:`claim_problems`), and a job naming one cannot be sized;
* a request with ``adminAccess`` shares devices others hold (monitoring): it counts nothing.

A job is sized with its pods' devices (:func:`pod_devices`): each pod set adds the asks of its template claims
per pod, and each shared claim the job names counts once. A running pod counts what its claims ask (a shared
claim once, however many pods name it), in the controller and the extender alike. The extender keeps who holds
each claim (:class:`ClaimHolders`: a claim counts from the first pod that holds it to the last) and checks a pod
about to be placed with what its claims add (:func:`devices_to_add`: the claims nobody holds yet; a claim not
known yet, or that cannot be counted, keeps the pod waiting).
"""

from __future__ import annotations

from collections.abc import Container, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from webhook.core.quantity import NANO
from webhook.core.resources import EMPTY, Resources

__all__ = [
    "ClaimAsk",
    "ClaimHold",
    "ClaimHolders",
    "ClaimKey",
    "DeviceQuota",
    "PodClaims",
    "PodDevices",
    "claim_ask",
    "claim_problems",
    "device_quota_of",
    "devices_to_add",
    "held_devices",
    "pod_claim_keys",
    "pod_claim_refs",
    "pod_claims",
    "pod_devices",
    "quota_classes",
    "unmade_claims",
]

ALL = "All"

ClaimKey = tuple[str, str]
"""A claim's ``(namespace, name)``."""


@dataclass(frozen=True, slots=True)
class ClaimAsk:
    """What one claim (or claim template) asks for in quota resources, or why it cannot be counted."""

    resources: Resources = EMPTY
    problem: str = ""


def _count(request: Mapping[str, object], classes: Mapping[str, str], where: str) -> tuple[dict[str, int], str]:
    """One device request's quota amounts (``exactly`` or a ``firstAvailable`` alternative)."""
    name = request.get("deviceClassName")
    resource = classes.get(name) if isinstance(name, str) else None
    if resource is None or request.get("adminAccess") is True:
        return {}, ""
    if request.get("allocationMode") == ALL:
        return {}, (f"{where}: allocationMode All of DeviceClass {name} cannot be counted against quota resource "
                    f"{resource} before the scheduler allocates it; ask for an exact count")
    count = request.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        return {}, f"{where}.count: expected a non-negative integer, got {count!r}"
    return {resource: count * NANO}, ""


def claim_ask(spec: object, classes: Mapping[str, str]) -> ClaimAsk:
    """What a ResourceClaim ``spec`` (or a template's ``spec.spec``) asks for, by the quota classes ``classes``
    (DeviceClass name -> quota resource)."""
    devices = spec.get("devices") if isinstance(spec, Mapping) else None
    requests = devices.get("requests") if isinstance(devices, Mapping) else None
    if not isinstance(requests, list) or not classes:
        return ClaimAsk()
    total: dict[str, int] = {}
    for index, request in enumerate(requests):
        if not isinstance(request, Mapping):
            continue
        where = f"spec.devices.requests[{index}]"
        alternatives = request.get("firstAvailable")
        if isinstance(alternatives, list):
            best: dict[str, int] = {}
            for number, alternative in enumerate(alternatives):
                if isinstance(alternative, Mapping):
                    amounts, problem = _count(alternative, classes, f"{where}.firstAvailable[{number}]")
                    if problem:
                        return ClaimAsk(problem=problem)
                    for name, amount in amounts.items():
                        best[name] = max(best.get(name, 0), amount)
            amounts = best
        else:
            exactly = request.get("exactly")
            amounts, problem = _count(exactly if isinstance(exactly, Mapping) else request, classes,
                                      f"{where}.exactly" if isinstance(exactly, Mapping) else where)
            if problem:
                return ClaimAsk(problem=problem)
        for name, amount in amounts.items():
            total[name] = total.get(name, 0) + amount
    return ClaimAsk(Resources({name: amount for name, amount in total.items() if amount}))


def claim_problems(spec: object, classes: Mapping[str, str]) -> list[str]:
    """Why a claim (or template) created in a namespace of the tree is refused: it could not be counted."""
    problem = claim_ask(spec, classes).problem
    return [problem] if problem else []


def quota_classes(device_classes: Iterable[tuple[str, Mapping[str, object]]], annotation: str) -> dict[str, str]:
    """DeviceClass name -> quota resource, from ``(name, annotations)`` of each class."""
    out: dict[str, str] = {}
    for name, marks in device_classes:
        value = marks.get(annotation)
        if isinstance(value, str) and value:
            out[name] = value
    return out


@dataclass(frozen=True, slots=True)
class DeviceQuota:
    """The DRA objects sizing reads: the quota classes, and the asks of the claim templates and of the claims
    by ``(namespace, name)``."""

    classes: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    templates: Mapping[tuple[str, str], ClaimAsk] = field(default_factory=lambda: MappingProxyType({}))
    claims: Mapping[tuple[str, str], ClaimAsk] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, slots=True)
class PodClaims:
    """The claims a pod spec names: template names (a claim each pod) and shared claim names."""

    templates: tuple[str, ...] = ()
    shared: tuple[str, ...] = ()


def pod_claims(pod_spec: object) -> PodClaims:
    """The claims ``pod_spec`` names in ``spec.resourceClaims``."""
    entries = pod_spec.get("resourceClaims") if isinstance(pod_spec, Mapping) else None
    templates: list[str] = []
    shared: list[str] = []
    for entry in entries if isinstance(entries, list) else ():
        if not isinstance(entry, Mapping):
            continue
        template, claim = entry.get("resourceClaimTemplateName"), entry.get("resourceClaimName")
        if isinstance(template, str) and template:
            templates.append(template)
        elif isinstance(claim, str) and claim:
            shared.append(claim)
    return PodClaims(tuple(templates), tuple(shared))


def pod_claim_refs(pod: Mapping[str, object]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The claims a running (or scheduled) pod holds: ``(its own, shared)`` claim names. Its own are the claims
    made for it from templates, named in ``status.resourceClaimStatuses`` once the claim exists; shared ones
    are the claims its spec names."""
    spec, status = pod.get("spec"), pod.get("status")
    entries = spec.get("resourceClaims") if isinstance(spec, Mapping) else None
    from_template: set[str] = set()
    shared: list[str] = []
    for entry in entries if isinstance(entries, list) else ():
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
            continue
        if isinstance(entry.get("resourceClaimTemplateName"), str):
            from_template.add(entry["name"])
        elif isinstance(entry.get("resourceClaimName"), str) and entry["resourceClaimName"]:
            shared.append(entry["resourceClaimName"])
    made = status.get("resourceClaimStatuses") if isinstance(status, Mapping) else None
    own = [
        str(item["resourceClaimName"])
        for item in (made if isinstance(made, list) else ())
        if isinstance(item, Mapping) and item.get("name") in from_template and item.get("resourceClaimName")
    ]
    return tuple(own), tuple(shared)


def held_devices(namespace: str, own: Iterable[str], shared: Iterable[str], quota: DeviceQuota,
                 counted: set[tuple[str, str]] | None = None) -> Resources:
    """What a pod's claims hold (:func:`pod_claim_refs`): its own claims', and each shared claim's unless it
    is in ``counted`` already (the shared claims counted for other pods, which this adds to). A claim the
    caller does not know, or cannot count, adds nothing."""
    total = EMPTY
    for name in own:
        ask = quota.claims.get((namespace, name))
        if ask is not None:
            total = total + ask.resources
    for name in shared:
        key = (namespace, name)
        if counted is not None:
            if key in counted:
                continue
            counted.add(key)
        ask = quota.claims.get(key)
        if ask is not None:
            total = total + ask.resources
    return total


def pod_devices(
    namespace: str, pod_sets: Sequence[tuple[int, object]], quota: DeviceQuota
) -> tuple[list[Resources], Resources, str]:
    """A job's devices: per pod set (``(count, pod spec)`` each) what each of its pods' template claims ask,
    the shared claims the job names (each once), and why it cannot be sized (``""``: it can). A template or
    shared claim that does not exist yet cannot be sized either: the job waits for it."""
    if not quota.classes:
        return [EMPTY] * len(pod_sets), EMPTY, ""
    per_set: list[Resources] = []
    shared: dict[str, Resources] = {}
    for _, spec in pod_sets:
        claims = pod_claims(spec)
        each = EMPTY
        for name in claims.templates:
            ask, problem = _sized(quota.templates, "ResourceClaimTemplate", namespace, name)
            if problem:
                return [], EMPTY, problem
            each = each + ask
        per_set.append(each)
        for name in claims.shared:
            ask, problem = _sized(quota.claims, "ResourceClaim", namespace, name)
            if problem:
                return [], EMPTY, problem
            shared[name] = ask
    total = EMPTY
    for resources in shared.values():
        total = total + resources
    return per_set, total, ""


def _sized(asks: Mapping[tuple[str, str], ClaimAsk], kind: str, namespace: str, name: str) -> tuple[Resources, str]:
    """What the claim (or template) ``namespace/name`` asks, or why it cannot be sized."""
    ask = asks.get((namespace, name))
    if ask is None:
        return EMPTY, f"{kind} {namespace}/{name} does not exist (yet)"
    if ask.problem:
        return EMPTY, f"{kind} {namespace}/{name}: {ask.problem}"
    return ask.resources, ""


def _ident(obj: Mapping[str, object]) -> tuple[str, str, Mapping[str, object]]:
    metadata = obj.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    annotations = metadata.get("annotations")
    return (str(metadata.get("namespace") or ""), str(metadata.get("name") or ""),
            annotations if isinstance(annotations, Mapping) else {})


def device_quota_of(
    classes: Iterable[Mapping[str, object]],
    templates: Iterable[Mapping[str, object]],
    claims: Iterable[Mapping[str, object]],
    annotation: str,
) -> DeviceQuota:
    """A :class:`DeviceQuota` from raw DeviceClass, ResourceClaimTemplate and ResourceClaim objects (what ``kq``
    reads; the controller keeps the same per object version)."""
    counted = quota_classes(((_ident(obj)[1], _ident(obj)[2]) for obj in classes), annotation)
    asks: dict[tuple[str, str], ClaimAsk] = {}
    for obj in templates:
        namespace, name, _ = _ident(obj)
        spec = obj.get("spec")
        asks[(namespace, name)] = claim_ask(spec.get("spec") if isinstance(spec, Mapping) else None, counted)
    made = {(_ident(obj)[0], _ident(obj)[1]): claim_ask(obj.get("spec"), counted) for obj in claims}
    return DeviceQuota(MappingProxyType(counted), MappingProxyType(asks), MappingProxyType(made))


def unmade_claims(pod: Mapping[str, object]) -> tuple[str, ...]:
    """The ``spec.resourceClaims`` entries (by name) of ``pod`` that name a template and have no entry in
    ``status.resourceClaimStatuses`` yet: the control plane has not made their claims. (An entry whose
    ``resourceClaimName`` is empty says no claim was needed: it is made.)"""
    spec, status = pod.get("spec"), pod.get("status")
    entries = spec.get("resourceClaims") if isinstance(spec, Mapping) else None
    made = status.get("resourceClaimStatuses") if isinstance(status, Mapping) else None
    listed = {item.get("name") for item in (made if isinstance(made, list) else ()) if isinstance(item, Mapping)}
    return tuple(
        str(entry["name"])
        for entry in (entries if isinstance(entries, list) else ())
        if isinstance(entry, Mapping) and isinstance(entry.get("name"), str)
        and isinstance(entry.get("resourceClaimTemplateName"), str) and entry["name"] not in listed
    )


@dataclass(frozen=True, slots=True)
class PodDevices:
    """What a pod about to be placed adds in devices (:func:`devices_to_add`), or why that is not known."""

    resources: Resources = EMPTY
    claims: tuple[ClaimKey, ...] = ()
    """Every claim the pod holds once placed (those others hold already included)."""
    unknown: str = ""
    """A claim not known yet (not made, or not yet seen): the answer may change in a moment."""
    problem: str = ""
    """A claim that cannot be counted (:func:`claim_problems`): the pod cannot be checked against its quota."""


def pod_claim_keys(pod: Mapping[str, object]) -> tuple[ClaimKey, ...]:
    """Every claim ``pod`` holds (:func:`pod_claim_refs`: its own, then the shared ones), each once."""
    own, shared = pod_claim_refs(pod)
    if not own and not shared:
        return ()
    metadata = pod.get("metadata")
    namespace = str(metadata.get("namespace") or "") if isinstance(metadata, Mapping) else ""
    return tuple(dict.fromkeys((namespace, name) for name in (*own, *shared)))


def devices_to_add(pod: Mapping[str, object], quota: DeviceQuota, held: Container[ClaimKey] = ()) -> PodDevices:
    """The devices ``pod``'s claims (:func:`pod_claim_keys`) add to its quota: each claim's ask, except the
    claims in ``held`` (pods hold them already, so they count already: a claim counts once however many pods
    share it). Without quota classes nothing counts, so nothing is unknown either."""
    claims = pod_claim_keys(pod)
    if not quota.classes:
        return PodDevices(claims=claims)
    unmade = unmade_claims(pod)
    if unmade:
        return PodDevices(claims=claims, unknown=f"the claim for spec.resourceClaims {unmade[0]!r} is not made yet")
    total = EMPTY
    for key in claims:
        if key in held:
            continue
        ask = quota.claims.get(key)
        if ask is None:
            return PodDevices(claims=claims, unknown=f"ResourceClaim {key[0]}/{key[1]} is not known yet")
        if ask.problem:
            return PodDevices(claims=claims, problem=f"ResourceClaim {key[0]}/{key[1]}: {ask.problem}")
        total = total + ask.resources
    return PodDevices(total, claims)


@dataclass(frozen=True, slots=True)
class ClaimHold:
    """How a claim counts while pods hold it: once, as a bound pod's when any holder is bound (else as a
    placement's), and as a pod no queued job accounts for (``loose``) only when every such holder is one."""

    bound: bool
    loose: bool


class ClaimHolders:
    """Which pods hold each claim, so that a claim shared by several counts once: from when the first pod
    naming it is counted until the last one goes. A holder is any key the caller chooses (a pod bound, a
    placement not yet bound); each holds a set of claims. Mutable, in place (the extender keeps one)."""

    def __init__(self) -> None:
        self._claims: dict[Hashable, tuple[tuple[ClaimKey, ...], bool, bool]] = {}
        self._holders: dict[ClaimKey, dict[Hashable, tuple[bool, bool]]] = {}

    def put(self, holder: Hashable, claims: Iterable[ClaimKey], *, bound: bool, loose: bool) -> set[ClaimKey]:
        """``holder`` holds ``claims`` now (none: it holds nothing); the claims whose holders changed."""
        wanted = tuple(dict.fromkeys(claims))
        before = self._claims.get(holder)
        if before == (wanted, bound, loose) or (before is None and not wanted):
            return set()
        changed: set[ClaimKey] = set()
        if before is not None:
            for key in before[0]:
                holders = self._holders[key]
                del holders[holder]
                if not holders:
                    del self._holders[key]
                changed.add(key)
        if wanted:
            self._claims[holder] = (wanted, bound, loose)
            for key in wanted:
                self._holders.setdefault(key, {})[holder] = (bound, loose)
                changed.add(key)
        else:
            self._claims.pop(holder, None)
        return changed

    def release(self, holder: Hashable) -> set[ClaimKey]:
        """``holder`` holds nothing any more; the claims whose holders changed."""
        return self.put(holder, (), bound=False, loose=False)

    def hold(self, key: ClaimKey) -> ClaimHold | None:
        """How claim ``key`` counts now (``None``: nobody holds it)."""
        holders = self._holders.get(key)
        if not holders:
            return None
        bound = any(is_bound for is_bound, _ in holders.values())
        return ClaimHold(bound, all(loose for is_bound, loose in holders.values() if is_bound == bound))

    def __contains__(self, key: object) -> bool:
        return key in self._holders

    def claims(self) -> list[ClaimKey]:
        """Every claim some holder holds."""
        return list(self._holders)
