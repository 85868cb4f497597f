"""check_graph: the checker between stages (JAX's check_jaxpr).

A pass that produces a malformed graph is a dlc bug, so the error says so and
shows the IR around the bad node.
"""

from __future__ import annotations

from . import registry
from .ir import Graph, format_node


class IRError(Exception):
    """A malformed IR graph (an internal error, never a user's mistake)."""


def _context(g: Graph, i: int, radius: int = 3) -> str:
    lo, hi = max(0, i - radius), min(len(g.nodes), i + radius + 1)
    lines = []
    for k in range(lo, hi):
        mark = ">> " if k == i else "   "
        lines.append(mark + format_node(g, k))
    return "\n".join(lines)


def check_graph(g: Graph) -> None:
    """Raise IRError unless every node is well formed: known op, inputs defined
    earlier, the right arity, and the shape its op's rule gives."""

    def fail(i: int, msg: str):
        raise IRError(f"internal error: malformed IR at %{i}: {msg}\n{_context(g, i)}")

    for i, n in enumerate(g.nodes):
        if n.op not in registry.REGISTRY:
            fail(i, f"unknown op '{n.op}'")
        op = registry.get(n.op)
        if any(j < 0 or j >= i for j in n.inputs):
            fail(i, "an input is not defined before its use")
        if op.arity is not None and len(n.inputs) != op.arity:
            fail(i, f"{n.op} takes {op.arity} inputs, has {len(n.inputs)}")
        try:
            want = tuple(op.shape([g.nodes[j].shape for j in n.inputs], dict(n.attrs)))
        except Exception as e:  # a shape rule refusing its own inputs
            fail(i, f"shape rule failed: {e}")
        if want != n.shape:
            fail(i, f"shape is {list(n.shape)} but {n.op} gives {list(want)}")
    for name, i in g.names.items():
        if not 0 <= i < len(g.nodes):
            raise IRError(f"internal error: name '{name}' points past the graph")
    for kind, names, op in (("input", g.inputs, "input"), ("param", g.params, "param"), ("state", g.states, "state")):
        for name in names:
            if name not in g.names or g.nodes[g.names[name]].op != op:
                raise IRError(f"internal error: {kind} '{name}' is not an {op} leaf")
    for name in g.losses:
        if name not in g.names or g.nodes[g.names[name]].shape != ():
            raise IRError(f"internal error: loss '{name}' is missing or not a scalar")
    for target, i in g.updates:
        if target not in g.names:
            raise IRError(f"internal error: update of unknown leaf '{target}'")
        if g.nodes[g.names[target]].shape != g.nodes[i].shape:
            fail(
                i,
                f"update of '{target}' has shape {list(g.nodes[i].shape)}, "
                f"the leaf has {list(g.nodes[g.names[target]].shape)}",
            )
