"""Each quota node's usage for ``kq top quota`` and the console: from the admitted jobs when ``kq`` can read
them all, else from the ElasticQuotaTree's status."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from webhook.api.names import (
    MAX_JOBS,
)
from webhook.api.objects import Obj
from webhook.core.ledger import build_ledger
from webhook.core.quota import QuotaNode, QuotaTree
from webhook.core.resources import EMPTY, ResourceError, Resources
from webhook.core.tree_status import status_tree
from webhook.readmodel.view import JobView
from webhook.workloads.base import value_at


@dataclass(frozen=True, slots=True)
class NodeUsage:
    """One quota node for ``kq top quota``: its depth, guarantees, caps and what is used and requested."""

    node: QuotaNode
    depth: int
    last: tuple[bool, ...]
    """For each level from the root's children down: whether the node (or its ancestor) is the last child."""
    used: Resources
    request: Resources


def _resources_at(raw: object) -> Resources:
    if not isinstance(raw, Mapping):
        return EMPTY
    try:
        return Resources.parse(raw)
    except ResourceError:
        return EMPTY


def quota_usage(tree: QuotaTree, tree_obj: Obj | None, views: Sequence[JobView] | None) -> tuple[list[NodeUsage], str]:
    """Every node of the tree in depth-first order with its usage, and where the usage comes from: the tree's
    status when it has one, else computed from ``views`` (the jobs) with the core's ledger."""
    by_name: dict[str, tuple[Resources, Resources]] = {}
    status = value_at(tree_obj, "status", "root") if tree_obj is not None else None
    source = "the ElasticQuotaTree's status"
    if not isinstance(status, Mapping) and views is not None:
        ledger = build_ledger(tree, [view.workload for view in views if view.workload is not None])
        status = status_tree(tree, ledger)["root"]
        source = "the jobs (the tree has no status yet)"
    if isinstance(status, Mapping):
        stack: list[Obj] = [status]
        while stack:
            node = stack.pop()
            name = node.get("name")
            if isinstance(name, str):
                by_name[name.lower()] = (_resources_at(node.get("used")), _resources_at(node.get("request")))
            children = node.get("children")
            if isinstance(children, list):
                stack.extend(child for child in children if isinstance(child, Mapping))
    else:
        source = "nothing (the tree has no status and the jobs could not be read)"
    out: list[NodeUsage] = []

    def visit(node: QuotaNode, depth: int, last: tuple[bool, ...]) -> None:
        used, request = by_name.get(node.key, (EMPTY, EMPTY))
        out.append(NodeUsage(node, depth, last, used, request))
        for index, child in enumerate(node.children):
            visit(child, depth + 1, (*last, index == len(node.children) - 1))

    visit(tree.root, 0, ())
    return out, source


def displayed_resources(usage: NodeUsage) -> list[str]:
    """The resources a node's rows show: those in its ``min`` or ``max``, then any other it uses
    (``kube-queue/max-jobs`` only when the node caps it)."""
    names = {*usage.node.min, *usage.node.max, *usage.used}
    if MAX_JOBS not in usage.node.max and MAX_JOBS not in usage.node.min:
        names.discard(MAX_JOBS)
    first = ("cpu", "memory", "nvidia.com/gpu")
    return [name for name in first if name in names] + sorted(names - set(first))
