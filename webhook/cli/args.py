"""What the service commands of ``kq`` share on the command line: the flags of the commands that listen
(``kq serve``, ``kq extender``).

``kq`` imports this module while it builds its parser, so it imports the standard library only. The commands
that read jobs take their flags from :mod:`webhook.cli.common` and their parsers from
:mod:`webhook.readmodel.commandline`, which also wraps the description; these print theirs as written.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TypeAlias

Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
"""Where ``kq``'s commands are added (``register(subparsers)``)."""


def add_listen_flags(parser: argparse.ArgumentParser, *, port: int, port_help: str, cert_help: str,
                     key_help: str) -> None:
    """``--host`` (every address by default), ``--port`` (default ``port``) and the PEM files ``--cert`` and
    ``--key`` to serve HTTPS with."""
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on (default: all)")
    parser.add_argument("--port", type=int, default=port, help=f"{port_help} (default: {port})")
    parser.add_argument("--cert", type=Path, help=cert_help)
    parser.add_argument("--key", type=Path, help=key_help)


def add_service_kubeconfig_flags(parser: argparse.ArgumentParser) -> None:
    """``--kubeconfig`` and ``--context`` of a service, which finds its cluster in-cluster first."""
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then $KUBECONFIG, ~/.kube/config)")
    parser.add_argument("--context", help="kubeconfig context")
