"""What the commands of both faces share on the command line: a subcommand parser that keeps its examples as
written, and the ``--oversellrate`` flag (``kq why`` and ``kq console`` read the rate alike)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from fractions import Fraction

EXAMPLES = "examples:\n"


def subparser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help_text: str,
              description: str, examples: list[str], *, aliases: Sequence[str] = ()) -> argparse.ArgumentParser:
    """A subcommand parser with an ``examples:`` epilog kept as written."""
    import textwrap  # noqa: PLC0415

    epilog = EXAMPLES + "\n".join(f"  {line}" for line in examples)
    return subparsers.add_parser(
        name,
        help=help_text,
        description=textwrap.fill(description, 79),
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        aliases=aliases,
    )


def rate_flag(text: str) -> Fraction:
    """``--oversellrate`` read as ``kq serve`` reads it (:func:`webhook.controller.settings.rate_flag`), imported
    only when a rate is given: ``kq`` starts without the controller's modules."""
    from webhook.controller.settings import rate_flag as serve_rate_flag  # noqa: PLC0415

    return serve_rate_flag(text)


def add_rate_flag(parser: argparse.ArgumentParser, default: str) -> None:
    """The ``--oversellrate`` flag, unset unless given; ``default`` says where the rate comes from then."""
    parser.add_argument("--oversellrate", type=rate_flag, default=None, metavar="RATE",
                        help=f"the controller's --oversellrate (default: {default})")
