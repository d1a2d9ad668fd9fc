"""Leader election with a ``coordination.k8s.io/v1`` Lease, as client-go's ``leaderelection`` does it.

* A candidate reads the Lease; it may take it when nobody holds it, when it already holds it (a restart
  with the same identity), or when the holder has not renewed it for ``leaseDurationSeconds`` as measured
  on the candidate's own clock since it last saw the record change (no trust in other machines' clocks).
* Taking and renewing are a ``PUT`` with the read ``resourceVersion``: of two candidates only one wins.
* The leader renews every ``retry_period``; when it could not renew for ``renew_deadline`` it stops acting
  (:meth:`LeaderElector.is_leader` turns false at that moment even if the renew loop hangs), well before
  another candidate may take over (``lease_duration`` > ``renew_deadline``).
* On a clean stop the leader releases the Lease (empty holder, 1 s duration) so a follower takes over at
  its next try instead of waiting out the lease.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field

from webhook.api.kinds import LEASE
from webhook.api.objects import Doc, Obj, mapping, meta, rfc3339
from webhook.controller.records import kv
from webhook.controller.settings import ControllerSettings
from webhook.kube.client import KubeApiError, KubeClient, ResourceRef

log = logging.getLogger(__name__)

LEASES = ResourceRef.of(LEASE)

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class LeaseTerms:
    """Which Lease a replica campaigns for, as whom, and its timing in seconds (:func:`lease_terms`; the defaults
    are the settings')."""

    namespace: str
    name: str
    identity: str
    lease_duration: float
    renew_deadline: float
    retry_period: float

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def lease_terms(settings: ControllerSettings) -> LeaseTerms:
    """What the elector reads of the controller's settings."""
    return LeaseTerms(settings.lease_namespace, settings.lease_name, settings.identity, settings.lease_duration,
                      settings.renew_deadline, settings.retry_period)


@dataclass(eq=False)
class LeaderElector:
    """Campaign for one Lease; :meth:`run` until cancelled, then :meth:`release`."""

    client: KubeClient
    terms: LeaseTerms
    _: KW_ONLY
    on_change: Callable[[bool], None] | None = None
    clock: Clock = time.monotonic
    wall: Clock = time.time
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    rng: random.Random = field(default_factory=random.Random)
    transitions: int = field(default=0, init=False)
    """How many times this elector became leader."""
    _leading: bool = field(default=False, init=False)
    _last_renew: float = field(default=float("-inf"), init=False)
    _observed: tuple[object, ...] | None = field(default=None, init=False)
    _observed_at: float = field(default=0.0, init=False)

    # State -------------------------------------------------------------------------------------------------
    def is_leader(self) -> bool:
        """Whether this replica may act now: it holds the Lease and renewed it within ``renew_deadline``."""
        return self._leading and self.clock() - self._last_renew < self.terms.renew_deadline

    def _set_leading(self, leading: bool) -> None:
        if leading == self._leading:
            return
        self._leading = leading
        if leading:
            self.transitions += 1
        log.info(kv(component="leader", event="acquired" if leading else "lost", lease=self.terms.key,
                    identity=self.terms.identity))
        if self.on_change is not None:
            self.on_change(leading)

    # The loop ----------------------------------------------------------------------------------------------
    async def run(self) -> None:
        """Try (follower) or renew (leader) every ``retry_period`` until cancelled."""
        while True:
            try:
                ok = await self.try_acquire_or_renew()
            except asyncio.CancelledError:
                raise
            except Exception as error:
                log.warning(kv(component="leader", event="error", error=repr(error)))
                ok = False
            now = self.clock()
            if ok:
                self._last_renew = now
                self._set_leading(True)
            elif self._leading and now - self._last_renew >= self.terms.renew_deadline:
                self._set_leading(False)
            if self._leading and not self.is_leader():
                self._set_leading(False)
            period = self.terms.retry_period
            delay = period if self._leading else period * self.rng.uniform(1.0, 1.2)
            await self.sleep(delay)

    def _spec(self, previous: Obj | None, now: float) -> Doc:
        stamp = rfc3339(now)
        held_by_me = previous is not None and previous.get("holderIdentity") == self.terms.identity
        counted = (previous or {}).get("leaseTransitions")
        transitions = counted if isinstance(counted, int) else 0
        return {
            "holderIdentity": self.terms.identity,
            "leaseDurationSeconds": max(1, round(self.terms.lease_duration)),
            "acquireTime": (previous or {}).get("acquireTime") if held_by_me else stamp,
            "renewTime": stamp,
            "leaseTransitions": transitions if held_by_me or previous is None else transitions + 1,
        }

    def _observe(self, spec: Obj) -> None:
        record = (
            spec.get("holderIdentity"),
            spec.get("renewTime"),
            spec.get("acquireTime"),
            spec.get("leaseDurationSeconds"),
        )
        if record != self._observed:
            self._observed = record
            self._observed_at = self.clock()

    async def try_acquire_or_renew(self) -> bool:
        """One attempt; ``True`` when this replica holds the Lease afterwards."""
        try:
            lease = await self.client.get(LEASES, self.terms.name, self.terms.namespace)
        except KubeApiError as error:
            if not error.not_found:
                raise
            return await self._written(self.client.create(LEASES, self._body(self._spec(None, self.wall())),
                                                          self.terms.namespace))
        spec = mapping(lease.get("spec"))
        self._observe(spec)
        holder = spec.get("holderIdentity") or ""
        declared = spec.get("leaseDurationSeconds")
        duration = self.terms.lease_duration
        if isinstance(declared, int | float) and declared > 0:
            duration = float(declared)
        if holder and holder != self.terms.identity and self._observed_at + duration > self.clock():
            return False
        body = self._body(self._spec(spec, self.wall()), lease)
        return await self._written(self.client.replace(LEASES, self.terms.name, body, self.terms.namespace))

    def _body(self, spec: Doc, current: Obj | None = None) -> Doc:
        """The Lease to write: a new one, or a replacement of ``current`` (its ``resourceVersion`` the
        precondition)."""
        metadata: Doc = {"name": self.terms.name, "namespace": self.terms.namespace}
        if current is not None:
            metadata["resourceVersion"] = meta(current).get("resourceVersion")
        return {"apiVersion": LEASE.api_version, "kind": "Lease", "metadata": metadata, "spec": spec}

    async def _written(self, write: Awaitable[Obj]) -> bool:
        """``True`` once ``write`` stored the Lease; ``False`` when another replica wrote it first."""
        try:
            written = await write
        except KubeApiError as error:
            if error.conflict:
                return False
            raise
        self._observe(mapping(written.get("spec")))
        return True

    async def release(self) -> None:
        """Give the Lease up (only if this replica holds it) so another one takes over at once."""
        was_leading = self._leading
        self._set_leading(False)
        if not was_leading:
            return
        try:
            lease = await self.client.get(LEASES, self.terms.name, self.terms.namespace)
            spec = mapping(lease.get("spec"))
            if spec.get("holderIdentity") != self.terms.identity:
                return
            stamp = rfc3339(self.wall())
            body = self._body({
                "holderIdentity": "",
                "leaseDurationSeconds": 1,
                "acquireTime": stamp,
                "renewTime": stamp,
                "leaseTransitions": spec.get("leaseTransitions") or 0,
            }, lease)
            await self.client.replace(LEASES, self.terms.name, body, self.terms.namespace)
            log.info(kv(component="leader", event="released", lease=self.terms.key,
                        identity=self.terms.identity))
        except KubeApiError as error:
            log.warning(kv(component="leader", event="release_failed", error=repr(error)))
