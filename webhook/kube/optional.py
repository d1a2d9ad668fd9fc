"""A :class:`~webhook.kube.cache.ListWatch` of a resource the API server may not serve.

A CRD that is not installed yet (ResourcePolicy, ElasticQuotaTree) or an API group the cluster does not serve
(``resource.k8s.io/v1`` on a cluster without Dynamic Resource Allocation) reads as an empty list: a service
must not stall because an optional API is missing. Such a list is retried every
:data:`ABSENT_RETRY_SECONDS`, so the resource is picked up once it is served. Only a 404 means absent: a
403 (missing RBAC) stays an error, so the cache never reports a list it was not allowed to read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field

from webhook.api.objects import Doc
from webhook.kube.cache import ListWatch
from webhook.kube.client import KubeApiError

__all__ = ["ABSENT_RETRY_SECONDS", "OptionalListWatch"]

log = logging.getLogger(__name__)

ABSENT_RETRY_SECONDS = 10.0


@dataclass(slots=True)
class OptionalListWatch:
    """A :class:`ListWatch` whose resource may not exist: a 404 on list reads as an empty list, and the
    watch that follows waits ``retry_seconds`` then asks for a re-list (as a 410 Gone would)."""

    inner: ListWatch
    retry_seconds: float = ABSENT_RETRY_SECONDS
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    component: str = "extender"
    """Named in the log line that reports the resource absent."""
    absent: bool = field(default=False)

    async def list_page(self, limit: int, continue_token: str | None) -> Doc:
        try:
            page = await self.inner.list_page(limit, continue_token)
        except KubeApiError as error:
            if not error.not_found:
                raise
            if not self.absent:
                ref = getattr(self.inner, "ref", None)
                log.info("component=%s event=resource_absent resource=%s retry_in=%.0fs", self.component,
                         ref if ref is not None else "?", self.retry_seconds)
            self.absent = True
            return {"items": [], "metadata": {"resourceVersion": "0"}}
        self.absent = False
        return page

    def watch(self, resource_version: str, timeout_seconds: int) -> AbstractAsyncContextManager[AsyncIterator[Doc]]:
        if self.absent:
            return self._wait_then_relist()
        return self.inner.watch(resource_version, timeout_seconds)

    @contextlib.asynccontextmanager
    async def _wait_then_relist(self) -> AsyncIterator[AsyncIterator[Doc]]:
        await self.sleep(self.retry_seconds)
        raise KubeApiError(410, "Gone", "resource not installed yet: list again")
        yield _nothing()  # pragma: no cover - unreachable, keeps this a generator


async def _nothing() -> AsyncIterator[Doc]:  # pragma: no cover
    return
    yield {}
