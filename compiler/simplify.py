"""Small IR -> IR passes: constant folding, algebraic identities, CSE, dead code.

Each pass is a pure function Graph -> Graph that keeps every name, loss and
update pointing at a node of the same value. `simplify` runs them to a fixed
point. Passes rebuild the node list through `Rewriter`, which renumbers
inputs, names and updates.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from . import registry
from .dtypes import F32
from .ir import Graph, Node, Shape, cone, make_attrs
from .shapes import ShapeError, broadcast, symbols


class Rewriter:
    """Builds a new node list; `remap[i]` is the new index of old node i."""

    def __init__(self, g: Graph) -> None:
        self.g = g
        self.nodes: list[Node] = []
        self.remap: dict[int, int] = {}

    def node(self, old: Node) -> Node:
        """`old` with its inputs renumbered."""
        return Node(old.op, tuple(self.remap[j] for j in old.inputs), old.shape, old.attrs, old.loc)

    def append(self, n: Node) -> int:
        self.nodes.append(n)
        return len(self.nodes) - 1

    def graph(self) -> Graph:
        g = self.g
        names = {name: self.remap[i] for name, i in g.names.items()}
        updates = tuple((name, self.remap[i]) for name, i in g.updates)
        return Graph(tuple(self.nodes), names, g.inputs, g.params, g.states, g.losses, updates)


def rewrite(g: Graph, visit: Callable[[Rewriter, int, Node], int]) -> Graph:
    """Apply `visit(rewriter, old index, node with new inputs) -> new index` to every node."""
    rw = Rewriter(g)
    for i, n in enumerate(g.nodes):
        rw.remap[i] = visit(rw, i, rw.node(n))
    return rw.graph()


# -- constant folding ---------------------------------------------------------------


def _const_value(n: Node) -> np.ndarray:
    return np.asarray(n.attr("value"), dtype=np.float64).reshape(n.shape)


def _makes_f32(op, arity: int, n: Node) -> bool:
    try:
        return op.element_type([F32] * arity, dict(n.attrs)) == F32
    except ShapeError:  # an op that takes no f32 there
        return False


def fold_constants(g: Graph) -> Graph:
    """Replace an op whose inputs are all `const` by its value as a `const`.

    Only where the result is no larger than its largest input, so folding never
    grows the IR (broadcast_to of a scalar zero stays a broadcast).
    """

    def visit(rw: Rewriter, i: int, n: Node) -> int:
        ins = [rw.nodes[j] for j in n.inputs]
        foldable = ins and not n.is_leaf and all(m.op == "const" for m in ins) and not symbols(n.shape)
        if foldable:
            size = int(np.prod(n.shape))
            op = registry.get(n.op)
            # A const is f32: an op making i32 (int of a const) stays an op.
            if size <= max(int(np.prod(m.shape)) for m in ins) and _makes_f32(op, len(ins), n):
                value = op.ref([_const_value(m) for m in ins], dict(n.attrs), {})
                value = np.asarray(value, dtype=np.float64).reshape(n.shape)
                attrs = make_attrs(shape=n.shape, value=tuple(float(v) for v in value.ravel()))
                return rw.append(Node("const", (), n.shape, attrs, n.loc))
        return rw.append(n)

    return rewrite(g, visit)


# -- algebraic identities -----------------------------------------------------------


def _is_const(n: Node, value: float) -> bool:
    return n.op == "const" and all(v == value for v in n.attr("value"))


def simplify_algebra(g: Graph) -> Graph:
    """x+0, 0+x, x-0, x*1, 1*x, x/1, x^1, -(-x), training(t, x) (the eval form), and
    reshape/broadcast_to/transpose that change nothing become x, where x already has the
    result's shape."""

    def same(rw: Rewriter, n: Node) -> int | None:
        ins = [rw.nodes[j] for j in n.inputs]
        keep: int | None = None
        if n.op in ("add", "sub", "mul", "div", "pow"):
            (a, b), (na, nb) = n.inputs, ins
            unit = 0.0 if n.op in ("add", "sub") else 1.0
            if _is_const(nb, unit):
                keep = a
            elif n.op in ("add", "mul") and _is_const(na, unit):
                keep = b
        elif n.op == "neg" and ins[0].op == "neg":
            keep = ins[0].inputs[0]
        elif n.op in ("reshape", "broadcast_to"):
            keep = n.inputs[0]
        elif n.op == "transpose" and tuple(n.attr("perm")) == tuple(range(len(n.shape))):
            keep = n.inputs[0]
        elif n.op == "training":  # outside a training step (compiler/modes.py): the eval input
            keep = n.inputs[1]
        if keep is not None and rw.nodes[keep].shape == n.shape:
            return keep
        return None

    def visit(rw: Rewriter, i: int, n: Node) -> int:
        keep = same(rw, n)
        if keep is not None:
            return keep
        if registry.get(n.op).kind == "elementwise" and n.inputs:
            n = _implicit_broadcasts(rw.nodes, n)
        if n.op == "reshape" and rw.nodes[n.inputs[0]].op == "reshape":
            # reshape of a reshape reads the original directly
            n = Node(n.op, rw.nodes[n.inputs[0]].inputs, n.shape, n.attrs, n.loc)
        return rw.append(n)

    return rewrite(g, visit)


def _broadcast_source(nodes: list[Node], j: int) -> int:
    """What `j` broadcasts from: through broadcast_to and reshapes that only add leading 1s."""
    while True:
        m = nodes[j]
        if m.op == "broadcast_to" or (m.op == "reshape" and _adds_leading_ones(nodes[m.inputs[0]].shape, m.shape)):
            j = m.inputs[0]
        else:
            return j


def _adds_leading_ones(old: Shape, new: Shape) -> bool:
    extra = len(new) - len(old)
    return extra >= 0 and new[extra:] == old and all(d == 1 for d in new[:extra])


def _implicit_broadcasts(nodes: list[Node], n: Node) -> Node:
    """An elementwise op broadcasts its inputs itself: read past explicit broadcasts
    when the result's shape stays the same."""
    inputs = list(n.inputs)
    for k, j in enumerate(n.inputs):
        src = _broadcast_source(nodes, j)
        if src != j:
            trial = [*inputs[:k], src, *inputs[k + 1 :]]
            try:
                ok = broadcast(*(nodes[t].shape for t in trial)) == n.shape
            except ShapeError:
                ok = False
            if ok:
                inputs = trial
    if tuple(inputs) == n.inputs:
        return n
    return Node(n.op, tuple(inputs), n.shape, n.attrs, n.loc)


# -- common subexpressions ----------------------------------------------------------


def eliminate_common_subexpressions(g: Graph) -> Graph:
    """Merge nodes with the same op, inputs and attrs (leaves differ by their name attr)."""
    seen: dict[tuple, int] = {}

    def visit(rw: Rewriter, i: int, n: Node) -> int:
        key = (n.op, n.inputs, n.attrs)
        if key not in seen:
            seen[key] = rw.append(n)
        return seen[key]

    return rewrite(g, visit)


# -- dead code ----------------------------------------------------------------------


def eliminate_dead_code(g: Graph, keep: Iterable[int] | None = None, start: int = 0) -> Graph:
    """Drop nodes nothing kept depends on. Kept by default: every named node (inputs,
    params, states, named tensors, losses) and every update. Only nodes at index
    >= `start` are dropped, so a pass can prune what it appended and leave the rest."""
    roots = set(g.names.values()) | {i for _, i in g.updates}
    if keep is not None:
        roots |= set(keep)
    live = set(cone(g, roots)) | set(range(start))

    def visit(rw: Rewriter, i: int, n: Node) -> int:
        return rw.append(n) if i in live else -1

    return rewrite(g, visit)


def _pack_attention(g: Graph) -> Graph:
    from .attention_rewrite import pack_attention  # (it builds on this module's Rewriter)

    return pack_attention(g)


PASSES: tuple[Callable[[Graph], Graph], ...] = (
    simplify_algebra,
    fold_constants,
    eliminate_common_subexpressions,
    _pack_attention,  # after CSE: a forward and its gradient's statistics found as one q, k
    eliminate_dead_code,
)


def simplify(g: Graph, max_rounds: int = 8) -> Graph:
    """Run every pass until the graph stops changing."""
    for _ in range(max_rounds):
        before = g.nodes
        for p in PASSES:
            g = p(g)
        if g.nodes == before:
            break
    return g
