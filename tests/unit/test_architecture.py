"""The layering of docs/architecture.md holds: the wire names are a leaf, the core is pure, adapters only use
the core, shells never import each other (only the CLI ties them together), and the two faces, ``kq`` and the
console, meet only in the read model they both sit on."""

from __future__ import annotations

import ast
import functools
import re
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "webhook"
SHELLS = ("admission", "extender", "controller", "devcluster", "sim")
"""Packages that do I/O for one purpose; none may import another (``kube`` is shared plumbing)."""
FACES = ("webhook.cli", "webhook.console")
"""What users meet, ``kq`` and ``kq console``; neither imports the other, both sit on ``webhook.readmodel``."""


@functools.cache
def _nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of a source file, parsed once per test process (several checks read the same files)."""
    return tuple(ast.walk(ast.parse(path.read_text(), filename=str(path))))


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in _nodes(path):
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


def _string_literals(nodes: tuple[ast.AST, ...]) -> list[tuple[int, str]]:
    """The string constants of a module (given as all its nodes) that are not docstrings."""
    docstrings = {
        id(node.body[0].value)
        for node in nodes
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    return [
        (node.lineno, node.value)
        for node in nodes
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
        literals = _string_literals(_nodes(path))
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
        for node in _nodes(path):
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
    others = (*(f"webhook.{name}" for name in SHELLS if name != shell), *FACES, "webhook.readmodel")
    offenders = {
        path.name: sorted(name for name in _imports(path) if name.startswith(others))
        for path in _modules(shell)
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_check_sees_the_imports_it_judges() -> None:
    # Guard against a vacuous pass: the scanner must find the core's own intra-package imports.
    found = set().union(*(_imports(p) for p in _modules("core")))
    assert "webhook.core.resources" in found


def _imported_modules(path: Path) -> set[str]:
    """Every module a file imports, lazy and type-only imports included; ``from a import b`` counts as ``a``
    and as ``a.b`` (``b`` may be a module: ``from webhook import console``)."""
    names = _imports(path)
    for node in _nodes(path):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _imports_of(package: str, banned: tuple[str, ...]) -> dict[str, list[str]]:
    """The modules of ``webhook/<package>`` that import one of ``banned`` (or a module under it)."""
    offenders = {
        str(path.relative_to(ROOT)): sorted(
            name for name in _imported_modules(path) if any(name == b or name.startswith(b + ".") for b in banned)
        )
        for path in _modules(package)
    }
    return {where: names for where, names in offenders.items() if names}


def test_the_cli_does_not_import_the_console() -> None:
    # `kq console` is wired by name (webhook.cli.main.COMMANDS), like every command.
    assert _imports_of("cli", ("webhook.console",)) == {}


def test_the_console_does_not_import_the_cli() -> None:
    assert _imports_of("console", ("webhook.cli",)) == {}


def test_the_read_model_imports_neither_face() -> None:
    assert _imports_of("readmodel", FACES) == {}


def test_the_face_check_sees_the_imports_it_judges() -> None:
    # Guard against a vacuous pass: both faces are seen importing the read model (a module-level import, a
    # lazy one inside a function), and the `from package import module` form is seen as the module.
    cli, console = (_imports_of(face, ("webhook.readmodel",)) for face in ("cli", "console"))
    assert {"webhook.readmodel.context", "webhook.readmodel.fetch"} <= set(cli["cli/common.py"])
    assert "webhook.readmodel.explain" in console["console/developer.py"]
    assert "webhook.cli.devsystem" in _imported_modules(ROOT / "cli" / "dev.py")
    assert len(_modules("readmodel")) > 10


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
        for node in _nodes(path)
        if isinstance(node, ast.ClassDef) and node.name.startswith("Fake")
    }
    assert fakes == set()


def test_the_test_import_check_sees_test_imports() -> None:
    # Guard against a vacuous pass: the same scanner finds the tests' own imports of tests modules.
    assert _importers_of_tests(ROOT.parent / "tests" / "unit")


def _ours(module: str) -> bool:
    return module == "tests" or module.startswith("tests.")


def _is_test_module(module: str) -> bool:
    return (_ours(module) or module.startswith(".")) and module.rpartition(".")[2].startswith("test_")


def _test_module_imports(source: str | Path) -> list[str]:
    """The ``test_*`` modules a source (or a file) imports (``import a.test_x``, ``from a.test_x import y`` or
    ``from a import test_x``), relative imports included."""
    found = []
    nodes = _nodes(source) if isinstance(source, Path) else tuple(ast.walk(ast.parse(source)))
    for node in nodes:
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if _is_test_module(alias.name)]
        elif isinstance(node, ast.ImportFrom) and (node.level or _ours(node.module or "")):
            module = "." * node.level + (node.module or "")
            if _is_test_module(module):
                found.append(module)
            else:
                found += [f"{module}.{alias.name}" for alias in node.names if alias.name.startswith("test_")]
    return found


def test_no_test_module_imports_another_test_module() -> None:
    # Shared helpers live in support modules pytest does not collect (tests/builders.py, tests/strategies.py,
    # tests/service/*_support.py, ...), so a test module is never also a library.
    paths = sorted((ROOT.parent / "tests").rglob("*.py"))
    assert sum(path.name.startswith("test_") for path in paths) > 50  # the scan reaches the test tiers
    found = {
        str(path.relative_to(ROOT.parent)): names
        for path in paths
        if (names := _test_module_imports(path))
    }
    assert found == {}


@pytest.mark.parametrize(
    "source",
    [
        "from tests.service.test_controller_loop import seed_api",
        "import tests.unit.test_core_properties",
        "from tests.unit import test_core_properties",
        "from .test_extender_wire import post",
        "from . import test_extender_wire",
    ],
)
def test_the_test_module_check_sees_each_form_of_import(source: str) -> None:
    assert _test_module_imports(source)
    assert not _test_module_imports(source.replace("test_", "support_"))


API_CLIENTS = {"KubeClient", "KubeApi"}
"""The package's two API client interfaces; a test class deriving one of them fakes the API server."""
STORE_BACKED = {"ObjectStore", "FakeApi", "HttpApiserver"}
"""What a fake may build to keep its objects in the one store (each ``FakeApi`` and ``HttpApiserver`` is
itself judged by the check)."""


def _fake_api_servers(root: Path) -> dict[str, bool]:
    """Each class under ``root`` that derives an API client, ``ObjectStore`` or a class named like a fake API
    server, and whether it keeps its objects in :class:`tests.kubefake.ObjectStore` (by deriving it, deriving
    a class that does, or building one). A base is resolved by name (any class of that name)."""
    found: list[tuple[str, ast.ClassDef]] = [
        (f"{path.relative_to(root.parent)}:{node.name}", node)
        for path in sorted(root.rglob("*.py"))
        for node in _nodes(path)
        if isinstance(node, ast.ClassDef)
    ]
    by_name: dict[str, list[ast.ClassDef]] = {}
    for _, node in found:
        by_name.setdefault(node.name, []).append(node)

    def bases(node: ast.ClassDef) -> set[str]:
        return {base.id if isinstance(base, ast.Name) else ast.unparse(base) for base in node.bases}

    def inherits(node: ast.ClassDef, test: Callable[[ast.ClassDef], bool], roots: set[str], depth: int = 0) -> bool:
        return test(node) or any(
            base in roots
            or (depth < 5 and any(inherits(other, test, roots, depth + 1) for other in by_name.get(base, [])))
            for base in bases(node)
        )

    def builds_a_store(node: ast.ClassDef) -> bool:  # the store itself, or a fake the check passes below
        return any(
            isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in STORE_BACKED
            for call in ast.walk(node)
        )

    def named_a_fake(node: ast.ClassDef) -> bool:
        return "apiserver" in node.name.lower() or node.name in ("FakeApi", "FakeClient")

    return {
        where: inherits(node, builds_a_store, {"ObjectStore"})
        for where, node in found
        if inherits(node, named_a_fake, API_CLIENTS | {"ObjectStore"})
    }


def test_every_fake_api_server_in_the_tests_keeps_its_objects_in_the_one_store() -> None:
    fakes = _fake_api_servers(ROOT.parent / "tests")
    # The scan sees the fakes it judges: the CLI's, the shells' KubeClient one and the HTTP front.
    assert {"tests/fakeapi.py:FakeApi", "tests/service/kubeclient_fake.py:FakeApi",
            "tests/service/apiserver_http.py:HttpApiserver"} <= set(fakes)
    assert {name for name, on_store in fakes.items() if not on_store} == set()


# One vocabulary of values (docs/architecture.md, "One vocabulary") ------------------------------------------------


def test_the_read_model_and_the_faces_name_a_job_status_by_its_member() -> None:
    """A status word (``"QUEUING"``) is written only in ``webhook/api/statuses.py``; the read model and the faces
    use :class:`~webhook.api.statuses.JobStatus`, so a renamed or added status cannot be missed somewhere."""
    from webhook.api.statuses import JobStatus  # noqa: PLC0415

    words = {status.value for status in JobStatus}
    other_vocabularies = {("readmodel/view.py", "FAILED")}  # a RayJob's own status.jobStatus
    found, scanned = [], 0
    for package in ("readmodel", "cli", "console"):
        for path in (ROOT / package).rglob("*.py"):
            where = str(path.relative_to(ROOT))
            literals = _string_literals(_nodes(path))
            scanned += len(literals)
            found += [f"{where}:{line}: {text}" for line, text in literals
                      if text in words and (where, text) not in other_vocabularies]
    assert found == []
    assert scanned > 1000


def test_times_are_read_and_written_in_one_place() -> None:
    """Only ``webhook/api/objects.py`` parses or formats a time (``read_time``, ``parse_time``, ``rfc3339``);
    the dev cluster's pod logs write the container runtime's own line format."""
    calls = {"fromisoformat", "strptime", "strftime", "isoformat"}
    allowed = {"api/objects.py", "devcluster/podlog.py"}
    found, seen = [], 0
    for path in ROOT.rglob("*.py"):
        where = str(path.relative_to(ROOT))
        for node in _nodes(path):
            if isinstance(node, ast.Attribute) and node.attr in calls:
                seen += 1
                if where not in allowed:
                    found.append(f"{where}:{node.lineno}: {node.attr}")
    assert found == []
    assert seen >= 3  # the reader and the two writers


def test_a_refusal_for_pod_level_quota_is_worded_from_its_one_marker() -> None:
    """``kq why`` recognises the extender's refusals by :data:`webhook.core.podquota.POD_QUOTA_REFUSAL`; no
    other module spells the marker out."""
    from webhook.core.podquota import POD_QUOTA_REFUSAL  # noqa: PLC0415

    found = []
    for path in ROOT.rglob("*.py"):
        where = str(path.relative_to(ROOT))
        if where != "core/podquota.py":
            found += [f"{where}:{line}: {text}" for line, text in _string_literals(_nodes(path))
                      if text.startswith(POD_QUOTA_REFUSAL)]
    assert found == []


def test_no_module_of_the_package_is_over_500_lines() -> None:
    """Small modules with names that say what they hold (docs/architecture.md)."""
    sizes = {str(path.relative_to(ROOT)): len(path.read_text().splitlines()) for path in ROOT.rglob("*.py")}
    assert {where: lines for where, lines in sizes.items() if lines > 500} == {}
    assert len(sizes) > 150


def _import_time_edges() -> dict[str, set[str]]:
    """Module to module: the imports of ``webhook/`` and ``bench/`` that run when a module is imported (at its top
    level, outside ``if TYPE_CHECKING:``; functions' lazy imports do not count)."""
    modules: dict[str, Path] = {}
    for base in (ROOT, ROOT.parent / "bench"):
        for path in base.rglob("*.py"):
            parts = path.relative_to(ROOT.parent).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    edges: dict[str, set[str]] = {name: set() for name in modules}

    def visit(name: str, statements: list[ast.stmt]) -> None:
        for statement in statements:
            if isinstance(statement, ast.If) and "TYPE_CHECKING" in ast.unparse(statement.test):
                visit(name, statement.orelse)
                continue
            if isinstance(statement, ast.Import):
                edges[name].update(alias.name for alias in statement.names if alias.name in modules)
            elif isinstance(statement, ast.ImportFrom) and statement.module and statement.level == 0:
                for alias in statement.names:
                    target = f"{statement.module}.{alias.name}"
                    edges[name].add(target if target in modules else statement.module)
            for block in ("body", "orelse", "finalbody"):
                if not isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    visit(name, getattr(statement, block, []) or [])
            for handler in getattr(statement, "handlers", []) or []:
                visit(name, handler.body)

    for name, path in modules.items():
        visit(name, ast.parse(path.read_text()).body)
    return {name: {target for target in targets if target in modules} for name, targets in edges.items()}


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or around a circle (Tarjan's components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in edges[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = [stack.pop()]
            while group[-1] != node:
                group.append(stack.pop())
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_itself_around_a_circle() -> None:
    """Every module of the package and the bench can be imported on its own, in any order."""
    edges = _import_time_edges()
    assert _circles(edges) == []
    assert sum(len(targets) for targets in edges.values()) > 500  # the scan saw the imports


def test_the_circle_check_finds_a_circle() -> None:
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


ANY_ALLOWED = {
    "controller/__init__.py": "the package's lazy attributes (a module-level __getattr__)",
    "core/chain_usage.py": "Mapping.get's own signature, which an override must keep",
}
"""The modules of ``webhook/`` that may name ``typing.Any``, and why; every other value has a type
(``webhook.api.objects``: ``Obj`` read from the wire, ``Doc`` built for it, the TypedDicts of known shapes)."""


def _names_any(path: Path) -> list[int]:
    """The lines where a module names ``Any``: in code, in a quoted annotation or in a ``cast``'s type."""
    lines: list[int] = []
    for node in _nodes(path):
        named = (node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute)
                 else node.name if isinstance(node, ast.alias) else None)
        if named == "Any" and isinstance(node, ast.Name | ast.Attribute | ast.alias):
            lines.append(node.lineno)
        quoted: list[ast.expr | None] = []
        if isinstance(node, ast.arg | ast.AnnAssign):
            quoted.append(node.annotation)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            quoted.append(node.returns)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "cast" and node.args:
            quoted.append(node.args[0])
        for expr in quoted:
            if isinstance(expr, ast.Constant) and isinstance(expr.value, str) and re.search(r"\bAny\b", expr.value):
                lines.append(expr.lineno)
    return lines


def test_no_module_but_the_two_named_types_a_value_as_any() -> None:
    """A value read from the wire is an ``Obj`` narrowed where it is read, not ``Any`` (issue 39)."""
    found = {str(path.relative_to(ROOT)): _names_any(path) for path in ROOT.rglob("*.py")}
    assert {where: lines for where, lines in found.items() if lines and where not in ANY_ALLOWED} == {}
    assert all(found[where] for where in ANY_ALLOWED), "an allowed module no longer names Any: drop it"


@pytest.mark.parametrize("source", [
    "from typing import Any\n",
    "import typing\nx: typing.Any = 1\n",
    "def f(x: 'Mapping[str, Any]') -> None: ...\n",
    "y = cast('dict[str, Any]', {})\n",
])
def test_the_any_check_sees_each_form(source: str, tmp_path: Path) -> None:
    path = tmp_path / "module.py"
    path.write_text(source)
    assert _names_any(path)
