"""The queue controller: watches, snapshot, dequeue loop, reclaim, status writers and leader election.

Entry points for ``kq serve``: :func:`add_controller_args` (flags), :func:`run_controller` (a coroutine that
runs until its ``stop`` event is set) or :func:`controller_context` (an aiohttp ``cleanup_ctx`` entry).

The names are resolved lazily, so importing a light submodule (``records``, ``model``) does not pull in
aiohttp and the API client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from webhook.controller.controller import Controller, controller_context, run_controller
    from webhook.controller.settings import ControllerSettings, add_controller_args, settings_from_args

_HOMES = {
    "Controller": "webhook.controller.controller",
    "controller_context": "webhook.controller.controller",
    "run_controller": "webhook.controller.controller",
    "ControllerSettings": "webhook.controller.settings",
    "add_controller_args": "webhook.controller.settings",
    "settings_from_args": "webhook.controller.settings",
}

__all__ = [
    "Controller",
    "ControllerSettings",
    "add_controller_args",
    "controller_context",
    "run_controller",
    "settings_from_args",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'webhook.controller' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
