"""A bench's header gives the load when the bench started, not only when its report was written (the report
comes after minutes of its own work); the benches wait for a quiet machine (or quiet processes) before each
measured run."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from bench import machine


def test_the_header_gives_the_load_at_the_start_and_at_the_end(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(machine, "STARTED_LOAD", (0.5, 0.75, 1.0))
    monkeypatch.setattr(os, "getloadavg", lambda: (3.25, 2.0, 1.0))
    lines = machine.header("Title", "cmd")
    assert "load average 0.50 (1 min), 0.75 (5 min) at the start, 3.25 (1 min) at the end" in lines[3]


def test_settle_returns_once_the_counted_cpu_stops_growing() -> None:
    assert asyncio.run(machine.settle(lambda: 5.0, 0.3, window=0.01, timeout=1.0))


def test_settle_gives_up_after_the_timeout_while_the_cpu_keeps_growing() -> None:
    started = time.monotonic()

    def busy() -> float:  # two cores' worth of CPU per second of wall time
        return 2 * (time.monotonic() - started)

    assert not asyncio.run(machine.settle(busy, 0.3, window=0.01, timeout=0.05))
    assert time.monotonic() - started >= 0.05


def test_the_machine_counts_busy_seconds_that_never_go_back() -> None:
    first = machine.busy_seconds()
    assert first >= 0 and machine.busy_seconds() >= first
