"""``kq top quota`` (the quota tree with min / max / used / borrowed and a bar per resource) and
``kq queue list|get`` (the Queues the controller keeps per namespace of each leaf, with their waiting jobs).

The rows and texts come from :mod:`webhook.readmodel.queues`; here the commands read the cluster and print them.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from webhook.api.names import QUEUE_NAMESPACE
from webhook.api.objects import Obj, name_of
from webhook.cli.common import run_on_cluster
from webhook.readmodel.commandline import command_parser, subparser

if TYPE_CHECKING:
    from webhook.core.quota import QuotaTree
    from webhook.readmodel.context import Ctx

TOP_GAP = "  "


def _tree_or_fail(ctx: Ctx) -> tuple[Obj, QuotaTree]:
    from webhook.readmodel.fetch import CliError, read_tree  # noqa: PLC0415
    from webhook.readmodel.view import Snapshot  # noqa: PLC0415

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


def _top(ctx: Ctx, args: argparse.Namespace) -> int:
    from webhook.readmodel.fetch import CliError, load_snapshot  # noqa: PLC0415
    from webhook.readmodel.output import WIDE, table, to_json, to_yaml  # noqa: PLC0415
    from webhook.readmodel.queues import fair_lines, top_data, top_rows  # noqa: PLC0415
    from webhook.readmodel.usage import quota_usage  # noqa: PLC0415
    from webhook.readmodel.view import job_views  # noqa: PLC0415
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


def _queues_and_tree(ctx: Ctx) -> tuple[dict[str, Obj], QuotaTree | None]:
    from webhook.readmodel.fetch import CliError, read_tree  # noqa: PLC0415
    from webhook.readmodel.kubeapi import QUEUES, ApiError  # noqa: PLC0415
    from webhook.readmodel.view import Snapshot  # noqa: PLC0415

    try:
        queues: dict[str, Obj] = {name_of(obj): obj for obj in ctx.api.list(QUEUES, QUEUE_NAMESPACE)}
    except ApiError as error:
        if error.not_found:
            raise CliError("this cluster has no Queues (kube-queue is not installed: no Queue CRD)") from None
        raise CliError(f"cannot list the Queues in {QUEUE_NAMESPACE}: {error.one_line()}") from None
    tree_obj, _ = read_tree(ctx.api)
    return queues, Snapshot(now=ctx.now(), tree_obj=tree_obj).tree


def _queue_list(ctx: Ctx, args: argparse.Namespace) -> int:
    from webhook.readmodel.output import table, to_json, to_yaml  # noqa: PLC0415
    from webhook.readmodel.queues import queue_rows  # noqa: PLC0415

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
    from webhook.core.quota import queue_name  # noqa: PLC0415
    from webhook.readmodel.fetch import CliError  # noqa: PLC0415
    from webhook.readmodel.output import to_json, to_yaml  # noqa: PLC0415
    from webhook.readmodel.queues import describe_queue  # noqa: PLC0415

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


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    top = command_parser(
        subparsers,
        "top",
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
    run_on_cluster(parser, _top)

    queue = command_parser(
        subparsers,
        "queue",
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
    run_on_cluster(parser, _queue_list)
    parser = subparser(
        verbs, "get", "one Queue and its waiting jobs by position",
        "Show a Queue and its waiting jobs. Without a name: the Queue of your namespace.",
        ["kq queue get", "kq queue get root-department-a-user-a", "kq queue get Department-a -n user-b"],
    )
    parser.add_argument("queue", nargs="?", metavar="NAME", help="Queue name or leaf quota name (default: yours)")
    parser.add_argument("-o", "--output", choices=("json", "yaml"), help="print the object")
    run_on_cluster(parser, _queue_get)
