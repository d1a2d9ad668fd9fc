"""What a scenario is, once read: its settings, node shapes and timed submissions (:class:`Scenario`), the
simulator's own annotations (``sim.kube-queue.x-k8s.io/*``; the ``sim.kube-queue.io`` spelling of an earlier
release is still read) and its durations (integer microseconds). :mod:`webhook.sim.scenario` reads the files."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from webhook.api.names import LEGACY_SIM_GROUP, SIM_GROUP
from webhook.api.objects import Obj, name_of, namespace_of
from webhook.core import duration
from webhook.core.fairshare import with_fair_sharing
from webhook.core.quota import QuotaTree
from webhook.core.rate import DEFAULT_OVERSELL_RATE
from webhook.core.resources import Resources
from webhook.core.startup import BackoffPolicy
from webhook.workloads.base import Adapter

SCENARIO_API_VERSION = f"{SIM_GROUP}/v1alpha1"
SUBMIT_AT_ANNOTATION = f"{SIM_GROUP}/submit-at"
RUN_FOR_ANNOTATION = f"{SIM_GROUP}/run-for"
COUNT_ANNOTATION = f"{SIM_GROUP}/count"
EVERY_ANNOTATION = f"{SIM_GROUP}/every"
NEVER_STARTS_ANNOTATION = f"{SIM_GROUP}/never-starts"
"""``"true"``: the job's pods can never run (a nodeSelector no node has, an image that cannot be pulled...):
once released it is held again after the start timeout and retries with backoff (docs/start-timeout.md)."""
SIM_ANNOTATIONS = (SUBMIT_AT_ANNOTATION, RUN_FOR_ANNOTATION, COUNT_ANNOTATION, EVERY_ANNOTATION,
                   NEVER_STARTS_ANNOTATION)
LEGACY_SIM_ANNOTATIONS = {f"{LEGACY_SIM_GROUP}/{key.split('/', 1)[1]}": key for key in SIM_ANNOTATIONS}
"""The same annotations under the group an earlier release used (``sim.kube-queue.io``): still read."""

MICROS = 1_000_000
"""Microseconds in a second: the virtual clock's unit."""
MAX_JOBS_PER_SCENARIO = 2_000_000
"""A guard against a typo in ``count`` that would expand into billions of submissions."""
MAX_INCLUDE_DEPTH = 8

_FOREVER = ("forever", "never", "inf", "infinity")


class ScenarioError(ValueError):
    """A scenario that cannot be simulated: says which file and document, what is wrong and what to do."""


def parse_duration(value: object, where: str = "duration") -> int:
    """A duration in microseconds: ``"1m30s"``, ``"200ms"``, ``"1.5h"``, ``"2d"`` or a number of seconds.

    Units follow :data:`webhook.core.duration.SCENARIO`; YAML numbers and number text are seconds.
    """
    if isinstance(value, bool):
        raise ScenarioError(f"{where}: expected a duration such as 60s, 500ms or 1m30s, got {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise ScenarioError(f"{where}: a duration must not be negative, got {value!r}")
        return round(Fraction(value) * MICROS)
    if not isinstance(value, str) or not value.strip():
        raise ScenarioError(f"{where}: expected a duration such as 60s, 500ms or 1m30s, got {value!r}")
    text = value.strip()
    try:
        return round(Fraction(text) * MICROS)  # a bare number of seconds, as text (Fraction's syntax)
    except (ValueError, ZeroDivisionError):
        pass
    try:
        return round(duration.parse_duration(text, duration.SCENARIO) * MICROS)
    except duration.DurationError:
        raise ScenarioError(
            f"{where}: {value!r} is not a duration; write a number with a unit (ns, us, ms, s, m, h, d) such as "
            "60s, 500ms, 1m30s or 1.5h"
        ) from None


def parse_run_for(value: object, where: str) -> int | None:
    """``None`` (runs until the end) for ``None`` or ``forever``; else a duration in microseconds."""
    if value is None or (isinstance(value, str) and value.strip().lower() in _FOREVER):
        return None
    return parse_duration(value, where)


def format_duration(micros: int | None) -> str:
    """``1.5s``, ``0s``, ``2m0.250s``, ``forever``: short, exact to the millisecond."""
    if micros is None:
        return "forever"
    seconds = micros / MICROS
    if seconds < 60:
        return f"{seconds:g}s"
    minutes, rest = divmod(seconds, 60)
    if minutes < 60:
        return f"{int(minutes)}m{rest:g}s"
    hours, minutes = divmod(minutes, 60)
    return f"{int(hours)}h{int(minutes)}m{rest:g}s"


@dataclass(frozen=True, slots=True)
class NodeShape:
    """``count`` identical nodes named ``<name>-<i>`` with ``allocatable`` (``pods`` counts pods)."""

    name: str
    count: int
    allocatable: Resources


@dataclass(frozen=True, slots=True)
class Submission:
    """One job to submit at ``at`` (microseconds) that runs ``run_for`` once started (``None``: forever)."""

    at: int
    run_for: int | None
    adapter: Adapter
    obj: Obj
    """The manifest with its final name (generated names resolved), ``spec`` as written."""
    leaf: str
    """Key of the leaf quota holding the job's namespace."""
    source: str
    """Where it came from (``file.yaml#3``, copy 2 of 5) for messages."""
    never_starts: bool = False
    """Its pods never run once released (the start timeout holds it again)."""

    @property
    def name(self) -> str:
        return name_of(self.obj)

    @property
    def namespace(self) -> str:
        return namespace_of(self.obj)


@dataclass(frozen=True, slots=True)
class Scenario:
    """A loaded scenario, ready for :class:`webhook.sim.engine.Simulator`."""

    name: str
    tree: QuotaTree
    submissions: tuple[Submission, ...]
    """In submission order (time, then order in the files)."""
    oversell_rate: Fraction = DEFAULT_OVERSELL_RATE
    strict_priority: bool = False
    queues: Mapping[str, Obj] = field(default_factory=dict)
    """Queue objects by name, as the controller's Queue cache holds them (only ``spec.queuePolicy`` matters)."""
    priority_classes: Mapping[str, int] = field(default_factory=dict)
    nodes: tuple[NodeShape, ...] = ()
    """Empty: node capacity is not modelled (every admitted job can start)."""
    until: int | None = None
    """End of the virtual clock in microseconds (``None``: when the last event happened)."""
    description: str = ""
    start_timeout: int = 300 * MICROS
    """The controller's ``--start-timeout`` in microseconds (0: off)."""
    backoff: BackoffPolicy = field(default_factory=BackoffPolicy)
    """The controller's ``--backoff-base``, ``--backoff-max`` and ``--backoff-limit``."""

    def with_settings(
        self,
        *,
        oversell_rate: Fraction | None = None,
        strict_priority: bool | None = None,
        until: int | None = None,
        fair_sharing: bool | None = None,
    ) -> Scenario:
        """The same scenario with some settings overridden (the command line's flags; ``fair_sharing`` turns it
        on at every parent quota, or off everywhere: docs/fair-sharing.md)."""
        return Scenario(
            name=self.name,
            tree=self.tree if fair_sharing is None else with_fair_sharing(self.tree, fair_sharing),
            submissions=self.submissions,
            oversell_rate=self.oversell_rate if oversell_rate is None else oversell_rate,
            strict_priority=self.strict_priority if strict_priority is None else strict_priority,
            queues=self.queues,
            priority_classes=self.priority_classes,
            nodes=self.nodes,
            until=self.until if until is None else until,
            description=self.description,
            start_timeout=self.start_timeout,
            backoff=self.backoff,
        )
