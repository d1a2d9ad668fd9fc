"""Wiring fails loudly: every listed command and plugin module imports, and one that does not stops the
process with a message naming the module and the import error (never a silent skip)."""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys
import types

import pytest

from webhook.cli import main as main_module
from webhook.cli import serve as serve_module
from webhook.cli.wiring import WiringError, import_wired


@pytest.mark.parametrize(
    "name", sorted({*main_module.SUBCOMMAND_MODULES, *main_module.COMMANDS.values(), *serve_module.PLUGIN_MODULES})
)
def test_every_listed_command_and_plugin_module_imports(name: str) -> None:
    assert importlib.util.find_spec(name) is not None
    importlib.import_module(name)


def test_serve_loads_every_listed_plugin() -> None:
    assert [m.__name__ for m in serve_module.plugins()] == list(serve_module.PLUGIN_MODULES)


def test_a_missing_module_is_an_error_naming_it() -> None:
    with pytest.raises(WiringError) as caught:
        import_wired("webhook.no_such_module", "plugin")
    message = str(caught.value)
    assert "plugin module 'webhook.no_such_module'" in message
    assert "ModuleNotFoundError" in message
    assert isinstance(caught.value, SystemExit)


def test_a_module_that_raises_on_import_is_an_error_naming_the_cause(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(name: str) -> types.ModuleType:
        raise RuntimeError("boom at import")

    monkeypatch.setattr(importlib, "import_module", broken)
    with pytest.raises(WiringError, match=r"command module 'webhook\.cli\.jobs': RuntimeError: boom at import"):
        import_wired("webhook.cli.jobs", "command")


def test_serve_stops_on_a_missing_plugin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(serve_module, "PLUGIN_MODULES", ("webhook.controller.plugin", "kq_absent_plugin"))
    with pytest.raises(SystemExit, match="plugin module 'kq_absent_plugin': ModuleNotFoundError"):
        serve_module.plugins()


def test_a_plugin_that_imports_a_missing_module_is_not_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    # A module found but whose own import fails (a missing dependency) must not pass as "not installed".
    plugin = types.ModuleType("kq_half_plugin")
    monkeypatch.setitem(sys.modules, "kq_half_plugin", None)  # None in sys.modules makes import raise
    monkeypatch.setattr(serve_module, "PLUGIN_MODULES", (plugin.__name__,))
    with pytest.raises(SystemExit, match="kq_half_plugin"):
        serve_module.plugins()


def test_kq_stops_on_a_missing_command_module(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(main_module, "COMMANDS", {**main_module.COMMANDS, "list": "webhook.cli.gone"})
    monkeypatch.setattr(main_module, "SUBCOMMAND_MODULES", (*main_module.SUBCOMMAND_MODULES, "webhook.cli.gone"))
    with pytest.raises(SystemExit, match=r"command module 'webhook\.cli\.gone': ModuleNotFoundError"):
        main_module.main(["list"])


@pytest.mark.parametrize("argv", [[], ["--help"], ["-v", "--help"], ["no-such-command"]])
def test_kq_lists_its_commands_as_their_modules_would(argv: list[str]) -> None:
    """``kq --help`` (and a bare or mistyped ``kq``) lists the commands from the command table, importing no
    command module: the listing is the one every module's own ``register`` gives, byte for byte."""
    assert main_module.build_parser(argv).format_help() == main_module.build_parser().format_help()


def test_kq_help_imports_no_command_module() -> None:
    script = ("import sys; from webhook.cli.main import SUBCOMMAND_MODULES, main\n"
              "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
              "print(sorted(name for name in SUBCOMMAND_MODULES if name in sys.modules))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.strip().splitlines()[-1] == "[]"
    assert "usage: kq" in done.stdout


def test_kq_with_every_command_wired_builds_its_parser() -> None:
    parser = main_module.build_parser()
    assert parser.prog == "kq"
