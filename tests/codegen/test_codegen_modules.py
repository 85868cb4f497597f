"""Codegen's modules import at module level only, and each imports on its own first (the
texture target, its packed passes and the pipeline once imported each other inside
functions to break a cycle)."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

CODEGEN = pathlib.Path(__file__).resolve().parents[2] / "compiler" / "codegen"


def _function_imports(path: pathlib.Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for inner in ast.walk(node):
                if isinstance(inner, (ast.Import, ast.ImportFrom)):
                    found.append(f"{path.name}:{inner.lineno} in {node.name}()")
    return found


def test_codegen_imports_only_at_module_level():
    modules = sorted(CODEGEN.glob("*.py"))
    assert len(modules) > 10
    assert [where for m in modules for where in _function_imports(m)] == []


@pytest.mark.parametrize(
    "module", ["codegen.texture_matmul", "codegen.texture", "codegen.fragment", "codegen.compute", "pipeline"]
)
def test_each_module_imports_first_on_its_own(module):
    done = subprocess.run(
        [sys.executable, "-c", f"import dlc.compiler.{module}"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
