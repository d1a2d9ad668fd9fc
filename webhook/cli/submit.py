"""``kq submit job|pytorchjob|tfjob|mpijob|xgboostjob|paddlejob|rayjob|jobset``: create a job from flags (or a
file).

    kq submit job --name pi1 --cpu 10 --memory 10Gi --workers 6 -- sleep 60

The shapes, the checks and the create come from :mod:`webhook.readmodel.submit`, which the console's form
shares; here the flags become its options, and the created job is reported with what to run next.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from webhook.api.names import QUEUE_NAMESPACE, QUOTA_FULLNAME_ANNOTATION, QUOTA_LABEL
from webhook.api.objects import Obj, annotations_of, labels_of, meta
from webhook.cli.common import key_values, run_on_cluster
from webhook.readmodel.commandline import command_parser, subparser
from webhook.readmodel.submit import (
    DEFAULT_IMAGE,
    KINDS,
    JobOptions,
    SubmitError,
    build_job,
    create_object,
    job_from_file,
)

if TYPE_CHECKING:
    from webhook.readmodel.context import Ctx


def _options(ctx: Ctx, args: argparse.Namespace) -> JobOptions:
    return JobOptions(
        kind=args.kind,
        namespace=ctx.namespace,
        name=args.name,
        image=args.image,
        command=tuple(args.cmd or ()),
        cpu=args.cpu,
        memory=args.memory,
        gpus=args.gpus,
        workers=args.workers,
        priority_class=args.priority_class,
        env=tuple(key_values(args.env, "-e/--env")),
        annotations=tuple(key_values(args.annotation, "--annotation")),
        labels=tuple(key_values(args.label, "--label")),
    )


SHAPE_FLAGS = ("cpu", "memory", "gpus", "workers", "image", "cmd")


def _submit(ctx: Ctx, args: argparse.Namespace) -> int:
    from webhook.readmodel.fetch import CliError  # noqa: PLC0415
    from webhook.readmodel.output import to_yaml  # noqa: PLC0415

    if args.cmd and args.cmd[0] == "--":
        args.cmd = args.cmd[1:]
    options = _options(ctx, args)
    try:
        if args.filename:
            given = [f"--{name}" for name in SHAPE_FLAGS if name != "cmd" and getattr(args, name) != DEFAULTS[name]]
            if args.cmd:
                given.append("a command")
            if given:
                raise SubmitError(f"{', '.join(given)} cannot be combined with -f: edit {args.filename} instead")
            obj = job_from_file(args.filename, options, ctx.namespace_explicit)
        else:
            obj = build_job(options)
    except SubmitError as error:
        raise CliError(str(error)) from None
    if args.dry_run:
        ctx.print(to_yaml(obj).rstrip("\n"))
        return 0
    created = create_object(ctx, obj)
    name = str(meta(created).get("name") or meta(obj).get("name"))
    namespace = str(meta(created).get("namespace") or meta(obj)["namespace"])
    _report(ctx, args, created, name, namespace)
    if args.wait:
        from webhook.cli.jobs import wait_for  # noqa: PLC0415

        return wait_for(ctx, namespace, name, str(created.get("kind", "")), timeout=args.timeout)
    return 0


def _report(ctx: Ctx, args: argparse.Namespace, created: Obj, name: str, namespace: str) -> None:

    kind = str(created.get("kind") or "")
    group = str(created.get("apiVersion") or "").rpartition("/")[0]
    ctx.print(f"{kind.lower()}.{group or 'core'}/{name} created in namespace {namespace}")
    quota = annotations_of(created).get(QUOTA_FULLNAME_ANNOTATION)
    leaf = labels_of(created).get(QUOTA_LABEL)
    if quota or leaf:
        from webhook.core.quota import queue_name  # noqa: PLC0415

        queue = queue_name(str(leaf), namespace) if leaf else "?"
        ctx.print(f"queued: quota {quota or leaf}, queue {QUEUE_NAMESPACE}/{queue}")
        ctx.print("it starts when the quota allows")
    else:
        ctx.print(f"namespace {namespace} is not managed by kube-queue: the job is not queued and starts now")
    flag = f" -n {namespace}" if ctx.namespace_explicit else ""
    steps = [
        (f"kq list{flag}", "status and queue position"),
        (f"kq why {name}{flag}", "why it waits, while it waits"),
        (f"kq logs {name}{flag} -f", "follow its logs once it runs"),
    ]
    pad = max(len(cmd) for cmd, _ in steps) + 2
    ctx.print("")
    ctx.print("next:")
    for cmd, what in steps:
        ctx.print(f"  {cmd:<{pad}}# {what}")


DEFAULTS: dict[str, object] = {"cpu": None, "memory": None, "gpus": 0, "workers": 1, "image": DEFAULT_IMAGE}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    submit = command_parser(
        subparsers,
        "submit",
        "Create a job in your namespace; kube-queue holds it until its quota allows.",
        [
            "kq submit job --name pi1 --cpu 10 --memory 10Gi --workers 6 -- sleep 60",
            "kq submit pytorchjob --name mnist --gpus 1 --workers 4 -- python train.py",
            "kq submit job --name q --annotation dev.kube-queue.x-k8s.io/succeed-after=60s",
            "kq submit job -f job.yaml --name try2",
            "kq submit job --name pi1 --cpu 1 --dry-run > job.yaml",
        ],
    )
    kinds = submit.add_subparsers(dest="kind", metavar="KIND", required=True)
    for kind, (api_version, kind_name, _) in KINDS.items():
        parser = subparser(
            kinds,
            kind,
            f"a {kind_name} ({api_version})",
            f"Create a {kind_name} ({api_version}). Resources are per pod (requests = limits).",
            [
                f"kq submit {kind} --name demo --cpu 2 --memory 4Gi --workers 2 -- sleep 60",
                f"kq submit {kind} --name demo --gpus 1 -e LR=0.1 -- 'python train.py $LR'",
            ],
        )
        parser.add_argument("--name", help="the job's name (default: generated)")
        parser.add_argument("--image", default=DEFAULT_IMAGE, help=f"container image (default {DEFAULT_IMAGE})")
        parser.add_argument("--cpu", help="CPU per pod, e.g. 10 or 500m")
        parser.add_argument("--memory", help="memory per pod, e.g. 10Gi")
        parser.add_argument("--gpus", type=int, default=0, help="nvidia.com/gpu per pod")
        parser.add_argument(
            "--workers", type=int, default=1,
            help="pods in all (Kubeflow kinds: the master/chief plus workers; MPIJob: workers, plus a launcher; "
            "RayJob: the head plus workers, plus KubeRay's submitter pod; JobSet: the leader plus workers)",
        )
        parser.add_argument(
            "--priority", "--priority-class", dest="priority_class", metavar="CLASS",
            help="PriorityClass name (higher runs first inside a quota)",
        )
        parser.add_argument("-e", "--env", action="append", metavar="K=V", help="environment variable (repeatable)")
        parser.add_argument(
            "--annotation", action="append", metavar="K=V",
            help="pod annotation (repeatable), e.g. dev.kube-queue.x-k8s.io/succeed-after=60s on the dev cluster",
        )
        parser.add_argument("--label", action="append", metavar="K=V", help="label on the job and its pods")
        parser.add_argument("-f", "--filename", metavar="FILE", help="create this YAML object instead (- = stdin)")
        parser.add_argument("--dry-run", action="store_true", help="print the object as YAML, create nothing")
        parser.add_argument("--wait", action="store_true", help="wait until the job runs (or finishes)")
        parser.add_argument("--timeout", type=float, default=0, metavar="SECONDS", help="give up --wait after this")
        parser.add_argument("cmd", nargs="*", metavar="-- CMD", help="the command to run (after --)")
        run_on_cluster(parser, _submit)
        parser.set_defaults(kind=kind)
