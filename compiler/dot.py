"""A model's IR as a Graphviz graph (`dlc compile --emit dot`, `dlc plot-model`).

Inputs, params, constants, ops, named tensors and losses are nodes; every edge carries the
shape of the tensor it takes to its reader. With a fusion, each GLSL kernel is a cluster
around the ops it computes (leaves stay outside: they are storage, not work).
"""

from __future__ import annotations

import shutil
import subprocess

from dlc.runtime.optional import available

from .ir import Graph

# Fill colours by role; graphviz's X11 names.
_STYLE = {
    "input": 'shape=box, style="rounded,filled", fillcolor="#cfe2ff"',
    "param": 'shape=box, style="rounded,filled", fillcolor="#ffe8a8"',
    "state": 'shape=box, style="rounded,filled", fillcolor="#eeeeee"',
    "const": 'shape=box, style="rounded,filled", fillcolor="#f4f4f4", fontsize=10',
    "op": "shape=ellipse",
    "named": 'shape=ellipse, style=filled, fillcolor="#d7f5d7"',
    "loss": 'shape=doubleoctagon, style=filled, fillcolor="#ffc9c9"',
}


def quote(text: str) -> str:
    """A DOT string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _shape(shape) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"


def _const_text(values, shape) -> str:
    if shape == () and values:
        return f"{values[0]:g}"
    return f"const {_shape(shape)}"


def to_dot(graph: Graph, fusion=None, title: str = "model") -> str:
    """The DOT text of `graph`; `fusion` (a compiler.fusion.Fusion of this graph) adds one
    cluster per kernel."""
    names: dict[int, list[str]] = {}
    for name, i in graph.names.items():
        names.setdefault(i, []).append(name)
    losses = {graph.names[n] for n in graph.losses}
    leaves_of = {"input": set(graph.inputs), "param": set(graph.params), "state": set(graph.states)}

    def role(i: int) -> str:
        n = graph.nodes[i]
        if n.op == "const":
            return "const"
        if n.is_leaf:
            label = graph.label(i)
            return next((r for r, s in leaves_of.items() if label in s), n.op)
        if i in losses:
            return "loss"
        return "named" if i in names else "op"

    def label(i: int) -> str:
        n = graph.nodes[i]
        r = role(i)
        if r == "const":
            return _const_text(n.attr("value"), n.shape)
        if n.is_leaf:
            return f"{r} {graph.label(i)}\n{_shape(n.shape)}"
        head = " = ".join(names.get(i, []))
        prefix = "loss " if r == "loss" else ""
        return f"{prefix}{head}\n{n.op}" if head else n.op

    used = _reachable(graph)
    lines = [
        f"digraph {quote(title)} {{",
        '  graph [rankdir=TB, fontname="Helvetica", fontsize=11];',
        '  node [fontname="Helvetica", fontsize=11];',
        '  edge [fontname="Helvetica", fontsize=9, color="#555555"];',
    ]
    clustered: set[int] = set()
    if fusion is not None:
        for k in fusion.kernels:
            members = [i for i in k.nodes if i in used and not graph.nodes[i].is_leaf]
            if not members:
                continue
            lines.append(f"  subgraph cluster_{k.index} {{")
            lines.append(f'    label={quote(k.name)}; style="rounded,dashed"; color="#7a7a7a"; fontcolor="#444444";')
            for i in members:
                lines.append(f"    n{i} [label={quote(label(i))}, {_STYLE[role(i)]}];")
                clustered.add(i)
            lines.append("  }")
    for i in sorted(used - clustered):
        lines.append(f"  n{i} [label={quote(label(i))}, {_STYLE.get(role(i), _STYLE['op'])}];")
    for i in sorted(used):
        for j in graph.nodes[i].inputs:
            lines.append(f"  n{j} -> n{i} [label={quote(_shape(graph.nodes[j].shape))}];")
    for target, i in graph.updates:
        leaf = graph.names.get(target)
        if leaf is not None:
            lines.append(f"  n{i} -> n{leaf} [style=dashed, label={quote('update ' + target)}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _reachable(graph: Graph) -> set[int]:
    """The nodes a name, a loss or an update reads (dead code is left out)."""
    roots = set(graph.names.values()) | {i for _, i in graph.updates}
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        stack.extend(graph.nodes[i].inputs)
    return seen


# -- rendering -------------------------------------------------------------------------------

FORMATS = ("svg", "png", "pdf")
INSTALL = (
    "pip install 'dlc[viz]' (the graphviz package) and Graphviz's dot program "
    "(apt-get install graphviz, brew install graphviz, or graphviz.org/download)"
)


class RenderError(Exception):
    """The picture cannot be drawn here (no Graphviz); the message says what to install."""


def render(text: str, fmt: str) -> bytes:
    """DOT text drawn as `fmt` (svg, png, pdf) by Graphviz's dot: through the graphviz
    Python package when installed, else the dot program on PATH."""
    if fmt not in FORMATS:
        raise ValueError(f"cannot draw a '{fmt}': choose one of {', '.join(FORMATS)}")
    graphviz = available("graphviz")
    if graphviz is not None:
        try:
            return graphviz.Source(text).pipe(format=fmt)
        except graphviz.ExecutableNotFound:
            raise RenderError(
                "Graphviz's dot program is not installed (the graphviz Python "
                f"package is, but it draws through dot): {INSTALL}"
            ) from None
        except graphviz.CalledProcessError as e:
            raise RenderError(f"Graphviz's dot failed: {_first_line(e.stderr)}") from None
    return _render_with_dot(text, fmt)


def _render_with_dot(text: str, fmt: str) -> bytes:
    exe = shutil.which("dot")
    if exe is None:
        raise RenderError(f"drawing a model needs Graphviz, which is not installed: {INSTALL}")
    p = subprocess.run([exe, f"-T{fmt}"], input=text.encode(), capture_output=True, timeout=120)
    if p.returncode != 0:
        raise RenderError(f"Graphviz's dot failed: {_first_line(p.stderr)}")
    return p.stdout


def _first_line(err) -> str:
    text = err.decode(errors="replace") if isinstance(err, bytes) else str(err or "")
    return text.strip().splitlines()[0] if text.strip() else "no message"
