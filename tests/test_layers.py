"""Layers point one way: dlc/ (API, CLI) -> compiler/ -> runtime/, and dlc/ -> runtime/.

Every import of every module under compiler/, runtime/ and dlc/ is read from its syntax tree
(function-level imports included); an import from a lower layer into a higher one fails,
naming the file and line and what to import instead.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"dlc": "dlc", "compiler": "dlc.compiler", "runtime": "dlc.runtime"}  # folder -> package
RANK = {"runtime": 0, "compiler": 1, "api": 2}  # a layer imports only its own rank or lower

# What moved below the compiler: the old API name -> its home (`dlc` itself keeps the public names).
MOVED = {
    "dlc.errors": "dlc.runtime.errors",
    "dlc.feeds": "dlc.runtime.feeds",
    "dlc.weights": "dlc.runtime.weights",
    "dlc.training": "dlc.runtime.training",
    "dlc.optimizers": "dlc.runtime.optimizers",
    "dlc.__version__": "dlc.runtime.version",
}


def layer(module: str) -> str | None:
    """The layer of a dlc module (None: not dlc's, or the grammar data)."""
    if module.startswith("dlc.runtime") and module[len("dlc.runtime") :][:1] in ("", "."):
        return "runtime"
    if module.startswith("dlc.compiler") and module[len("dlc.compiler") :][:1] in ("", "."):
        return "compiler"
    if module.startswith("dlc.grammar"):
        return None
    if module == "dlc" or module.startswith("dlc."):
        return "api"
    return None


def module_name(path: Path, root: Path = ROOT) -> tuple[str, bool]:
    """(`path`'s dotted module name, whether it is a package's __init__)."""
    rel = path.relative_to(root)
    parts = [PACKAGES[rel.parts[0]], *rel.parts[1:-1]]
    if path.name != "__init__.py":
        parts.append(path.stem)
    return ".".join(parts), path.name == "__init__.py"


def imports(path: Path, root: Path = ROOT):
    """(line, imported module) for every import in `path`, `from M import a` giving M.a
    when M.a may be a module (dlc's own packages)."""
    name, is_package = module_name(path, root)
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node.lineno, a.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            for a in node.names:
                # `from dlc import errors` imports dlc.errors; `from dlc import Session` is dlc's
                yield (
                    node.lineno,
                    f"{base}.{a.name}" if base in ("dlc", "dlc.compiler", "dlc.runtime") or base == package else base,
                )


def advice(importer: str, target: str) -> str:
    for old, new in MOVED.items():
        if target == old or target.startswith(old + "."):
            return f"import from {new} instead"
    if importer == "runtime":
        return "the runtime imports only dlc.runtime.*: move what it needs into runtime/"
    return "the compiler imports only dlc.compiler.* and dlc.runtime.*: move what it needs down"


def upward_imports(root: Path = ROOT) -> list[str]:
    bad = []
    for folder in PACKAGES:
        for path in sorted((root / folder).rglob("*.py")):
            mine = layer(module_name(path, root)[0])
            for line, target in imports(path, root):
                theirs = layer(target)
                if theirs is not None and RANK[theirs] > RANK[mine]:
                    bad.append(
                        f"{path.relative_to(root)}:{line}: {mine}/ imports {target} "
                        f"({theirs} layer): {advice(mine, target)}"
                    )
    return bad


def test_layers_point_one_way():
    bad = upward_imports()
    assert not bad, "imports that point up a layer:\n" + "\n".join(bad)


@pytest.mark.parametrize(
    "source, want",
    [
        ("from dlc.errors import CompileError\n", "import from dlc.runtime.errors instead"),
        ("def f():\n    from dlc import __version__\n", "import from dlc.runtime.version instead"),
        ("from dlc.compiler import registry\n", "the runtime imports only dlc.runtime"),
        ("from .. import debug\n", "dlc.debug (api layer)"),
    ],
)
def test_an_upward_import_is_named_with_file_line_and_fix(tmp_path, source, want):
    for folder in PACKAGES:
        (tmp_path / folder).mkdir()
    (tmp_path / "runtime" / "probe.py").write_text(source, encoding="utf-8")
    (tmp_path / "dlc" / "fine.py").write_text("from dlc.compiler import ir\nimport dlc.runtime\n")
    (tmp_path / "compiler" / "fine.py").write_text("from dlc.runtime.errors import Loc\n")
    line = next(k for k, text in enumerate(source.splitlines(), 1) if "import" in text)
    bad = upward_imports(tmp_path)
    assert len(bad) == 1 and bad[0].startswith(f"runtime/probe.py:{line}: runtime/ imports "), bad
    assert want in bad[0], bad


def test_the_moved_names_are_reachable_from_dlc_itself_not_through_shims():
    import importlib

    import dlc
    from dlc.runtime import errors, optimizers, version

    assert errors.CompileError is dlc.CompileError and errors.TrainingDiverged is dlc.TrainingDiverged
    assert optimizers.Adam is dlc.Adam and optimizers.SGD is dlc.SGD
    assert dlc.__version__ == version.__version__
    for shim in ("errors", "feeds", "optimizers", "training", "weights"):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(f"dlc.{shim}")
