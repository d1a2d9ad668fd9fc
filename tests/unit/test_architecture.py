"""The layering of docs/architecture.md holds: the wire names are a leaf, the core is pure, adapters only use
the core, shells never import each other (only the CLI ties them together)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "webhook"
SHELLS = ("admission", "extender", "controller", "devcluster", "sim")
"""Packages that do I/O for one purpose; none may import another (``kube`` is shared plumbing)."""


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize(("package", "allowed"), [("api", ("webhook.api",)), ("core", ("webhook.core", "webhook.api"))])
def test_api_and_core_import_only_the_standard_library(package: str, allowed: tuple[str, ...]) -> None:
    offenders = {}
    for path in _modules(package):
        bad = sorted(
            name
            for name in _imports(path)
            if name != "__future__"
            and not name.startswith(allowed)
            and name.split(".")[0] not in sys.stdlib_module_names
        )
        if bad:
            offenders[path.name] = bad
    assert offenders == {}


def _string_literals(tree: ast.AST) -> list[tuple[int, str]]:
    """The string constants of a module that are not docstrings."""
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def test_the_wire_names_are_defined_in_one_place() -> None:
    # Our own label/annotation prefixes and API groups appear as string literals only in webhook/api
    # (docstrings aside).
    prefixes = ("kube-queue.x-k8s.io/", "kube-queue.io/", "kube-queue/", "dev.kube-queue", "sim.kube-queue",
                "scheduling.sigs.k8s.io", "scheduling.x-k8s.io", "scheduling.alibabacloud.com")
    found = []
    scanned = 0
    for path in ROOT.rglob("*.py"):
        literals = _string_literals(ast.parse(path.read_text()))
        scanned += len(literals)
        if path.parent.name != "api":
            where = path.relative_to(ROOT)
            found += [f"{where}:{line}: {text}" for line, text in literals if text.startswith(prefixes)]
    assert found == []
    assert scanned > 1000  # the scan saw the package's literals (a guard against a vacuous pass)


def test_core_does_no_io() -> None:
    banned = {"asyncio", "socket", "subprocess", "os", "time", "random", "logging", "threading", "urllib", "http"}
    offenders = {
        path.name: sorted(name for name in _imports(path) if name.split(".")[0] in banned)
        for path in _modules("core")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_core_never_reads_the_clock() -> None:
    clock_calls = {"now", "utcnow", "today", "monotonic", "perf_counter"}
    offenders = []
    for path in _modules("core"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in clock_calls:
                offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []


def test_workload_adapters_import_only_the_core() -> None:
    offenders = {
        path.name: sorted(
            name
            for name in _imports(path)
            if name.startswith("webhook.") and not name.startswith(("webhook.core", "webhook.workloads", "webhook.api"))
        )
        for path in _modules("workloads")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


@pytest.mark.parametrize("shell", SHELLS)
def test_shells_do_not_import_other_shells(shell: str) -> None:
    others = (*(f"webhook.{name}" for name in SHELLS if name != shell), "webhook.cli")
    offenders = {
        path.name: sorted(name for name in _imports(path) if name.startswith(others))
        for path in _modules(shell)
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_check_sees_the_imports_it_judges() -> None:
    # Guard against a vacuous pass: the scanner must find the core's own intra-package imports.
    found = set().union(*(_imports(p) for p in _modules("core")))
    assert "webhook.core.resources" in found


def test_the_cli_command_table_names_the_module_that_registers_each_command() -> None:
    import argparse  # noqa: PLC0415
    import importlib  # noqa: PLC0415

    from webhook.cli.main import COMMANDS, SUBCOMMAND_MODULES  # noqa: PLC0415

    registered: dict[str, str] = {}
    for name in SUBCOMMAND_MODULES:
        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(name).register(sub)
        registered.update(dict.fromkeys(sub.choices, name))
    assert registered == COMMANDS


def _importers_of_tests(root: Path) -> dict[str, list[str]]:
    found = {}
    for path in sorted(root.rglob("*.py")):
        bad = sorted(name for name in _imports(path) if name == "tests" or name.startswith("tests."))
        if bad:
            found[str(path.relative_to(root.parent))] = bad
    return found


def test_neither_the_package_nor_the_bench_imports_a_test_module() -> None:
    # tests/ is not a library: what the benchmarks need lives in bench/ (bench/objects.py).
    assert _importers_of_tests(ROOT) == {}
    assert _importers_of_tests(ROOT.parent / "bench") == {}


def test_the_package_ships_no_fake_api_server() -> None:
    # Fakes of the API server are test-only (tests/fakeapi.py and the service tier's fakes).
    fakes = {
        f"{path.relative_to(ROOT.parent)}:{node.name}"
        for path in ROOT.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef) and node.name.startswith("Fake")
    }
    assert fakes == set()


def test_the_test_import_check_sees_test_imports() -> None:
    # Guard against a vacuous pass: the same scanner finds the tests' own imports of tests modules.
    assert _importers_of_tests(ROOT.parent / "tests" / "unit")
