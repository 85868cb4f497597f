"""The package structure stays one-way inside each package, and imports stay at module level.

Every module under dlc/, compiler/, runtime/ and grammar/ is read with `ast`. Inside each of
those packages, the imports (module-level and function-level alike: a function-level import
only hides a cycle until the function runs) must form no cycle: what two modules share
belongs in a third, below both. And a function-level import is the exception: each needs a
`# lazy: why` comment on its line (an optional dependency, a start-up-heavy one such as
OpenGL, ...), and there are fewer than `MAX_LAZY` of them in all.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"dlc": "dlc", "compiler": "dlc.compiler", "runtime": "dlc.runtime", "grammar": "dlc.grammar"}
MAX_LAZY = 20


def module_name(path: Path, root: Path = ROOT) -> str:
    rel = path.relative_to(root)
    parts = [PACKAGES[rel.parts[0]], *rel.parts[1:-1]]
    if path.name != "__init__.py":
        parts.append(path.stem)
    return ".".join(parts)


def modules(root: Path = ROOT) -> dict[str, Path]:
    return {module_name(p, root): p for folder in PACKAGES for p in sorted((root / folder).rglob("*.py"))}


def _never_on_import(node: ast.AST) -> bool:
    """`if TYPE_CHECKING:` and `if __name__ == "__main__":` blocks: they run on no import."""
    if not isinstance(node, ast.If):
        return False
    test = ast.unparse(node.test)
    return test.endswith("TYPE_CHECKING") or test.replace("'", '"') == '__name__ == "__main__"'


def import_nodes(tree: ast.AST):
    """(import node, inside a function?) for every import that runs on import."""

    def walk(node, in_function):
        for child in ast.iter_child_nodes(node):
            if _never_on_import(child):
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, in_function
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            yield from walk(child, inner)

    yield from walk(tree, False)


def targets(node: ast.AST, name: str, is_package: bool, known: dict[str, Path]) -> list[str]:
    """The dlc modules an import statement in module `name` imports."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in known]
    base = node.module or ""
    if node.level:
        anchor = (name if is_package else name.rpartition(".")[0]).split(".")
        anchor = anchor[: len(anchor) - (node.level - 1)]
        base = ".".join([*anchor, *([base] if base else [])])
    out = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known]
    if base in known and len(out) < len(node.names):
        out.append(base)
    return out


def package_of(module: str) -> str:
    """The package (folder) a module belongs to: dlc.compiler, dlc.runtime, dlc.grammar or dlc."""
    for pkg in ("dlc.compiler", "dlc.runtime", "dlc.grammar"):
        if module == pkg or module.startswith(pkg + "."):
            return pkg
    return "dlc"


def scan(root: Path = ROOT):
    """(edges: module -> modules it imports in its own package, lazy: [(file, line, text)])."""
    known = modules(root)
    edges: dict[str, set[str]] = {m: set() for m in known}
    lazy = []
    for name, path in known.items():
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        for node, in_function in import_nodes(ast.parse(text, str(path))):
            for t in targets(node, name, path.name == "__init__.py", known):
                if package_of(t) == package_of(name) and t != name:
                    edges[name].add(t)
            if in_function:  # its text: a `# lazy:` comment may sit on any of its lines
                text = " ".join(x.strip() for x in lines[node.lineno - 1 : node.end_lineno])
                lazy.append((path.relative_to(root).as_posix(), node.lineno, text))
    return edges, lazy


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def per_file(lazy) -> dict[str, int]:
    counts: dict[str, int] = {}
    for file, _, _ in lazy:
        counts[file] = counts.get(file, 0) + 1
    return counts


def test_no_import_cycle_inside_a_package():
    edges, _ = scan()
    found = cycles(edges)
    assert not found, "import cycles (move what they share into a module below them):\n" + "\n".join(
        " <-> ".join(c) for c in found
    )


def test_every_function_level_import_says_why_it_is_lazy():
    _, lazy = scan()
    bad = [f"{f}:{n}: {t}" for f, n, t in lazy if "# lazy:" not in t]
    assert not bad, "function-level imports without `# lazy: why` (move them to module level):\n" + "\n".join(bad)


def test_function_level_imports_are_few():
    _, lazy = scan()
    assert len(lazy) < MAX_LAZY, f"{len(lazy)} function-level imports: {per_file(lazy)}"


def test_the_scan_finds_a_cycle_and_a_lazy_import(tmp_path):
    for folder in PACKAGES:
        (tmp_path / folder).mkdir()
    (tmp_path / "runtime" / "a.py").write_text("from .b import x\n")
    (tmp_path / "runtime" / "b.py").write_text("def f():\n    from . import a\n")
    (tmp_path / "runtime" / "c.py").write_text("def g():\n    import json  # lazy: why\n")
    (tmp_path / "compiler" / "a.py").write_text("from dlc.runtime import a\n")  # another package: no edge
    edges, lazy = scan(tmp_path)
    assert cycles(edges) == [["dlc.runtime.a", "dlc.runtime.b"]]
    assert [(f, n) for f, n, _ in lazy] == [("runtime/b.py", 2), ("runtime/c.py", 2)]


def test_only_runtime_gl_imports_opengl_at_module_level():
    """runtime/gl.py sets PYOPENGL_PLATFORM (EGL) before PyOpenGL first loads: a module that
    imported OpenGL itself ahead of it would pin PyOpenGL to GLX, and EGL would find no device."""
    bad = []
    for name, path in modules().items():
        if name == "dlc.runtime.gl":
            continue
        for node, in_function in import_nodes(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if not in_function and any(n == "OpenGL" or n.startswith("OpenGL.") for n in names):
                bad.append(f"{path.relative_to(ROOT).as_posix()}:{node.lineno}")
    assert not bad, "import OpenGL through dlc.runtime.gl: " + ", ".join(bad)
