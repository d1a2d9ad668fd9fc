"""What every service of ours does the same way: its event loop, its TLS context, and freezing the start-up heap.

The event loop is uvloop when it is installed (a dependency on Linux and macOS): it spends less CPU per request
than the standard loop in the socket and TLS transport, which is most of what a webhook or extender request costs
besides the decision. Without uvloop (``pip install --no-deps``, Windows) the standard asyncio loop serves the
same way; ``KQ_EVENT_LOOP=asyncio`` forces it. The choice is logged at start.
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import logging
import os
import ssl
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

LOOP_ENV = "KQ_EVENT_LOOP"
"""Environment variable: ``asyncio`` forces the standard event loop; unset or ``uvloop`` prefers uvloop."""


def tls_context(cert: Path, key: Path) -> ssl.SSLContext:
    """The serving TLS context (TLS 1.2 or later) with the certificate and key loaded. It trusts no CA for
    client certificates (not the system's): only what :func:`webhook.kube.frontproxy.trust_front_proxy` adds."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    return context


def freeze_heap() -> int:
    """Collect once, then move every object that exists (modules, classes, caches listed so far) out of the
    collector's view (``gc.freeze()``); returns how many were moved.

    Called once a service is set up. A full collection would otherwise walk all of them every time (with the
    controller and the Kubernetes client loaded some 80,000 objects, about 35 ms on a 2-core machine), a stall
    every request in flight would wait through. Frozen objects are still freed by reference counting; only
    cycles among them are never reclaimed, and start-up leaves none (it was just collected).
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


@dataclass(frozen=True)
class LoopChoice:
    """The event loop a service runs on: ``factory`` is ``None`` for the standard asyncio loop."""

    name: str
    """``uvloop 0.23.0`` or ``asyncio``."""
    reason: str
    """Why this one (``installed``, ``uvloop is not installed``, ``KQ_EVENT_LOOP=asyncio``)."""
    factory: Callable[[], asyncio.AbstractEventLoop] | None = None


def choose_loop() -> LoopChoice:
    """uvloop when it can be imported and is not turned off by :data:`LOOP_ENV`, else the standard loop."""
    wanted = os.environ.get(LOOP_ENV, "").strip().lower()
    if wanted == "asyncio":
        return LoopChoice("asyncio", f"{LOOP_ENV}=asyncio")
    try:
        uvloop = importlib.import_module("uvloop")
    except ImportError:
        return LoopChoice("asyncio", "uvloop is not installed")
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return LoopChoice(f"uvloop {getattr(uvloop, '__version__', '?')}", "installed", factory)


def run(main: Coroutine[object, None, T], choice: LoopChoice | None = None, *, component: str = "serve") -> T:
    """Run ``main`` to completion on the chosen event loop (as :func:`asyncio.run` does), logging the choice
    as ``component``'s."""
    choice = choice or choose_loop()
    log.info("component=%s event=event_loop loop=%r reason=%r", component, choice.name, choice.reason)
    with asyncio.Runner(loop_factory=choice.factory) as runner:
        return runner.run(main)
