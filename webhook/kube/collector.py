"""The cyclic garbage collector paused over one decision pass (:func:`collector_paused`).

A process-level concern, so it lives with the shells' shared plumbing, never in the pure core: the controller's
pass, the simulator's and the scale benchmark's all enter the same helper, so the benchmark times what the
controller does.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


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
