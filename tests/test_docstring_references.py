"""Every cross-reference in a docstring of the package names something that exists.

A reference is a Sphinx role (``:func:``, ``:mod:``, ``:class:``, ``:meth:``, ``:data:``,
``:attr:``, ``:exc:``). It resolves as Sphinx would look it up: a dotted name from
``sessionstore`` by importing it; a name with a leading dot in the module, then from its
package; any other name in the enclosing classes (a method, a class attribute, or an
attribute their code assigns), then in the module's globals, then as a module path of
another library.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

import sessionstore

PACKAGE = Path(sessionstore.__file__).parent
ROLE = re.compile(r":(?:func|mod|class|meth|data|attr|exc):`~?([^`<>]+?)`")


def _modules() -> list[tuple[str, Path]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = ["sessionstore", *path.relative_to(PACKAGE).with_suffix("").parts]
        if parts[-1] == "__main__":  # importing it runs the CLI
            continue
        if parts[-1] == "__init__":
            parts.pop()
        found.append((".".join(parts), path))
    return found


def _docstrings(tree: ast.AST) -> list[tuple[str, list[str], int]]:
    """(docstring, names of the classes around it, line) of every docstring."""
    found: list[tuple[str, list[str], int]] = []

    def visit(node: ast.AST, classes: list[str]) -> None:
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            inside = [*classes, node.name] if isinstance(node, ast.ClassDef) else classes
            doc = ast.get_docstring(node, clean=False)
            if doc:
                found.append((doc, inside, getattr(node, "lineno", 1)))
            classes = inside
        for child in ast.iter_child_nodes(node):
            visit(child, classes)

    visit(tree, [])
    return found


def _follow(obj: Any, names: list[str]) -> bool:
    for name in names:
        if not hasattr(obj, name):
            return False
        obj = getattr(obj, name)
    return True


def _dotted(name: str) -> bool:
    """Whether ``a.b.c`` names a module or an attribute of one."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        return _follow(module, parts[cut:])
    return False


def _assigns(cls: type, name: str) -> bool:
    """Whether the class declares or assigns the instance attribute ``name``."""
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return False
    return (
        f"self.{name} " in source
        or f"self.{name}:" in source
        or name in getattr(cls, "__annotations__", {})
    )


def resolves(target: str, module: str, classes: list[str]) -> bool:
    target = target.strip().removesuffix("()")
    if target.startswith("sessionstore"):
        return _dotted(target)
    if target.startswith("."):
        bare = target.lstrip(".")
        if target.count(".") == 1 and "." not in bare and resolves(bare, module, classes):
            return True
        is_package = hasattr(importlib.import_module(module), "__path__")
        package = module if is_package else module.rpartition(".")[0]
        level = len(target) - len(bare)
        base = package.split(".")[: len(package.split(".")) - level + 1]
        return _dotted(".".join([*base, bare]))
    namespace = importlib.import_module(module)
    first, *rest = target.split(".")
    for name in reversed(classes):
        cls = getattr(namespace, name, None)
        if cls is None:
            continue
        if hasattr(cls, first) and _follow(getattr(cls, first), rest):
            return True
        if not rest and _assigns(cls, first):
            return True
    if hasattr(namespace, first):
        return _follow(getattr(namespace, first), rest)
    return bool(rest) and _dotted(target)  # another library's name, ``rich.text.Text``


def references() -> list[tuple[str, int, str, list[str]]]:
    found = []
    for module, path in _modules():
        for doc, classes, line in _docstrings(ast.parse(path.read_text(encoding="utf-8"))):
            found += [(module, line, target, classes) for target in ROLE.findall(doc)]
    return found


def test_every_docstring_reference_resolves():
    found = references()
    assert len(found) > 100
    broken = [
        f"{module}:{line}: {target}"
        for module, line, target, classes in found
        if not resolves(target, module, classes)
    ]
    assert broken == []


@pytest.mark.parametrize(
    ("target", "module", "classes", "expected"),
    [
        ("sessionstore.Store.check_durable", "sessionstore.store", [], True),
        ("sessionstore.cli.demo.check_durable", "sessionstore.store", [], False),
        ("Session.records", "sessionstore.store", [], True),
        ("records", "sessionstore.store", ["Session"], True),
        ("UnsupportedVersionError", "sessionstore.backends.jsonl_format", [], False),
        (".common", "sessionstore.cli.values", [], True),
        (".nothing", "sessionstore.cli.values", [], False),
        ("rich.text.Text", "sessionstore.cli.text", [], True),
    ],
)
def test_the_check_tells_a_stale_reference(target, module, classes, expected):
    assert resolves(target, module, classes) is expected
