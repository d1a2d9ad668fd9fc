"""The ElasticQuotaTree: parsing, validation, namespace -> leaf, queue names and the usage ledger.

Node identity is the node's name, matched case-insensitively (names are unique ignoring case). Paths are
tuples of names from the root: ``("root", "Department-a")``; ``"/".join(path)`` is the quota's full name
(``root/Department-a``), as written in the ``kube-queue/quota-fullname`` annotation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from webhook.core.resources import EMPTY, Resources

PREEMPT_POLICY = "preempt-policy"
PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"


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
