"""``kq``: the one command for developers and operators.

Subcommands live in their own modules, each exposing ``register(subparsers)``. A listed module that is missing
or fails to import stops the tool with a message naming it (see :mod:`webhook.cli.wiring`).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import TextIO

from webhook.cli.wiring import import_wired

SUBCOMMAND_MODULES = (
    "webhook.cli.dev",
    "webhook.cli.serve",
    "webhook.cli.certs",
    "webhook.cli.extender",
    "webhook.cli.simulate",
    "webhook.cli.submit",
    "webhook.cli.jobs",
    "webhook.cli.why",
    "webhook.cli.logs",
    "webhook.cli.quota",
    "webhook.console.command",
)
COMMANDS = {
    "dev": "webhook.cli.dev",
    "serve": "webhook.cli.serve",
    "certs": "webhook.cli.certs",
    "extender": "webhook.cli.extender",
    "simulate": "webhook.cli.simulate",
    "submit": "webhook.cli.submit",
    "list": "webhook.cli.jobs",
    "ls": "webhook.cli.jobs",
    "get": "webhook.cli.jobs",
    "delete": "webhook.cli.jobs",
    "why": "webhook.cli.why",
    "logs": "webhook.cli.logs",
    "top": "webhook.cli.quota",
    "queue": "webhook.cli.quota",
    "console": "webhook.console.command",
}
"""Command -> the module that registers it, so ``kq list`` imports only its own module (fast start: the
service's modules pull in aiohttp and kubernetes-asyncio). A test keeps this table true."""


def _command_of(argv: Sequence[str]) -> str | None:
    for arg in argv:
        if not arg.startswith("-"):
            return arg
    return None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser; given ``argv`` naming a known command, only that command's module is imported."""
    parser = argparse.ArgumentParser(
        prog="kq",
        description="Elastic-quota job queueing for Kubernetes.",
        epilog="examples:\n  kq dev up        start the local dev cluster"
        "\n  kq submit job --name pi --cpu 1 -- sleep 60"
        "\n  kq list          your jobs and where they stand\n  kq why pi        why a job waits",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug lines")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    command = _command_of(argv) if argv is not None else None
    modules = (COMMANDS[command],) if command in COMMANDS else SUBCOMMAND_MODULES
    for name in modules:
        import_wired(name, "command").register(subparsers)
    return parser


def configure_logging(verbose: bool, stream: TextIO) -> None:
    """What every ``kq`` command logs, and how: one line per record on ``stream``, DEBUG with ``verbose``."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=stream,
    )
    # The format reads no caller, thread or process: skip finding them for every record (the logging
    # HOWTO's "Optimization"): the extender writes a line per scheduling decision, hundreds a second.
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    logging._srcfile = None


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    configure_logging(args.verbose, sys.stderr)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    try:
        return int(handler(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
