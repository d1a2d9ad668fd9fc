"""The controller as a ``kq serve`` plugin (see :mod:`webhook.cli.serve`): its flags, and a background
entry in the application's ``cleanup_ctx`` that runs it for the service's lifetime."""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import dataclass

from aiohttp import web

from webhook.controller.controller import Controller, controller_context
from webhook.controller.settings import add_controller_args
from webhook.kube.client import KubeClient


@dataclass
class RunningController:
    """The controller this process runs, once made, and its event loop."""

    controller: Controller | None = None
    loop: asyncio.AbstractEventLoop | None = None

    def made(self, controller: Controller) -> None:
        """Called on the controller's event loop before it runs."""
        self.controller, self.loop = controller, asyncio.get_running_loop()


RUNNING = web.AppKey("controller", RunningController)
"""Where ``kq serve`` keeps its controller on the application, for the parts that read it."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``--oversellrate``, ``--no-controller``, ``--status-interval``, ``--leader-elect`` and the Lease flags."""
    add_controller_args(parser)


async def attach(app: web.Application, client: KubeClient, args: argparse.Namespace) -> None:
    """Run the queue controller while ``app`` runs (nothing with ``--no-controller``); other parts find it in
    ``app[RUNNING]``."""
    running = RunningController()
    app[RUNNING] = running
    app.cleanup_ctx.append(controller_context(args, client, running.made))
