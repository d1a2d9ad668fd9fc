"""What every developer command shares: connection flags, ``K=V`` flags, and one-line errors.

A command is a function ``(ctx, args) -> int`` wrapped by :func:`command`; tests pass their own
:class:`~webhook.readmodel.context.Ctx` (a fake API, a fixed clock, string buffers) as ``args.ctx``.
"""

from __future__ import annotations

import argparse
import gc
from collections.abc import Callable
from typing import TYPE_CHECKING

from webhook.readmodel.kubeapi import ApiError
from webhook.readmodel.kubeconfig import ConfigError

if TYPE_CHECKING:
    from webhook.readmodel.context import Ctx


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


def run_on_cluster(
    parser: argparse.ArgumentParser, function: Callable[[Ctx, argparse.Namespace], int], *, all_namespaces: bool = False
) -> None:
    """Make ``parser``'s command run ``function`` (through :func:`command`) with the connection flags its
    context is built from; added last, so they close the usage line."""
    add_connection_flags(parser, all_namespaces)
    parser.set_defaults(handler=command(function))


def command(function: Callable[[Ctx, argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """A handler for ``args.handler``: runs ``function`` and turns every expected failure into one line on
    stderr (``error: ...``) and exit status 1 (130 on Ctrl-C)."""
    from webhook.readmodel.fetch import CliError  # noqa: PLC0415

    def handler(args: argparse.Namespace) -> int:
        from webhook.readmodel.context import ctx_from_args  # noqa: PLC0415 - built when a command runs

        ctx = ctx_from_args(args)
        collecting = gc.isenabled()
        pause = ctx.sleep

        def sleep(seconds: float) -> None:
            gc.collect()  # a command that waits (--watch, --wait, logs -f) frees a round's cycles as it waits
            pause(seconds)

        # A command builds tens of thousands of acyclic objects (the API's JSON) and ends: the cyclic collector
        # would walk them again and again (a third of ``kq why``'s time at 50,000 jobs); reference counting
        # still frees them.
        gc.disable()
        ctx.sleep = sleep
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
        finally:
            ctx.sleep = pause
            if collecting:
                gc.enable()
        return 1

    handler.__name__ = getattr(function, "__name__", "handler")
    return handler


def key_values(pairs: list[str] | None, flag: str) -> list[tuple[str, str]]:
    """``K=V`` flag values as pairs; :class:`CliError` naming the flag for one without ``=``."""
    from webhook.readmodel.fetch import CliError  # noqa: PLC0415

    out = []
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise CliError(f"{flag} takes KEY=VALUE, got {pair!r}")
        out.append((key, value))
    return out
