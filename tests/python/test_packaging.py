"""What the installed package needs: ``import vramscope`` in a bare environment (the wheel
alone, nothing else installed) imports only the standard library and what ``pyproject.toml``
declares. The tests' venv has torch (and through it typing_extensions), so an undeclared import
would pass every other test and fail for a user; this reads every module's import statements
instead of importing it."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

from conftest import REPO

PACKAGE = REPO / "python" / "vramscope"


def _modules(requirements: list[str]) -> set[str]:
    """Top-level module names of requirements (distribution names as modules:
    ``typing-extensions`` → ``typing_extensions``)."""
    names = set()
    for req in requirements:
        m = re.match(r"[A-Za-z0-9._-]+", req)
        assert m, req
        names.add(m.group(0).lower().replace("-", "_").replace(".", "_"))
    return names


def _declared() -> tuple[set[str], set[str]]:
    """Modules of ``[project] dependencies``, and of every optional extra."""
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project.get("optional-dependencies", {})
    return _modules(project.get("dependencies", [])), _modules(
        [r for reqs in extras.values() for r in reqs]
    )


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def import_time_modules(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, top-level module) of every absolute import that runs when the module is imported:
    module and class bodies, ``try``/``if``/``with`` blocks, but not function bodies (run when
    called) nor ``if TYPE_CHECKING:`` blocks (read by type checkers only)."""
    found: list[tuple[int, str]] = []

    def walk(stmts: list[ast.stmt]) -> None:
        for s in stmts:
            if isinstance(s, ast.Import):
                found.extend((s.lineno, a.name.split(".")[0]) for a in s.names)
            elif isinstance(s, ast.ImportFrom):
                if s.level == 0 and s.module:
                    found.append((s.lineno, s.module.split(".")[0]))
            elif isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            elif isinstance(s, ast.If):
                if not _is_type_checking(s.test):
                    walk(s.body)
                walk(s.orelse)
            elif isinstance(s, (ast.ClassDef, ast.With, ast.AsyncWith)):
                walk(s.body)
            elif isinstance(s, ast.Try):
                walk(s.body)
                for h in s.handlers:
                    walk(h.body)
                walk(s.orelse)
                walk(s.finalbody)

    walk(tree.body)
    return found


def test_the_checker_sees_what_an_import_runs() -> None:
    """The reader itself: a function's import and a TYPE_CHECKING import are not import time;
    one in a try block or a class body is."""
    src = (
        "import os\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import numpy\n"
        "def f():\n    import torch\ntry:\n    import yaml\nexcept ImportError:\n    pass\n"
        "class C:\n    import json\nfrom . import x\n"
    )
    assert [m for _, m in import_time_modules(ast.parse(src))] == ["os", "typing", "yaml", "json"]


@pytest.mark.skipif(sys.version_info < (3, 10), reason="sys.stdlib_module_names is 3.10+")
def test_every_import_time_module_is_stdlib_or_declared() -> None:
    """Every module ``import vramscope`` reaches imports the standard library and the declared
    dependencies only; the trainer callbacks (``vramscope.integrations.*``, imported by their
    users alone) also their extra's framework (and ``pytorch_lightning``, Lightning's older
    name, tried when ``lightning`` is missing)."""
    required, extras = _declared()
    allowed = set(sys.stdlib_module_names) | required | {"vramscope"}
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 10, files

    def ok(f: Path, mod: str) -> bool:
        if f.parent.name == "integrations":
            return mod in allowed | extras | {"pytorch_lightning"}
        return mod in allowed

    bad = [
        f"{f.relative_to(REPO)}:{line}: {mod}"
        for f in files
        for line, mod in import_time_modules(ast.parse(f.read_text(), str(f)))
        if not ok(f, mod)
    ]
    assert not bad, "imported at import time but not declared in pyproject.toml: " + ", ".join(bad)
