"""kube-scheduler's default node sampling, as the extender meets it and gives it back.

The scheduler filters every node when the extender is configured (``percentageOfNodesToScore: 100``, so the
extender sees each ResourcePolicy unit); the extender then cuts the passing nodes to about as many as the
scheduler would have scored by default (:func:`scheduler_sample_size`), a window that moves on with every
call (:func:`rotating_window`). :func:`looks_sampled` tells a request the scheduler itself cut short.
"""

from __future__ import annotations

from typing import TypeVar


def scheduler_sample_size(nodes: int) -> int:
    """How many feasible nodes kube-scheduler looks for among ``nodes`` before it stops filtering, with
    ``percentageOfNodesToScore`` unset: all below 100, else ``nodes × max(5, 50 - nodes/125) %`` but at least
    100 (230 of 500, 420 of 1,000, 500 of 5,000) - the nodes it then scores."""
    if nodes < 100:
        return nodes
    percent = max(5, 50 - nodes // 125)
    return max(100, nodes * percent // 100)


def looks_sampled(asked: int, nodes: int) -> bool:
    """Whether a filter request about ``asked`` of the cluster's ``nodes`` may be cut short by the scheduler's
    default sampling (``percentageOfNodesToScore`` not 100): fewer than all, and exactly the default sample
    size. With the full scan the scheduler asks about every node that passed its own filters, which is this
    very number only by chance - but then the same nodes every time (the extender compares with the last
    such request)."""
    return asked < nodes and asked == scheduler_sample_size(nodes)


Names = TypeVar("Names", list[str], tuple[str, ...])


def rotating_window(names: Names, start: int, size: int) -> tuple[Names, int]:
    """``size`` of ``names`` from ``start`` (taken modulo their number), wrapping around to the front; and
    where the next window starts. ``names`` must be longer than ``size``."""
    start %= len(names)
    end = start + size
    return names[start:end] + names[: max(0, end - len(names))], end
