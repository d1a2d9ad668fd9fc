"""The controller as a ``kq serve`` plugin (see :mod:`webhook.cli.serve`): its flags, and a background
entry in the application's ``cleanup_ctx`` that runs it for the service's lifetime."""

from __future__ import annotations

import argparse

from aiohttp import web

from webhook.controller.controller import controller_context
from webhook.controller.settings import add_controller_args
from webhook.kube.client import KubeClient


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--oversellrate``, ``--no-controller``, ``--status-interval``, ``--leader-elect`` and the Lease flags."""
    add_controller_args(parser)


async def attach(app: web.Application, client: KubeClient, args: argparse.Namespace) -> None:
    """Run the queue controller while ``app`` runs (nothing with ``--no-controller``)."""
    app.cleanup_ctx.append(controller_context(args, client))
