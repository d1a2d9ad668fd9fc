"""kube-scheduler's extender wire format (``k8s.io/kube-scheduler/extender/v1``), decoded and encoded with orjson.

The Go types carry no JSON tags, so the keys are the Go field names, sent exactly so:

* request (filter and prioritize): ``ExtenderArgs`` ``{"Pod": {...}, "Nodes": null, "NodeNames": ["n1", ...]}``;
  with ``nodeCacheCapable: true`` only ``NodeNames`` is set, otherwise ``Nodes`` is a ``NodeList``;
* filter reply: ``ExtenderFilterResult`` ``{"Nodes": null, "NodeNames": [...], "FailedNodes": {node: why},
  "FailedAndUnresolvableNodes": {node: why}, "Error": ""}``. A reply without ``NodeNames`` (and without
  ``Nodes``) rejects every node, so passing nodes are always echoed - in the form the request used;
* prioritize reply: ``HostPriorityList`` ``[{"Host": "n1", "Score": 7}, ...]`` with scores 0..10;
* preempt request: ``ExtenderPreemptionArgs`` ``{"Pod": {...}, "NodeNameToVictims": null,
  "NodeNameToMetaVictims": {"n1": {"Pods": [{"UID": "..."}], "NumPDBViolations": 0}}}`` (with
  ``nodeCacheCapable: true`` only the meta form, pod UIDs, is set; otherwise ``NodeNameToVictims`` carries whole
  Pods); preempt reply: ``ExtenderPreemptionResult`` ``{"NodeNameToMetaVictims": {...}}``, the nodes whose
  victims may go. The scheduler maps each UID back to a pod on that node (an unknown one is an error), and a
  node listed without victims is an error for an extender that is not ``ignorable``: leave such nodes out.

The scheduler decodes keys case-insensitively (Go's ``encoding/json``), so requests are read that way too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypedDict, TypeGuard

import orjson

from webhook.api.objects import Obj

MIN_SCORE = 0
MAX_SCORE = 10
"""``extenderv1.MaxExtenderPriority``: the scheduler multiplies it by ``weight × 10``."""


class ProtocolError(ValueError):
    """A request body that is not an ``ExtenderArgs``: says what is wrong."""


class NodeList(TypedDict):
    """A ``NodeList`` as a filter reply echoes it: the passing nodes, as the request sent them."""

    items: list[Obj]


class ExtenderFilterResult(TypedDict):
    """The filter reply; exactly one of ``Nodes`` and ``NodeNames`` is set (the form the request used)."""

    Nodes: NodeList | None
    NodeNames: Sequence[str] | None
    FailedNodes: Mapping[str, str]
    FailedAndUnresolvableNodes: Mapping[str, str]
    Error: str


class HostPriority(TypedDict):
    """One entry of a prioritize reply (``HostPriorityList``)."""

    Host: str
    Score: int


class MetaPod(TypedDict):
    """A victim as the meta form names it: its UID."""

    UID: str


class MetaVictims(TypedDict):
    """The victims on one node, in the meta form."""

    Pods: list[MetaPod]
    NumPDBViolations: int


class ExtenderPreemptionResult(TypedDict):
    """The preempt reply: the nodes whose victims may go."""

    NodeNameToMetaVictims: dict[str, MetaVictims]


@dataclass(frozen=True, slots=True)
class ExtenderArgs:
    """One decoded request. ``node_names`` is always filled (from ``NodeNames``, else from ``Nodes``);
    ``nodes`` holds the full Node objects when the scheduler sent them (``nodeCacheCapable: false``)."""

    pod: Obj
    node_names: Sequence[str]
    nodes: Sequence[Obj] | None = None

    @property
    def by_name(self) -> bool:
        """Whether the scheduler sent node names only (the reply must then carry ``NodeNames``)."""
        return self.nodes is None

    def pod_key(self) -> str:
        """``namespace/name`` of the pod, for logs."""
        metadata = self.pod.get("metadata")
        if not isinstance(metadata, Mapping):
            return "?/?"
        return f"{metadata.get('namespace') or ''}/{metadata.get('name') or ''}"


def _field(body: Obj, name: str) -> object:
    """``body[name]``, matching the key case-insensitively as Go does when the exact spelling is absent."""
    if name in body:
        return body[name]
    lower = name.lower()
    for key, value in body.items():
        if isinstance(key, str) and key.lower() == lower:
            return value
    return None


def _with_pod(raw: bytes, what: str) -> tuple[Obj, Obj]:
    """Decode a body that must be a JSON object of type ``what`` with a ``Pod`` object: the body and the pod;
    :class:`ProtocolError` naming ``what`` when it is not one."""
    try:
        body: object = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise ProtocolError(f"the request body is not JSON: {error}") from None
    if not isinstance(body, dict):
        raise ProtocolError(f"expected an {what} object, got {type(body).__name__}")
    pod = _field(body, "Pod")
    if not isinstance(pod, dict):
        raise ProtocolError(f"{what}.Pod is missing or not an object")
    return body, pod


def parse_args(raw: bytes) -> ExtenderArgs:
    """Decode an ``ExtenderArgs`` body; :class:`ProtocolError` when it is not one."""
    body, pod = _with_pod(raw, "ExtenderArgs")
    names = _field(body, "NodeNames")
    if names is not None:
        if not isinstance(names, list) or not _all_strings(names):
            raise ProtocolError("ExtenderArgs.NodeNames must be a list of node names")
        return ExtenderArgs(pod=pod, node_names=names)
    node_list = _field(body, "Nodes")
    if node_list is None:
        return ExtenderArgs(pod=pod, node_names=[])
    items = _field(node_list, "items") if isinstance(node_list, dict) else None
    if items is None:
        items = []
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise ProtocolError("ExtenderArgs.Nodes.items must be a list of Node objects")
    nodes: list[Obj] = items
    return ExtenderArgs(pod=pod, node_names=[_node_name(node) for node in nodes], nodes=nodes)


def _all_strings(items: list[object]) -> TypeGuard[list[str]]:
    """Whether every item is a ``str``. JSON decodes to exact types, so the set of the items' types says it;
    ``map`` and ``set`` run in C - a per-name ``isinstance`` in Python cost more than the whole decision."""
    return _STR_ONLY.issuperset(map(type, items))


_STR_ONLY = frozenset({str})


def _node_name(node: Obj) -> str:
    metadata = node.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    if not isinstance(name, str) or not name:
        raise ProtocolError("a Node in ExtenderArgs.Nodes has no metadata.name")
    return name


def filter_reply(
    args: ExtenderArgs,
    passing: Sequence[str],
    failed: Mapping[str, str],
    unresolvable: Mapping[str, str],
) -> bytes:
    """An ``ExtenderFilterResult`` that lets ``passing`` through (names from the request only), in the form
    the request used (``NodeNames``, or ``Nodes`` with the request's Node objects)."""
    nodes_field: NodeList | None = None
    names_field: Sequence[str] | None = passing  # orjson writes a tuple or a list alike: no copy
    if not args.by_name:
        assert args.nodes is not None
        keep = set(passing)
        nodes_field = {"items": [node for node, name in zip(args.nodes, args.node_names, strict=True) if name in keep]}
        names_field = None
    result: ExtenderFilterResult = {
        "Nodes": nodes_field,
        "NodeNames": names_field,
        "FailedNodes": failed,
        "FailedAndUnresolvableNodes": unresolvable,
        "Error": "",
    }
    return orjson.dumps(result)


def filter_error(message: str) -> bytes:
    """An ``ExtenderFilterResult`` with ``Error`` set: the scheduler fails this scheduling attempt (and
    retries the pod later) unless the extender is ``ignorable``."""
    result: ExtenderFilterResult = {
        "Nodes": None, "NodeNames": None, "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": message
    }
    return orjson.dumps(result)


def priority_reply(names: Sequence[str], groups: Mapping[int, Sequence[str]]) -> bytes:
    """A ``HostPriorityList`` with one entry per name: the score of the group (1..10) it is in, else 0.

    Entries come grouped by score (the scheduler keys them by host; order carries no meaning). Node names
    are DNS subdomains, so the list is joined as text - with a check, and orjson for anything unusual.
    """
    for score in groups:
        if not MIN_SCORE < score <= MAX_SCORE:
            raise ValueError(f"extender scores are 0..10 (groups 1..10), got {score}")
    scored = {name for group in groups.values() for name in group} if groups else set()
    parts: list[tuple[int, Sequence[str]]] = [(score, group) for score, group in groups.items() if group]
    zero = [name for name in names if name not in scored] if scored else names
    if zero:
        parts.append((MIN_SCORE, zero))
    text = "".join(name for _, group in parts for name in group)
    if '"' in text or "\\" in text or not text.isprintable():
        scores: list[HostPriority] = [{"Host": host, "Score": score} for score, group in parts for host in group]
        return orjson.dumps(scores)
    entries = (
        '{"Host":"' + f'","Score":{score}}},{{"Host":"'.join(group) + f'","Score":{score}}}' for score, group in parts
    )
    return ("[" + ",".join(entries) + "]").encode()


@dataclass(frozen=True, slots=True)
class NodeVictims:
    """The victims the scheduler proposes on one node: their UIDs (and whole Pods when it sent them)."""

    uids: tuple[str, ...]
    pdb_violations: int = 0
    pods: tuple[Obj, ...] | None = None


@dataclass(frozen=True, slots=True)
class PreemptionArgs:
    """One decoded ``ExtenderPreemptionArgs``."""

    pod: Obj
    victims: Mapping[str, NodeVictims]

    def pod_key(self) -> str:
        """``namespace/name`` of the preemptor, for logs."""
        return ExtenderArgs(self.pod, ()).pod_key()


def _victims_of(node: str, entry: object, whole: bool) -> NodeVictims:
    if not isinstance(entry, dict):
        raise ProtocolError(f"the victims of node {node!r} must be an object")
    pods = _field(entry, "Pods")
    if pods is None:
        pods = []
    if not isinstance(pods, list) or not all(isinstance(item, dict) for item in pods):
        raise ProtocolError(f"the victims of node {node!r}: Pods must be a list of objects")
    violations = _field(entry, "NumPDBViolations")
    if violations is None:
        violations = 0
    if isinstance(violations, bool) or not isinstance(violations, int):
        raise ProtocolError(f"the victims of node {node!r}: NumPDBViolations must be an integer")
    if whole:
        uids = tuple(str((item.get("metadata") or {}).get("uid") or "") for item in pods)
    else:
        uids = tuple(str(_field(item, "UID") or "") for item in pods)
    if not all(uids):
        raise ProtocolError(f"a victim on node {node!r} has no UID")
    return NodeVictims(uids, violations, tuple(pods) if whole else None)


def parse_preemption_args(raw: bytes) -> PreemptionArgs:
    """Decode an ``ExtenderPreemptionArgs`` body (either victim form); :class:`ProtocolError` when it is not one."""
    body, pod = _with_pod(raw, "ExtenderPreemptionArgs")
    meta = _field(body, "NodeNameToMetaVictims")
    whole = _field(body, "NodeNameToVictims")
    given, is_whole = (meta, False) if meta is not None else (whole, True)
    if given is None:
        given = {}
    if not isinstance(given, dict):
        raise ProtocolError("ExtenderPreemptionArgs: the victims must be an object keyed by node name")
    return PreemptionArgs(pod, {str(node): _victims_of(str(node), entry, is_whole) for node, entry in given.items()})


def preemption_reply(kept: Mapping[str, NodeVictims]) -> bytes:
    """An ``ExtenderPreemptionResult`` listing the nodes in ``kept`` with their victims (UIDs)."""
    result: ExtenderPreemptionResult = {
        "NodeNameToMetaVictims": {
            node: {"Pods": [{"UID": uid} for uid in victims.uids], "NumPDBViolations": victims.pdb_violations}
            for node, victims in kept.items()
        }
    }
    return orjson.dumps(result)
