"""``kq extender``: the kube-scheduler extender (ResourcePolicy placement and pod-level quota).

    kq extender --port 8888 [--cert tls.crt --key tls.key] [--kubeconfig PATH] [--assume-ttl 30]
    kq extender --print-config http://127.0.0.1:8888/extender
"""

from __future__ import annotations

import argparse
import json

from webhook.api.names import TREE_NAMESPACE
from webhook.cli.args import Subparsers, add_listen_flags, add_service_kubeconfig_flags
from webhook.extender.cache import DEFAULT_ASSUME_TTL
from webhook.extender.config import extender_entry
from webhook.extender.server import ExtenderOptions, serve
from webhook.kube.serving import run as run_on_loop
from webhook.readmodel.commandline import command_parser


def register(subparsers: Subparsers) -> None:
    parser = command_parser(
        subparsers,
        "extender",
        "Serve POST /extender/filter, /extender/prioritize and /extender/preempt for kube-scheduler "
        "(nodeCacheCapable), plus "
        "/healthz, /readyz and /metrics. Nodes, pods, ResourcePolicies and the ElasticQuotaTree come from "
        "watches. HTTP unless --cert and --key are given.",
        [
            "kq extender --port 8888 --kubeconfig ~/.kube/config",
            "kq extender --port 8443 --cert certs/tls.crt --key certs/tls.key",
            "kq extender --print-config https://kube-queue-extender.kube-queue.svc:8443/extender",
        ],
        wrap=False,
    )
    add_listen_flags(
        parser,
        port=8888,
        port_help="port",
        cert_help="serving certificate (PEM): serve HTTPS",
        key_help="its private key (PEM)",
    )
    add_service_kubeconfig_flags(parser)
    parser.add_argument(
        "--assume-ttl",
        type=float,
        default=DEFAULT_ASSUME_TTL,
        metavar="SECONDS",
        help=f"how long a placement counts before the pod is seen bound (default: {DEFAULT_ASSUME_TTL:.0f})",
    )
    parser.add_argument(
        "--pass-every-node",
        action="store_true",
        help=(
            "pass the scheduler every node of the chosen unit (default: at most as many as it scores without "
            "an extender - 230 of 500 nodes - a window that moves on with each pod)"
        ),
    )
    parser.add_argument("--tree-namespace", default=TREE_NAMESPACE, help=argparse.SUPPRESS)
    parser.add_argument(
        "--print-config",
        metavar="URL_PREFIX",
        help="print the scheduler's extenders[] entry for an extender at URL_PREFIX and exit",
    )
    parser.set_defaults(handler=run)


def options_from_args(args: argparse.Namespace) -> ExtenderOptions:
    """Check the flags (``SystemExit`` with a message when inconsistent)."""
    if (args.cert is None) != (args.key is None):
        raise SystemExit("kq extender: give both --cert and --key (HTTPS), or neither (HTTP)")
    for path in (args.cert, args.key):
        if path is not None and not path.is_file():
            raise SystemExit(f"kq extender: {path} does not exist")
    if args.assume_ttl <= 0:
        raise SystemExit("kq extender: --assume-ttl must be a positive number of seconds, e.g. 30")
    return ExtenderOptions(
        host=args.host,
        port=args.port,
        cert=args.cert,
        key=args.key,
        kubeconfig=args.kubeconfig,
        context=args.context,
        assume_ttl=args.assume_ttl,
        tree_namespace=args.tree_namespace,
        sample=not args.pass_every_node,
    )


def run(args: argparse.Namespace) -> int:
    if args.print_config:
        print(json.dumps(extender_entry(args.print_config), indent=2))
        return 0
    run_on_loop(serve(options_from_args(args)), component="extender")  # uvloop when installed
    return 0
