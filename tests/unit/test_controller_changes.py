"""The loop's wake-up flag: the debounce counts from the first change a pass serves (docs/queueing.md, "One
pass")."""

from __future__ import annotations

import asyncio
import itertools

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



def test_a_stream_of_changes_cannot_start_passes_closer_than_a_debounce_apart() -> None:
    """A user who changes jobs without pause (creates in a loop) gets one pass per debounce at most, whether
    the passes are short or long: the loop clears the flag as a pass starts, so the next pass's wait counts
    from a change after that start."""
    clock = Clock(100.0)
    flag = ChangeFlag(clock)
    starts: list[float] = []
    busy_until = 0.0  # the loop runs a pass until then
    wake: float | None = None  # when the loop, waiting out the debounce, starts its next pass
    for step in range(2000):  # two seconds of a change every millisecond
        flag.set()
        if wake is None and clock.now >= busy_until:
            wake = clock.now + flag.settle(0.1)
        if wake is not None and clock.now >= wake - 1e-9:
            starts.append(clock.now)
            flag.clear()
            busy_until, wake = clock.now + (0.3 if len(starts) % 2 else 0.0), None  # long and short passes
        clock.now = 100.0 + (step + 1) * 0.001
    assert len(starts) >= 8
    gaps = [later - earlier for earlier, later in itertools.pairwise(starts)]
    assert min(gaps) >= 0.1 - 1e-6
    assert any(abs(gap - 0.3) < 0.002 for gap in gaps), "after a long pass the next one starts at once"
