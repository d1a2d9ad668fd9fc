"""The queue controller: watches, snapshot, dequeue loop, reclaim, status writers and leader election.

Entry points for ``kq serve``: :func:`add_controller_args` (flags), :func:`run_controller` (a coroutine that
runs until its ``stop`` event is set) or :func:`controller_context` (an aiohttp ``cleanup_ctx`` entry).
"""

from webhook.controller.controller import Controller, controller_context, run_controller
from webhook.controller.settings import ControllerSettings, add_controller_args, settings_from_args

__all__ = [
    "Controller",
    "ControllerSettings",
    "add_controller_args",
    "controller_context",
    "run_controller",
    "settings_from_args",
]
