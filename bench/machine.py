"""The machine a benchmark ran on, and small helpers shared by the benchmarks (a report, not a test)."""

from __future__ import annotations

import asyncio
import datetime
import os
import platform
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def machine() -> str:
    """``2 CPUs (nproc), Intel(R) Xeon(R) Processor, Python 3.11.9, Linux 6.1``."""
    return (f"{os.cpu_count()} CPUs (nproc), {cpu_model()}, Python {sys.version.split()[0]}, "
            f"{platform.system()} {platform.release()}")


def today() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


STARTED_LOAD = os.getloadavg()
"""The load average when this bench's process started (each bench runs in a process of its own)."""


def load() -> str:
    """The load average when the bench started and when its report is written (the report comes last)."""
    one, five, _ = STARTED_LOAD
    end, _, _ = os.getloadavg()
    return f"load average {one:.2f} (1 min), {five:.2f} (5 min) at the start, {end:.2f} (1 min) at the end"


def machine_times() -> tuple[int, int]:
    """``(idle, total)`` jiffies of all cores so far (``/proc/stat``; idle counts I/O wait)."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return fields[3] + fields[4], sum(fields[:8])


def busy_seconds() -> float:
    """CPU seconds the machine's cores have spent busy so far (``/proc/stat``)."""
    idle, total = machine_times()
    return (total - idle) / os.sysconf("SC_CLK_TCK")


async def settle(cpu: Callable[[], float], cores: float, *, window: float, timeout: float) -> bool:
    """Wait until ``cpu`` (CPU seconds used so far, by whatever it counts) grows by less than ``cores`` per
    second over ``window`` seconds, at most ``timeout`` seconds; whether it did."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        before, started = cpu(), time.monotonic()
        await asyncio.sleep(window)
        if (cpu() - before) / (time.monotonic() - started) < cores:
            return True
    return False


def peak_rss_mib() -> float:
    """This process's peak resident set size so far, in MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_rss_mib() -> float:
    """This process's resident set size now, in MiB."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return peak_rss_mib()


def header(title: str, command: str) -> list[str]:
    """The lines every BENCHMARKS.md section starts with: title, command, machine, date."""
    return [
        f"## {title}",
        "",
        f"- command: `{command}`",
        f"- machine: {machine()}; {load()}",
        f"- date: {today()}",
        "",
    ]
