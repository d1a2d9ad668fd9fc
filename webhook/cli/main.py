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
from webhook.readmodel.command_table import TABLE

SUBCOMMAND_MODULES = tuple(dict.fromkeys(command.module for command in TABLE))
"""Every module that registers commands, in the order ``kq --help`` lists their commands."""
COMMANDS = {name: command.module for command in TABLE for name in (command.name, *command.aliases)}
"""Command (or alias) -> the module that registers it, so ``kq list`` imports only its own module (fast start:
the service's modules pull in aiohttp and kubernetes-asyncio). A test keeps this table true."""


def _command_of(argv: Sequence[str]) -> str | None:
    for arg in argv:
        if not arg.startswith("-"):
            return arg
    return None


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser; given ``argv``, only the module of the command it names is imported (none for ``kq --help``),
    the other commands listed from :data:`~webhook.readmodel.command_table.TABLE`; without, every module."""
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
    chosen = COMMANDS.get(command) if command is not None else None
    for name in SUBCOMMAND_MODULES:
        if argv is None or name == chosen:
            import_wired(name, "command").register(subparsers)
            continue
        # Every other command is listed from the table as its module would list it, without importing it.
        for listed in TABLE:
            if listed.module == name:
                subparsers.add_parser(listed.name, help=listed.help, aliases=list(listed.aliases))
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
