"""What every developer command shares: connection flags, the namespace, and one-line errors.

A command is a function ``(ctx, args) -> int`` wrapped by :func:`command`; tests pass their own :class:`Ctx`
(a fake API, a fixed clock, string buffers) as ``args.ctx``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, TextIO

from webhook.cli.kubeapi import ApiError, KubeApi
from webhook.cli.kubeconfig import ConfigError

EXAMPLES = "examples:\n"


@dataclass
class Ctx:
    """A command's world: the API (connected on first use), the clock and the output streams."""

    api_factory: Callable[[], KubeApi]
    namespace_flag: str | None = None
    now: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)
    width: int = 80
    _api: KubeApi | None = None

    @property
    def api(self) -> KubeApi:
        if self._api is None:
            self._api = self.api_factory()
        return self._api

    @property
    def namespace(self) -> str:
        """``-n`` when given, else the kubeconfig context's namespace, else ``default``."""
        return self.namespace_flag or self.api.namespace or "default"

    @property
    def namespace_explicit(self) -> bool:
        return bool(self.namespace_flag)

    def print(self, text: str = "") -> None:
        self.out.write(text if text.endswith("\n") else text + "\n")
        self.out.flush()

    def note(self, text: str) -> None:
        """A line on stderr (progress, hints) that scripts reading stdout do not see."""
        self.err.write(text + "\n")
        self.err.flush()


def ctx_from_args(args: argparse.Namespace) -> Ctx:
    given = getattr(args, "ctx", None)
    if isinstance(given, Ctx):
        if getattr(args, "namespace", None):
            given.namespace_flag = args.namespace
        return given

    def factory() -> KubeApi:
        from webhook.cli.kubeapi import connect  # noqa: PLC0415

        return connect(getattr(args, "kubeconfig", None), getattr(args, "context", None))

    return Ctx(api_factory=factory, namespace_flag=getattr(args, "namespace", None) or None)


def add_connection_flags(parser: argparse.ArgumentParser, all_namespaces: bool = False) -> None:
    """``-n/--namespace``, ``--kubeconfig``, ``--context`` (and ``-A/--all-namespaces``)."""
    group = parser.add_argument_group("cluster")
    group.add_argument(
        "-n", "--namespace", help="namespace (default: the kubeconfig context's namespace, else default)"
    )
    if all_namespaces:
        group.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
    group.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
    group.add_argument("--context", help="kubeconfig context (default: the current context)")


def command(function: Callable[[Ctx, argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """A handler for ``args.handler``: runs ``function`` and turns every expected failure into one line on
    stderr (``error: ...``) and exit status 1 (130 on Ctrl-C)."""
    from webhook.cli.fetch import CliError  # noqa: PLC0415

    def handler(args: argparse.Namespace) -> int:
        ctx = ctx_from_args(args)
        try:
            return function(ctx, args)
        except (CliError, ConfigError) as error:
            ctx.note(f"error: {error}")
        except ApiError as error:
            ctx.note(f"error: {error.one_line()}")
        except KeyboardInterrupt:
            return 130
        except BrokenPipeError:
            return 0
        return 1

    handler.__name__ = getattr(function, "__name__", "handler")
    return handler


def subparser(subparsers: Any, name: str, help_text: str, description: str, examples: list[str],
              **kwargs: Any) -> argparse.ArgumentParser:
    """A subcommand parser with an ``examples:`` epilog kept as written."""
    import textwrap  # noqa: PLC0415

    epilog = EXAMPLES + "\n".join(f"  {line}" for line in examples)
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name,
        help=help_text,
        description=textwrap.fill(description, 79),
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        **kwargs,
    )
    return parser


def key_values(pairs: list[str] | None, flag: str) -> list[tuple[str, str]]:
    """``K=V`` flag values as pairs; :class:`CliError` naming the flag for one without ``=``."""
    from webhook.cli.fetch import CliError  # noqa: PLC0415

    out = []
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise CliError(f"{flag} takes KEY=VALUE, got {pair!r}")
        out.append((key, value))
    return out


def rate_flag(text: str) -> Fraction:
    """``--oversellrate`` as the controller's: ``2``, ``1.5`` or ``3/2``; positive (:mod:`webhook.core.rate`)."""
    from webhook.core.rate import RateError, parse_rate  # noqa: PLC0415 - kq starts without the core

    try:
        return parse_rate(text)
    except RateError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
