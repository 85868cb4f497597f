"""Written-out attention into the fused primitive (ops/attention.py), and the forward and its
row statistics into one kernel.

`fuse_attention` (run on every model as it is built, before autodiff, so the gradient is the
fused one too) finds attention written out,

    softmax(where(MASK, q @ transpose(k) * s, -inf)) @ v     (or / s, or no scale; MASK
                                                               optional, lower-triangular)

as the softmax composite expands it (exp(x - stop_gradient(max(x))) / sum(...)), and puts an
`attention` node in place of the final product. The mask is accepted when it is made of
iotas and constants only and evaluates to tril(ones([T, T])) (checked at two sizes); the
scale when it is a constant scalar. The written-out nodes stay only where a name still
refers to them.

`dropout(softmax(...), p) @ v`, as the dropout composite expands it (ops/random.py:
training(probs * (ge(random_uniform, p) * 1/(1-p)), probs)), becomes
training(attention with dropout p, the draw's key and [$seed, $step], attention): the
training step drops the same probabilities the written-out form would (ops/attention.py),
eval drops none.

`pack_attention` (a simplify pass: after autodiff) finds an `attention` and an
`attention_lse` of the same q, k, causal and scale (a forward and the statistics its gradient
saves) and computes both as one `attention_packed` node, [..., T, D + 1], read through slices.

`pack_kv_grads` (a simplify pass, after autodiff) finds an `attention_grad` wrt k and one
wrt v of the same inputs and attrs and computes both as one wrt kv node, [..., T, 2D], read
through slices: FlashAttention-2's dK/dV loop, the query tiles streamed and p recomputed
once for both. Only for heads `ops.attention.packs_kv` allows (those the compute target's
register-tiled kernel takes); a wider head keeps two kernels.
"""

from __future__ import annotations

import numpy as np

from . import registry
from .ir import Graph, Node, cone, make_attrs
from .ops.attention import keep_scale, packs_kv
from .reference import evaluate
from .rewriter import Rewriter, eliminate_dead_code, rewrite


def _constant(g: Graph, i: int, dims: dict) -> np.ndarray | None:
    """Node i's value when it is computed from constants, iotas and layout ops only (else
    None); `dims` binds its symbolic dims."""
    part = cone(g, [i])
    for j in part:
        n = g.nodes[j]
        if n.is_leaf and n.op != "const":
            return None
        if not n.is_leaf and registry.get(n.op).kind not in ("elementwise", "layout"):
            return None
    try:
        return evaluate(g, [i], {}, dims, dtype=np.float64)[i]
    except (KeyError, ValueError, TypeError):
        return None


def _is_causal_mask(g: Graph, i: int, t) -> bool:
    shape = g.nodes[i].shape
    if tuple(shape) != (t, t):
        return False
    for n in (5, 7) if isinstance(t, str) else (t,):  # a symbolic T at two sizes
        value = _constant(g, i, {t: n} if isinstance(t, str) else {})
        if value is None or not np.array_equal(value != 0, np.tril(np.ones((n, n), dtype=bool))):
            return False
    return True


def _scalar(g: Graph, i: int) -> float | None:
    if g.nodes[i].shape != ():
        return None
    value = _constant(g, i, {})
    return None if value is None else float(value)


def _dropout(g: Graph, i: int) -> tuple[int, tuple] | None:
    """(the probabilities x, (seed, step, p, key)) when node i is dropout(x, p) as the
    composite builds it: training(x * (ge(random_uniform(seed, step), p) * s), x)."""
    nodes = g.nodes
    if nodes[i].op != "training":
        return None
    train, x = nodes[i].inputs
    dropped = nodes[train]
    if dropped.op != "mul" or dropped.inputs[0] != x or nodes[dropped.inputs[1]].op != "mul":
        return None
    keep, s = nodes[dropped.inputs[1]].inputs
    if nodes[keep].op != "ge":
        return None
    u, p = nodes[keep].inputs
    draw = nodes[u]
    if draw.op != "random_uniform" or tuple(draw.attr("shape")) != tuple(nodes[x].shape):
        return None
    p, s = _scalar(g, p), _scalar(g, s)
    # p is the float32 threshold, s was made from p as given: equal to float32's rounding
    if p is None or s is None or not 0.0 <= p <= 1.0 or not np.isclose(s, keep_scale(p), rtol=1e-6, atol=0.0):
        return None
    seed, step = draw.inputs
    return x, (seed, step, p, draw.attr("key"))


def _match(g: Graph, n: Node) -> tuple[int, int, int, bool, float, tuple | None] | None:
    """(q, k, v, causal, scale, dropout) when matmul node `n` is written-out attention;
    dropout is (seed, step, p, key) where its probabilities are dropped, else None."""
    nodes = g.nodes
    if n.op != "matmul" or n.attr("ta") or n.attr("tb"):
        return None
    probs, v = n.inputs
    drop = None
    if nodes[probs].op == "training":
        found = _dropout(g, probs)
        if found is None:
            return None
        probs, drop = found
    div = nodes[probs]
    if div.op != "div":
        return None
    e, total = div.inputs
    tot = nodes[total]
    if nodes[e].op != "exp" or tot.op != "sum" or tot.inputs != (e,) or not tot.attr("keepdims"):
        return None
    last = len(nodes[e].shape) - 1
    if tuple(tot.attr("axes")) != (last,):
        return None
    sub = nodes[nodes[e].inputs[0]]
    if sub.op != "sub":
        return None
    x, shifted = sub.inputs
    stop = nodes[shifted]
    if stop.op == "stop_gradient":
        stop = nodes[stop.inputs[0]]
    if stop.op != "max" or stop.inputs != (x,) or tuple(stop.attr("axes")) != (last,):
        return None
    causal = False
    xs = nodes[x]
    if xs.op == "where":
        mask, scores, fill = xs.inputs
        if _scalar(g, fill) != -np.inf or not _is_causal_mask(g, mask, xs.shape[-1]):
            return None
        causal, x, xs = True, scores, nodes[scores]
    scale = 1.0
    if xs.op in ("mul", "div"):
        a, b = xs.inputs
        s = _scalar(g, b)
        if s is None and xs.op == "mul":
            a, s = b, _scalar(g, a)
        if s is None or s == 0:
            return None
        scale = s if xs.op == "mul" else 1.0 / s
        x, xs = a, nodes[a]
    if xs.op != "matmul" or xs.attr("ta"):
        return None
    q, kt = xs.inputs
    if xs.attr("tb"):
        k = kt
    else:
        tn = nodes[kt]
        rank = len(tn.shape)
        swap = (*range(rank - 2), rank - 1, rank - 2)
        if tn.op != "transpose" or tuple(tn.attr("perm")) != swap:
            return None
        (k,) = tn.inputs
    shapes = [tuple(nodes[j].shape) for j in (q, k, v)]
    if shapes[0] != shapes[1] or shapes[0] != shapes[2] or tuple(n.shape) != shapes[0] or not np.isfinite(scale):
        return None
    try:
        registry.get("attention").shape(shapes, {"causal": causal, "scale": scale})
    except Exception:  # a head too wide or symbolic: the written-out form runs as it is
        return None
    return q, k, v, causal, scale, drop


def fuse_attention(g: Graph) -> Graph:
    """`g` with written-out attention (see the module doc) replaced by `attention` nodes."""
    found = {}
    for i, n in enumerate(g.nodes):
        m = _match(g, n) if n.op == "matmul" else None
        if m is not None:
            found[i] = m
    if not found:
        return g

    def visit(rw: Rewriter, i: int, n: Node) -> int:
        if i not in found:
            return rw.append(n)
        q, k, v, causal, scale, drop = found[i]
        ins = tuple(rw.remap[j] for j in (q, k, v))
        plain = Node("attention", ins, n.shape, make_attrs(causal=causal, scale=scale), n.loc)
        if drop is None or drop[2] == 0.0:  # dropout(x, 0) is x
            return rw.append(plain)
        seed, step, p, key = drop
        loc = g.nodes[g.nodes[i].inputs[0]].loc  # the dropout's
        one = make_attrs(shape=(1,))
        pair = [rw.append(Node("reshape", (rw.remap[c],), (1,), one, loc)) for c in (seed, step)]
        counters = rw.append(Node("concat", tuple(pair), (2,), make_attrs(axis=0), loc))
        attrs = make_attrs(causal=causal, scale=scale, dropout=p, key=key)
        train = rw.append(Node("attention", (*ins, counters), n.shape, attrs, n.loc))
        return rw.append(Node("training", (train, rw.append(plain)), n.shape, (), loc))

    out = rewrite(g, visit)
    return eliminate_dead_code(out, start=_first_fused(g, found))


def _first_fused(g: Graph, found: dict) -> int:
    """Dead code is dropped only past the first replaced product's inputs (the rest is as built)."""
    return min(min(found[i][:3]) for i in found) + 1


def pack_attention(g: Graph) -> Graph:
    """`g` with each attention_lse that has an attention of the same q, k and attrs computed
    by one attention_packed node with it (see the module doc)."""
    forward = {}
    for i, n in enumerate(g.nodes):
        if n.op == "attention":  # its statistics' attrs: dropout changes none of them
            stats = make_attrs(causal=n.attr("causal"), scale=n.attr("scale"))
            forward.setdefault((n.inputs[:2], stats), i)
    pairs = {}
    for i, n in enumerate(g.nodes):
        j = forward.get((n.inputs, n.attrs)) if n.op == "attention_lse" else None
        if j is not None and j < i:
            pairs[j] = i
    if not pairs:
        return g
    lse_of = {i: j for j, i in pairs.items()}
    packed: dict[int, int] = {}

    def visit(rw: Rewriter, i: int, n: Node) -> int:
        if i in pairs:  # the forward: the packed node, its output columns
            *lead, d = n.shape
            node = Node("attention_packed", n.inputs, (*lead, d + 1), n.attrs, n.loc)
            packed[i] = p = rw.append(node)
            cols = make_attrs(begin=(0,) * len(n.shape), size=tuple(n.shape))
            return rw.append(Node("slice", (p,), n.shape, cols, n.loc))
        if i in lse_of:  # the statistics: the packed node's last column
            p = packed[lse_of[i]]
            *lead, d = rw.nodes[p].shape
            col = make_attrs(begin=(*(0,) * len(lead), d - 1), size=(*lead, 1))
            last = rw.append(Node("slice", (p,), (*lead, 1), col, n.loc))
            return rw.append(Node("reshape", (last,), n.shape, make_attrs(shape=n.shape), n.loc))
        return rw.append(n)

    return rewrite(g, visit)


def pack_kv_grads(g: Graph) -> Graph:
    """`g` with each attention_grad wrt k that has one wrt v of the same inputs and other
    attrs computed with it by one attention_grad wrt kv node (see the module doc)."""
    found: dict = {}
    for i, n in enumerate(g.nodes):
        if n.op == "attention_grad" and n.attr("wrt") in ("k", "v") and packs_kv(n.shape[-1]):
            rest = tuple(kv for kv in n.attrs if kv[0] != "wrt")
            found.setdefault((n.inputs, rest), {})[n.attr("wrt")] = i
    pairs = {min(w.values()): w for w in found.values() if len(w) == 2}
    if not pairs:
        return g
    column = {}  # node -> (its pair's first node, the column its part starts at)
    for first, w in pairs.items():
        d = g.nodes[first].shape[-1]
        column[w["k"]], column[w["v"]] = (first, 0), (first, d)
    packed: dict[int, int] = {}

    def visit(rw: Rewriter, i: int, n: Node) -> int:
        if i not in column:
            return rw.append(n)
        first, begin = column[i]
        *lead, d = n.shape
        if first not in packed:
            attrs = make_attrs(**{**dict(n.attrs), "wrt": "kv"})
            packed[first] = rw.append(Node("attention_grad", n.inputs, (*lead, 2 * d), attrs, n.loc))
        cols = make_attrs(begin=(*(0,) * len(lead), begin), size=tuple(n.shape))
        return rw.append(Node("slice", (packed[first],), n.shape, cols, n.loc))

    return rewrite(g, visit)
