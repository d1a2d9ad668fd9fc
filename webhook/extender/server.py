"""Running the extender: client, watch caches, marker, waker, auditor, HTTP(S) listener - until told to stop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from webhook.api.names import EXTENDER_COMPONENT, PREFIX, TREE_NAMESPACE
from webhook.api.objects import Doc, Obj
from webhook.extender.app import MAX_BODY_BYTES, make_app
from webhook.extender.audit import Auditor
from webhook.extender.cache import DEFAULT_ASSUME_TTL
from webhook.extender.decision import MarkPatch
from webhook.extender.http import HttpServer, start_server
from webhook.extender.marker import Marker
from webhook.extender.nudge import Nudger
from webhook.extender.refusals import RefusalNotes
from webhook.extender.sources import PODS, build_caches, running
from webhook.extender.state import ExtenderState
from webhook.extender.wake import Waker
from webhook.kube.client import KubeApiError, KubeClient
from webhook.kube.events import EventRecorder
from webhook.kube.serving import freeze_heap, tls_context
from webhook.kube.tasks import TaskGroup

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ExtenderOptions:
    """Everything ``kq extender`` needs; built from its flags."""

    host: str = "0.0.0.0"
    port: int = 8888
    cert: Path | None = None
    """Serving certificate (PEM); with ``key``, the extender speaks HTTPS."""
    key: Path | None = None
    kubeconfig: str | None = None
    context: str | None = None
    assume_ttl: float = DEFAULT_ASSUME_TTL
    """Seconds a placement counts before the pod is seen bound."""
    tree_namespace: str = TREE_NAMESPACE
    marker_workers: int = 4
    sample: bool = True
    """Pass the scheduler at most its default sample of the chosen unit's nodes (``ExtenderState.filter``)."""

    @property
    def scheme(self) -> str:
        return "https" if self.cert is not None else "http"


@contextlib.asynccontextmanager
async def extender_running(
    client: KubeClient, options: ExtenderOptions, state: ExtenderState | None = None
) -> AsyncIterator[tuple[ExtenderState, HttpServer]]:
    """The whole extender on ``client``, serving on ``options.host:port`` for the block's lifetime (the
    listener opens once the watches run, so ``/readyz`` reports them listing)."""
    state = state if state is not None else ExtenderState(assume_ttl=options.assume_ttl, sample=options.sample)

    async def patch(mark: MarkPatch) -> Obj:
        return await client.merge_patch(PODS, mark.name, mark.body(), namespace=mark.namespace)

    async def touch(namespace: str, name: str, body: Doc) -> Obj:
        return await client.merge_patch(PODS, name, body, namespace=namespace)

    async def read(namespace: str, name: str) -> Obj | None:
        try:
            return await client.get(PODS, name, namespace=namespace)
        except KubeApiError as error:
            if error.not_found:
                return None
            raise

    marker = Marker(state, patch, workers=options.marker_workers)
    nudger = Nudger(touch, time.time)
    waker = Waker(state, touch, time.time)
    state.on_room = waker.notify
    caches = build_caches(client, state, options.tree_namespace)
    events = EventRecorder(client, socket.gethostname(), component=EXTENDER_COMPONENT)
    app = make_app(state, time.time, nudger, RefusalNotes(events.emit))
    listener: HttpServer | None = None
    background = TaskGroup("extender")
    background.start(events.run(), "extender-events")
    background.start(marker.run(), "extender-marker")
    background.start(waker.run(), "extender-waker")
    background.start(Auditor(state, read, time.time).run(), "extender-auditor")
    try:
        async with running(caches, state, on_ready=freeze_heap):
            context = tls_context(options.cert, options.key) if options.cert and options.key else None
            listener = await start_server(
                app.routes(), options.host, options.port, ssl_context=context, max_body=MAX_BODY_BYTES
            )
            log.info(
                "component=extender event=listening url=%s://%s:%d%s assume_ttl=%.0fs",
                options.scheme,
                options.host,
                options.port,
                PREFIX,
                options.assume_ttl,
            )
            yield state, listener
    finally:
        if listener is not None:
            await listener.close()
        try:
            await background.close()
        finally:
            await nudger.close()


async def serve(options: ExtenderOptions, stop: asyncio.Event | None = None) -> None:
    """Run until ``stop`` is set (or SIGINT/SIGTERM)."""
    stop = stop if stop is not None else asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signum, stop.set)
    client = await KubeClient.connect(options.kubeconfig, options.context, user_agent=EXTENDER_COMPONENT)
    try:
        async with extender_running(client, options):
            await stop.wait()
            log.info("component=extender event=stopping")
    finally:
        await client.close()
