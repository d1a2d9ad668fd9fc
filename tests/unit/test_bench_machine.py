"""A bench's header gives the load when the bench started, not only when its report was written (the report
comes after minutes of its own work)."""

from __future__ import annotations

import os

import pytest

from bench import machine


def test_the_header_gives_the_load_at_the_start_and_at_the_end(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(machine, "STARTED_LOAD", (0.5, 0.75, 1.0))
    monkeypatch.setattr(os, "getloadavg", lambda: (3.25, 2.0, 1.0))
    lines = machine.header("Title", "cmd")
    assert "load average 0.50 (1 min), 0.75 (5 min) at the start, 3.25 (1 min) at the end" in lines[3]
