"""The DRA objects the controller sizes jobs and counts pods with (docs/accounting.md, "Devices").

When the API serves ``resource.k8s.io/v1`` (found at start and at every discovery), three watch caches keep
the DeviceClasses, ResourceClaimTemplates and ResourceClaims. :meth:`DeviceWatch.quota` gives the pass a
:class:`~webhook.core.dra.DeviceQuota`: the classes that count (their
:data:`~webhook.api.names.QUOTA_RESOURCE_ANNOTATION`), and what each template and claim asks for, parsed once
per object version. :attr:`DeviceWatch.epoch` moves when what sizes a job moves - a class, a template, a
claim no pod owns (a shared one) - so the job index sizes its jobs again; the claims the control plane makes
for pods from templates come and go with every pod and change no job's size.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType

from webhook.api import kinds
from webhook.api.names import QUOTA_RESOURCE_ANNOTATION
from webhook.api.objects import Obj, annotations_of, meta, name_of, resource_version_of
from webhook.controller.records import kv
from webhook.core.dra import ClaimAsk, DeviceQuota, claim_ask, quota_classes
from webhook.kube.cache import RELIST, ApiListWatch, CacheEvent, WatchCache
from webhook.kube.client import KubeApiError, KubeClient, ResourceRef

log = logging.getLogger("webhook.controller")

CLASSES = ResourceRef.of(kinds.DEVICE_CLASS)
TEMPLATES = ResourceRef.of(kinds.RESOURCE_CLAIM_TEMPLATE)
CLAIMS = ResourceRef.of(kinds.RESOURCE_CLAIM)

Start = Callable[[Awaitable[None], str], "asyncio.Task[None]"]


def _owned_by_pod(obj: Obj) -> bool:
    owners = meta(obj).get("ownerReferences")
    return isinstance(owners, list) and any(isinstance(ref, Mapping) and ref.get("kind") == "Pod" for ref in owners)


class DeviceWatch:
    """The DRA caches (none until the API serves them) and the quota a pass reads of them."""

    def __init__(self, client: KubeClient, on_change: Callable[[], None]) -> None:
        self._client = client
        self._on_change = on_change
        self.caches: list[WatchCache] = []
        self.epoch = 0
        self._asks: dict[tuple[str, str, str], tuple[str, ClaimAsk]] = {}
        """Per ``(cache, namespace, name)``: ``(resourceVersion, ask)``, re-read when the object changes."""
        self._quota: DeviceQuota = DeviceQuota()
        self._dirty = True

    async def discover(self, served: Callable[[str, str, str], Awaitable[bool]], start: Start) -> None:
        """Start the caches once the API serves DeviceClasses (``served(group, version, plural)``) and this
        identity may list them; until then devices are not counted (a warning says why, at each discovery)."""
        if self.caches or not await served(CLASSES.group, CLASSES.version, CLASSES.plural):
            return
        for ref in (CLASSES, TEMPLATES, CLAIMS):
            try:
                await self._client.list_page(ref, limit=1)
            except KubeApiError as error:
                log.warning(kv(component="controller", event="devices_not_counted", resource=ref.plural,
                               status=error.status, reason=error.message[:200],
                               fix="grant get/list/watch on resource.k8s.io deviceclasses, resourceclaims and "
                                   "resourceclaimtemplates (manifests/controller/rbac.yaml)"))
                return
        for name, ref in (("deviceclasses", CLASSES), ("resourceclaimtemplates", TEMPLATES),
                          ("resourceclaims", CLAIMS)):
            cache = WatchCache(name, ApiListWatch(self._client, ref))
            cache.add_listener(self._changed)
            self.caches.append(cache)
            start(cache.run(), f"cache-{name}")
        log.info(kv(component="controller", event="watching", kind="DeviceClass,ResourceClaim",
                    apiVersion=CLASSES.api_version))

    def _changed(self, cache: WatchCache, event: CacheEvent) -> None:
        self._dirty = True
        if cache.name == "resourceclaims" and event.type != RELIST:
            objs = [obj for obj in (event.obj, event.old) if obj is not None]
            if event.type == "MODIFIED" or all(_owned_by_pod(obj) for obj in objs):
                return  # a claim's spec never changes; a pod's own claim sizes no job
        self.epoch += 1
        self._on_change()

    def quota(self) -> DeviceQuota:
        """The classes that count and the asks of every template and claim, as the caches have them."""
        if not self.caches or not self._dirty:
            return self._quota
        self._dirty = False
        classes_cache, templates_cache, claims_cache = self.caches
        classes = quota_classes(((name_of(obj), annotations_of(obj)) for obj in classes_cache.items()),
                                QUOTA_RESOURCE_ANNOTATION)
        if classes != self._quota.classes:
            self._asks.clear()  # every ask depends on the classes
        seen: set[tuple[str, str, str]] = set()
        templates = self._read(templates_cache, classes, seen, template=True)
        claims = self._read(claims_cache, classes, seen, template=False)
        if len(self._asks) > len(seen):
            for gone in self._asks.keys() - seen:
                del self._asks[gone]
        self._quota = DeviceQuota(MappingProxyType(classes), MappingProxyType(templates), MappingProxyType(claims))
        return self._quota

    def _read(self, cache: WatchCache, classes: Mapping[str, str], seen: set[tuple[str, str, str]], *,
              template: bool) -> dict[tuple[str, str], ClaimAsk]:
        out: dict[tuple[str, str], ClaimAsk] = {}
        for obj in cache.items():
            namespace, name = str(meta(obj).get("namespace") or ""), name_of(obj)
            key = (cache.name, namespace, name)
            seen.add(key)
            version = resource_version_of(obj)
            known = self._asks.get(key)
            if known is None or known[0] != version:
                spec = obj.get("spec")
                if template:
                    spec = spec.get("spec") if isinstance(spec, Mapping) else None
                known = self._asks[key] = (version, claim_ask(spec, classes))
            out[(namespace, name)] = known[1]
        return out
