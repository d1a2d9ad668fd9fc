"""The cyclic collector is paused over a decision pass and resumes after it, also when the pass raises."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from webhook.kube.collector import collector_paused


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
