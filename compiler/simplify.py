"""Small IR -> IR passes: constant folding, algebraic identities, matmul layouts (transposes
and batch sums read into the product), CSE, dead code.

Each pass is a pure function Graph -> Graph that keeps every name, loss and
update pointing at a node of the same value. `simplify` runs them to a fixed
point. Passes rebuild the node list through `Rewriter`, which renumbers
inputs, names and updates.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from dlc.runtime.dims import product as dim_product

from . import registry
from .attention_rewrite import pack_attention, pack_kv_grads
from .dtypes import F32
from .ir import Graph, Node, Shape, make_attrs
from .remat import rematerialize
from .rewriter import Rewriter, eliminate_dead_code, rewrite
from .shapes import ShapeError, broadcast, symbols

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


# -- matmul layout ------------------------------------------------------------------


def _swaps_last_two(n: Node) -> bool:
    """A transpose that swaps the last two axes and keeps the others in place."""
    if n.op != "transpose":
        return False
    perm, r = tuple(n.attr("perm")), len(n.shape)
    return r >= 2 and perm == (*range(r - 2), r - 1, r - 2)


def _use_counts(g: Graph) -> list[int]:
    """How many times each node is read (a name or an update counts as a read)."""
    uses = [0] * len(g.nodes)
    for n in g.nodes:
        for j in n.inputs:
            uses[j] += 1
    for i in (*g.names.values(), *(i for _, i in g.updates)):
        uses[i] += 1
    return uses


def fold_matmul_layouts(g: Graph) -> Graph:
    """Products read their operands as stored instead of through layout kernels:

    - matmul(transpose(x), y) (the last two axes swapped) reads x with ta flipped (likewise
      for y and tb): `q @ transpose(k)` needs no kernel that transposes k, nor a gradient's
      `g @ transpose(transpose(w))` one for w; except where that would read a weight
      transposed under batched rows (`_weight_read_transposed`);
    - transpose(matmul(a, b)) (the last two axes) is matmul(b, a) with both flags flipped,
      where nothing else reads the product: C^T = op(B)^T op(A)^T;
    - sum(matmul(a, b, ta=True), over every batch axis) with a and b batched alike is one
      matmul over K = batch * K of the operands reshaped (views): a weight gradient
      sum_b X_b^T G_b over [B, T, C] activations is X^T G over B*T rows, not B products
      of [C, N] summed afterwards."""
    uses = _use_counts(g)

    def visit(rw: Rewriter, i: int, n: Node) -> int:
        ins = [rw.nodes[j] for j in n.inputs]
        if n.op == "matmul":
            flags = [bool(n.attr("ta")), bool(n.attr("tb"))]
            inputs = list(n.inputs)
            for k, m in enumerate(ins):
                if _swaps_last_two(m) and not _weight_read_transposed(k, not flags[k], rw.nodes[m.inputs[0]], ins):
                    inputs[k], flags[k] = m.inputs[0], not flags[k]
            if inputs != list(n.inputs):
                n = Node("matmul", tuple(inputs), n.shape, make_attrs(ta=flags[0], tb=flags[1]), n.loc)
        elif _swaps_last_two(n) and ins[0].op == "matmul" and uses[g.nodes[i].inputs[0]] == 1:
            m = ins[0]
            a, b = m.inputs
            attrs = make_attrs(ta=not m.attr("tb"), tb=not m.attr("ta"))
            n = Node("matmul", (b, a), n.shape, attrs, n.loc)
        elif n.op == "sum" and ins[0].op == "matmul" and uses[g.nodes[i].inputs[0]] == 1:
            folded = _fold_batch_into_k(rw, n, ins[0])
            if folded is not None:
                n = folded
        return rw.append(n)

    return rewrite(g, visit)


def _weight_read_transposed(k: int, flag: bool, source: Node, ins: list[Node]) -> bool:
    """Whether absorbing a transpose would read a matrix shared by every batch (a weight) as
    B transposed under batched rows: measured on the H100 (benchmarks/bench_matmul_gpt.py),
    the blocked template's [16384, 384] x W^T products ran 15-30% longer reading W as [N, K]
    than as [K, N], and transposing W (under a megabyte) is one short kernel."""
    return k == 1 and flag and len(source.shape) == 2 and len(ins[0].shape) >= 3


def _fold_batch_into_k(rw: Rewriter, n: Node, m: Node) -> Node | None:
    """sum over the batch axes of matmul(a, b, ta=True, tb=False) as one matmul over the
    operands reshaped to [batch * K, M] and [batch * K, N] (the batch is outer to K in both
    as stored), or None where that does not hold."""
    if not (m.attr("ta") and not m.attr("tb")) or n.attr("keepdims"):
        return None
    a, b = (rw.nodes[j] for j in m.inputs)
    lead = len(m.shape) - 2
    if lead < 1 or tuple(n.attr("axes")) != tuple(range(lead)):
        return None
    if not (a.shape[:-2] == b.shape[:-2] == m.shape[:-2]):
        return None  # an operand broadcast over the batch: no common K to fold into
    rows = dim_product(*a.shape[:-1])
    ra, rb = (rows, a.shape[-1]), (rows, b.shape[-1])
    ia = rw.append(Node("reshape", (m.inputs[0],), ra, make_attrs(shape=ra), m.loc))
    ib = rw.append(Node("reshape", (m.inputs[1],), rb, make_attrs(shape=rb), m.loc))
    return Node("matmul", (ia, ib), n.shape, make_attrs(ta=True, tb=False), n.loc)


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


PASSES: tuple[Callable[[Graph], Graph], ...] = (
    simplify_algebra,
    fold_matmul_layouts,
    fold_constants,
    eliminate_common_subexpressions,
    pack_attention,  # after CSE: a forward and its gradient's statistics found as one q, k
    pack_kv_grads,  # after CSE: the k and v gradients of one attention found as one
    eliminate_dead_code,
)


def simplify(g: Graph, max_rounds: int = 8) -> Graph:
    """Run every pass until the graph stops changing; then a gradient graph's backward gets
    its own copies of cheap forward values (compiler/remat.py)."""
    for _ in range(max_rounds):
        before = g.nodes
        for p in PASSES:
            g = p(g)
        if g.nodes == before:
            break
    return rematerialize(g)  # after CSE, which would merge its copies back
