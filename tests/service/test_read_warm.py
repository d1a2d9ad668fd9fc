"""``kq serve`` keeps the job summaries built between reads (docs/queueing.md, "Reading every job"): a warm-up
when a job or a pod changed, so a read finds them built; it gives way to the controller's pass and to a read."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from types import SimpleNamespace
from typing import Any, cast

import pytest
from aiohttp import web
from prometheus_client import REGISTRY

from tests.clirun import NOW, seed_api
from webhook.cli import readapi
from webhook.controller.controller import Controller
from webhook.controller.plugin import RunningController
from webhook.readmodel import summaries
from webhook.readmodel.fetch import load_snapshot
from webhook.readmodel.summaries import SummaryInputs
from webhook.readmodel.view import ViewContext

BOUND_S = 10.0
"""How long a test waits for what it expects before it fails."""


def _inputs() -> SummaryInputs:
    snapshot = load_snapshot(seed_api(), None, now=NOW)
    context = ViewContext(snapshot.tree, snapshot.priority_classes, snapshot.devices, NOW)
    return SummaryInputs([(source, obj, None) for source, obj in snapshot.jobs], {}, context, None, {})


def _controller() -> Controller:
    ready = asyncio.Event()
    ready.set()
    cache = SimpleNamespace(job_caches={}, pods=SimpleNamespace(changes=0), epoch=lambda: (1, 1, 0))
    return cast(Controller, SimpleNamespace(ready=ready, cache=cache, eta=None))


async def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + BOUND_S
    while not condition():
        assert time.monotonic() < deadline, f"not within {BOUND_S} s: {what}"
        await asyncio.sleep(0.005)


class Collected:
    """``readapi._collect`` made to hand over fixed inputs, counting how often it is asked."""

    def __init__(self, inputs: SummaryInputs) -> None:
        self.inputs = inputs
        self.count = 0

    async def __call__(self, controller: Controller) -> Callable[[], SummaryInputs]:
        self.count += 1
        return lambda: self.inputs


@pytest.fixture
def collected(monkeypatch: pytest.MonkeyPatch) -> Collected:
    collect = Collected(_inputs())
    monkeypatch.setattr(readapi, "_collect", collect)
    return collect


@pytest.fixture
async def warming(collected: Collected, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[readapi.ReadApi]:
    monkeypatch.setattr(readapi, "WARM_SECONDS", 0.01)
    monkeypatch.setattr(readapi, "WARM_CHANGES", 3)
    running = RunningController(_controller(), asyncio.get_running_loop())
    api = readapi.ReadApi(running)
    entry = api.keep_warm(web.Application())
    await entry.__anext__()
    try:
        yield api
    finally:
        with pytest.raises(StopAsyncIteration):
            await entry.__anext__()


async def test_the_first_read_finds_every_summary_built(warming: readapi.ReadApi, collected: Collected,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    jobs = len(collected.inputs.jobs)
    await _until(lambda: len(warming.book) == jobs, "a warm-up built every summary")
    looks: list[readapi.Marker] = []
    changes = readapi._changes

    def counted(controller: Controller) -> readapi.Marker:
        looks.append(changes(controller))
        return looks[-1]

    monkeypatch.setattr(readapi, "_changes", counted)
    await _until(lambda: len(looks) >= 3, "three more looks")
    assert collected.count == 1  # nothing moved: no warm-up walked the jobs again

    controller = warming._running.controller
    assert controller is not None
    controller.cache.pods.changes += readapi.WARM_CHANGES - 1  # not enough to walk every job for
    seen = len(looks)
    await _until(lambda: len(looks) >= seen + 3, "three more looks")
    assert collected.count == 1
    controller.cache.pods.changes += 1  # enough, and calm since the last look: the next look warms up again
    await _until(lambda: collected.count == 2, "a warm-up after enough changes")
    spent = REGISTRY.get_sample_value("kube_queue_read_api_warm_cpu_seconds_total") or 0.0
    monkeypatch.setattr(controller.cache, "epoch", lambda: (2, 1, 0))  # a new tree: every summary again
    await _until(lambda: collected.count == 3, "a warm-up after a new tree")
    await _until(lambda: (REGISTRY.get_sample_value("kube_queue_read_api_warm_cpu_seconds_total") or 0.0) > spent,
                 "the warm-up's CPU counted")

    inputs, _ = await warming._inputs()
    assert inputs is not None
    _, count, _ = await asyncio.get_running_loop().run_in_executor(None, warming._render, inputs, None, None)
    assert count == jobs and warming.book.rebuilt == 0


def test_a_read_that_comes_stops_the_warm_up(collected: Collected, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(summaries, "WARM_BUILDS", 2)
    api = readapi.ReadApi(RunningController(_controller(), None))
    api._lists = 1  # a list is on its way to the worker
    assert api._warm(collected.inputs) == 2 and len(api.book) == 2


@pytest.fixture
def controller_loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield loop
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(BOUND_S)
        loop.close()


async def test_a_warm_up_waits_while_the_controller_decides(collected: Collected,
                                                           controller_loop: asyncio.AbstractEventLoop,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(summaries, "WARM_BUILDS", 1)
    order: list[str] = []
    build = summaries._build

    def recorded(*args: Any, **kwargs: Any) -> Any:
        order.append("built")
        return build(*args, **kwargs)

    monkeypatch.setattr(summaries, "_build", recorded)
    release = threading.Event()

    def deciding() -> None:  # a pass's long stretch on the controller's loop
        order.append("pass started")
        release.wait(BOUND_S)
        order.append("pass ended")

    controller_loop.call_soon_threadsafe(deciding)
    await _until(lambda: order == ["pass started"], "the pass started")
    api = readapi.ReadApi(RunningController(_controller(), controller_loop))
    warm = asyncio.ensure_future(asyncio.to_thread(api._warm, collected.inputs))
    await _until(lambda: "built" in order, "the first build")
    await asyncio.sleep(0.3)  # time for a warm-up that does not wait to build the rest
    release.set()
    built = await warm
    assert built == len(collected.inputs.jobs)
    assert order[:4] == ["pass started", "built", "pass ended", "built"]


EPOCH = (1, 1, 0)


@pytest.mark.parametrize(("seen", "previous", "marker", "waited", "due"), [
    (None, None, (0, EPOCH), 0.0, True),  # the first look after the start
    ((10, EPOCH), (10, EPOCH), (10, EPOCH), 0.0, False),  # nothing moved
    ((10, EPOCH), (10, EPOCH), (10, (2, 1, 0)), 0.0, True),  # a new tree: every summary again
    ((10, EPOCH), (10, EPOCH), (10 + 499, EPOCH), 600.0, False),  # too few changes for a walk over every job
    ((10, EPOCH), (10 + 400, EPOCH), (10 + 500, EPOCH), 0.0, True),  # enough, and calm since the last look
    ((10, EPOCH), (10, EPOCH), (10 + 500, EPOCH), 0.0, False),  # enough, in a burst: wait for it to calm down
    ((10, EPOCH), (10, EPOCH), (10 + 500, EPOCH), 300.0, True),  # ... at most WARM_STALE_SECONDS
])
def test_a_warm_up_is_due_after_enough_changes_once_they_calm_down(
        seen: readapi.Marker | None, previous: readapi.Marker | None, marker: readapi.Marker, waited: float,
        due: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(readapi, "WARM_CHANGES", 500)
    monkeypatch.setattr(readapi, "WARM_STALE_SECONDS", 300.0)
    assert readapi.warm_due(seen, previous, marker, waited) is due
