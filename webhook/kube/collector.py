"""The cyclic garbage collector: paused over one decision pass (:func:`collector_paused`), and kept off the
controller's cached objects between passes (:class:`HeapFreezer`); the allocator's free memory given back after
the large transient work (:func:`release_free_memory`).

A process-level concern, so it lives with the shells' shared plumbing, never in the pure core: the controller's
pass, the simulator's and the scale benchmark's all enter the same helper, so the benchmark times what the
controller does.
"""

from __future__ import annotations

import ctypes
import gc
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic collector for the block and resume it after, also when the block raises.

    A pass over a million waiting jobs makes no garbage cycle, yet the young collections its allocations
    trigger (some 2,000 at that size, none finding anything) walk its growing lists again and again: 0.7 s
    of a 4 s pass. Reference counting still frees everything meanwhile; the one young collection when the
    collector resumes (about 0.15 s there) sees what is left. A collector that was off before stays off (a
    caller that paused it, or a nested pass)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@dataclass
class HeapFreezer:
    """After each pass, move every object that survived it out of the collector's view (``gc.freeze()``); once
    every ``full_every`` seconds, bring them all back and collect everything once.

    The controller caches every job and pod of the cluster. With some 10,000 of each, a full collection walked
    all of them: 0.2-0.55 s with the interpreter lock held, every few seconds during a burst of admissions,
    while every release in flight and every webhook call waited (issue 23; BENCHMARKS.md). Freezing is cheap
    (it moves lists, it does not walk them), so the full collections that still come see only what changed
    since the last pass. Frozen objects are still freed by reference counting; only a garbage cycle frozen
    meanwhile waits for the next full collection. That one comes after the first quiet pass once ``full_every``
    has passed, and after ``2 * full_every`` in any case, so such garbage never lives longer than that.
    """

    full_every: float = 600.0
    clock: Callable[[], float] = time.monotonic
    _last_full: float | None = None

    def after_pass(self, *, busy: bool) -> float | None:
        """Freeze what survived the pass; ``busy`` says the pass wrote releases or evictions (a full collection
        then waits for a quiet pass, up to ``2 * full_every``). Returns how long a full collection took, when
        one ran (``None`` otherwise)."""
        now = self.clock()
        if self._last_full is None:
            self._last_full = now
        waited = now - self._last_full
        if waited >= 2 * self.full_every or (waited >= self.full_every and not busy):
            started = time.perf_counter()
            gc.unfreeze()
            gc.collect()
            gc.freeze()
            self._last_full = now
            return time.perf_counter() - started
        gc.freeze()
        return None


def release_free_memory() -> None:
    """Give the allocator's free memory back to the system (glibc's ``malloc_trim``; nothing elsewhere). A read
    of every job, or a refresh of the start estimates, frees as much as it keeps, tens of MiB at 50,000 jobs,
    which would otherwise stay resident until the next one reuses it."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        function: Callable[[int], int] = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None
    return function


_MALLOC_TRIM = _malloc_trim()
