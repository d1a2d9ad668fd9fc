"""``kq top quota`` (the quota tree with min / max / used / borrowed and a bar per resource) and
``kq queue list|get`` (the Queues the controller keeps per namespace of each leaf, with their waiting jobs).

Usage comes from the ElasticQuotaTree's ``status`` (what the controller counts); when the tree has no
status yet it is computed from the jobs' admission records with the core's ledger.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from webhook.api.names import MAX_JOBS, QUEUE_NAMESPACE, QUOTA_FULLNAME_ANNOTATION
from webhook.api.objects import Obj, QueueItem, annotations_of, created_of, name_of, queue_active, queue_details
from webhook.cli.common import Ctx, add_connection_flags, command, subparser

if TYPE_CHECKING:
    from webhook.cli.usage import NodeUsage
    from webhook.core.quota import QuotaTree

TOP_GAP = "  "
BAR_WIDTH = 8


def _tree_or_fail(ctx: Ctx) -> tuple[Obj, QuotaTree]:
    from webhook.cli.fetch import CliError, read_tree  # noqa: PLC0415
    from webhook.cli.view import Snapshot  # noqa: PLC0415

    tree_obj, problem = read_tree(ctx.api)
    if problem:
        raise CliError(problem)
    if tree_obj is None:
        raise CliError("there is no ElasticQuotaTree in kube-system: kube-queue has no quotas yet "
                       "(an operator creates one: kubectl apply -f examples/seed/01-elasticquotatree.yaml)")
    snapshot = Snapshot(now=ctx.now(), tree_obj=tree_obj)
    if snapshot.tree is None:
        raise CliError(snapshot.problem or "the ElasticQuotaTree cannot be read")
    return tree_obj, snapshot.tree


def _glyphs(usage: NodeUsage) -> tuple[str, str]:
    """The tree drawing before a node's first row and before its other rows."""
    ancestors = "".join("   " if last else "│  " for last in usage.last[:-1])
    below = "│" if usage.node.children else ""
    if usage.depth == 0:
        return "", below
    own_last = usage.last[-1]
    return ancestors + ("└─ " if own_last else "├─ "), ancestors + ("   " if own_last else "│  ") + below


def top_rows(usages: Sequence[NodeUsage], wide: bool) -> tuple[list[Any], list[list[str]]]:
    """QUOTA, RESOURCE, MIN, MAX, USED, BORROWED (used beyond min), USAGE (a bar of max and the percentage);
    ``wide`` adds REQUEST (admitted + queued)."""
    from webhook.cli.output import Column, bar, percent, quantity, resource_name  # noqa: PLC0415
    from webhook.cli.usage import displayed_resources  # noqa: PLC0415

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


def top_data(usages: Sequence[NodeUsage]) -> list[dict[str, Any]]:
    """``kq top quota -o json|yaml``: every node with its lists."""
    from webhook.core.resources import Resources  # noqa: PLC0415

    out = []
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


def _top(ctx: Ctx, args: argparse.Namespace) -> int:
    from webhook.cli.fetch import CliError, load_snapshot  # noqa: PLC0415
    from webhook.cli.output import WIDE, table, to_json, to_yaml  # noqa: PLC0415
    from webhook.cli.usage import quota_usage  # noqa: PLC0415
    from webhook.cli.view import job_views  # noqa: PLC0415
    from webhook.workloads.base import value_at  # noqa: PLC0415

    tree_obj, tree = _tree_or_fail(ctx)
    views = None
    if value_at(tree_obj, "status", "root") is None:
        try:
            views = job_views(load_snapshot(ctx.api, None, now=ctx.now()))
        except CliError:
            views = None
    usages, source = quota_usage(tree, tree_obj, views)
    if args.output in ("json", "yaml"):
        data = {"source": source, "quotas": top_data(usages)}
        ctx.print((to_json if args.output == "json" else to_yaml)(data).rstrip("\n"))
        return 0
    wide = args.output == "wide"
    columns, rows = top_rows(usages, wide)
    ctx.print(table(columns, rows, max(ctx.width, WIDE) if wide else ctx.width, TOP_GAP).rstrip("\n"))
    for line in fair_lines(tree, usages):
        ctx.print(line)
    ctx.note(f"usage from {source}; bar = max, # used within min, + borrowed beyond min")
    return 0


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


def _queues_and_tree(ctx: Ctx) -> tuple[dict[str, Obj], QuotaTree | None]:
    from webhook.cli.fetch import CliError, read_tree  # noqa: PLC0415
    from webhook.cli.kubeapi import QUEUES, ApiError  # noqa: PLC0415
    from webhook.cli.view import Snapshot  # noqa: PLC0415

    try:
        queues: dict[str, Obj] = {name_of(obj): obj for obj in ctx.api.list(QUEUES, QUEUE_NAMESPACE)}
    except ApiError as error:
        if error.not_found:
            raise CliError("this cluster has no Queues (kube-queue is not installed: no Queue CRD)") from None
        raise CliError(f"cannot list the Queues in {QUEUE_NAMESPACE}: {error.one_line()}") from None
    tree_obj, _ = read_tree(ctx.api)
    return queues, Snapshot(now=ctx.now(), tree_obj=tree_obj).tree


def queue_rows(queues: Mapping[str, Obj], tree: QuotaTree | None, now: float) -> tuple[list[Any], list[list[str]]]:
    from webhook.cli.output import Column, age  # noqa: PLC0415

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
    from webhook.cli.output import Column, table  # noqa: PLC0415

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


def _queue_list(ctx: Ctx, args: argparse.Namespace) -> int:
    from webhook.cli.output import table, to_json, to_yaml  # noqa: PLC0415

    queues, tree = _queues_and_tree(ctx)
    if args.output in ("json", "yaml"):
        data = {"items": [queues[name] for name in sorted(queues)]}
        ctx.print((to_json if args.output == "json" else to_yaml)(data).rstrip("\n"))
        return 0
    columns, rows = queue_rows(queues, tree, ctx.now())
    if not rows:
        ctx.note("No Queues: the controller creates one per namespace of each leaf quota.")
        return 0
    ctx.print(table(columns, rows, ctx.width, TOP_GAP).rstrip("\n"))
    return 0


def _queue_get(ctx: Ctx, args: argparse.Namespace) -> int:
    from webhook.cli.fetch import CliError  # noqa: PLC0415
    from webhook.cli.output import to_json, to_yaml  # noqa: PLC0415
    from webhook.core.quota import queue_name  # noqa: PLC0415

    queues, tree = _queues_and_tree(ctx)
    name = args.queue
    if name is None or name not in queues:
        namespace = ctx.namespace
        leaf = None
        if tree is not None:
            if name is None:
                leaf = tree.leaf_for_namespace(namespace)
            elif name.lower() in tree.nodes and tree.nodes[name.lower()].is_leaf:
                leaf = tree.nodes[name.lower()]
        if leaf is not None and namespace in leaf.namespaces:
            name = queue_name(leaf.name, namespace)
        elif leaf is not None:
            choices = ", ".join(queue_name(leaf.name, ns) for ns in leaf.namespaces)
            raise CliError(f"quota {leaf.full_name} has one Queue per namespace: {choices}")
        elif name is None:
            raise CliError(f"namespace {namespace} is not managed by kube-queue, so it has no Queue (kq queue list)")
    if name not in queues:
        raise CliError(f"Queue {name!r} not found in kube-queue (kq queue list)")
    queue = queues[name]
    if args.output in ("json", "yaml"):
        ctx.print((to_json if args.output == "json" else to_yaml)(dict(queue)).rstrip("\n"))
        return 0
    ctx.print(describe_queue(name, queue, tree, ctx.width))
    return 0


def register(subparsers: Any) -> None:
    top = subparser(
        subparsers,
        "top",
        "show quota usage",
        "Show resource usage.",
        ["kq top quota", "kq top quota -o wide"],
    )
    kinds = top.add_subparsers(dest="top_command", metavar="WHAT", required=True)
    parser = subparser(
        kinds,
        "quota",
        "the quota tree: min / max / used / borrowed and a bar per resource",
        "The ElasticQuotaTree with each node's guaranteed min, max, what admitted jobs use, how much of that "
        "is borrowed beyond min, and a bar of usage against max (# within min, + borrowed).",
        ["kq top quota", "kq top quota -o wide", "kq top quota -o json"],
    )
    parser.add_argument("-o", "--output", choices=("wide", "json", "yaml"), help="add REQUEST, or JSON/YAML")
    add_connection_flags(parser)
    parser.set_defaults(handler=command(_top))

    queue = subparser(
        subparsers,
        "queue",
        "the Queues: list them, or show one with its waiting jobs",
        "kube-queue keeps one Queue per namespace of each leaf quota (in namespace kube-queue).",
        [
            "kq queue list",
            "kq queue get",
            "kq queue get root-department-a-user-a",
            "kq queue get Department-a -n user-b",
        ],
    )
    verbs = queue.add_subparsers(dest="queue_command", metavar="VERB", required=True)
    parser = subparser(
        verbs, "list", "every Queue with its quota, policy and waiting jobs", "List the Queues.",
        ["kq queue list", "kq queue list -o yaml"], aliases=["ls"],
    )
    parser.add_argument("-o", "--output", choices=("json", "yaml"), help="print the objects")
    add_connection_flags(parser)
    parser.set_defaults(handler=command(_queue_list))
    parser = subparser(
        verbs, "get", "one Queue and its waiting jobs by position",
        "Show a Queue and its waiting jobs. Without a name: the Queue of your namespace.",
        ["kq queue get", "kq queue get root-department-a-user-a", "kq queue get Department-a -n user-b"],
    )
    parser.add_argument("queue", nargs="?", metavar="NAME", help="Queue name or leaf quota name (default: yours)")
    parser.add_argument("-o", "--output", choices=("json", "yaml"), help="print the object")
    add_connection_flags(parser)
    parser.set_defaults(handler=command(_queue_get))
