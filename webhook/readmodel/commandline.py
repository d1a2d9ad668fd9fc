"""What the commands of both faces share on the command line: a command's parser, with its help from the
command table and its examples kept as written, and the ``--oversellrate`` flag (``kq why`` and ``kq console``
read the rate alike)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from fractions import Fraction

from webhook.readmodel.command_table import command


def subparser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help_text: str,
              description: str, examples: Sequence[str], *, aliases: Sequence[str] = (), wrap: bool = True,
              heading: str = "examples") -> argparse.ArgumentParser:
    """A subcommand parser: its description wrapped to 79 columns (as written with ``wrap=False``), then
    ``heading:`` and the examples, each on its own indented line, as written."""
    import textwrap  # noqa: PLC0415

    return subparsers.add_parser(
        name,
        help=help_text,
        description=textwrap.fill(description, 79) if wrap else description,
        epilog=f"{heading}:\n" + "\n".join(f"  {line}" for line in examples),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        aliases=aliases,
    )


def command_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], name: str,
                   description: str, examples: Sequence[str], *, wrap: bool = True,
                   heading: str = "examples") -> argparse.ArgumentParser:
    """The parser of ``kq`` command ``name``, its help and aliases taken from the command table, so the
    listing of ``kq --help`` and the command's own parser say the same."""
    listed = command(name)
    return subparser(subparsers, name, listed.help, description, examples, aliases=listed.aliases, wrap=wrap,
                     heading=heading)


def rate_flag(text: str) -> Fraction:
    """``--oversellrate`` read as ``kq serve`` reads it (:func:`webhook.controller.settings.rate_flag`), imported
    only when a rate is given: ``kq`` starts without the controller's modules."""
    from webhook.controller.settings import rate_flag as serve_rate_flag  # noqa: PLC0415

    return serve_rate_flag(text)


def add_rate_flag(parser: argparse.ArgumentParser, default: str) -> None:
    """The ``--oversellrate`` flag, unset unless given; ``default`` says where the rate comes from then."""
    parser.add_argument("--oversellrate", type=rate_flag, default=None, metavar="RATE",
                        help=f"the controller's --oversellrate (default: {default})")
