"""The extender's picture of the cluster, and its filter and prioritize decisions.

Synchronous and free of I/O: watch caches feed it (:meth:`ExtenderState.upsert_node`, :meth:`upsert_pod`,
:meth:`set_policies`, :meth:`set_trees`...), the HTTP handlers ask it (:meth:`filter`, :meth:`prioritize`)
with the time passed in. Every read of counts and the record of the placement it leads to happen with no
other request decided in between (one synchronous call, or :meth:`ExtenderState.decide_filter` and its
record in one event-loop callback), so concurrent requests can never both take the last slot of a unit.

**Assumed placements.** When the filter lets a pod through, the extender records it (pod uid -> one passing
node, the pod's request and quota) until it sees the pod bound or deleted, or ``assume_ttl`` seconds pass.
Assumed pods count towards ResourcePolicy units (their passing nodes all lie in one unit) and towards the
pod-level quota, so pods scheduled back to back - before the first one's binding reaches the watch - never
overrun a unit's ``max`` or a quota's ``max``. A pod re-filtered replaces its own record, and never counts
against itself.

**Marks.** A pod the extender placed under a ResourcePolicy gets its unit's ``podLabels`` and
``podAnnotations`` once it is bound (the extender only filters, so it learns the node from the watch);
until the cluster shows them, the pod counts as if it carried them. Every bound pod a policy governs gets
``controller.kubernetes.io/pod-deletion-cost`` by its unit (earlier units cost more), so a shrinking
ReplicaSet removes the later units' pods - the virtual node's - first (the first unit's cost is 0, the
cost of a pod without the annotation, so only pods of later units are written: see
:func:`unit_deletion_cost`). :meth:`marks_patch` says what a pod lacks; the caller patches it.

**Fast path.** Placement only depends on which unit each candidate node is in, so the state caches
node -> unit per policy and hands :func:`place` one representative node per unit, then gives every node
its representative's verdict: a request with 5,000 node names costs one dictionary lookup per name, in C.
That per-unit verdict is kept per policy, units present and unit counts (:class:`UnitVerdict`), so a
burst of pods into the same unit decides once. Unit counts are tallied per policy as pod events and
placements arrive (:meth:`unit_counts`), so a request does not walk the namespace's pods either - a
Deployment of thousands of replicas costs the same. A pod's request is parsed once per shape
(:class:`RequestCache`) and only when a quota or a policy counts it; a pod that neither governs costs
its metadata and a few set operations over the names.
"""

from __future__ import annotations

import logging
import re
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import chain, compress, filterfalse, repeat
from operator import eq
from typing import Any, TypeVar

import orjson

from webhook.api.names import TREE_NAMESPACE
from webhook.core.placement import (
    DELETION_COST_ANNOTATION,
    MAX_SCORE,
    AssumedPod,
    NodeView,
    Placement,
    PodView,
    PolicyError,
    ResourcePolicy,
    TryNextPolicy,
    count_pods_per_unit,
    counts_towards,
    deletion_cost,
    node_view,
    parse_policy,
    place,
    place_unmanaged,
    pod_view,
    policy_for_pod,
    unit_of_node,
)
from webhook.core.quota import QuotaTree
from webhook.core.resources import EMPTY, Resources
from webhook.core.selectors import FrozenLabels
from webhook.core.treechoice import honoured_tree
from webhook.core.workload import WorkloadError, pod_request
from webhook.extender.podquota import explain_blockers, pod_quota_blockers, quota_key

log = logging.getLogger(__name__)

DEFAULT_ASSUME_TTL = 30.0
"""Seconds an assumed placement counts without the extender seeing the pod bound."""
UNKNOWN_NODE = "node not yet in the extender's node cache; retried on the next scheduling attempt"
_MISSING = -2
LAST_FILTERS = 256
"""How many recent filter verdicts are kept for the prioritize call that follows each."""
FEW_OUTSIDE = 64
"""At most this many names outside the largest unit are picked out one by one (see ``_group_by_unit``)."""


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
    (:meth:`ExtenderState._sampled_by_scheduler`): an earlier unit's nodes may be missing."""

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

    def body(self) -> dict[str, Any]:
        metadata: dict[str, Any] = {}
        if self.labels:
            metadata["labels"] = dict(self.labels)
        if self.annotations:
            metadata["annotations"] = dict(self.annotations)
        if self.uid:
            metadata["uid"] = self.uid  # a precondition: never patch a re-created pod of the same name
        return {"metadata": metadata}


Group = tuple[str | None, ...]
"""A pod's values of a policy's ``matchLabelKeys`` (pods count only within their group)."""


@dataclass(slots=True)
class _Tally:
    """The bound pods of one policy that fill its units, kept up to date from pod events."""

    policy: ResourcePolicy
    counts: dict[Group, list[int]]
    """Group -> pods per unit."""
    members: dict[str, tuple[Group, int]]
    """Pod key -> (group, unit index) of each pod counted."""


@dataclass(slots=True)
class _PodRecord:
    view: PodView
    request: Resources
    charged: str | None
    """Quota node key the pod's request is charged to (bound, unfinished pods), else ``None``."""


UnitKey = int | None
"""A 0-based unit index of a policy, or ``None`` for "in no unit"."""
Grouping = dict[UnitKey, tuple[str, ...]]
"""Node names by the unit of a policy they lie in, each group in the order the names came."""


@dataclass(frozen=True, slots=True)
class UnitVerdict:
    """:func:`~webhook.core.placement.place`'s verdict by unit rather than by node: what every candidate of a
    unit gets. ``place`` only ever looks at which unit a candidate is in, so one representative node per
    unit decides for all of them, and the verdict carries over to any request with the same units present
    and the same counts (see :meth:`ExtenderState._unit_verdict`)."""

    passing: frozenset[UnitKey]
    failed: Mapping[UnitKey, str]
    """Resolvable refusals, already worded for the scheduler (:func:`_policy_reason`)."""
    unresolvable: Mapping[UnitKey, str]
    scores: Mapping[UnitKey, int]
    """0..10 per unit."""
    unit_index: int | None
    summary: str
    retry_at: float | None


def _by_unit(policy: ResourcePolicy, placement: Placement, representative: Mapping[UnitKey, NodeView]) -> UnitVerdict:
    """A per-node :class:`Placement` of one representative per unit, as a :class:`UnitVerdict`."""
    passing: set[UnitKey] = set()
    failed: dict[UnitKey, str] = {}
    unresolvable: dict[UnitKey, str] = {}
    scores: dict[UnitKey, int] = {}
    for index, node in representative.items():
        scores[index] = min(MAX_SCORE, max(0, placement.scores.get(node.name, 0)))
        if node.name in placement.passing:
            passing.add(index)
        elif node.name in placement.failed:
            failed[index] = _policy_reason(policy, placement.failed[node.name])
        else:
            unresolvable[index] = _policy_reason(policy, placement.unresolvable.get(node.name, ""))
    return UnitVerdict(
        frozenset(passing), failed, unresolvable, scores, placement.unit_index, placement.summary, placement.retry_at
    )


VerdictKey = tuple[frozenset[UnitKey], tuple[int, ...]]
"""The units present and the counts that show in a verdict (see :meth:`ExtenderState._unit_verdict`)."""
VERDICTS_PER_POLICY = 256
"""How many (units present, counts) verdicts are kept per policy before they are dropped and recomputed."""


def unit_deletion_cost(index: int, n_units: int) -> int:
    """The pod-deletion-cost of a pod in unit ``index``: the core's :func:`deletion_cost` (each earlier unit
    100 more than the next) shifted so that the first unit costs 0 - the cost of a pod without the
    annotation. Pods of the preferred unit, usually nearly all of them, then need no write at all; pods of
    later units get -100, -200, ... and still go first when a ReplicaSet shrinks."""
    return deletion_cost(index, n_units) - deletion_cost(0, n_units)


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
    very number only by chance - but then the same nodes every time (see
    :meth:`ExtenderState._sampled_by_scheduler`)."""
    return asked < nodes and asked == scheduler_sample_size(nodes)


Names = TypeVar("Names", list[str], tuple[str, ...])


def rotating_window(names: Names, start: int, size: int) -> tuple[Names, int]:
    """``size`` of ``names`` from ``start`` (taken modulo their number), wrapping around to the front; and
    where the next window starts. ``names`` must be longer than ``size``."""
    start %= len(names)
    end = start + size
    return names[start:end] + names[: max(0, end - len(names))], end


def _uid(pod: Mapping[str, Any]) -> str:
    metadata = pod.get("metadata")
    uid = metadata.get("uid") if isinstance(metadata, Mapping) else None
    return uid if isinstance(uid, str) else ""


def _pod_key(view: PodView) -> str:
    return view.uid or view.key


_POD_METADATA = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "labels",
    "annotations",
    "creationTimestamp",
    "deletionTimestamp",
)
_POD_SPEC = ("nodeName", "resources", "overhead")
_CONTAINER = ("name", "resources", "restartPolicy")


def _pick(obj: object, keys: Sequence[str]) -> object:
    """``obj`` with only ``keys`` when it is a mapping (anything else as it is: malformed stays malformed)."""
    if not isinstance(obj, Mapping):
        return obj
    return {key: obj[key] for key in keys if key in obj}


def pod_essentials(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a Pod the extender reads (:func:`~webhook.core.placement.pod_view`,
    :func:`~webhook.core.workload.pod_request`, the cache's key and resource version), nothing else.

    The pod watch keeps every pod; without ``managedFields``, volumes, env, probes and status conditions a
    pod is a few small dictionaries instead of a few hundred, so the cache takes a fraction of the memory
    and the garbage collector, which walks every dictionary it has not been told to skip, a fraction of the
    time - its full passes over tens of thousands of pods stall the event loop, requests included.
    """
    out: dict[str, Any] = {"metadata": _pick(obj.get("metadata"), _POD_METADATA)}
    spec = obj.get("spec")
    if isinstance(spec, Mapping):
        kept: dict[str, Any] = {key: spec[key] for key in _POD_SPEC if key in spec}
        for field_name in ("containers", "initContainers"):
            containers = spec.get(field_name)
            if isinstance(containers, list):
                kept[field_name] = [_pick(container, _CONTAINER) for container in containers]
            elif containers is not None:
                kept[field_name] = containers
        out["spec"] = kept
    elif spec is not None:
        out["spec"] = spec
    status = obj.get("status")
    if status is not None:
        out["status"] = _pick(status, ("phase",))
    return out


def _request_key(spec: Mapping[str, Any]) -> bytes | None:
    """What :func:`~webhook.core.workload.pod_request` reads of a pod spec - every container's
    ``resources`` (and an init container's ``restartPolicy``), pod-level ``resources``, ``overhead`` -
    serialized (orjson, in C); ``None`` for a spec too odd to key (then the request is parsed as it is)."""
    try:
        return orjson.dumps(
            (
                [container.get("resources") for container in spec.get("containers") or ()],
                [(c.get("resources"), c.get("restartPolicy")) for c in spec.get("initContainers") or ()],
                spec.get("resources"),
                spec.get("overhead"),
            )
        )
    except (AttributeError, TypeError, orjson.JSONEncodeError):
        return None


class RequestCache:
    """Pod requests by :func:`_request_key`. Parsing quantities is the dearest part of reading a pod (exact
    fractions), and the pods of one Deployment or Job all ask the same: the filter and the pod's binding
    event parse each shape once. Bounded: emptied when it reaches ``size`` shapes."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._known: dict[bytes, Resources] = {}

    def request(self, pod: Mapping[str, Any], where: str) -> Resources:
        """The pod's effective request (``EMPTY``, logged, when its spec is malformed)."""
        spec = pod.get("spec")
        if not isinstance(spec, Mapping):
            return EMPTY
        key = _request_key(spec)
        known = None if key is None else self._known.get(key)
        if known is not None:
            return known
        try:
            request = pod_request(spec)
        except WorkloadError as error:
            log.warning("component=extender event=bad_pod_request pod=%s error=%r", where, str(error))
            return EMPTY
        if key is not None:
            if len(self._known) >= self.size:
                self._known.clear()
            self._known[key] = request
        return request


def _with_marks(view: PodView, marks: tuple[FrozenLabels, FrozenLabels]) -> PodView:
    labels, annotations = marks
    return PodView(
        namespace=view.namespace,
        name=view.name,
        uid=view.uid,
        labels={**view.labels, **labels},
        annotations={**view.annotations, **annotations},
        node_name=view.node_name,
        terminating=view.terminating,
        finished=view.finished,
        created=view.created,
    )


def _carries(view: PodView, marks: tuple[FrozenLabels, FrozenLabels]) -> bool:
    labels, annotations = marks
    return all(view.labels.get(k) == v for k, v in labels.items()) and all(
        view.annotations.get(k) == v for k, v in annotations.items()
    )


_WAITED = re.compile(r" \(waited [^)]*\)")


def _policy_reason(policy: ResourcePolicy, reason: str) -> str:
    """A node's refusal as the scheduler shows it: names the policy, and never changes while the pod waits.

    The core's ``TimeoutOrExceedMax`` reason tells how long the pod has waited; that part is dropped here
    (the log line keeps it). A reason that changed on every attempt would change the pod's PodScheduled
    condition each time, and each such update sends the pod straight back to an idle scheduler: a retry
    storm, and an Event per attempt.
    """
    reason = _WAITED.sub("", reason)
    return reason if policy.key in reason else f"ResourcePolicy {policy.key}: {reason}"


class ExtenderState:
    """Nodes, pods, ResourcePolicies and the ElasticQuotaTree as the watches last reported them, plus the
    extender's assumed placements. Not thread-safe: use it from one event loop."""

    def __init__(self, *, assume_ttl: float = DEFAULT_ASSUME_TTL, sample: bool = True) -> None:
        self.assume_ttl = assume_ttl
        self.sample = sample
        """Pass the scheduler at most :func:`scheduler_sample_size` of the chosen unit's nodes (see :meth:`filter`)."""
        self._sample_start = 0
        self.nodes: dict[str, NodeView] = {}
        self._virtual: set[str] = set()
        self._pods: dict[str, _PodRecord] = {}
        self._pods_by_ns: dict[str, dict[str, PodView]] = {}
        self._policies: dict[str, tuple[ResourcePolicy, ...]] = {}
        self.policy_problems: dict[str, str] = {}
        """``namespace/name`` -> why the ResourcePolicy is ignored."""
        self.tree: QuotaTree | None = None
        self.tree_problem = ""
        self._usage: dict[str, dict[str, int]] = {}
        self._assumed: dict[str, Assumption] = {}
        self._assumed_core: dict[str, AssumedPod] = {}
        self._assumed_usage: dict[str, dict[str, int]] = {}
        """Like ``_usage``, for the requests of assumed placements."""
        self._assumed_charge: dict[str, tuple[str, Resources]] = {}
        """Pod key -> (quota key, request) its assumption is charged with."""
        self._next_expiry = float("inf")
        self._first_seen: dict[str, float] = {}
        self._unit_cache: dict[str, tuple[ResourcePolicy, dict[str, int | None]]] = {}
        self._verdicts: dict[str, tuple[ResourcePolicy, dict[VerdictKey, UnitVerdict]]] = {}
        """Policy key -> its :class:`UnitVerdict` by (units present, counts that show): see :meth:`_unit_verdict`."""
        self._pending_marks: dict[str, tuple[FrozenLabels, FrozenLabels]] = {}
        self._tallies: dict[str, _Tally] = {}
        """Policy key -> its bound pods per unit (built on first use, then kept by pod events)."""
        self._assumed_by_ns: dict[str, set[str]] = {}
        self._last_filter: OrderedDict[str, Decision] = OrderedDict()
        """Pod uid -> its latest filter verdict that passed some node (consumed by its prioritize)."""
        self._requests = RequestCache()
        self._sample_seen: frozenset[str] | None = None
        """The names of the last filter request that looked like a default sample (:meth:`_sampled_by_scheduler`)."""
        self.ready = False
        """Set by the wiring once every watch has listed; until then the filter answers with ``Error``."""
        self.on_marks_needed: Callable[[str], None] | None = None
        """Called with a pod key when a bound pod lacks marks (see :meth:`marks_patch`)."""

    # Nodes -------------------------------------------------------------------------------------------------
    def upsert_node(self, obj: Mapping[str, Any]) -> None:
        view = node_view(obj)
        if not view.name:
            return
        old = self.nodes.get(view.name)
        if old == view:
            return
        self.nodes[view.name] = view
        if view.is_virtual:
            self._virtual.add(view.name)
        else:
            self._virtual.discard(view.name)
        self._forget_node_units(view.name)

    def delete_node(self, obj: Mapping[str, Any]) -> None:
        name = node_view(obj).name
        if self.nodes.pop(name, None) is not None:
            self._virtual.discard(name)
            self._forget_node_units(name)

    def replace_nodes(self, objs: Iterable[Mapping[str, Any]]) -> None:
        views = (node_view(obj) for obj in objs)
        self.nodes = {view.name: view for view in views if view.name}
        self._virtual = {name for name, view in self.nodes.items() if view.is_virtual}
        self._unit_cache.clear()
        self._tallies.clear()

    def _forget_node_units(self, name: str) -> None:
        for _, units in self._unit_cache.values():
            units.pop(name, None)
        self._tallies.clear()  # pods on the node may have changed unit: recount lazily

    # Pods --------------------------------------------------------------------------------------------------
    def upsert_pod(self, obj: Mapping[str, Any]) -> None:
        view = pod_view(obj)
        key = _pod_key(view)
        if not view.name:
            return
        old = self._pods.get(key)
        if old is not None and old.view == view and key not in self._assumed and key not in self._pending_marks:
            return  # nothing the extender reads changed (a status update: Running, conditions, IPs...)
        if old is not None:
            self._uncharge(old)
        request = old.request if old is not None and old.view.node_name == view.node_name else None
        if request is None:
            request = self._requests.request(obj, view.key) if view.node_name else EMPTY
        record = _PodRecord(view, request, None)
        self._pods[key] = record
        self._pods_by_ns.setdefault(view.namespace, {})[key] = view
        self._charge(record)
        if view.node_name is not None or view.finished:
            self._first_seen.pop(key, None)
            assumption = self._drop_assumption(key, retally=False)  # recounted once, below
            if assumption is not None and assumption.policy is not None and view.node_name is not None:
                self._start_marks(key, view)
        pending = self._pending_marks.get(key)
        if pending is not None and (_carries(view, pending) or view.finished):
            del self._pending_marks[key]
        self._retally(key, view.namespace)
        self._check_marks(key)

    def delete_pod(self, obj: Mapping[str, Any]) -> None:
        view = pod_view(obj)
        self._remove_pod(_pod_key(view))

    def _remove_pod(self, key: str) -> None:
        record = self._pods.pop(key, None)
        if record is not None:
            self._uncharge(record)
            by_ns = self._pods_by_ns.get(record.view.namespace)
            if by_ns is not None:
                by_ns.pop(key, None)
                if not by_ns:
                    del self._pods_by_ns[record.view.namespace]
        self._drop_assumption(key)
        self._first_seen.pop(key, None)
        self._pending_marks.pop(key, None)
        if record is not None:
            self._retally(key, record.view.namespace)

    def replace_pods(self, objs: Iterable[Mapping[str, Any]]) -> None:
        """A re-list: the store is replaced; assumptions of pods now bound or gone are dropped."""
        seen: set[str] = set()
        for obj in objs:
            view = pod_view(obj)
            if view.name:
                seen.add(_pod_key(view))
                self.upsert_pod(obj)
        for key in [key for key in self._pods if key not in seen]:
            self._remove_pod(key)

    def pod_views(self) -> list[PodView]:
        """Every cached pod."""
        return [record.view for record in self._pods.values()]

    def pod(self, key: str) -> PodView | None:
        """The cached view of a pod (by uid, or ``namespace/name`` for pods without one)."""
        record = self._pods.get(key)
        return None if record is None else record.view

    # Policies and the tree ---------------------------------------------------------------------------------
    def set_policies(self, objs: Iterable[Mapping[str, Any]]) -> None:
        """Replace every ResourcePolicy; invalid ones are logged and ignored."""
        by_ns: dict[str, list[ResourcePolicy]] = {}
        problems: dict[str, str] = {}
        for obj in objs:
            try:
                policy = parse_policy(obj)
            except PolicyError as error:
                metadata = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
                assert isinstance(metadata, Mapping)
                name = f"{metadata.get('namespace')}/{metadata.get('name')}"
                problems[name] = str(error)
                continue
            by_ns.setdefault(policy.namespace, []).append(policy)
        new = {namespace: tuple(policies) for namespace, policies in by_ns.items()}
        changed = {ns for ns in set(new) | set(self._policies) if new.get(ns) != self._policies.get(ns)}
        for name, problem in problems.items():
            if self.policy_problems.get(name) != problem:
                log.warning("component=extender event=policy_ignored policy=%s error=%r", name, problem)
        self._policies = new
        self.policy_problems = problems
        live = {policy.key for policies in new.values() for policy in policies}
        for key in [key for key in self._unit_cache if key not in live]:
            del self._unit_cache[key]
        for key in [key for key in self._verdicts if key not in live]:
            del self._verdicts[key]
        for key in [key for key in self._tallies if key not in live]:
            del self._tallies[key]
        for namespace in changed:
            for key in list(self._pods_by_ns.get(namespace, {})):
                self._check_marks(key)

    @property
    def policy_count(self) -> int:
        """How many valid ResourcePolicies the state holds."""
        return sum(len(policies) for policies in self._policies.values())

    def policies(self, namespace: str) -> tuple[ResourcePolicy, ...]:
        return self._policies.get(namespace, ())

    def policy_for(self, view: PodView) -> ResourcePolicy | None:
        return policy_for_pod(self._policies.get(view.namespace, ()), view)

    def set_trees(self, objs: Iterable[Mapping[str, Any]]) -> None:
        """Use the oldest ElasticQuotaTree given (the webhook allows only one); recharge every pod."""
        listed = list(objs)
        namespace = next((str((obj.get("metadata") or {}).get("namespace")) for obj in listed
                          if (obj.get("metadata") or {}).get("namespace")), TREE_NAMESPACE)
        honoured = honoured_tree(listed, namespace)
        tree = honoured.tree
        problem = honoured.problem or ""
        if problem and problem != self.tree_problem:
            log.warning("component=extender event=tree_ignored error=%r", problem)
        if tree == self.tree and problem == self.tree_problem:
            return
        self.tree, self.tree_problem = tree, problem
        self._usage = {}
        for record in self._pods.values():
            record.charged = None
            self._charge(record)
        self._assumed_usage = {}
        self._assumed_charge = {}
        for key, assumption in self._assumed.items():
            self._charge_assumption(key, assumption)

    # Quota usage -------------------------------------------------------------------------------------------
    def _shift(self, usage: dict[str, dict[str, int]], quota: str, request: Resources, sign: int) -> None:
        """Add (``sign`` 1) or remove (-1) ``request`` along the chain of ``quota`` in ``usage``."""
        assert self.tree is not None
        for node in self.tree.chain(quota):
            sums = usage.setdefault(node.key, {})
            for name, amount in request.items():
                left = sums.get(name, 0) + sign * amount
                if left:
                    sums[name] = left
                else:
                    sums.pop(name, None)

    def _charge(self, record: _PodRecord) -> None:
        view = record.view
        if view.node_name is None or view.finished or not record.request or self.tree is None:
            return
        key = quota_key(self.tree, view.namespace)
        if key is None:
            return
        record.charged = key
        self._shift(self._usage, key, record.request, 1)

    def _uncharge(self, record: _PodRecord) -> None:
        if record.charged is not None and self.tree is not None:
            self._shift(self._usage, record.charged, record.request, -1)
        record.charged = None

    def used(self, quota: str) -> Resources:
        """What the bound pods of a quota node's subtree request (for tests and ``why``)."""
        return Resources(self._usage.get(quota.lower(), {}))

    def _quota_blocker(self, quota: str, request: Resources, key: str) -> tuple[str, str] | None:
        """``(quota full name, reason)`` when the pod ``key`` would take quota node ``quota`` over ``max``."""
        tree = self.tree
        if tree is None or not request:
            return None
        usages: list[Mapping[str, Mapping[str, int]]] = [self._usage, self._assumed_usage]
        own = self._assumed_charge.get(key)
        if own is not None:  # a pod filtered again: its own placement must not count against it
            mine: dict[str, dict[str, int]] = {}
            self._shift(mine, own[0], own[1], -1)
            usages.append(mine)
        blockers = pod_quota_blockers(tree, quota, request, *usages)
        if not blockers:
            return None
        return blockers[0].quota, explain_blockers(blockers)

    # Assumptions -------------------------------------------------------------------------------------------
    @property
    def assumed(self) -> Mapping[str, Assumption]:
        """Pod key -> the placement the filter made and the watch has not yet confirmed."""
        return self._assumed

    def _assume(self, key: str, assumption: Assumption) -> None:
        self._drop_assumption(key)
        self._assumed[key] = assumption
        self._assumed_by_ns.setdefault(assumption.view.namespace, set()).add(key)
        self._retally(key, assumption.view.namespace)
        self._assumed_core[key] = AssumedPod(key, assumption.node_name, assumption.expires_at)
        self._next_expiry = min(self._next_expiry, assumption.expires_at)
        self._charge_assumption(key, assumption)

    def _charge_assumption(self, key: str, assumption: Assumption) -> None:
        quota = quota_key(self.tree, assumption.view.namespace)
        if quota is not None and assumption.request:
            self._assumed_charge[key] = (quota, assumption.request)
            self._shift(self._assumed_usage, quota, assumption.request, 1)

    def _drop_assumption(self, key: str, *, retally: bool = True) -> Assumption | None:
        """Forget pod ``key``'s assumed placement (and its charge); recount it in its policies' tallies
        unless the caller does so itself (``retally=False``)."""
        self._assumed_core.pop(key, None)
        charged = self._assumed_charge.pop(key, None)
        if charged is not None:
            self._shift(self._assumed_usage, charged[0], charged[1], -1)
        assumption = self._assumed.pop(key, None)
        if assumption is not None:
            keys = self._assumed_by_ns.get(assumption.view.namespace)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._assumed_by_ns[assumption.view.namespace]
            if retally:
                self._retally(key, assumption.view.namespace)
        return assumption

    def expire(self, now: float) -> None:
        """Forget assumed placements whose time is up."""
        if now < self._next_expiry:
            return
        for key in [key for key, assumption in self._assumed.items() if now >= assumption.expires_at]:
            assumption = self._drop_assumption(key)
            if assumption is not None:
                log.info(
                    "component=extender event=assumption_expired pod=%s node=%s",
                    assumption.view.key,
                    assumption.node_name,
                )
        self._next_expiry = min((a.expires_at for a in self._assumed.values()), default=float("inf"))

    # Marks -------------------------------------------------------------------------------------------------
    def _unit_map(self, policy: ResourcePolicy) -> dict[str, int | None]:
        """The cached node name -> unit index of ``policy`` (rebuilt when the policy object changes)."""
        entry = self._unit_cache.get(policy.key)
        if entry is None or entry[0] is not policy:
            entry = (policy, {})
            self._unit_cache[policy.key] = entry
        return entry[1]

    def _unit_index(self, policy: ResourcePolicy, name: str) -> int | None:
        return self._unit_of(policy, self._unit_map(policy), name)

    def _start_marks(self, key: str, view: PodView) -> None:
        policy = self.policy_for(view)
        if policy is None or view.node_name is None:
            return
        index = self._unit_index(policy, view.node_name)
        if index is None:
            return
        unit = policy.units[index]
        marks = (unit.pod_labels, unit.pod_annotations)
        if (marks[0] or marks[1]) and not _carries(view, marks):
            self._pending_marks[key] = marks

    def marks_patch(self, key: str) -> MarkPatch | None:
        """What the bound pod ``key`` lacks: its unit's marks (pods the extender placed) and its deletion
        cost (every pod a policy governs; absent reads as 0); ``None`` when nothing is missing."""
        record = self._pods.get(key)
        if record is None:
            return None
        view = record.view
        if view.node_name is None or view.finished or view.terminating:
            return None
        policy = self.policy_for(view)
        if policy is None:
            return None
        index = self._unit_index(policy, view.node_name)
        if index is None:
            return None
        labels: dict[str, str] = {}
        annotations: dict[str, str] = {}
        pending = self._pending_marks.get(key)
        if pending is not None:
            labels.update((k, v) for k, v in pending[0].items() if view.labels.get(k) != v)
            annotations.update((k, v) for k, v in pending[1].items() if view.annotations.get(k) != v)
        cost = str(unit_deletion_cost(index, len(policy.units)))
        if view.annotations.get(DELETION_COST_ANNOTATION, "0") != cost:
            annotations[DELETION_COST_ANNOTATION] = cost
        if not labels and not annotations:
            return None
        return MarkPatch(
            view.namespace, view.name, view.uid, labels, annotations, policy.describe_unit(index), view.node_name
        )

    def _check_marks(self, key: str) -> None:
        if self.on_marks_needed is not None and self.marks_patch(key) is not None:
            self.on_marks_needed(key)

    # Decisions ---------------------------------------------------------------------------------------------
    def _lookup(self, name: str, given: Mapping[str, NodeView] | None) -> NodeView | None:
        node = self.nodes.get(name)
        if node is None and given is not None:
            node = given.get(name)
        return node

    def _unit_of(self, policy: ResourcePolicy, units: dict[str, int | None], name: str) -> int | None:
        index = units.get(name, _MISSING)
        if index == _MISSING:
            node = self.nodes.get(name)
            if node is None:
                return None
            index = unit_of_node(policy, node)
            units[name] = index
        return index

    def _contribution(self, policy: ResourcePolicy, key: str) -> tuple[Group, int] | None:
        """Where pod ``key`` counts for ``policy`` - its group and unit - as ``count_pods_per_unit`` counts it
        for any other pod of its group: a bound pod by its node (carrying the unit's marks, or about to), an
        unbound pod with a uid by its assumed placement; ``None`` when it does not count."""
        record = self._pods.get(key)
        pod = None if record is None else record.view
        if pod is not None and pod.node_name is not None:
            if not counts_towards(policy, pod):
                return None
            index = self._unit_index(policy, pod.node_name)
            if index is None:
                return None
            marks = self._pending_marks.get(key)
            if not policy.units[index].carries_marks(pod if marks is None else _with_marks(pod, marks)):
                return None
            return tuple(pod.labels.get(label) for label in policy.match_label_keys), index
        assumption = self._assumed.get(key)
        if assumption is None:
            return None
        pod = assumption.view if pod is None else pod
        if not pod.uid or not counts_towards(policy, pod):
            return None
        index = self._unit_index(policy, assumption.node_name)
        if index is None:
            return None
        return tuple(pod.labels.get(label) for label in policy.match_label_keys), index

    def _tally(self, policy: ResourcePolicy) -> _Tally:
        tally = self._tallies.get(policy.key)
        if tally is None or tally.policy is not policy:
            tally = _Tally(policy, {}, {})
            keys = set(self._pods_by_ns.get(policy.namespace, {})) | self._assumed_by_ns.get(policy.namespace, set())
            for key in keys:
                self._count_in(tally, key)
            self._tallies[policy.key] = tally
        return tally

    def _count_in(self, tally: _Tally, key: str) -> None:
        place = self._contribution(tally.policy, key)
        if place is not None:
            tally.members[key] = place
            tally.counts.setdefault(place[0], [0] * len(tally.policy.units))[place[1]] += 1

    def _retally(self, key: str, namespace: str) -> None:
        """Recount pod ``key`` (bound, assumed, or gone) in the tallies of its namespace's policies."""
        for policy in self._policies.get(namespace, ()):
            tally = self._tallies.get(policy.key)
            if tally is None or tally.policy is not policy:
                continue  # rebuilt on next use
            old = tally.members.pop(key, None)
            if old is not None:
                tally.counts[old[0]][old[1]] -= 1
            self._count_in(tally, key)

    def unit_counts(self, policy: ResourcePolicy, for_pod: PodView, now: float) -> tuple[int, ...]:
        """How many of the policy's pods each unit holds when placing ``for_pod`` (assumptions due by
        ``now`` are dropped first).

        Exactly :func:`~webhook.core.placement.count_pods_per_unit` over the namespace's pods (placed pods
        counting as carrying their unit's marks until the watch shows them) and the assumed placements -
        :meth:`unit_counts_reference` is that call, and a property test holds the two equal - without
        walking the namespace's pods on every request: each pod is tallied per group and unit when its
        events (or its assumed placement) arrive, so a request reads one row and takes out the pod itself.
        """
        self.expire(now)
        tally = self._tally(policy)
        group = tuple(for_pod.labels.get(label) for label in policy.match_label_keys)
        counts = list(tally.counts.get(group, [0] * len(policy.units)))
        # The pod being placed never counts itself (``PodView.same_pod``: by uid, else by namespace/name).
        if for_pod.uid:
            own_keys = {for_pod.uid, for_pod.key}
        else:
            views = self._pods_by_ns.get(policy.namespace, {})
            own_keys = {key for key, view in views.items() if view.same_pod(for_pod)}
            own_keys.update(
                key
                for key in self._assumed_by_ns.get(policy.namespace, ())
                if key not in views and self._assumed[key].view.same_pod(for_pod)
            )
        for key in own_keys:
            own = tally.members.get(key)
            if own is not None and own[0] == group:
                counts[own[1]] -= 1
        return tuple(counts)

    def unit_counts_reference(self, policy: ResourcePolicy, for_pod: PodView, now: float) -> tuple[int, ...]:
        """:meth:`unit_counts` the plain way: the core's ``count_pods_per_unit`` over every pod view."""

        def views() -> Iterator[PodView]:
            by_key = self._pods_by_ns.get(policy.namespace, {})
            for key, view in by_key.items():
                marks = self._pending_marks.get(key)
                yield view if marks is None else _with_marks(view, marks)
            for key, assumption in self._assumed.items():
                if assumption.view.namespace == policy.namespace and key not in by_key:
                    yield assumption.view

        return count_pods_per_unit(
            policy, views(), self.nodes, now=now, for_pod=for_pod, assumed=self._assumed_core
        )

    def _decide(
        self,
        verb: str,
        pod: Mapping[str, Any],
        view: PodView,
        names: Sequence[str],
        *,
        now: float,
        given: Mapping[str, NodeView] | None,
    ) -> tuple[Decision, Assumption | None]:
        """The decision, and the placement to record should it be a filter that lets the pod through.

        The pod's request is read (quantities parsed) only when something counts it: its quota, or the
        placement a policy pod leaves behind. A pod neither applies to costs a view of its metadata and a
        few set operations over the node names.
        """
        key = _pod_key(view)
        policy = self.policy_for(view)
        # Prioritize only sees nodes the filter passed, so a pod its quota refuses never gets there.
        quota = quota_key(self.tree, view.namespace) if verb == "filter" else None
        counted = verb == "filter" and (quota is not None or policy is not None)
        request = self._requests.request(pod, view.key) if counted else EMPTY
        blocked = None if quota is None else self._quota_blocker(quota, request, key)
        if blocked is not None:
            quota_name, reason = blocked
            decision = Decision(
                verb,
                view.key,
                unresolvable=dict.fromkeys(names, reason),
                nodes=len(names),
                quota=quota_name,
                summary=reason,
            )
            return decision, None
        if policy is None:
            decision = self._unmanaged(verb, view, names, given, assume=quota is not None and bool(request))
            if not decision.assumed:
                return decision, None
            return decision, Assumption(view, decision.passing[0], now + self.assume_ttl, request)
        return self._managed(verb, view, key=key, request=request, policy=policy, names=names, now=now, given=given)

    def _known(
        self, names: Sequence[str], given: Mapping[str, NodeView] | None
    ) -> tuple[dict[str, str], dict[str, NodeView]]:
        """Names the node cache lacks: ``(failed reasons, views taken from the request's Node objects)``."""
        nodes = self.nodes
        if all(map(nodes.__contains__, names)):  # the usual case, checked in C
            return {}, {}
        missing = [name for name in names if name not in nodes]
        extra = {name: given[name] for name in missing if name in given} if given else {}
        return {name: UNKNOWN_NODE for name in missing if name not in extra}, extra

    def _unmanaged(
        self,
        verb: str,
        view: PodView,
        names: Sequence[str],
        given: Mapping[str, NodeView] | None,
        *,
        assume: bool = False,
    ) -> Decision:
        """A pod no policy selects: every node but the virtual ones (unless it opted in); ``assume`` marks
        the decision as one whose placement is recorded (its quota counts it)."""
        failed, extra = self._known(names, given)
        virtual_names: set[str] | frozenset[str] = self._virtual
        if extra:
            virtual_names = virtual_names | {name for name, node in extra.items() if node.is_virtual}
        virtual = [] if virtual_names.isdisjoint(names) else [name for name in names if name in virtual_names]
        unresolvable: dict[str, str] = {}
        summary = "no ResourcePolicy selects the pod"
        refused: set[str] = set(failed)
        if virtual:
            verdict = place_unmanaged(view, [self.nodes.get(name) or extra[name] for name in virtual])
            unresolvable.update(verdict.unresolvable)
            refused.update(name for name in virtual if name not in verdict.passing)
            summary = verdict.summary
        passing = tuple(names) if not refused else tuple(filterfalse(refused.__contains__, names))
        return Decision(
            verb,
            view.key,
            passing=passing,
            failed=failed,
            unresolvable=unresolvable,
            nodes=len(names),
            summary=summary,
            assumed=assume and bool(passing),
        )

    def _group_by_unit(
        self, policy: ResourcePolicy, names: Sequence[str], given: Mapping[str, NodeView] | None
    ) -> Grouping:
        """``names`` by the 0-based unit of ``policy`` they belong to (``None``: no unit; ``_MISSING``: a node
        nobody knows), each group in input order, the groups in order of first appearance.

        The node -> unit map is cached per policy, so this is one ``dict.get`` per name, in C (``map``): at a
        few thousand names a Python loop here cost more than everything else the filter does. The groups are
        then cut in C too: usually nearly every name lies in one unit - the pool the scheduler found room in
        - and the few others (the virtual node) are picked out by position (``list.index``) and deleted from
        a copy; with more than :data:`FEW_OUTSIDE` outside the unit of the middle name, each unit present is
        selected (``compress``). (The scheduler's names come in a different order on every call - its filter runs
        in parallel - so a grouping cannot be kept by the list.)
        """
        units = self._unit_map(policy)
        indices = list(map(units.get, names, repeat(_MISSING)))
        present = set(indices)
        if _MISSING in present:
            self._resolve_units(policy, units, names, indices, given)
            present = set(indices)
        if len(present) <= 1:
            return {indices[0]: tuple(names)} if indices else {}
        order = sorted(present, key=indices.index)
        largest = indices[len(indices) // 2]  # the largest unit, most likely: counted, not assumed
        if len(indices) - indices.count(largest) > FEW_OUTSIDE:
            return {index: tuple(compress(names, map(eq, indices, repeat(index)))) for index in order}
        groups: Grouping = {}
        outside: list[int] = []
        for index in order:
            if index == largest:
                continue
            positions: list[int] = []
            start = 0
            for _ in range(indices.count(index)):
                start = indices.index(index, start)
                positions.append(start)
                start += 1
            groups[index] = tuple(names[position] for position in positions)
            outside.extend(positions)
        rest = list(names)
        for position in sorted(outside, reverse=True):
            del rest[position]
        groups[largest] = tuple(rest)
        return {index: groups[index] for index in order}

    def _resolve_units(
        self,
        policy: ResourcePolicy,
        units: dict[str, int | None],
        names: Sequence[str],
        indices: list[int | None],
        given: Mapping[str, NodeView] | None,
    ) -> None:
        """Fill in ``indices`` where the unit cache had no entry (cached for nodes of the node cache; nodes
        the request alone describes are not): the first request after a node change, or an unknown node."""
        for position, index in enumerate(indices):
            if index != _MISSING:
                continue
            name = names[position]
            node = self._lookup(name, given)
            if node is None:
                continue
            found = unit_of_node(policy, node)
            if name in self.nodes:
                units[name] = found
            indices[position] = found

    def _unit_verdict(
        self,
        policy: ResourcePolicy,
        view: PodView,
        groups: Mapping[UnitKey, Sequence[str]],
        counts: tuple[int, ...],
        *,
        now: float,
        first_seen: float | None,
        given: Mapping[str, NodeView] | None,
    ) -> UnitVerdict:
        """:func:`place` over one representative node per unit present, by unit.

        ``place`` reads of its inputs only which units have candidates and the unit counts - and, under
        ``TimeoutOrExceedMax``, the clock and how long the pod has waited. So for the other two policies the
        verdict is kept per (units present, counts), a count only where the unit has a ``max`` (without
        one it shows nowhere): a burst of pods into a policy's first unit decides once.
        """
        representative = {index: self._lookup(group[0], given) for index, group in groups.items()}
        candidates = {index: node for index, node in representative.items() if node is not None}
        if policy.when_try_next is TryNextPolicy.TIMEOUT_OR_EXCEED_MAX:
            placement = place(policy, view, list(candidates.values()), counts, now, pod_first_seen=first_seen)
            return _by_unit(policy, placement, candidates)
        entry = self._verdicts.get(policy.key)
        if entry is None or entry[0] is not policy:
            entry = (policy, {})
            self._verdicts[policy.key] = entry
        shown = tuple(0 if unit.max is None else count for unit, count in zip(policy.units, counts, strict=True))
        cache_key = (frozenset(candidates), shown)
        verdict = entry[1].get(cache_key)
        if verdict is None:
            placement = place(policy, view, list(candidates.values()), counts, now, pod_first_seen=first_seen)
            verdict = _by_unit(policy, placement, candidates)
            if len(entry[1]) >= VERDICTS_PER_POLICY:
                entry[1].clear()
            entry[1][cache_key] = verdict
        return verdict

    def _managed(
        self,
        verb: str,
        view: PodView,
        *,
        key: str,
        request: Resources,
        policy: ResourcePolicy,
        names: Sequence[str],
        now: float,
        given: Mapping[str, NodeView] | None,
    ) -> tuple[Decision, Assumption | None]:
        groups = self._group_by_unit(policy, names, given)
        unknown = groups.pop(_MISSING, ())
        counts = self.unit_counts(policy, view, now)
        first_seen = None if view.created is not None else self._first_seen.setdefault(key, now)
        verdict = self._unit_verdict(policy, view, groups, counts, now=now, first_seen=first_seen, given=given)
        chosen = verdict.unit_index
        passing_groups: list[Sequence[str]] = []
        failed: dict[str, str] = dict.fromkeys(unknown, UNKNOWN_NODE) if verb == "filter" else {}
        unresolvable: dict[str, str] = {}
        score_groups: dict[int, list[str]] = {}
        passing_score = 0
        for index, group in groups.items():
            score = verdict.scores[index]
            if index in verdict.passing:
                passing_groups.append(group)
                passing_score = score
            elif verb == "filter":
                if index in verdict.failed:
                    failed.update(dict.fromkeys(group, verdict.failed[index]))
                else:
                    unresolvable.update(dict.fromkeys(group, verdict.unresolvable[index]))
            if score and verb != "filter":
                score_groups.setdefault(score, []).extend(group)
        # Every passing node lies in one unit, so this is that unit's group as it is (a tuple: no copy).
        passing = tuple(passing_groups[0] if len(passing_groups) == 1 else chain.from_iterable(passing_groups))
        summary = verdict.summary
        if chosen is not None and summary.endswith(" candidate node(s)"):
            # place() saw one representative per unit: count the real candidates.
            summary = f"{summary.rsplit(': ', 1)[0]}: {len(passing)} candidate node(s)"
        assumption = None
        if passing and verb == "filter":
            assumption = Assumption(view, passing[0], now + self.assume_ttl, request, policy.key, chosen)
        decision = Decision(
            verb,
            view.key,
            passing=passing,
            failed=failed,
            unresolvable=unresolvable,
            score_groups=score_groups,
            nodes=len(names),
            policy=policy.key,
            unit=None if chosen is None else policy.describe_unit(chosen),
            summary=summary,
            assumed=assumption is not None,
            retry_at=verdict.retry_at,
            passing_score=passing_score,
            scheduler_sampled=verb == "filter" and len(policy.units) > 1 and self._sampled_by_scheduler(names),
        )
        return decision, assumption

    def _sampled_by_scheduler(self, names: Sequence[str]) -> bool:
        """Whether the scheduler cut this request to its default sample: :func:`looks_sampled`, and other
        nodes than the last request that looked so. A sampling scheduler starts each cycle where the last
        one stopped, so its samples move on; a fully scanning one whose own filters pass exactly that many
        nodes names the same ones each time (and a sample that does not move has missed nothing)."""
        if not looks_sampled(len(names), len(self.nodes)):
            return False
        current = frozenset(names)
        previous, self._sample_seen = self._sample_seen, current
        return previous is not None and previous != current

    def filter(
        self,
        pod: Mapping[str, Any],
        names: Sequence[str],
        now: float,
        given_nodes: Sequence[Mapping[str, Any]] | None = None,
    ) -> Decision:
        """Which of ``names`` the pod may use; records the placement when some node passes and a policy or
        a quota governs the pod (``given_nodes``: the request's Node objects, when the scheduler sent them).

        :meth:`decide_filter` and its record in one call.
        """
        decision, record = self.decide_filter(pod, names, now, given_nodes)
        record()
        return decision

    def decide_filter(
        self,
        pod: Mapping[str, Any],
        names: Sequence[str],
        now: float,
        given_nodes: Sequence[Mapping[str, Any]] | None = None,
    ) -> tuple[Decision, Callable[[], None]]:
        """:meth:`filter`'s decision, and the record of it - the placement assumed (or a stale one dropped)
        and the verdict kept for prioritize - as a call to make before any other request is decided.

        The HTTP handler answers the scheduler first and records right after, in the same callback
        (:attr:`webhook.extender.http.Reply.then`), so the read of the counts and the placement it leads
        to still happen with no other request in between, and the scheduler's serial cycle does not wait
        for the bookkeeping.

        With :attr:`sample`, more passing nodes than the scheduler would have scored by default are cut to that
        many (:func:`scheduler_sample_size` of ``names``), a window that moves on with every call: the
        scheduler filters every node so that the extender sees each unit (``percentageOfNodesToScore: 100``,
        :mod:`webhook.extender.config`), and this gives it back its own default trade-off - to score about
        as many nodes as it would have sampled - but within the unit the pod must use. Without the window
        the scheduler scored (and decoded the names of) 500 nodes instead of 230 on 500 kwok nodes: it
        placed 212 pods/s instead of 239 (``bench/extender_bench.py``, ``filter, every node``; ``kq extender
        --pass-every-node`` turns the window off).
        """
        self.expire(now)
        given = None if given_nodes is None else {view.name: view for view in map(node_view, given_nodes)}
        view = pod_view(pod)
        decision, assumption = self._decide("filter", pod, view, names, now=now, given=given)
        if self.sample:
            decision = self._sampled(decision, scheduler_sample_size(len(names)))

        def record() -> None:
            if view.uid and decision.passing:
                self._remember_filter(view.uid, decision)
            key = _pod_key(view)
            if assumption is None:
                self._drop_assumption(key)
            else:
                self._assume(key, assumption)

        return decision, record

    def _sampled(self, decision: Decision, size: int) -> Decision:
        """``decision`` with at most ``size`` passing nodes: the window starting where the last one ended."""
        passing = decision.passing
        if len(passing) <= size:
            return decision
        window, self._sample_start = rotating_window(passing, self._sample_start, size)
        return replace(decision, passing=window, sampled_from=len(passing))

    def _remember_filter(self, uid: str, decision: Decision) -> None:
        """Keep the verdict for the prioritize call a scheduler configured with one makes next (the oldest
        of :data:`LAST_FILTERS` goes; without prioritize calls this is a bounded, cheap ring)."""
        self._last_filter[uid] = decision
        if len(self._last_filter) > LAST_FILTERS:
            self._last_filter.popitem(last=False)

    def prioritize(self, pod: Mapping[str, Any], names: Sequence[str], now: float) -> Decision:
        """Scores 0..10 for ``names``: the pod's usable units in order score 10, 9, ...; other nodes 0.

        kube-scheduler asks right after this pod's filter, about nodes that filter passed - which all lie
        in one unit and score alike. That filter's verdict then answers without deciding again.
        """
        self.expire(now)
        uid = _uid(pod)
        last = self._last_filter.pop(uid, None) if uid else None
        if last is not None and set(last.passing).issuperset(names):
            return Decision(
                "prioritize",
                last.pod,
                score_groups={last.passing_score: list(names)} if last.passing_score and names else {},
                nodes=len(names),
                policy=last.policy,
                unit=last.unit,
                summary=f"as filtered: {last.summary}",
            )
        decision, _ = self._decide("prioritize", pod, pod_view(pod), names, now=now, given=None)
        return decision
