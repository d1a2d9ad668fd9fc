"""Import the modules the ``kq`` tool is wired from, failing loudly.

Commands (:mod:`webhook.cli.main`) and ``kq serve`` plugins (:mod:`webhook.cli.serve`) are listed by module
name. A listed module that is missing or fails to import is a packaging or coding error, never an optional
part: skipping it silently would ship a service without its controller or a tool without a command. So the
process stops with a message that names the module and the import error.
"""

from __future__ import annotations

import importlib
from types import ModuleType


class WiringError(SystemExit):
    """A listed command or plugin module could not be imported (exits the process with the message)."""


def import_wired(name: str, role: str) -> ModuleType:
    """Import the module ``name`` listed as a ``role`` (``"command"``, ``"plugin"``), or raise
    :class:`WiringError` naming it and the error it raised on import."""
    try:
        return importlib.import_module(name)
    except Exception as error:  # any import-time failure is a broken wiring, whatever its type
        raise WiringError(f"kq: cannot import {role} module {name!r}: {type(error).__name__}: {error}") from error
