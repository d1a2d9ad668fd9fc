"""How long a job runs once its pods run: what its submitter declares, else the run times of completed jobs like
it, else unknown; as a median (p50) and a pessimistic (p90) figure, with what they rest on (docs/eta.md).

* **Declared**: the job's annotation :data:`~webhook.api.names.EXPECTED_RUNTIME_ANNOTATION` (read by
  :mod:`webhook.workloads.runtime`, parsed by :func:`parse_runtime`); p50 = p90 = the declared time.
* **History**: the run times of completed jobs of the same kind and *name stem* (:func:`name_stem`): first in
  the job's namespace, else in its queue (every namespace of its leaf quota). p50 and p90 are nearest-rank
  quantiles of those samples.
* **Deadline**: ``activeDeadlineSeconds`` is an upper bound: no figure above it (the job is stopped then). A job
  with a deadline and nothing else has no p50, and the deadline as its p90.
* Else **unknown**.

:class:`RuntimeHistory` is the bounded store of samples: at most :data:`MAX_SAMPLES` per (namespace, kind, stem),
the newest kept, at most :data:`MAX_NAMESPACE_GROUPS` groups a namespace and :data:`MAX_GROUPS` in all, the least
recently finished dropped first. Pure: the controller (``webhook/controller/eta.py``) fills it from the jobs it
sees finish and persists it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

from webhook.api.objects import parse_time, rfc3339_seconds
from webhook.core import duration

__all__ = [
    "MAX_GROUPS",
    "MAX_NAMESPACE_GROUPS",
    "MAX_SAMPLES",
    "OVERDUE_SHARE",
    "P50",
    "P90",
    "STATUS_GROUPS",
    "UNKNOWN",
    "DeclaredRuntimeError",
    "HistoryKey",
    "Runtime",
    "RuntimeHistory",
    "Source",
    "history_items",
    "name_stem",
    "nearest_rank",
    "parse_runtime",
    "restore_items",
    "running_since",
    "runtime_for",
]

P50 = 0.5
P90 = 0.9
MAX_SAMPLES = 20
"""Run times kept per (namespace, kind, stem): the newest."""
MAX_GROUPS = 2048
"""(namespace, kind, stem) groups kept in all; the one whose last job finished longest ago goes first."""
MAX_NAMESPACE_GROUPS = 64
"""Groups kept per namespace: a namespace with many stems forgets its own oldest, never another's."""
OVERDUE_SHARE = 0.25
"""A running job already past every run time its estimate knows is taken to end after another quarter of its
p50 (of its p90 for the pessimistic figure): it is late, not endless."""

_TRAILING_COUNTER = re.compile(r"[0-9]+$")
_SEPARATORS = "-_."


def name_stem(name: str, generate_name: str | None = None) -> str:
    """What jobs "like this one" share: ``metadata.generateName`` when the job has one, else its name without
    a trailing counter; separators at the end dropped (``train-``, ``train-7`` and ``train-0012`` are all
    ``train``). A name that is only digits is its own stem."""
    base = generate_name if generate_name else _TRAILING_COUNTER.sub("", name)
    stem = base.rstrip(_SEPARATORS)
    return stem or name


class DeclaredRuntimeError(ValueError):
    """A declared run time that cannot be read: says what and what to write instead."""


def parse_runtime(text: str) -> float:
    """A declared run time in seconds: ``45m``, ``1h30m``, ``2d``, ``90s`` or a number of seconds; positive."""
    try:
        seconds = duration.parse_duration(text.strip(), duration.SCENARIO)
    except duration.DurationError:
        raise DeclaredRuntimeError(
            f"{text!r} is not a duration: write e.g. 45m, 1h30m, 2d or a number of seconds") from None
    if seconds <= 0:
        raise DeclaredRuntimeError(f"{text!r}: a run time must be more than zero")
    return float(seconds)


def nearest_rank(ordered: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``ordered`` (sorted, not empty), nearest rank."""
    index = max(0, math.ceil(q * len(ordered)) - 1)
    return ordered[min(index, len(ordered) - 1)]


class Source(Enum):
    """What a run time rests on."""

    DECLARED = "declared"
    NAMESPACE = "namespace"
    """Completed jobs of the same kind and stem in the job's namespace."""
    QUEUE = "queue"
    """Completed jobs of the same kind and stem in the job's queue (its leaf quota's namespaces)."""
    DEADLINE = "deadline"
    """Only its ``activeDeadlineSeconds``: an upper bound, no median."""
    UNKNOWN = "unknown"


HistoryKey = tuple[str, str, str]
"""``(namespace, kind, stem)``."""


@dataclass(frozen=True, slots=True)
class Runtime:
    """One job's expected run time (seconds): ``p50`` and ``p90`` (``None``: unknown)."""

    p50: float | None
    p90: float | None
    source: Source
    samples: tuple[float, ...] = ()
    """The history samples, sorted (for the time a running job has left)."""
    groups: tuple[tuple[HistoryKey, int], ...] = ()
    """The history groups the samples come from, with how many samples each gave."""
    deadline: float | None = None
    """``activeDeadlineSeconds``: nothing runs longer."""
    problem: str = ""
    """Why a declared run time was not used (it could not be read)."""
    figures: tuple[float | None, float | None] = field(init=False, repr=False, compare=False)
    """:meth:`at` the median and at the p90, made once (a start estimate's replay asks for them again and again)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "figures", (self._figure(P50), self._figure(P90)))

    def at(self, q: float) -> float | None:
        """The figure for quantile ``q`` (0 < q <= 1): of the history samples when there are some (never past the
        deadline), else ``p50`` up to the median and ``p90`` above."""
        if q == P50:
            return self.figures[0]
        if q == P90:
            return self.figures[1]
        return self._figure(q)

    def _figure(self, q: float) -> float | None:
        if self.samples and self.p50 is not None:
            figure = nearest_rank(self.samples, q)
            return min(figure, self.deadline) if self.deadline is not None else figure
        return self.p50 if q <= P50 else self.p90

    def remaining(self, elapsed: float, q: float) -> float | None:
        """How much longer a job that has run ``elapsed`` seconds runs, at quantile ``q``: for history, the
        quantile of the samples longer than ``elapsed`` minus it; past every sample (or past a declared time),
        another :data:`OVERDUE_SHARE` of the figure; never past the deadline."""
        figure = self.at(q)
        if figure is None:
            return None
        left: float
        longer = [sample for sample in self.samples if sample > elapsed]
        if longer:
            left = nearest_rank(longer, q) - elapsed
        elif figure > elapsed:
            left = figure - elapsed
        else:
            left = OVERDUE_SHARE * figure
        if self.deadline is not None:
            left = min(left, max(0.0, self.deadline - elapsed))
        return max(0.0, left)


UNKNOWN = Runtime(None, None, Source.UNKNOWN)


def runtime_for(
    declared: float | None,
    deadline: float | None,
    history: Runtime | None,
    problem: str = "",
) -> Runtime:
    """Combine what is known of a job's run time, in the module's order; ``deadline`` caps every figure."""
    if declared is not None:
        figure = min(declared, deadline) if deadline is not None else declared
        return Runtime(figure, figure, Source.DECLARED, deadline=deadline)
    if history is not None and history.p50 is not None and history.p90 is not None:
        if deadline is None:
            return Runtime(history.p50, history.p90, history.source, history.samples, history.groups, problem=problem)
        return Runtime(min(history.p50, deadline), min(history.p90, deadline), history.source, history.samples,
                       history.groups, deadline, problem)
    if deadline is not None:
        return Runtime(None, deadline, Source.DEADLINE, deadline=deadline, problem=problem)
    return Runtime(None, None, Source.UNKNOWN, problem=problem)


@dataclass(slots=True)
class RuntimeHistory:
    """Run times of completed jobs by (namespace, kind, stem), bounded (see the module)."""

    max_samples: int = MAX_SAMPLES
    max_groups: int = MAX_GROUPS
    max_namespace_groups: int = MAX_NAMESPACE_GROUPS
    groups: dict[HistoryKey, list[float]] = field(default_factory=dict)
    """Run times in seconds, oldest first."""
    last: dict[HistoryKey, float] = field(default_factory=dict)
    """When the newest sample's job finished (seconds since the epoch)."""

    def add(self, key: HistoryKey, seconds: float, finished_at: float) -> None:
        """Count one completed job's run time."""
        if seconds < 0 or not math.isfinite(seconds):
            return
        samples = self.groups.get(key)
        if samples is None:
            own = [group for group in self.groups if group[0] == key[0]]
            if len(own) >= self.max_namespace_groups:  # a namespace pushes out its own groups, not others'
                self._drop(own)
            elif len(self.groups) >= self.max_groups:
                self._drop(self.groups)
            samples = self.groups[key] = []
        samples.append(seconds)
        del samples[:-self.max_samples]
        self.last[key] = max(finished_at, self.last.get(key, finished_at))

    def _drop(self, among: Iterable[HistoryKey]) -> None:
        """Forget the group of ``among`` whose last job finished longest ago."""
        oldest = min(among, key=lambda group: (self.last.get(group, 0.0), group))
        del self.groups[oldest]
        self.last.pop(oldest, None)

    def restore(self, key: HistoryKey, samples: Iterable[float], last: float) -> None:
        """Put back a group as it was persisted (a restart): its samples, oldest first, and its last finish."""
        kept = [float(sample) for sample in samples if sample >= 0 and math.isfinite(sample)][-self.max_samples:]
        if not kept:
            return
        if key not in self.groups and len(self.groups) >= self.max_groups:
            return
        self.groups[key] = kept
        self.last[key] = last

    def namespace_groups(self, namespace: str) -> dict[HistoryKey, list[float]]:
        """The groups of one namespace (what its Queue's status persists)."""
        return {key: samples for key, samples in self.groups.items() if key[0] == namespace}

    def runtime(self, namespace: str, kind: str, stem: str, queue_namespaces: Iterable[str]) -> Runtime | None:
        """The history figure for a job: its namespace's samples of the same kind and stem, else those of its
        queue's namespaces together; ``None`` when neither has any."""
        own = (namespace, kind, stem)
        samples = self.groups.get(own)
        if samples:
            return _from_samples(samples, Source.NAMESPACE, ((own, len(samples)),))
        keys = [(other, kind, stem) for other in sorted(set(queue_namespaces)) if (other, kind, stem) in self.groups]
        pooled = [sample for key in keys for sample in self.groups[key]]
        if pooled:
            return _from_samples(pooled, Source.QUEUE, tuple((key, len(self.groups[key])) for key in keys))
        return None


def _from_samples(samples: Iterable[float], source: Source, groups: tuple[tuple[HistoryKey, int], ...]) -> Runtime:
    ordered = tuple(sorted(samples))
    return Runtime(nearest_rank(ordered, P50), nearest_rank(ordered, P90), source, ordered, groups)


# On a Queue's status ------------------------------------------------------------------------------------------

STATUS_GROUPS = 32
"""History groups one Queue's ``status.runtimeHistory`` keeps (its namespace's most recently finished)."""


def history_items(history: RuntimeHistory, namespace: str, limit: int = STATUS_GROUPS) -> list[dict[str, object]]:
    """The namespace's groups as a Queue's ``status.runtimeHistory`` lists them: ``{kind, stem, seconds,
    lastFinished}`` (whole seconds, oldest first), the most recently finished ``limit`` groups, by kind and stem."""
    groups = history.namespace_groups(namespace)
    newest = sorted(groups, key=lambda key: (-history.last.get(key, 0.0), key))[:limit]
    return [
        {"kind": kind, "stem": stem, "seconds": [round(sample) for sample in groups[(namespace, kind, stem)]],
         "lastFinished": rfc3339_seconds(history.last.get((namespace, kind, stem), 0.0))}
        for _, kind, stem in sorted(newest)
    ]


def restore_items(history: RuntimeHistory, namespace: str, items: object) -> int:
    """Put back what :func:`history_items` wrote for ``namespace`` (a restart); entries that cannot be read
    are skipped. Returns how many groups were restored."""
    restored = 0
    for item in items if isinstance(items, list) else ():
        if not isinstance(item, Mapping):
            continue
        kind, stem, seconds = item.get("kind"), item.get("stem"), item.get("seconds")
        if not (isinstance(kind, str) and isinstance(stem, str) and isinstance(seconds, list)):
            continue
        samples = [float(value) for value in seconds
                   if isinstance(value, int | float) and not isinstance(value, bool)]
        last = parse_time(item.get("lastFinished")) or 0.0
        if samples:
            history.restore((namespace, kind, stem), samples, last)
            restored += 1
    return restored


def running_since(starts: Iterable[float], admitted_at: float | None) -> float | None:
    """When a job's pods run since: the earliest start of its pods that ran, not before its admission (kept to
    the microsecond where a pod's start is kept to the second); ``None`` when no pod has started. A run time
    measured from it holds the pods' whole time on their nodes, not a late sighting of it."""
    earliest = min(starts, default=None)
    if earliest is None:
        return None
    return max(earliest, admitted_at) if admitted_at else earliest
