"""The first admission among some namespaces, as a watch on Jobs sees it (the queue-scale bench's clock).

An admission is a Job's ``spec.suspend`` seen false, for us and for Kueue alike. The watch starts before the
step that should set one off, from the resourceVersion of that moment, so an admission that comes before the
caller asks is not missed; Jobs named in :attr:`Admissions.gone` (the ones the step deletes) do not count.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

from webhook.api.objects import mapping, meta, resource_version_of, spec_of
from webhook.kube.client import KubeApiError, KubeClient, ResourceRef

ALL_JOBS = ResourceRef("batch", "v1", "jobs")
WATCH_S = 60
"""Each watch request's server-side timeout; the watch resumes from the last version it saw."""


@dataclass
class Admissions:
    """A watch on every Job for the first one of :attr:`namespaces` released, other than :attr:`gone`."""

    client: KubeClient
    namespaces: set[str]
    gone: set[tuple[str, str]] = field(default_factory=set)
    """(namespace, name) of Jobs that do not count (the running ones the step deletes)."""
    _seen: asyncio.Future[float] | None = None
    _task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Take the current resourceVersion and watch from it."""
        listing = await self.client.list_page(ALL_JOBS, limit=1)
        self._seen = asyncio.get_running_loop().create_future()
        self._task = asyncio.ensure_future(self._watch(resource_version_of(listing)))

    async def _watch(self, version: str) -> None:
        assert self._seen is not None
        while not self._seen.done():
            async with self.client.watch(ALL_JOBS, resource_version=version, timeout_seconds=WATCH_S) as events:
                async for event in events:
                    item = mapping(event.get("object"))
                    metadata = meta(item)
                    version = str(metadata.get("resourceVersion") or version)
                    key = (str(metadata.get("namespace")), str(metadata.get("name")))
                    if (event.get("type") in ("ADDED", "MODIFIED") and key[0] in self.namespaces
                            and key not in self.gone and spec_of(item).get("suspend") is False):
                        self._seen.set_result(time.monotonic())
                        return

    async def first(self, timeout: float) -> float:
        """The monotonic time of the first admission (``nan`` past ``timeout`` seconds); the watch stops."""
        assert self._seen is not None and self._task is not None
        try:
            return await asyncio.wait_for(asyncio.shield(self._seen), timeout)
        except TimeoutError:
            return float("nan")
        finally:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, KubeApiError):
                await self._task
