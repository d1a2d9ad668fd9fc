"""A job's status as ``kq list``, ``kq why``, the console and ``-o json`` show it: one vocabulary, defined once.

The values are the words users see and filter on (``kq list --status QUEUING``); as a :class:`~enum.StrEnum`
each member equals, prints and serialises as its word.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class JobStatus(StrEnum):
    """Where a job stands (docs/queueing.md, docs/start-timeout.md)."""

    QUEUING = "QUEUING"
    """Held by the queue: suspended, not admitted."""
    BACKOFF = "BACKOFF"
    """Released, did not start within the start timeout, held again until its retry time (or gave up)."""
    PENDING = "PENDING"
    """Admitted (released), not every pod running yet."""
    RUNNING = "RUNNING"
    """Every expected pod runs."""
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    SUSPENDED = "SUSPENDED"
    """Suspended in a namespace kube-queue does not manage: nothing will release it."""


WAITING: Final = frozenset({JobStatus.QUEUING, JobStatus.BACKOFF})
"""The statuses of a job that waits in its queue."""
FINAL: Final = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED})
"""The statuses of a finished job."""
STARTED: Final = frozenset({JobStatus.PENDING, JobStatus.RUNNING})
"""The statuses of a released, unfinished job."""
