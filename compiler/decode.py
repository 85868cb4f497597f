"""The decode pass: a language model's forward as an incremental step with a key/value cache.

`decode_graph(g, block)` turns the graph computing `logits` ([B, T, V] from `tokens:
i32[B, T]`) into one that takes only the new tokens, at positions [pos, pos + T) (`$pos`, an
i32 [1] input), and gives the logits of the last of them ([B, V]):

- each causal `attention(q, k, v)` writes its new k and v rows into caches [..., block, D]
  (states `$kv<i>.k`, `$kv<i>.v`, updated by the step) and attends over them
  (`attention_cached`, ops/kv_cache.py: query i sees the cached rows up to pos + i). The
  write is `where(row in [pos, pos + T), gather(new, row - pos), cache)`: elementwise in the
  cache, so GL writes it in place (compiler/plan.py), with no copy after the step;
- each `iota` counting positions along T (a position embedding's `int(arange(T))`) counts
  from pos.

That is the same computation exactly when every other op is position-wise along T: each
position's value depends on that position's values only (elementwise ops, matmuls and norms
over other axes, layout ops that keep T an axis of its own, reductions over other axes).
The pass follows T's axis through every node of the logits' cone and refuses
(`NotIncremental`, with the reason and the line) an op that mixes positions: a sum or
softmax over T, a non-causal attention, a count of positions (`mean` over T), a reshape
that merges T with another axis, a second input.
"""

from __future__ import annotations

from dataclasses import dataclass

from dlc.runtime.dims import factors
from dlc.runtime.errors import DlcError

from . import registry
from .ir import Graph, Node, Shape, cone, make_attrs

POS = "$pos"  # the input: the position of the first new token
FLOAT_KINDS = ("elementwise", "norm")


class NotIncremental(DlcError):
    """The model's logits cannot be computed a few positions at a time (the message says why)."""


@dataclass(frozen=True)
class Decoder:
    graph: Graph  # inputs `tokens` [B, T] (the new ids) and `$pos` [1]; states: the caches
    logits: int  # node: the logits of the last new position, [B, V]
    caches: tuple[tuple[str, Shape], ...]  # (state, shape) of each cache, B symbolic
    block: int  # rows of each cache: the longest context


def decode_graph(g: Graph, block: int, fetch: str = "logits", tokens: str = "tokens") -> Decoder:
    """The decode step of `g`'s `fetch` (see the module doc); NotIncremental when it has none."""
    if fetch not in g.names or tokens not in g.names:
        raise NotIncremental(f"the model needs an input '{tokens}' and a tensor '{fetch}'")
    t = g.node(tokens).shape[1]
    if not isinstance(t, str):
        raise NotIncremental(f"'{tokens}' needs a symbolic length, not {t}")
    if POS in g.names:
        raise NotIncremental(f"the model names a tensor '{POS}'")
    root = g.names[fetch]
    nodes: list[Node] = []
    remap: dict[int, int] = {}
    axis: dict[int, int | None] = {}
    caches: list[tuple[str, Shape]] = []
    updates: list[tuple[str, int]] = []

    def add(op: str, ins: tuple[int, ...], loc=None, **attrs) -> int:
        shape = registry.get(op).shape([nodes[j].shape for j in ins], attrs)
        nodes.append(Node(op, ins, tuple(shape), make_attrs(**attrs), loc))
        return len(nodes) - 1

    pos = len(nodes)
    nodes.append(Node("input", (), (1,), make_attrs(name=POS, dtype="i32", shape=(1,))))
    first = add("float", (pos,))  # [1]
    count = add("dim_size", (), dims=(t,))  # T: the new positions
    rows: dict[int, tuple[int, int]] = {}  # cache length -> (each row's new row, whether it is new)

    def write(cache: int, new: int, loc) -> int:
        size = nodes[cache].shape[-2]
        if size not in rows:
            zero = add("const", (), shape=(), value=(0.0,))
            at = add("sub", (add("iota", (), shape=(size,), axis=0), first))  # row - pos
            last = add("sub", (count, add("const", (), shape=(), value=(1.0,))))
            fresh = add("logical_and", (add("ge", (at, zero)), add("lt", (at, count))))
            index = add("int", (add("maximum", (add("minimum", (at, last)), zero)),))
            rows[size] = (index, add("reshape", (fresh,), shape=(size, 1)))
        index, fresh = rows[size]
        moved = add("gather", (new, index), loc, axis=len(nodes[new].shape) - 2)
        return add("where", (fresh, moved, cache), loc)

    for i in cone(g, [root]):
        n = g.nodes[i]
        axis[i] = time_axis(g, i, axis, t, tokens)
        ins = tuple(remap[j] for j in n.inputs)
        if n.op == "iota" and axis[i] is not None and n.attr("axis") == axis[i]:
            counted = len(nodes)
            nodes.append(Node(n.op, ins, n.shape, n.attrs, n.loc))
            remap[i] = add("add", (counted, add("float", (pos,), n.loc)), n.loc)
        elif n.op == "attention":
            q, k, v = ins
            *lead, _, d = n.shape
            shape = (*lead, block, d)
            written = []
            for name, new in ((f"$kv{len(caches) // 2}.k", k), (f"$kv{len(caches) // 2}.v", v)):
                nodes.append(Node("state", (), shape, make_attrs(name=name, init=("zeros",), shape=shape), n.loc))
                written.append(write(len(nodes) - 1, new, n.loc))
                caches.append((name, shape))
                updates.append((name, written[-1]))
            remap[i] = add("attention_cached", (q, *written, pos), n.loc, scale=n.attr("scale"))
        else:
            if n.op == "matmul" and _transposed_leaf(g, n.inputs[1]) and not n.attr("tb"):
                # x @ transpose(W): the matmul reads W transposed, and no kernel transposes W
                # again each step (a param does not change between steps)
                ins = (ins[0], remap[g.nodes[n.inputs[1]].inputs[0]])
                n = Node(n.op, ins, n.shape, make_attrs(**{**dict(n.attrs), "tb": True}), n.loc)
            nodes.append(Node(n.op, ins, n.shape, n.attrs, n.loc))
            remap[i] = len(nodes) - 1
    # only the last new position's logits: gather(logits, T - 1) along T's axis
    last = add("int", (add("sub", (count, add("const", (), shape=(), value=(1.0,)))),))
    out = add("gather", (remap[root], last), axis=axis[root])
    names = {name: remap[i] for name, i in g.names.items() if i in remap}
    names.update({fetch: out, POS: pos, **{name: i for name, i in updates}})
    for name, _ in caches:
        names[name] = next(j for j, n in enumerate(nodes) if n.op == "state" and n.attr("name") == name)
    params = tuple(p for p in g.params if p in names)
    graph = Graph(tuple(nodes), names, (tokens, POS), params, tuple(c for c, _ in caches), (), tuple(updates))
    return Decoder(graph, out, tuple(caches), block)


def time_axis(g: Graph, i: int, axis: dict[int, int | None], t: str, tokens: str) -> int | None:
    """The axis of node i that is T (None: its value is the same at every position), after
    checking that node i computes each position from that position alone."""
    n = g.nodes[i]
    where = f" (line {n.loc.line})" if n.loc else ""
    own = [k for k, d in enumerate(n.shape) if d == t]
    if len(own) > 1:
        raise NotIncremental(f"{n.op}{where} makes a [T, T] tensor: positions attend to each other outside attention")
    out = own[0] if own else None
    if any(isinstance(d, str) and t in factors(d)[1] and d != t for d in n.shape):
        raise NotIncremental(f"{n.op}{where} merges T with another axis")
    ins = [axis[j] for j in n.inputs]
    if n.op == "input":
        if n.attr("name") != tokens:
            raise NotIncremental(f"generation feeds '{tokens}' only, and the logits read input '{n.attr('name')}'")
        return out
    if n.is_leaf:
        return out
    if n.op == "dim_size" and any(t in factors(d)[1] for d in n.attr("dims")):
        raise NotIncremental(f"{n.op}{where} counts the positions (a mean over T?)")
    if all(a is None for a in ins):
        return out  # the same at every position (iota's positions: the pass offsets them)
    kind = registry.get(n.op).kind
    if n.op == "attention":
        if not n.attr("causal"):
            raise NotIncremental(f"attention{where} is not causal: a position sees later ones")
        if any(a != len(n.shape) - 2 for a in ins):
            raise NotIncremental(f"attention{where} attends over an axis other than T")
        return out
    if out is None:
        raise NotIncremental(f"{n.op}{where} reduces over T: each position would see the others")

    def aligned(j: int, a: int | None) -> bool:  # broadcasting aligns trailing axes
        return a is None or a + len(n.shape) - len(g.nodes[j].shape) == out

    if kind in FLOAT_KINDS or n.op in ("broadcast_to", "one_hot", "pick"):
        if kind == "norm" and out in tuple(n.attr("axes")):
            raise NotIncremental(f"{n.op}{where} normalizes over T")
        if all(aligned(j, a) for j, a in zip(n.inputs, ins)):
            return out
    elif kind == "reduce":
        if ins[0] not in tuple(n.attr("axes")):
            return out
    elif kind == "matmul":
        if _matmul_keeps(g, n, ins, out):
            return out
    elif n.op == "transpose":
        if tuple(n.attr("perm")).index(ins[0]) == out:
            return out
    elif n.op == "reshape":
        src = g.nodes[n.inputs[0]].shape
        if _size(src[: ins[0]]) == _size(n.shape[:out]):
            return out
    elif n.op == "slice":
        if n.attr("begin")[ins[0]] == 0 and ins[0] == out:
            return out
    elif n.op == "pad":
        if n.attr("before")[ins[0]] == 0 and n.attr("after")[ins[0]] == 0 and ins[0] == out:
            return out
    elif n.op == "concat":
        if n.attr("axis") != out and all(a == out for a in ins):
            return out
    elif n.op == "gather":
        table, idx = ins
        if table is None and idx is not None and n.attr("axis") + idx == out:
            return out
    raise NotIncremental(f"{n.op}{where} mixes positions along T")


def _transposed_leaf(g: Graph, i: int) -> bool:
    """Whether node i is a transpose of a leaf's last two axes (a weight read as W^T)."""
    n = g.nodes[i]
    if n.op != "transpose" or not g.nodes[n.inputs[0]].is_leaf:
        return False
    rank = len(n.shape)
    return tuple(n.attr("perm")) == (*range(rank - 2), rank - 1, rank - 2)


def _matmul_keeps(g: Graph, n: Node, ins: list[int | None], out: int) -> bool:
    """Whether a matmul keeps T as a row, column or batch axis (never the contracted one)."""
    for j, a, flag, contracted in zip(n.inputs, ins, ("ta", "tb"), (1, 2)):
        if a is None:
            continue
        rank = len(g.nodes[j].shape)
        summed = rank - contracted if not n.attr(flag) else rank - (3 - contracted)
        if a == summed:
            return False
        if a < rank - 2 and a + len(n.shape) - rank != out:  # a batch axis stays where it is
            return False
    return True


def _size(shape: Shape) -> tuple:
    known, syms = 1, []
    for d in shape:
        k, s = factors(d)
        known *= k
        syms += s
    return known, tuple(sorted(syms))
