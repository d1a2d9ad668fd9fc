"""The loop's wake-up flag: the debounce counts from the first change a pass serves (docs/queueing.md, "One
pass")."""

from __future__ import annotations

import asyncio

import pytest

from webhook.controller.changes import ChangeFlag


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_woken_without_a_change_the_loop_waits_the_whole_debounce() -> None:
    flag = ChangeFlag(Clock(100.0))
    assert flag.since is None
    assert flag.settle(0.1) == 0.1


def test_the_wait_counts_from_the_first_change_not_the_last() -> None:
    clock = Clock(100.0)
    flag = ChangeFlag(clock)
    flag.set()
    clock.now = 100.04
    flag.set()  # a later change of the same burst does not push the pass back
    assert flag.since == 100.0
    clock.now = 100.06
    assert flag.settle(0.1) == pytest.approx(0.04)


def test_a_change_older_than_the_debounce_waits_no_more() -> None:
    clock = Clock(100.0)
    flag = ChangeFlag(clock)
    flag.set()  # came while the last pass was writing
    clock.now = 100.5
    assert flag.settle(0.1) == 0.0


def test_clearing_for_a_pass_forgets_the_changes_it_serves() -> None:
    clock = Clock(100.0)
    flag = ChangeFlag(clock)
    flag.set()
    flag.clear()
    assert flag.since is None and not flag.is_set()
    clock.now = 101.0
    flag.set()
    assert flag.since == 101.0 and flag.is_set()
    assert flag.settle(0.1) == pytest.approx(0.1)


async def test_it_wakes_a_waiter_as_the_event_does() -> None:
    flag = ChangeFlag(Clock(0.0))
    waiter = asyncio.ensure_future(flag.wait())
    await asyncio.sleep(0)
    assert not waiter.done()
    flag.set()
    await asyncio.wait_for(waiter, 1.0)
