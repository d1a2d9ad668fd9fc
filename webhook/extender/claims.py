"""The devices pods claim through Dynamic Resource Allocation, as the extender counts them (docs/pod-quota.md,
"Devices").

Two watches feed :class:`ClaimBook`: the DeviceClasses (which count, and as what quota resource:
:func:`~webhook.core.dra.quota_classes`) and the ResourceClaims (what each asks: :func:`~webhook.core.dra.claim_ask`,
computed once per claim version and again only when the classes change). A claim counts against the quota of
its namespace while a pod holds it - a bound pod, or a pod the filter placed and the watch has not yet shown
bound - and only once however many pods share it (:class:`~webhook.core.dra.ClaimHolders`): it is charged when
the first pod naming it is charged and uncharged when the last one goes. :meth:`ClaimBook.apply` keeps each
claim's charge in the cache's usage sums, so the filter's check still reads sums, not pods.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol

from webhook.api.names import QUOTA_RESOURCE_ANNOTATION
from webhook.api.objects import Doc, Obj, annotations_of, meta, name_of, namespace_of
from webhook.core.dra import (
    ClaimAsk,
    ClaimHolders,
    ClaimKey,
    DeviceQuota,
    PodDevices,
    claim_ask,
    devices_to_add,
    quota_classes,
)
from webhook.core.podquota import MutableUsage, charge, quota_key
from webhook.core.quota import QuotaTree
from webhook.core.resources import Resources
from webhook.extender.reserved import HeldRoom

__all__ = ["ClaimBook", "ClaimCharge", "Sums", "claim_essentials"]


class Sums(Protocol):
    """The usage sums claims are charged in (the extender's cache)."""

    @property
    def tree(self) -> QuotaTree | None: ...
    @property
    def usage(self) -> MutableUsage: ...
    @property
    def assumed_usage(self) -> MutableUsage: ...
    @property
    def held(self) -> HeldRoom: ...


def claim_essentials(obj: Obj) -> Doc:
    """What the claim watch keeps of a ResourceClaim: its name and version, and its device requests (its
    status - allocation, the pods it is reserved for - changes often and is not read)."""
    metadata = meta(obj)
    spec = obj.get("spec")
    devices = spec.get("devices") if isinstance(spec, Mapping) else None
    kept_meta = {key: metadata[key] for key in ("name", "namespace", "uid", "resourceVersion") if key in metadata}
    requests = devices.get("requests") if isinstance(devices, Mapping) else None
    return {"metadata": kept_meta, "spec": {"devices": {"requests": requests}}}


def _key(obj: Obj) -> ClaimKey:
    return namespace_of(obj), name_of(obj)


@dataclass(frozen=True, slots=True)
class ClaimCharge:
    """What one claim is charged with: its ask, at its namespace's leaf and up, as a bound pod's or as a
    placement's, and whether as a pod's no queued job accounts for (:mod:`webhook.extender.reserved`)."""

    quota: str
    resources: Resources
    bound: bool
    loose: bool

    def frees(self, then: ClaimCharge | None) -> bool:
        """Whether going from this charge to ``then`` gives room back somewhere."""
        if then is None or then.quota != self.quota:
            return True
        return any(then.resources.get(name, 0) < amount for name, amount in self.resources.items())


class ClaimBook:
    """The quota classes, every claim's ask, who holds which claim, and what each claim is charged with in
    ``sums``; ``on_freed`` is called when a charge goes down (pods waiting for room may fit now)."""

    def __init__(self, sums: Sums, on_freed: Callable[[], None]) -> None:
        self._sums = sums
        self._on_freed = on_freed
        self.classes: dict[str, str] = {}
        """DeviceClass name -> the quota resource each of its devices counts as."""
        self._specs: dict[ClaimKey, object] = {}
        self.asks: dict[ClaimKey, ClaimAsk] = {}
        self.holders = ClaimHolders()
        self.charged: dict[ClaimKey, ClaimCharge] = {}
        self.quota = DeviceQuota()
        """The classes and claims as :func:`~webhook.core.dra.devices_to_add` reads them (live views)."""

    # The watches -------------------------------------------------------------------------------------------
    def set_classes(self, objs: Iterable[Obj]) -> None:
        """The DeviceClasses changed: every claim's ask may have."""
        classes = quota_classes(((name_of(obj), annotations_of(obj)) for obj in objs), QUOTA_RESOURCE_ANNOTATION)
        if classes == self.classes:
            return
        self.classes = classes
        changed: set[ClaimKey] = set()
        for key, spec in self._specs.items():
            ask = claim_ask(spec, classes)
            if ask != self.asks.get(key):
                self.asks[key] = ask
                changed.add(key)
        self.quota = DeviceQuota(MappingProxyType(self.classes), claims=MappingProxyType(self.asks))
        self.apply(changed)

    def upsert(self, obj: Obj) -> None:
        """A claim was made or changed (a claim's spec never changes, so its status updates cost a comparison)."""
        key = self._read(obj)
        if key is not None:
            self.apply((key,))

    def _read(self, obj: Obj) -> ClaimKey | None:
        """Keep claim ``obj``; its key when its ask is new or changed."""
        key = _key(obj)
        spec = obj.get("spec")
        if key in self._specs and self._specs[key] == spec:
            return None
        self._specs[key] = spec
        ask = claim_ask(spec, self.classes)
        if self.asks.get(key) == ask:
            return None
        self.asks[key] = ask
        return key

    def delete(self, obj: Obj) -> None:
        key = _key(obj)
        self._specs.pop(key, None)
        if self.asks.pop(key, None) is not None:
            self.apply((key,))

    def replace(self, objs: Iterable[Obj]) -> None:
        """A re-list."""
        seen: set[ClaimKey] = set()
        changed: set[ClaimKey] = set()
        for obj in objs:
            seen.add(_key(obj))
            key = self._read(obj)
            if key is not None:
                changed.add(key)
        for key in [key for key in self._specs if key not in seen]:
            del self._specs[key]
            self.asks.pop(key, None)
            changed.add(key)
        self.apply(changed)

    # Pods --------------------------------------------------------------------------------------------------
    def devices(self, pod: Obj) -> PodDevices:
        """What ``pod``'s claims add to its quota request: the claims no pod holds yet
        (:func:`~webhook.core.dra.devices_to_add`)."""
        return devices_to_add(pod, self.quota, self.holders)

    def hold(self, pod: str, claims: Iterable[ClaimKey], *, bound: bool, loose: bool = False,
             freed: bool = True) -> None:
        """Pod ``pod`` holds ``claims`` now (none: it holds nothing), as a bound pod or as a placement (a pod
        holds both ways while its binding replaces its placement). ``freed=False``: room given back here is
        taken again at once (a placement made anew), so nobody is told."""
        changed = self.holders.put((pod, bound), claims, bound=bound, loose=loose)
        if changed:
            self.apply(changed, freed=freed)

    # Charges -----------------------------------------------------------------------------------------------
    def wanted(self, key: ClaimKey) -> ClaimCharge | None:
        """What claim ``key`` should be charged with now: its ask, while some pod holds it, in a namespace of
        the tree (a claim not yet seen, or one that cannot be counted, adds nothing)."""
        hold = self.holders.hold(key)
        ask = self.asks.get(key)
        quota = quota_key(self._sums.tree, key[0])
        if hold is None or ask is None or not ask.resources or quota is None:
            return None
        return ClaimCharge(quota, ask.resources, hold.bound, hold.loose)

    def apply(self, keys: Iterable[ClaimKey], *, freed: bool = True) -> None:
        """Bring the charges of claims ``keys`` in line with :meth:`wanted`."""
        sums = self._sums
        tree = sums.tree
        gave_back = False
        for key in keys:
            want = self.wanted(key)
            have = self.charged.get(key)
            if want == have:
                continue
            if have is not None and tree is not None:
                _charge(key, have, tree, sums, -1)
                gave_back = gave_back or have.frees(want)
            if want is None:
                self.charged.pop(key, None)
            else:
                assert tree is not None
                self.charged[key] = want
                _charge(key, want, tree, sums, 1)
        if gave_back and freed:
            self._on_freed()

    def recharge(self) -> None:
        """The cache started its usage sums afresh (the tree changed): charge every held claim again."""
        self.charged = {}
        self.apply(self.holders.claims(), freed=False)


def _charge(key: ClaimKey, what: ClaimCharge, tree: QuotaTree, sums: Sums, sign: int) -> None:
    held = sums.held
    if what.bound:
        charge(sums.usage, tree, what.quota, what.resources.items(), sign)
        if what.loose:
            held.charge_pod(tree, what.quota, what.resources, sign)
        return
    charge(sums.assumed_usage, tree, what.quota, what.resources.items(), sign)
    if what.loose:
        holder = f"claim:{key[0]}/{key[1]}"  # no pod key looks so (a uid, or namespace/name)
        if sign > 0:
            held.assume(tree, holder, what.quota, what.resources)
        else:
            held.drop(tree, holder)
