"""The ElasticQuotaTree's ``status``: what the controller writes (:func:`status_tree`) and reads back
(:func:`used_from_status`, for ``kq why`` and the webhook's resize check when the jobs themselves are not at
hand)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NotRequired, TypedDict

from webhook.api.objects import Obj
from webhook.core.ledger import Ledger
from webhook.core.quota import QuotaNode, QuotaTree
from webhook.core.resources import EMPTY, ResourceError, Resources

__all__ = ["NodeStatus", "TreeStatus", "status_tree", "used_from_status"]


class NodeStatus(TypedDict):
    """One node of the tree's ``status``: canonical quantity strings."""

    name: str
    used: dict[str, str]
    request: dict[str, str]
    children: list[NodeStatus]


class TreeStatus(TypedDict):
    root: NodeStatus
    handoff: NotRequired[Mapping[str, list[float]]]
    """The control plane's time per turn (``HANDOFF_STATUS``; docs/eta.md), written by the controller."""


def status_tree(tree: QuotaTree, ledger: Ledger) -> TreeStatus:
    """The ``status`` of the ElasticQuotaTree, mirroring the tree: each node ``{name, used, request,
    children}`` with canonical quantity strings, so ``kubectl get eqtree -o json | jq .status`` shows who uses
    what."""

    def render(node: QuotaNode) -> NodeStatus:
        usage = ledger.usage(node.key)
        return {
            "name": node.name,
            "used": usage.used.to_spec(),
            "request": usage.request.to_spec(),
            "children": [render(child) for child in node.children],
        }

    return {"root": render(tree.root)}


def used_from_status(tree: QuotaTree, status: object) -> dict[str, Resources] | None:
    """``used`` per node key as an ElasticQuotaTree's ``status`` says it (what :func:`status_tree` wrote; a node
    whose amounts do not parse reads as empty); ``None`` when there is no status."""
    root = status.get("root") if isinstance(status, Mapping) else None
    if not isinstance(root, Mapping):
        return None
    out: dict[str, Resources] = {}
    stack: list[Obj] = [root]
    while stack:
        node = stack.pop()
        name = node.get("name")
        if isinstance(name, str) and name.lower() in tree.nodes:
            used = node.get("used")
            try:
                out[name.lower()] = Resources.parse(used if isinstance(used, Mapping) else {})
            except ResourceError:
                out[name.lower()] = EMPTY
        children = node.get("children")
        if isinstance(children, list):
            stack.extend(child for child in children if isinstance(child, Mapping))
    return out
