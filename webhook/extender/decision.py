"""What the extender answers and records: filter and prioritize decisions, assumed placements, mark patches.

Plain values, made by :mod:`webhook.extender.decide` and kept by :mod:`webhook.extender.cache`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from webhook.api.objects import Doc
from webhook.core.dra import ClaimKey
from webhook.core.placement import PodView
from webhook.core.resources import Resources
from webhook.extender.protocol import NodeVictims

UNKNOWN_NODE = "node not yet in the extender's node cache; retried on the next scheduling attempt"


@dataclass(frozen=True, slots=True)
class Assumption:
    """A pod the filter let through and the extender has not yet seen bound."""

    view: PodView
    """The pod as the filter saw it (unbound)."""
    node_name: str
    """One passing node (every passing node lies in the same unit)."""
    expires_at: float
    request: Resources
    policy: str | None = None
    """``namespace/name`` of the governing ResourcePolicy, if any."""
    unit: int | None = None
    """0-based unit index under that policy."""
    mark: str = ""
    """What the scheduler had written on the pod when the filter let it through
    (:func:`webhook.core.assumed.scheduling_mark`): a different one later means it gave up on that attempt."""
    loose: bool = False
    """No queued job accounts for the pod: its placement counts against the room jobs leave too."""
    claims: tuple[ClaimKey, ...] = ()
    """The DRA claims the pod holds once placed: they count (once each) while it is placed
    (:mod:`webhook.extender.claims`)."""


@dataclass(frozen=True, slots=True)
class Decision:
    """One filter or prioritize answer, with what the log line says about it."""

    verb: str
    pod: str
    passing: tuple[str, ...] = ()
    failed: Mapping[str, str] = field(default_factory=dict)
    unresolvable: Mapping[str, str] = field(default_factory=dict)
    score_groups: Mapping[int, Sequence[str]] = field(default_factory=dict)
    """Prioritize: score (1..10) -> the nodes with that score; nodes in no group score 0."""
    nodes: int = 0
    policy: str | None = None
    unit: str | None = None
    quota: str | None = None
    summary: str = ""
    assumed: bool = False
    error: str = ""
    retry_at: float | None = None
    """When the verdict changes by time alone (a ``TimeoutOrExceedMax`` wait ends): the pod should be
    tried again then."""
    passing_score: int = 0
    """Filter: the prioritize score of the passing nodes (all in one unit, so all alike)."""
    sampled_from: int | None = None
    """Filter: how many nodes passed before the window cut them to ``passing`` (``None``: not cut)."""
    scheduler_sampled: bool = False
    """Filter: the pod's policy has several units and the scheduler asked about exactly as many nodes as it
    samples by default out of all it has, other nodes than the last time it asked about that many
    (:meth:`~webhook.extender.state.ExtenderState.filter`): an earlier unit's nodes may be missing."""

    @property
    def scores(self) -> dict[str, int]:
        """Node -> score for the nodes that score above 0."""
        return {name: score for score, names in self.score_groups.items() if score for name in names}

    def log_fields(self) -> dict[str, object]:
        """``key=value`` fields for the decision's log line (no node lists: they can be 5,000 long)."""
        fields: dict[str, object] = {"verb": self.verb, "pod": self.pod, "nodes": self.nodes}
        if self.verb == "filter":
            fields.update(passing=len(self.passing), failed=len(self.failed), unresolvable=len(self.unresolvable))
            if self.sampled_from is not None:
                fields["sampled_from"] = self.sampled_from
            if self.scheduler_sampled:
                fields["scheduler_sampled"] = "true"
        else:
            fields["top_score"] = max((score for score, names in self.score_groups.items() if names), default=0)
        if self.policy:
            fields["policy"] = self.policy
        if self.unit:
            fields["unit"] = self.unit
        if self.quota:
            fields["quota"] = self.quota
        if self.assumed:
            fields["assumed"] = "true"
        if self.error:
            fields["error"] = self.error
        fields["reason"] = self.summary
        return fields


@dataclass(frozen=True, slots=True)
class MarkPatch:
    """Labels and annotations a bound pod lacks (a merge patch of its metadata)."""

    namespace: str
    name: str
    uid: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    unit: str
    node: str

    def body(self) -> Doc:
        metadata: Doc = {}
        if self.labels:
            metadata["labels"] = dict(self.labels)
        if self.annotations:
            metadata["annotations"] = dict(self.annotations)
        if self.uid:
            metadata["uid"] = self.uid  # a precondition: never patch a re-created pod of the same name
        return {"metadata": metadata}


@dataclass(frozen=True, slots=True)
class PreemptDecision:
    """One preempt answer: the nodes whose victims may go, and why each other node's may not."""

    pod: str
    kept: Mapping[str, NodeVictims]
    refused: Mapping[str, str]
    """Node -> why its victims may not go."""
    quota: str | None = None
    """Full name of the preemptor's quota (``None`` when it is under none)."""
    summary: str = ""
    foreign: tuple[str, ...] = ()
    """The keys (``namespace/name``) of the victims outside the preemptor's namespace, which the reasons name:
    what the pod's own users are told leaves them out (:mod:`webhook.extender.refusals`)."""

    def log_fields(self) -> dict[str, object]:
        """``key=value`` fields for the decision's log line (no node lists)."""
        fields: dict[str, object] = {
            "verb": "preempt",
            "pod": self.pod,
            "nodes": len(self.kept) + len(self.refused),
            "kept": len(self.kept),
            "refused": len(self.refused),
        }
        if self.quota:
            fields["quota"] = self.quota
        fields["reason"] = self.summary
        return fields
