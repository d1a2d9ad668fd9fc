"""The one task-group helper of the shells: a failing task cancels its siblings and its error surfaces; a task
cancelled or finished on its own is simply gone; closing stops everything. Also through the controller: a
background task of a running controller that fails stops the controller with that error."""

from __future__ import annotations

import asyncio

import pytest

from tests.service.test_controller_loop import seed_api, settings
from webhook.controller.controller import Controller
from webhook.kube.tasks import TaskGroup


class Boom(RuntimeError):
    pass


async def _forever(cancelled: list[str], name: str) -> None:
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        cancelled.append(name)
        raise


async def _fail_after(delay: float) -> None:
    await asyncio.sleep(delay)
    raise Boom("the watch broke")


async def test_one_failure_cancels_the_others_and_surfaces_from_wait() -> None:
    cancelled: list[str] = []
    group = TaskGroup("test")
    group.start(_forever(cancelled, "a"), "a")
    group.start(_forever(cancelled, "b"), "b")
    group.start(_fail_after(0.01), "boom")
    with pytest.raises(Boom, match="the watch broke"):
        async with asyncio.timeout(5):
            await group.wait(asyncio.Event())
    await asyncio.sleep(0)
    assert sorted(cancelled) == ["a", "b"]
    assert len(group) == 0
    await group.close()  # raised once already: closing does not raise it again


async def test_leaving_the_block_raises_a_failure_nobody_waited_for() -> None:
    cancelled: list[str] = []
    with pytest.raises(Boom):
        async with TaskGroup("test") as group:
            group.start(_forever(cancelled, "a"), "a")
            group.start(_fail_after(0), "boom")
            await asyncio.sleep(0.05)
            assert cancelled == ["a"], "the sibling is cancelled at once, not when the block ends"


async def test_stop_ends_the_wait_and_close_cancels_everything_without_error() -> None:
    cancelled: list[str] = []
    stop = asyncio.Event()
    group = TaskGroup("test")
    for name in ("a", "b"):
        group.start(_forever(cancelled, name), name)
    finished = group.start(asyncio.sleep(0), "done")
    waiter = asyncio.ensure_future(group.wait(stop))
    await asyncio.sleep(0.01)
    assert finished.done() and not waiter.done() and group.failure is None
    stop.set()
    await asyncio.wait_for(waiter, 5)
    assert [task.get_name() for task in group] == ["a", "b"]
    await group.close()
    assert sorted(cancelled) == ["a", "b"] and len(group) == 0


async def test_a_task_cancelled_on_its_own_is_not_a_failure() -> None:
    cancelled: list[str] = []
    async with TaskGroup("test") as group:
        one = group.start(_forever(cancelled, "one"), "one")
        group.start(_forever(cancelled, "other"), "other")
        await asyncio.sleep(0)
        one.cancel()
        await asyncio.sleep(0.01)
        assert cancelled == ["one"] and group.failure is None
        assert [task.get_name() for task in group] == ["other"]
    assert sorted(cancelled) == ["one", "other"]


async def test_the_body_error_wins_over_a_task_failure() -> None:
    with pytest.raises(KeyError):
        async with TaskGroup("test") as group:
            group.start(_fail_after(0), "boom")
            await asyncio.sleep(0.01)
            raise KeyError("body")


async def test_a_failing_background_task_stops_the_controller_with_its_error() -> None:
    api = seed_api()
    controller = Controller(api, settings())

    async def broken_events() -> None:
        await asyncio.sleep(0.05)
        raise Boom("the event sender broke")

    controller.events.run = broken_events  # type: ignore[method-assign]
    with pytest.raises(Boom, match="event sender"):
        async with asyncio.timeout(10):
            await controller.run(asyncio.Event())
    assert len(controller._tasks) == 0, "every other task of the controller was stopped"
