"""``kq console``: serve the web console (see :mod:`webhook.console` and docs/console.md)."""

from __future__ import annotations

import argparse
import ipaddress
import sys

from webhook.readmodel.commandline import add_rate_flag, command_parser

LOOPBACK_NAMES = ("localhost",)


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _console(args: argparse.Namespace) -> int:
    from aiohttp import web  # noqa: PLC0415

    from webhook.console.app import ConsoleSettings, build_app  # noqa: PLC0415
    from webhook.console.identity import IdentitySettings  # noqa: PLC0415
    from webhook.readmodel.kubeconfig import ConfigError, load_connection  # noqa: PLC0415

    if args.act_as_kubeconfig and not is_loopback(args.host):
        print("kq console: --act-as-kubeconfig gives every visitor the kubeconfig's rights, so it only listens on "
              f"loopback (the dev cluster); drop it or use --host 127.0.0.1 (got --host {args.host})", file=sys.stderr)
        return 2
    try:
        connection = load_connection(args.kubeconfig, args.context)
    except ConfigError as error:
        print(f"kq console: {error}", file=sys.stderr)
        return 1
    settings = ConsoleSettings(
        identity=IdentitySettings(
            cluster=connection,
            act_as_kubeconfig=args.act_as_kubeconfig,
            token_header=args.token_header,
            user_header=args.user_header,
        ),
        default_namespace=args.namespace or connection.namespace or "default",
        oversellrate=args.oversellrate,
        secure_cookie=args.secure_cookie,
    )
    app = build_app(settings)
    url = f"http://{args.host}:{args.port}/"
    web.run_app(app, host=args.host, port=args.port, print=lambda _: print(f"kq console: serving {url}", flush=True))
    return 0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:

    parser = command_parser(
        subparsers,
        "console",
        "Serve the web console. It acts as the person using it: a bearer token they paste once (kept in memory "
        "only), or an authenticating proxy's header (--token-header, --user-header), or on the dev cluster the "
        "kubeconfig's own user (--act-as-kubeconfig, loopback only). Kubernetes RBAC decides what they see.",
        [
            "kq console --kubeconfig .dev/kubeconfig --act-as-kubeconfig   # the dev cluster, on loopback",
            "kq console --host 0.0.0.0 --port 8080                        # in the cluster: users paste a token",
            "kq console --host 0.0.0.0 --token-header X-Forwarded-Access-Token",
        ],
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    parser.add_argument("--kubeconfig", help="where the cluster is (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
    parser.add_argument("--context", help="kubeconfig context (default: the current one)")
    parser.add_argument("-n", "--namespace", help="namespace shown first (default: the context's, else default)")
    parser.add_argument(
        "--act-as-kubeconfig", action="store_true",
        help="visitors who paste no token act as the kubeconfig's user (dev cluster only; loopback only)",
    )
    parser.add_argument("--token-header", metavar="HEADER",
                        help="an authenticating proxy's header holding the user's bearer token")
    parser.add_argument("--user-header", metavar="HEADER",
                        help="an authenticating proxy's header naming the user (impersonated: the console's own "
                             "identity then needs the impersonate right on users)")
    add_rate_flag(parser, "read as `kq why` reads it")
    parser.add_argument("--secure-cookie", action="store_true", help="mark the session cookie Secure (HTTPS)")
    parser.set_defaults(handler=_console)
