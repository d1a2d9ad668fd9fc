"""A start estimate packed in about a hundred bytes, so the controller can keep every waiting job's between two
refreshes for ``kq why`` (docs/queueing.md, "Why a job waits, from the controller"): the estimate object with its
run time and basis takes some 750 bytes a job, the packed one under 130.

What is packed is what ``kq why`` says of it: the times, the job's own run time (its figures, where they come
from and how many completed jobs they rest on, not the samples themselves), the basis, and why there is no
estimate; a run-time problem and the jobs of unknown run time it waits for, when there are, follow as JSON.
"""

from __future__ import annotations

import json
import math
import struct

from webhook.core.eta import Estimate, Why
from webhook.core.eta_replay import Basis
from webhook.core.runtimes import Runtime, Source
from webhook.core.workload import WorkloadKey

__all__ = ["pack_estimate", "unpack_estimate"]

_HEAD = struct.Struct("<8d6IBB")
"""start, latest, finish, finish_latest, p50, p90, deadline, spread; finished, declared, history, deadline
count, samples (the basis), the run time's samples; its source, why (indexes)."""
_SOURCES = tuple(Source)
_WHYS = tuple(Why)


def _float(value: float | None) -> float:
    return math.nan if value is None else value


def _optional(value: float) -> float | None:
    return None if math.isnan(value) else value


def pack_estimate(found: Estimate) -> bytes:
    """``found`` as bytes (:func:`unpack_estimate` reads them back)."""
    runtime, basis = found.runtime, found.basis
    head = _HEAD.pack(
        _float(found.start), _float(found.latest), _float(found.finish), _float(found.finish_latest),
        _float(runtime.p50), _float(runtime.p90), _float(runtime.deadline), basis.spread,
        basis.finished, basis.declared, basis.history, basis.deadline, basis.samples, len(runtime.samples),
        _SOURCES.index(runtime.source), _WHYS.index(found.why),
    )
    if not (runtime.problem or found.unknown_jobs):
        return head
    tail = {"problem": runtime.problem, "unknown": [[key.kind, key.namespace, key.name] for key in found.unknown_jobs]}
    return head + json.dumps(tail, separators=(",", ":")).encode()


def unpack_estimate(blob: bytes) -> tuple[Estimate, int]:
    """The estimate :func:`pack_estimate` packed, and how many samples its own run time rests on (the returned
    run time carries its figures, not its samples)."""
    (start, latest, finish, finish_latest, p50, p90, deadline, spread, finished, declared, history, deadline_count,
     samples, own_samples, source, why) = _HEAD.unpack_from(blob)
    problem, unknown = "", tuple[WorkloadKey, ...]()
    if len(blob) > _HEAD.size:
        tail = json.loads(blob[_HEAD.size:])
        problem = str(tail["problem"])
        unknown = tuple(WorkloadKey(*key) for key in tail["unknown"])
    runtime = Runtime(_optional(p50), _optional(p90), _SOURCES[source], deadline=_optional(deadline),
                      problem=problem)
    basis = Basis(finished, declared, history, deadline_count, samples, spread)
    estimate = Estimate(_optional(start), _optional(latest), _optional(finish), _optional(finish_latest), runtime,
                        basis, _WHYS[why], unknown)
    return estimate, own_samples
