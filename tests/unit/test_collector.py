"""The cyclic collector is paused over a decision pass and resumes after it, also when the pass raises; between
passes the controller keeps its heap frozen and collects it all once an interval."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from webhook.kube.collector import HeapFreezer, collector_paused


@pytest.fixture(autouse=True)
def _collector_back_on() -> Iterator[None]:
    """Whatever a test does, the process's collector is on again after it."""
    yield
    gc.enable()


def test_the_collector_is_paused_inside_and_on_again_after() -> None:
    gc.enable()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_the_collector_is_on_again_after_the_block_raised() -> None:
    gc.enable()
    seen = []
    with pytest.raises(RuntimeError, match="pass failed"), collector_paused():
        seen.append(gc.isenabled())
        raise RuntimeError("pass failed")
    assert seen == [False]
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off_and_nested_blocks_keep_the_outer_pause() -> None:
    gc.enable()
    with collector_paused():
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner block does not resume what the outer one paused
    assert gc.isenabled()
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()


def test_the_simulators_pass_runs_with_the_collector_paused(monkeypatch: pytest.MonkeyPatch) -> None:
    from fractions import Fraction  # noqa: PLC0415

    from webhook.core.quota import parse_tree  # noqa: PLC0415
    from webhook.sim import engine  # noqa: PLC0415

    seen = []

    def decide(*args: object, **kwargs: object) -> None:
        seen.append(gc.isenabled())

    monkeypatch.setattr(engine, "decide", decide)
    tree = parse_tree({"root": {"name": "root", "min": {"cpu": 1}, "max": {"cpu": 1}, "children": [
        {"name": "a", "min": {"cpu": 1}, "max": {"cpu": 1}, "namespaces": ["a"]}]}})
    gc.enable()
    engine.CorePath().decide(tree, [], {}, oversell_rate=Fraction(1), strict_priority=False)
    assert seen == [False]
    assert gc.isenabled()


class _Cycle:
    """An object that refers to itself: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


def test_the_heap_freezer_hides_what_survived_a_pass_and_collects_it_all_once_due() -> None:
    clock = [0.0]
    heap = HeapFreezer(full_every=600.0, clock=lambda: clock[0])
    try:
        cycle = _Cycle()
        alive = weakref.ref(cycle)
        assert heap.after_pass(busy=False) is None  # the first pass starts the interval and freezes
        assert gc.get_freeze_count() > 0
        del cycle
        gc.collect()
        assert alive() is not None  # frozen: no collection walks it, so the garbage cycle waits
        clock[0] = 601.0
        assert heap.after_pass(busy=True) is None  # due, but a pass that released jobs does not stall for it
        gc.collect()
        assert alive() is not None
        took = heap.after_pass(busy=False)  # the first quiet pass once due: one full collection, then freeze
        assert took is not None and took >= 0
        assert alive() is None
        assert gc.get_freeze_count() > 0

        cycle = _Cycle()
        alive = weakref.ref(cycle)
        assert heap.after_pass(busy=True) is None
        del cycle
        clock[0] = 601.0 + 1200.0  # twice the interval: collected even though every pass is busy
        assert heap.after_pass(busy=True) is not None
        assert alive() is None
    finally:
        gc.unfreeze()
