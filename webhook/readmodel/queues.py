"""What ``kq top quota``, ``kq queue`` and the console's operator page show: the quota tree's rows (min / max /
used / borrowed and a bar per resource), who borrows at what share under a fair-sharing parent, the Queues'
rows and one Queue with its waiting jobs.

Usage comes from the ElasticQuotaTree's ``status`` (what the controller counts); when the tree has no
status yet it is computed from the jobs' admission records with the core's ledger (:mod:`webhook.readmodel.usage`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, TypedDict

from webhook.api.names import MAX_JOBS, QUOTA_FULLNAME_ANNOTATION
from webhook.api.objects import Obj, QueueItem, annotations_of, created_of, queue_active, queue_details

if TYPE_CHECKING:
    from webhook.core.quota import QuotaTree
    from webhook.readmodel.output import Column
    from webhook.readmodel.usage import NodeUsage

BAR_WIDTH = 8


def _glyphs(usage: NodeUsage) -> tuple[str, str]:
    """The tree drawing before a node's first row and before its other rows."""
    ancestors = "".join("   " if last else "│  " for last in usage.last[:-1])
    below = "│" if usage.node.children else ""
    if usage.depth == 0:
        return "", below
    own_last = usage.last[-1]
    return ancestors + ("└─ " if own_last else "├─ "), ancestors + ("   " if own_last else "│  ") + below


def top_rows(usages: Sequence[NodeUsage], wide: bool) -> tuple[list[Column], list[list[str]]]:
    """QUOTA, RESOURCE, MIN, MAX, USED, BORROWED (used beyond min), USAGE (a bar of max and the percentage);
    ``wide`` adds REQUEST (admitted + queued)."""
    from webhook.readmodel.output import Column, bar, percent, quantity, resource_name  # noqa: PLC0415
    from webhook.readmodel.usage import displayed_resources  # noqa: PLC0415

    columns = [
        Column("QUOTA", shrink=1, min_width=10),
        Column("RESOURCE", shrink=2, min_width=6),
        Column("MIN", right=True),
        Column("MAX", right=True),
        Column("USED", right=True),
        Column("BORROWED", right=True),
    ]
    if wide:
        columns.append(Column("REQUEST", right=True))
    columns.append(Column("USAGE"))
    rows: list[list[str]] = []
    for usage in usages:
        first, rest = _glyphs(usage)
        names = displayed_resources(usage) or ["-"]
        for index, name in enumerate(names):
            label = first + usage.node.name if index == 0 else rest
            if name == "-":
                rows.append([label, "-", "-", "-", "-", "-", *(["-"] if wide else []), "-"])
                continue
            low = usage.node.min.get_or_zero(name)
            high = usage.node.max.get(name)
            used = usage.used.get_or_zero(name)
            row = [
                label,
                resource_name(name),
                quantity(name, low),
                quantity(name, high) if high is not None else "-",
                quantity(name, used),
                quantity(name, max(0, used - low)),
            ]
            if wide:
                row.append(quantity(name, usage.request.get_or_zero(name)))
            row.append(f"{bar(used, high, low, BAR_WIDTH)} {percent(used, high):>4}".rstrip())
            rows.append(row)
    return columns, rows


def fair_lines(tree: QuotaTree, usages: Sequence[NodeUsage]) -> list[str]:
    """Under each fair-sharing parent, each child's share of what it borrows beside its fair part of the spare
    (docs/fair-sharing.md); nothing for a tree without one."""
    from webhook.core.fairshare import INFINITE, fair_parents, shares, weights  # noqa: PLC0415

    parents = fair_parents(tree)
    if not parents:
        return []
    used = {usage.node.key: usage.used for usage in usages}
    share, weight = shares(tree, used), weights(tree)
    lines = []
    for key in sorted(parents):
        parent = tree.nodes[key]
        total = sum(weight[child.key] for child in parent.children)
        parts = []
        for child in parent.children:
            fair = weight[child.key] / total if total else 0
            value = share[child.key]
            said = "unbounded" if value >= INFINITE else f"{float(value):.2f}"
            parts.append(f"{child.name} borrows at share {said}, fair part of the spare {float(fair):.0%}")
        lines.append(f"fair sharing under {parent.full_name}: " + "; ".join(parts))
    return lines


class QuotaUsage(TypedDict):
    """A node of ``kq top quota -o json|yaml``, with its resource lists."""

    quota: str
    min: dict[str, str]
    max: dict[str, str]
    used: dict[str, str]
    borrowed: dict[str, str]
    request: dict[str, str]


def top_data(usages: Sequence[NodeUsage]) -> list[QuotaUsage]:
    """``kq top quota -o json|yaml``: every node with its lists."""
    from webhook.core.resources import Resources  # noqa: PLC0415

    out: list[QuotaUsage] = []
    for usage in usages:
        node = usage.node
        borrowed = Resources(
            {
                name: max(0, amount - node.min.get_or_zero(name))
                for name, amount in usage.used.items()
                if name != MAX_JOBS
            }
        )
        out.append(
            {
                "quota": node.full_name,
                "min": node.min.to_spec(),
                "max": node.max.to_spec(),
                "used": usage.used.to_spec(),
                "borrowed": borrowed.without_zeros().to_spec(),
                "request": usage.request.to_spec(),
            }
        )
    return out


# Queues -----------------------------------------------------------------------------------------------------------


def _queue_namespaces(tree: QuotaTree | None) -> dict[str, tuple[str, str]]:
    """Queue name -> (quota full name, namespace) for every Queue the tree asks for."""
    from webhook.core.quota import queue_name  # noqa: PLC0415

    out: dict[str, tuple[str, str]] = {}
    if tree is None:
        return out
    for leaf in tree.leaves():
        for namespace in leaf.namespaces:
            out[queue_name(leaf.name, namespace)] = (leaf.full_name, namespace)
    return out


def _items(queue: Obj) -> tuple[list[QueueItem], int]:
    details = queue_details(queue)
    if details is None:
        return [], 0
    omitted: object = details.get("activeOmitted")
    return queue_active(details), omitted if isinstance(omitted, int) else 0


def _policy(queue: Obj) -> str:
    from webhook.workloads.base import value_at  # noqa: PLC0415

    return str(value_at(queue, "spec", "queuePolicy") or "Round")


def queue_rows(
    queues: Mapping[str, Obj], tree: QuotaTree | None, now: float
) -> tuple[list[Column], list[list[str]]]:
    from webhook.readmodel.output import Column, age  # noqa: PLC0415

    where = _queue_namespaces(tree)
    columns = [
        Column("NAME", shrink=2, min_width=12),
        Column("QUOTA", shrink=1, min_width=10),
        Column("NAMESPACE", shrink=3, min_width=9),
        Column("POLICY"),
        Column("WAITING", right=True),
        Column("AGE", right=True),
    ]
    rows = []
    for name in sorted(queues):
        queue = queues[name]
        items, omitted = _items(queue)
        quota, namespace = where.get(name, (str(annotations_of(queue).get(QUOTA_FULLNAME_ANNOTATION) or "-"), "-"))
        if namespace == "-" and items:
            namespace = str(items[0].get("namespace") or "-")
        rows.append([name, quota, namespace, _policy(queue), str(len(items) + omitted), age(created_of(queue), now)])
    return columns, rows


def describe_queue(name: str, queue: Obj, tree: QuotaTree | None, width: int = 80) -> str:
    from webhook.readmodel.output import Column, table  # noqa: PLC0415

    quota, namespace = _queue_namespaces(tree).get(
        name, (str(annotations_of(queue).get(QUOTA_FULLNAME_ANNOTATION) or "-"), "-")
    )
    items, omitted = _items(queue)
    lines = [
        f"{'Name:':<13}{name}",
        f"{'Quota:':<13}{quota}",
        f"{'Namespace:':<13}{namespace}",
        f"{'Policy:':<13}{_policy(queue)}",
        f"{'Waiting:':<13}{len(items) + omitted}",
    ]
    if items:
        columns = [
            Column("POSITION", right=True),
            Column("NAME", shrink=1, min_width=12),
            Column("NAMESPACE", shrink=2, min_width=9),
            Column("KIND"),
            Column("PRIORITY", right=True),
        ]
        rows = [
            [str(item.get("position", "-")), str(item.get("name", "")), str(item.get("namespace", "")),
             str(item.get("kind") or "Job"), str(item.get("priority", 0))]
            for item in items
        ]
        lines += ["", table(columns, rows, width).rstrip("\n")]
        if omitted:
            lines.append(f"... and {omitted} more")
    return "\n".join(lines)
