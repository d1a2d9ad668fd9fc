"""The ElasticQuotaTree: parsing, validation, namespace -> leaf, queue names (usage: :mod:`webhook.core.ledger`).

Node identity is the node's name, matched case-insensitively (names are unique ignoring case). Paths are
tuples of names from the root: ``("root", "Department-a")``; ``"/".join(path)`` is the quota's full name
(``root/Department-a``), as written in the ``kube-queue/quota-fullname`` annotation.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from webhook.api.names import MAX_JOBS, TREE_NAMESPACE
from webhook.api.objects import Obj
from webhook.core.quantity import NANO, format_quantity
from webhook.core.quota_attributes import attribute_problems
from webhook.core.resources import EMPTY, ResourceError, Resources, is_binary_resource

PREEMPT_POLICY = "preempt-policy"
PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"

"""The only namespace where an ElasticQuotaTree is honoured."""
MAX_DEPTH = 32
"""Deepest tree accepted (levels, the root being level 1)."""
QUEUE_NAME_MAX = 63
"""Queue names are DNS-1123 labels: at most 63 characters."""

_DNS_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?", re.ASCII)
LABEL_VALUE_MAX = 63
"""Kubernetes label values: at most 63 characters."""
_LABEL_VALUE = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?", re.ASCII)
"""A non-empty Kubernetes label value (``k8s.io/apimachinery`` ``IsValidLabelValue``)."""


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken rule: where (node path), which rule, and a message a user can act on."""

    path: str
    rule: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message} [rule: {self.rule}]"


class QuotaTreeError(ValueError):
    """A tree that breaks one or more rules; ``violations`` lists each, the message all of them."""

    def __init__(self, violations: list[Violation]) -> None:
        self.violations = tuple(violations)
        super().__init__("; ".join(str(v) for v in violations))


@dataclass(frozen=True, slots=True)
class QuotaNode:
    """One node of the tree. ``min``/``max`` are resource lists; a resource absent from ``max`` is unlimited
    at this node, a resource absent from ``min`` is guaranteed zero."""

    name: str
    path: tuple[str, ...]
    min: Resources = EMPTY
    max: Resources = EMPTY
    namespaces: tuple[str, ...] = ()
    children: tuple[QuotaNode, ...] = ()
    attributes: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def full_name(self) -> str:
        """``root/Department-a``."""
        return "/".join(self.path)

    @property
    def is_leaf(self) -> bool:
        return not self.children

    @property
    def key(self) -> str:
        """The case-insensitive identity used in maps (lower-cased name)."""
        return self.name.lower()


@dataclass(frozen=True, slots=True)
class QuotaTree:
    """A validated tree with lookup maps. Build it with :func:`parse_tree` or :func:`build_tree`."""

    root: QuotaNode
    nodes: Mapping[str, QuotaNode]
    """Every node by its key (lower-cased name)."""
    parents: Mapping[str, str | None]
    """Node key -> parent key (``None`` for the root)."""
    leaf_by_namespace: Mapping[str, str]
    """Namespace -> key of the leaf that holds it."""

    def node(self, name: str) -> QuotaNode:
        """The node named ``name`` (any case); ``KeyError`` naming it when absent."""
        try:
            return self.nodes[name.lower()]
        except KeyError:
            raise KeyError(f"no quota node named {name!r}") from None

    def chain(self, name: str) -> tuple[QuotaNode, ...]:
        """The node and its ancestors, from the node up to the root inclusive."""
        out: list[QuotaNode] = []
        key: str | None = name.lower()
        while key is not None:
            out.append(self.nodes[key])
            key = self.parents[key]
        return tuple(out)

    def leaf_for_namespace(self, namespace: str) -> QuotaNode | None:
        """The leaf whose ``namespaces`` lists ``namespace``; ``None`` when the namespace is unmanaged."""
        key = self.leaf_by_namespace.get(namespace)
        return None if key is None else self.nodes[key]

    def leaves(self) -> tuple[QuotaNode, ...]:
        """Every leaf, in tree order."""
        return tuple(node for node in self.nodes.values() if node.is_leaf)


def namespace_quota_label(tree: QuotaTree, namespace: str) -> str | None:
    """The value of a namespace's quota label (``kube-queue.x-k8s.io/quota``): the name of the leaf that lists
    it, as its jobs and pods are labelled; ``None`` (no label) for a namespace the tree does not list."""
    leaf = tree.leaf_for_namespace(namespace)
    return None if leaf is None else leaf.name


# Validation -------------------------------------------------------------------------------------------------


def _text(name: str, nanos: int) -> str:
    """The canonical quantity text of ``nanos`` of resource ``name``."""
    return format_quantity(nanos, is_binary_resource(name))


def _amount(name: str, nanos: int | None) -> str:
    """``cpu=10`` / ``memory=10Gi`` / ``cpu=unset`` for messages."""
    return f"{name}=unset" if nanos is None else f"{name}={_text(name, nanos)}"


def _name_problem(name: object) -> str | None:
    """Why ``name`` cannot name a quota node, or ``None`` when it can."""
    if not isinstance(name, str) or not name:
        return "every node needs a non-empty name"
    if name != name.strip():
        return f"the name {name!r} has spaces around it; remove them"
    if "/" in name:
        return f"the name {name!r} contains '/', which separates names in full names such as root/Department-a"
    return None


def _label_value_problem(name: str) -> str | None:
    """Why ``name`` cannot be a Kubernetes label value, or ``None``: a leaf's name becomes the quota label of
    every job and pod under it (and a node's name is matched against pods' labels), so a name that cannot be
    a label value would make every Job and Pod create in its namespaces fail."""
    rule = (
        "a node's name becomes the quota label (quota.scheduling.alibabacloud.com/name) of every job and pod "
        "under it, so it must be a valid Kubernetes label value: at most 63 characters, ASCII letters, digits, "
        "'-', '_' and '.', starting and ending with a letter or digit"
    )
    if len(name) > LABEL_VALUE_MAX:
        return f"the name {name!r} has {len(name)} characters; {rule}; shorten it"
    if not _LABEL_VALUE.fullmatch(name):
        return f"the name {name!r} is not a valid label value; {rule}; rename the node (for example {_suggest(name)!r})"
    return None


def _suggest(name: str) -> str:
    """A label-value spelling of ``name`` for the refusal message."""
    cleaned = re.sub(r"[^-A-Za-z0-9_.]+", "-", name, flags=re.ASCII).strip("-_.")
    return cleaned[:LABEL_VALUE_MAX].rstrip("-_.") or "team-1"


def _check_quantities(node: QuotaNode, where: str, out: list[Violation]) -> None:
    for field_name, resources in (("min", node.min), ("max", node.max)):
        for name, nanos in resources.items():
            if nanos < 0:
                out.append(Violation(where, "quantity",
                                     f"{field_name} {_amount(name, nanos)} is negative; use zero or more"))
            elif name == MAX_JOBS and nanos % NANO:
                out.append(Violation(where, "quantity",
                                     f"{field_name} {_amount(name, nanos)} is not a whole number of jobs; "
                                     "use an integer"))


def _check_min_le_max(node: QuotaNode, where: str, out: list[Violation]) -> None:
    for name in sorted(node.min):
        low, high = node.min[name], node.max.get(name)
        if high is not None and low > high:
            out.append(Violation(where, "min-le-max",
                                 f"min {_amount(name, low)} is greater than max {_amount(name, high)}; "
                                 "lower min or raise max"))


def _check_root(node: QuotaNode, where: str, out: list[Violation]) -> None:
    low, high = node.min.without_zeros(), node.max.without_zeros()
    differ = sorted(name for name in set(low) | set(high) if low.get(name) != high.get(name))
    if differ:
        detail = ", ".join(f"min {_amount(n, low.get(n, 0))} vs max {_amount(n, high.get(n))}" for n in differ)
        out.append(Violation(where, "root-min-eq-max",
                             f"the root's min and max must be equal (the enterprise's total): {detail}; "
                             "set both to the cluster's total"))


def _check_children_min(node: QuotaNode, where: str, out: list[Violation]) -> None:
    summed: dict[str, int] = {}
    for child in node.children:
        for name, nanos in child.min.items():
            summed[name] = summed.get(name, 0) + nanos
    for name in sorted(summed):
        own = node.min.get_or_zero(name)
        if summed[name] > own:
            out.append(Violation(where, "children-min-le-parent-min",
                                 f"the children's min add up to {_amount(name, summed[name])}, more than this "
                                 f"node's min {_amount(name, own)}; lower the children's min or raise this "
                                 "node's min"))


def _check_child_max(child: QuotaNode, where: str, parent: QuotaNode, parent_where: str,
                     out: list[Violation]) -> None:
    for name in sorted(child.max):
        cap = parent.max.get(name)
        if cap is not None and child.max[name] > cap:
            out.append(Violation(where, "child-max-le-parent-max",
                                 f"max {_amount(name, child.max[name])} is greater than the parent's "
                                 f"({parent_where}) max {_amount(name, cap)}; lower it to at most {_text(name, cap)}"))


def validate_tree(root: QuotaNode) -> list[Violation]:
    """Every rule of docs/quota-tree.md broken by the tree under ``root`` (empty when valid), in tree order.

    Rules (ids): ``name`` (non-empty, no ``/``), ``label-value`` (a name is a valid Kubernetes label value: it
    becomes the quota label of the jobs and pods under it), ``unique-names`` (ignoring case), ``path`` (each node's
    ``path`` is its names from the root), ``quantity`` (no negative amounts; whole ``kube-queue/max-jobs``),
    ``min-le-max``, ``root-min-eq-max``, ``children-min-le-parent-min``, ``child-max-le-parent-max``
    (a resource absent from a ``max`` is unlimited there), ``namespaces-only-on-leaves``,
    ``namespace-name`` (DNS-1123 labels), ``namespace-in-one-leaf``, ``queue-name-collision`` (two leaf
    namespaces that would share one Queue), ``attribute`` (:mod:`webhook.core.quota_attributes`) and ``depth``
    (at most :data:`MAX_DEPTH` levels). The seed's
    "root max >= sum of children's max" is deliberately not enforced.
    """
    out: list[Violation] = []
    names: dict[str, str] = {}
    namespaces: dict[str, str] = {}
    queues: dict[str, tuple[str, str]] = {}
    stack: list[tuple[QuotaNode, tuple[str, ...], QuotaNode | None]] = [(root, (root.name,), None)]
    while stack:
        node, path, parent = stack.pop()
        where = "/".join(path)
        problem = _name_problem(node.name)
        label_problem = _label_value_problem(node.name) if problem is None else None
        if problem is not None:
            out.append(Violation(where or "<unnamed>", "name", problem))
        elif label_problem is not None:
            out.append(Violation(where, "label-value", label_problem))
        elif node.key in names:
            out.append(Violation(where, "unique-names",
                                 f"the name {node.name!r} is already used by {names[node.key]} (names are "
                                 "compared ignoring case); rename one of them"))
        else:
            names[node.key] = where
        if node.path != path:
            out.append(Violation(where, "path",
                                 f"the node's path {'/'.join(node.path)!r} does not match its place in the "
                                 f"tree; build nodes with their full path from the root"))
        _check_quantities(node, where, out)
        _check_min_le_max(node, where, out)
        out.extend(Violation(where, "attribute", problem)
                   for problem in attribute_problems(node.attributes, bool(node.children)))
        if parent is None:
            _check_root(node, where, out)
        else:
            _check_child_max(node, where, parent, "/".join(path[:-1]), out)
        if node.children:
            _check_children_min(node, where, out)
            if node.namespaces:
                out.append(Violation(where, "namespaces-only-on-leaves",
                                     f"namespaces {', '.join(node.namespaces)} are on a node with children; "
                                     "move them to a leaf (a node without children)"))
        for namespace in node.namespaces:
            if not isinstance(namespace, str) or len(namespace) > 63 or not _DNS_LABEL.fullmatch(namespace):
                out.append(Violation(where, "namespace-name",
                                     f"{namespace!r} is not a valid namespace name (lower-case letters, digits "
                                     "and '-', starting and ending with a letter or digit, at most 63 "
                                     "characters); fix the spelling"))
                continue
            if namespace in namespaces:
                other = namespaces[namespace]
                twice = "twice in this node" if other == where else f"already in {other}"
                out.append(Violation(where, "namespace-in-one-leaf",
                                     f"namespace {namespace!r} is listed {twice}; list each namespace in "
                                     "exactly one leaf"))
                continue
            namespaces[namespace] = where
            if node.is_leaf and problem is None:
                queue = queue_name(node.name, namespace)
                if queue in queues:
                    leaf, first = queues[queue]
                    out.append(Violation(where, "queue-name-collision",
                                         f"namespace {namespace!r} would share the Queue {queue!r} with "
                                         f"namespace {first!r} of {leaf}; rename the node or the namespace"))
                else:
                    queues[queue] = (where, namespace)
        if node.children and len(path) >= MAX_DEPTH:
            out.append(Violation(where, "depth",
                                 f"the tree is deeper than {MAX_DEPTH} levels; flatten it"))
            continue
        stack.extend((child, (*path, child.name), node) for child in reversed(node.children))
    return out


def build_tree(root: QuotaNode) -> QuotaTree:
    """Validate ``root`` and index it; raises :class:`QuotaTreeError` listing every broken rule."""
    violations = validate_tree(root)
    if violations:
        raise QuotaTreeError(violations)
    nodes: dict[str, QuotaNode] = {}
    parents: dict[str, str | None] = {}
    leaf_by_namespace: dict[str, str] = {}
    stack: list[tuple[QuotaNode, str | None]] = [(root, None)]
    while stack:
        node, parent = stack.pop()
        nodes[node.key] = node
        parents[node.key] = parent
        for namespace in node.namespaces:
            leaf_by_namespace[namespace] = node.key
        stack.extend((child, node.key) for child in reversed(node.children))
    return QuotaTree(
        root=root,
        nodes=MappingProxyType(nodes),
        parents=MappingProxyType(parents),
        leaf_by_namespace=MappingProxyType(leaf_by_namespace),
    )


# Parsing ----------------------------------------------------------------------------------------------------


def _parse_resources(raw: object, field_name: str, where: str, out: list[Violation]) -> Resources:
    if raw is None:
        return EMPTY
    if not isinstance(raw, Mapping):
        out.append(Violation(where, "type",
                             f"{field_name} must be a resource list such as {{cpu: 10, memory: 10Gi}}, "
                             f"got {raw!r}"))
        return EMPTY
    try:
        return Resources.parse(raw)
    except ResourceError as error:
        out.append(Violation(where, "quantity",
                             f"{field_name}: {error}; write quantities like 10, 500m, 1.5 or 10Gi"))
        return EMPTY


def _parse_strings(raw: object, field_name: str, where: str, out: list[Violation]) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, Sequence) or isinstance(raw, str | bytes) or not all(
        isinstance(item, str) for item in raw
    ):
        out.append(Violation(where, "type", f"{field_name} must be a list of names, got {raw!r}"))
        return ()
    return tuple(raw)


def _parse_attributes(raw: object, where: str, out: list[Violation]) -> Mapping[str, str]:
    if raw is None:
        return MappingProxyType({})
    if not isinstance(raw, Mapping) or not all(
        isinstance(key, str) and isinstance(value, str) for key, value in raw.items()
    ):
        out.append(Violation(where, "type",
                             f"attributes must map names to strings (quote values such as \"true\"), "
                             f"got {raw!r}"))
        return MappingProxyType({})
    return MappingProxyType(dict(raw))


def _parse_node(raw: object, parent: tuple[str, ...], where: str, out: list[Violation]) -> QuotaNode:
    """One node and its subtree; problems go to ``out`` (never raises on junk)."""
    if not isinstance(raw, Mapping):
        out.append(Violation(where, "type", f"a quota node must be an object with a name, got {raw!r}"))
        return QuotaNode(name=where, path=(*parent, where))
    name = raw.get("name")
    if isinstance(name, str) and name:
        where = "/".join((*parent, name))
    problem = _name_problem(name)
    if problem is not None:
        out.append(Violation(where, "name", problem))
    label = name if isinstance(name, str) and name else where
    path = (*parent, label)
    children_raw = raw.get("children")
    children: list[QuotaNode] = []
    if children_raw is not None and (not isinstance(children_raw, Sequence) or isinstance(children_raw, str | bytes)):
        out.append(Violation(where, "type", f"children must be a list of quota nodes, got {children_raw!r}"))
    elif children_raw:
        if len(path) >= MAX_DEPTH:
            out.append(Violation(where, "depth", f"the tree is deeper than {MAX_DEPTH} levels; flatten it"))
        else:
            children = [
                _parse_node(child, path, f"{where}/children[{index}]", out)
                for index, child in enumerate(children_raw)
            ]
    return QuotaNode(
        name=label,
        path=path,
        min=_parse_resources(raw.get("min"), "min", where, out),
        max=_parse_resources(raw.get("max"), "max", where, out),
        namespaces=_parse_strings(raw.get("namespaces"), "namespaces", where, out),
        children=tuple(children),
        attributes=_parse_attributes(raw.get("attributes"), where, out),
    )


def _parse_spec(spec: object) -> tuple[QuotaNode | None, list[Violation]]:
    out: list[Violation] = []
    if not isinstance(spec, Mapping):
        return None, [Violation("spec", "type", f"spec must be an object with a root node, got {spec!r}")]
    raw_root = spec.get("root")
    if raw_root is None:
        return None, [Violation("spec.root", "type",
                                "spec.root is missing; declare the tree under spec.root with name, min and max")]
    root = _parse_node(raw_root, (), "spec.root", out)
    return root, out


def spec_violations(spec: object) -> list[Violation]:
    """Every problem of an ElasticQuotaTree ``spec``: its shape and types first; when those are sound,
    every rule of :func:`validate_tree`. Never raises."""
    root, violations = _parse_spec(spec)
    if violations or root is None:
        return violations
    return validate_tree(root)


def parse_tree(spec: Obj) -> QuotaTree:
    """Read an ElasticQuotaTree ``spec`` (``{"root": {name, min, max, namespaces, children, attributes}}``)
    into a validated :class:`QuotaTree`; raises :class:`QuotaTreeError` listing every problem."""
    root, violations = _parse_spec(spec)
    if violations or root is None:
        raise QuotaTreeError(violations)
    return build_tree(root)


def validate_tree_object(obj: Obj, existing_trees: int) -> list[Violation]:
    """Every reason to refuse a whole ElasticQuotaTree object: it must live in ``kube-system``, be the only
    tree in the cluster (``existing_trees`` counts the *other* trees), and its spec must be valid."""
    if not isinstance(obj, Mapping):
        return [Violation("ElasticQuotaTree", "type", f"expected an ElasticQuotaTree object, got {obj!r}")]
    out: list[Violation] = []
    metadata = obj.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    namespace = metadata.get("namespace")
    if namespace != TREE_NAMESPACE:
        out.append(Violation("metadata.namespace", "tree-namespace",
                             f"an ElasticQuotaTree is only honoured in namespace {TREE_NAMESPACE!r}, not "
                             f"{namespace!r}; create it with -n {TREE_NAMESPACE}"))
    if existing_trees > 0:
        out.append(Violation("metadata.name", "one-tree-per-cluster",
                             f"the cluster already has an ElasticQuotaTree ({existing_trees} other); only one "
                             f"is allowed: edit it instead (kubectl -n {TREE_NAMESPACE} edit eqtree)"))
    out.extend(spec_violations(obj.get("spec")))
    return out


# Names ------------------------------------------------------------------------------------------------------


def queue_name(leaf_name: str, namespace: str) -> str:
    """The Queue of a leaf's namespace: ``root-<leaf>-<namespace>`` in lower case (``root-department-a-user-a``).

    When that is not already a DNS-1123 label of at most 63 characters, invalid characters become ``-``
    (runs collapsed, ends trimmed), the name is cut to fit and a short stable hash of the inputs is
    appended, so distinct inputs get distinct names.
    """
    plain = f"root-{leaf_name}-{namespace}".lower()
    if len(plain) <= QUEUE_NAME_MAX and _DNS_LABEL.fullmatch(plain):
        return plain
    digest = hashlib.sha256(f"{leaf_name}\x00{namespace}".encode()).hexdigest()[:10]
    cleaned = re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", plain, flags=re.ASCII)).strip("-")
    head = cleaned[: QUEUE_NAME_MAX - len(digest) - 1].rstrip("-")
    return f"{head}-{digest}"


def quota_fullname(tree: QuotaTree, leaf: str) -> str:
    """``root/Department-a``: the full name of the node named ``leaf`` (any case), as written in the
    ``kube-queue/quota-fullname`` annotation; ``KeyError`` naming it when absent."""
    return tree.node(leaf).full_name
