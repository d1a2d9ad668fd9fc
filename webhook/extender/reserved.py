"""The room admitted jobs hold, kept from pods no queued job accounts for (docs/pod-quota.md).

The queue controller publishes, before it releases jobs or evicts pods, what the admitted jobs hold at each
quota node (the ConfigMap :data:`~webhook.api.names.RESERVATIONS`, written by
``webhook.controller.reservations``). A *loose* pod - a Deployment's, a StatefulSet's, an orphan: one that
:func:`~webhook.workloads.registry.queued_by_a_job` says no job accounts for - fits only within what those jobs
leave: at every level of its chain, ``reserved + loose pods (bound and placed) + the pod <= max``. So a
Deployment's replacement cannot take the room a reclaim freed for another quota's job, nor a scale-up the room
of a job released a moment before its pods exist. Pods of queued jobs keep the plain rule (bound and placed
pods within ``max``): their jobs are in the reservation already.

A reservation the controller has not written again for :data:`~webhook.api.names.RESERVATIONS_TTL_SECONDS`
(it writes it every minute while it runs) is not trusted: loose pods are then checked like any other pod, so a
dead controller never keeps Deployments from scaling for longer than that.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping

from webhook.api.names import RESERVATIONS, RESERVATIONS_KEY, RESERVATIONS_TTL_SECONDS, RESERVED_AT_KEY
from webhook.api.objects import Obj, name_of, parse_time
from webhook.core.podquota import POD_QUOTA_REFUSAL, MutableUsage, QuotaBlocker, Usage, charge
from webhook.core.quota import QuotaTree
from webhook.core.resources import ResourceError, Resources

log = logging.getLogger(__name__)


def explain_held(blockers: tuple[QuotaBlocker, ...]) -> str:
    """The filter's reason for a loose pod refused by the room admitted jobs hold."""
    return (f"{POD_QUOTA_REFUSAL} (room held by admitted jobs, for a pod no queued job accounts for): "
            + "; ".join(blocker.explain() for blocker in blockers))


def parse_reservations(data: Obj) -> tuple[dict[str, dict[str, int]], float | None]:
    """A reservation ConfigMap's ``data``: node key -> resource -> nano-units, and when it was written."""
    raw = data.get(RESERVATIONS_KEY)
    held: dict[str, dict[str, int]] = {}
    try:
        decoded = json.loads(raw) if isinstance(raw, str) else {}
    except ValueError:
        decoded = {}
    for key, spec in (decoded.items() if isinstance(decoded, dict) else ()):
        if not isinstance(spec, Mapping):
            continue
        try:
            held[str(key)] = dict(Resources.parse(spec).items())
        except ResourceError:
            continue
    return held, parse_time(data.get(RESERVED_AT_KEY))


class HeldRoom:
    """The reservation and the usage of loose pods (bound, and placed but not yet bound)."""

    def __init__(self) -> None:
        self.reserved: Usage = {}
        self.reserved_at: float | None = None
        self.loose: MutableUsage = {}
        """Bound, unfinished loose pods, charged up their chains."""
        self.loose_assumed: MutableUsage = {}
        """Loose pods the filter let through and the watch has not shown bound yet."""
        self._assumed: dict[str, tuple[str, Resources]] = {}

    def set_reservations(self, objs: Iterable[Obj]) -> bool:
        """Read the reservation ConfigMap among ``objs``; whether any node's reservation went down."""
        held: dict[str, dict[str, int]] = {}
        at: float | None = None
        for obj in objs:
            if name_of(obj) == RESERVATIONS:
                data = obj.get("data")
                held, at = parse_reservations(data if isinstance(data, Mapping) else {})
        before = self.reserved
        self.reserved, self.reserved_at = held, at
        return any(amount > held.get(key, {}).get(name, 0)
                   for key, sums in before.items() for name, amount in sums.items())

    def charge_pod(self, tree: QuotaTree, quota: str, request: Resources, sign: int) -> None:
        charge(self.loose, tree, quota, request.items(), sign)

    def assume(self, tree: QuotaTree, key: str, quota: str, request: Resources) -> None:
        self.drop(tree, key)
        self._assumed[key] = (quota, request)
        charge(self.loose_assumed, tree, quota, request.items())

    def drop(self, tree: QuotaTree | None, key: str) -> None:
        charged = self._assumed.pop(key, None)
        if charged is not None and tree is not None:
            charge(self.loose_assumed, tree, charged[0], charged[1].items(), -1)

    def reset(self) -> None:
        """Forget every charge (the tree changed: the cache charges every pod again)."""
        self.loose, self.loose_assumed, self._assumed = {}, {}, {}

    def usages(self, tree: QuotaTree, key: str, now: float) -> tuple[Usage, ...] | None:
        """What a loose pod ``key``'s check adds up besides itself - the reservation, the loose pods bound and
        placed, its own placement taken out - or ``None`` while no reservation is trusted."""
        if self.reserved_at is None or now - self.reserved_at > RESERVATIONS_TTL_SECONDS:
            return None
        own = self._assumed.get(key)
        if own is None:
            return self.reserved, self.loose, self.loose_assumed
        mine: MutableUsage = {}
        charge(mine, tree, own[0], own[1].items(), -1)
        return self.reserved, self.loose, self.loose_assumed, mine
