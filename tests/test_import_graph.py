"""The modules of the package import one another without a cycle.

The graph is read from the source with ``ast`` (nothing is imported): every ``import``
counts, at module level or inside a function, since a lazy import only hides a cycle
until the function runs. Imports under ``if TYPE_CHECKING:`` do not count (they never
run). A module importing a submodule implicitly imports its parent package first; that
edge is left out, as every package whose ``__init__`` imports a child would otherwise be
a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import sessionstore

PACKAGE = Path(sessionstore.__file__).parent
NAME = "sessionstore"


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = [NAME, *path.relative_to(PACKAGE).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    found: list[ast.Import | ast.ImportFrom] = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            found.extend(_imports(ast.Module(body=node.orelse, type_ignores=[])))
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        found.extend(_imports(node))
    return found


def import_graph() -> dict[str, set[str]]:
    """Module name -> the package modules it imports (itself left out)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        targets: set[str] = set()
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
                continue
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                targets.add(submodule if submodule in modules else source)
        graph[module] = {target for target in targets if target in modules} - {module}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path that starts and ends at the same module, or None."""
    done: set[str] = set()
    path: list[str] = []
    on_path: set[str] = set()

    def visit(module: str) -> list[str] | None:
        path.append(module)
        on_path.add(module)
        for target in sorted(graph[module]):
            if target in on_path:
                return path[path.index(target) :] + [target]
            if target not in done:
                cycle = visit(target)
                if cycle:
                    return cycle
        path.pop()
        on_path.discard(module)
        done.add(module)
        return None

    for module in sorted(graph):
        if module not in done:
            cycle = visit(module)
            if cycle:
                return cycle
    return None


def test_no_module_of_the_package_imports_itself_back():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_graph_sees_relative_lazy_and_package_imports():
    graph = import_graph()
    assert "sessionstore.contracts" in graph["sessionstore.connection"]
    assert "sessionstore.backends.memory" in graph["sessionstore.connection"]  # in a function
    assert "sessionstore.flows" in graph["sessionstore.store"]  # ``from . import flows``
    assert "sessionstore" in graph["sessionstore.cli.demo.engine"]  # ``import sessionstore``


CLI = "sessionstore.cli"
#: Outside the CLI, only ``python -m sessionstore`` may import it (to run it).
RUNS_THE_CLI = {"sessionstore.__main__"}


def _in_cli(module: str) -> bool:
    return module == CLI or module.startswith(CLI + ".")


def test_the_library_core_does_not_import_the_cli():
    """The CLI (and the demo, which lives in it) builds on the library: no module of the
    library imports any part of it back."""
    graph = import_graph()
    assert "sessionstore.cli" in graph["sessionstore.__main__"]  # the check sees the CLI
    found = {
        module: sorted(filter(_in_cli, targets))
        for module, targets in graph.items()
        if not _in_cli(module) and module not in RUNS_THE_CLI and any(map(_in_cli, targets))
    }
    assert found == {}


def test_a_cycle_is_reported_as_a_path():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


# --- layers: private attributes and the test tree ---------------------------------------

REPO = PACKAGE.parent
#: The storage layers, whose modules share their own private parts.
LAYERS = ("sessionstore/backends/", "sessionstore/redis/")
#: Private by name only: public API of the standard library (``NamedTuple._asdict``).
PUBLIC_UNDERSCORED = {"_asdict", "_replace", "_fields", "_make"}


def _defined(tree: ast.AST) -> set[str]:
    """The private names a module defines: attributes it assigns, its functions, classes
    and module-level names."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


def _outside_modules(tree: ast.AST) -> set[str]:
    """Names bound by ``import x`` of modules outside the package (``asyncio``)."""
    return {
        (alias.asname or alias.name).split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
        if not alias.name.startswith(NAME)
    }


def foreign_private_reads(source: str) -> list[str]:
    """``owner._name`` reads of a private attribute the module does not define itself
    (other than on ``self``/``cls`` or an outside module), as ``line: expression``."""
    tree = ast.parse(source)
    mine, outside = _defined(tree), _outside_modules(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
            continue
        if node.attr.startswith("__") or node.attr in mine | PUBLIC_UNDERSCORED:
            continue
        if isinstance(node.value, ast.Name) and node.value.id in {"self", "cls", *outside}:
            continue
        found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def _layered_sources() -> list[Path]:
    paths = [*PACKAGE.rglob("*.py"), *(REPO / "benchmarks").rglob("*.py")]
    return [p for p in paths if not p.relative_to(REPO).as_posix().startswith(LAYERS)]


def test_no_module_outside_the_storage_layers_reads_another_layers_private_parts():
    """The CLI, the demo, the facades and the benchmarks use public API only: a store's
    ``_backends``, a backend's internals and another module's private helpers stay
    where they are defined."""
    found = {
        path.relative_to(REPO).as_posix(): reads
        for path in _layered_sources()
        if (reads := foreign_private_reads(path.read_text(encoding="utf-8")))
    }
    assert found == {}


def test_the_private_read_check_finds_a_store_internal():
    source = "import asyncio\nasyncio._get_running_loop()\nstore._backends.values.read(key)\n"
    assert foreign_private_reads(source) == ["3: store._backends"]
    assert foreign_private_reads("class S:\n    def f(self, o):\n        o._x = self._x\n") == []


def test_the_benchmarks_import_nothing_of_the_tests():
    imports = [
        node
        for path in (REPO / "benchmarks").rglob("*.py")
        for node in _imports(ast.parse(path.read_text(encoding="utf-8")))
    ]
    sources = [
        alias.name for node in imports if isinstance(node, ast.Import) for alias in node.names
    ] + [node.module or "" for node in imports if isinstance(node, ast.ImportFrom)]
    assert sources and [source for source in sources if source.split(".")[0] == "tests"] == []
