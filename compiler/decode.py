"""The decode pass: a language model's forward as an incremental step with a key/value cache.

`decode_graph(g, block)` turns the graph computing `logits` ([B, T, V] from `tokens:
i32[B, T]`) into one that takes only the new tokens, at positions [pos, pos + T) (`$pos`, an
i32 [1] input), and gives the logits of the last of them ([B, V]):

- each causal `attention(q, k, v)` writes its new k and v rows into a cache [2, ..., block,
  D] (keys, then values: the state `$kv<i>`, updated by the step) and attends over it
  (`attention_cached`, ops/kv_cache.py: query i sees the cached rows up to pos + i). The
  write is `where(row in [pos, pos + T), gather(new, row - pos), cache)`: elementwise in the
  cache, so GL writes it in place (compiler/plan.py), with no copy after the step;
- each `iota` counting positions along T (a position embedding's `int(arange(T))`) counts
  from pos.

It also makes the window step (the whole context from position 0, attention as the model
has it, no cache: past the block every step is one, as nanoGPT crops the context and the
positions shift) and, for both, keeps them lean: each `x @ transpose(W)` of a param reads
W^T from a state that `constants` fills once a generation (no transpose kernel a step), and
the nodes after the last attention that only the last position's logits need (the final
block's projection and MLP, the norm, the head) run on that one row.

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
from dlc.runtime.optional import require

from .ir import Graph, Node, Shape, cone, make_attrs
from .rewriter import eliminate_dead_code

POS = "$pos"  # the input: the position of the first new token
FLOAT_KINDS = ("elementwise", "norm")


def _op(name: str):
    """The registry's entry (the registry on first use: compile_cache imports this module, and
    a warm generation reads the decode steps from its cache without the registry)."""
    return require("dlc.compiler.registry").get(name)


class NotIncremental(DlcError):
    """The model's logits cannot be computed a few positions at a time (the message says why)."""


@dataclass(frozen=True)
class Step:
    graph: Graph  # input `tokens` [B, T] (the new ids; the cached step also `$pos` [1])
    logits: int  # node: the logits of the last new position, [B, V]


@dataclass(frozen=True)
class Decoder:
    step: Step  # T new ids at positions [pos, pos + T): writes them into the caches, reads them
    window: Step  # a whole window from position 0, no cache: the steps past the block
    constants: Graph  # the `hoisted` states from the params (its updates), once a generation
    caches: tuple[tuple[str, Shape], ...]  # (state, shape) of each cache, B symbolic
    hoisted: tuple[tuple[str, Shape], ...]  # (state, shape): the weights a matmul reads transposed
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
    cached = _Rewrite(g, t, tokens, block, cached=True)
    step = cached.run(fetch)
    window = _Rewrite(g, t, tokens, block, cached=False).run(fetch)
    nodes: list[Node] = []
    updates = []
    for name, transpose in cached.hoisted.items():  # each weight transposed, into its state
        node = g.nodes[transpose]
        nodes += [g.nodes[node.inputs[0]], Node("transpose", (len(nodes),), node.shape, node.attrs, node.loc)]
        nodes.append(Node("state", (), node.shape, make_attrs(name=name, init=("zeros",), shape=node.shape)))
        updates.append((name, len(nodes) - 2))
    names = {n.attr("name"): i for i, n in enumerate(nodes) if n.is_leaf}
    params = tuple(n.attr("name") for n in nodes if n.op == "param")
    constants = Graph(tuple(nodes), names, (), params, tuple(cached.hoisted), (), tuple(updates))
    hoisted = tuple((name, g.nodes[i].shape) for name, i in cached.hoisted.items())
    return Decoder(step, window, constants, tuple(cached.caches), hoisted, block)


class _Rewrite:
    """One rewrite of g's logits: `cached`, the decode step (attention over the caches, from
    `$pos`); else the window step (attention as it is, from position 0). Both read the last
    position's logits only, and matmuls read hoisted transposed weights."""

    def __init__(self, g: Graph, t: str, tokens: str, block: int, cached: bool):
        self.g, self.t, self.tokens, self.block, self.cached = g, t, tokens, block, cached
        self.nodes: list[Node] = []
        self.caches: list[tuple[str, Shape]] = []
        self.updates: list[tuple[str, int]] = []
        self.hoisted: dict[str, int] = {}  # state -> the transpose node of g it holds
        self.count = self.add("dim_size", (), dims=(t,))  # T: the new positions
        self.one = self.add("const", (), shape=(), value=(1.0,))
        self._rows: dict[int, tuple[int, int]] = {}  # cache length -> (each row's new row, whether new)
        self._last: int | None = None  # [T - 1], i32: the last position
        self._rows_of: dict[int, int] = {}  # node -> its last row
        if cached:
            self.pos = self.leaf("input", POS, (1,), dtype="i32")
            self.first = self.add("float", (self.pos,))  # [1]

    def add(self, op: str, ins: tuple[int, ...], loc=None, **attrs) -> int:
        shape = _op(op).shape([self.nodes[j].shape for j in ins], attrs)
        self.nodes.append(Node(op, ins, tuple(shape), make_attrs(**attrs), loc))
        return len(self.nodes) - 1

    def leaf(self, op: str, name: str, shape: Shape, loc=None, **attrs) -> int:
        self.nodes.append(Node(op, (), shape, make_attrs(name=name, shape=shape, **attrs), loc))
        return len(self.nodes) - 1

    def copy(self, n: Node, ins: tuple[int, ...], **attrs) -> int:
        self.nodes.append(Node(n.op, ins, n.shape, make_attrs(**{**dict(n.attrs), **attrs}), n.loc))
        return len(self.nodes) - 1

    def write(self, cache: int, new: int, loc) -> int:
        """The cache with rows [pos, pos + T) replaced by `new`'s rows."""
        size = self.nodes[cache].shape[-2]
        if size not in self._rows:
            zero = self.add("const", (), shape=(), value=(0.0,))
            at = self.add("sub", (self.add("iota", (), shape=(size,), axis=0), self.first))  # row - pos
            last = self.add("sub", (self.count, self.add("const", (), shape=(), value=(1.0,))))
            fresh = self.add("logical_and", (self.add("ge", (at, zero)), self.add("lt", (at, self.count))))
            index = self.add("int", (self.add("maximum", (self.add("minimum", (at, last)), zero)),))
            self._rows[size] = (index, self.add("reshape", (fresh,), shape=(size, 1)))
        index, fresh = self._rows[size]
        moved = self.add("gather", (new, index), loc, axis=len(self.nodes[new].shape) - 2)
        return self.add("where", (fresh, moved, cache), loc)

    def run(self, fetch: str) -> Step:
        g = self.g
        root = g.names[fetch]
        remap: dict[int, int] = {}
        axis: dict[int, int | None] = {}
        part = cone(g, [root])
        for i in part:
            axis[i] = time_axis(g, i, axis, self.t, self.tokens)
        readers = _readers(g, part)
        last = _last_row_only(g, part, readers, axis)
        for i in part:
            n = g.nodes[i]
            ins = tuple(remap[j] for j in n.inputs)
            if i in remap:  # a transpose the attention before it wrote its output in
                continue
            if i in last:  # computed at the last position only: its inputs' last rows
                rows = n.inputs[:1] if n.op == "attention" else n.inputs  # (an attention's query)
                ins = tuple(self.last_row(j, axis[a]) if a in rows and a not in last and axis[a] is not None else j
                            for a, j in zip(n.inputs, ins))  # fmt: skip
            if n.op == "iota" and axis[i] is not None and n.attr("axis") == axis[i] and self.cached:
                remap[i] = self.add("add", (self.copy(n, ins), self.add("float", (self.pos,))), n.loc)
            elif n.op == "attention" and (self.cached or i in last):
                # [B, H, T, D] read only as [B, T, H, D] (heads together, for the projection):
                # the attention writes it so, and no kernel transposes it
                (reader,) = readers[i] if len(readers[i]) == 1 else (None,)
                swaps = reader is not None and (reader in last) == (i in last)
                swaps = swaps and _swaps_rows_and_heads(g.nodes[reader])
                remap[i] = self.attention(n, ins, rows_first=swaps, last=i in last)
                if swaps:
                    remap[reader] = remap[i]
            elif n.op == "matmul" and _transposed_param(g, n.inputs[1]) and not n.attr("tb"):
                # x @ transpose(W): W^T is computed once a generation (`constants`), not a step
                weight = g.nodes[n.inputs[1]]
                name = f"$kv.{g.nodes[weight.inputs[0]].attr('name')}.T"
                self.hoisted[name] = n.inputs[1]
                ins = (ins[0], self.leaf("state", name, weight.shape, init=("zeros",)))
                remap[i] = self.add(n.op, ins, n.loc, **dict(n.attrs)) if i in last else self.copy(n, ins)
            elif i in last:  # T is 1 in its shape and attrs
                attrs = {k: _one_row(v, self.t) if k in ("shape", "size") else v for k, v in n.attrs}
                remap[i] = self.add(n.op, ins, n.loc, **attrs)
            else:
                remap[i] = self.copy(n, ins)
        # only the last new position's logits: those computed there alone (a view without
        # the axis of one row), or gather(logits, T - 1) along T's axis
        if root in last:
            shape = tuple(d for k, d in enumerate(self.nodes[remap[root]].shape) if k != axis[root])
            out = self.add("reshape", (remap[root],), shape=shape)
        else:
            index = self.add("int", (self.last_index(),))
            out = self.add("gather", (remap[root], index), axis=axis[root])
        names = {n.attr("name"): j for j, n in enumerate(self.nodes) if n.is_leaf and n.op != "const"}
        names.update({name: remap[i] for name, i in g.names.items() if i in remap and name not in names})
        names[fetch] = out
        inputs = (self.tokens, POS) if self.cached else (self.tokens,)
        states = tuple(n.attr("name") for n in self.nodes if n.op == "state")
        params = tuple(n.attr("name") for n in self.nodes if n.op == "param")
        graph = Graph(tuple(self.nodes), names, inputs, params, states, (), tuple(self.updates))
        # without the nodes nothing reads now (a weight's transpose, the rows no one needs)
        kept = eliminate_dead_code(graph, keep=[out])
        return Step(kept, kept.names[fetch])

    def last_index(self) -> int:
        """T - 1, as a float scalar."""
        return self.add("sub", (self.count, self.add("const", (), shape=(), value=(1.0,))))

    def last_row(self, x: int, axis: int) -> int:
        """x's last position along `axis`, the axis kept (of size 1)."""
        if self._last is None:
            # elementwise of one element: each kernel reading it computes it inline
            minus_one = self.add("const", (), shape=(1,), value=(-1.0,))
            self._last = self.add("int", (self.add("add", (minus_one, self.count)),))
        if x not in self._rows_of:
            self._rows_of[x] = self.add("gather", (x, self._last), axis=axis)
        return self._rows_of[x]

    def attention(self, n: Node, ins: tuple[int, ...], rows_first: bool, last: bool) -> int:
        """Causal attention of the new rows over the layer's cache, once it holds them: keys
        and values stacked, [2, ..., block, D], so one kernel writes both. `last`: of the
        last new row only (q's last row), over the cache or, with no cache (the window
        step), over the new keys and values themselves."""
        q, k, v = ins
        *lead, t, d = n.shape
        one = (1, *lead, t, d)
        kv = self.add("concat", tuple(self.add("reshape", (x,), shape=one) for x in (k, v)), n.loc, axis=0)
        pos = self.pos if self.cached else None
        if self.cached:
            name = f"$kv{len(self.caches)}"
            shape = (2, *lead, self.block, d)
            cache = self.leaf("state", name, shape, n.loc, init=("zeros",))
            kv = self.write(cache, kv, n.loc)
            self.caches.append((name, shape))
            self.updates.append((name, kv))
        if last:  # the last row's position: pos + T - 1 (the window's: T - 1)
            start = self.first if self.cached else self.add("const", (), shape=(1,), value=(0.0,))
            last_row = self.add("add", (start, self.add("sub", (self.count, self.one))))
            pos = self.add("int", (last_row,))
        scale = n.attr("scale")
        if rows_first:
            return self.add("attention_cached", (q, kv, pos), n.loc, scale=scale, rows_first=True)
        return self.add("attention_cached", (q, kv, pos), n.loc, scale=scale)


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
    if n.op in RANDOM:
        raise NotIncremental(f"{n.op}{where} draws by element: a step's elements are not the whole forward's")
    if n.op == "dim_size" and any(t in factors(d)[1] for d in n.attr("dims")):
        raise NotIncremental(f"{n.op}{where} counts the positions (a mean over T?)")
    if all(a is None for a in ins):
        return out  # the same at every position (iota's positions: the pass offsets them)
    kind = _op(n.op).kind
    if n.op == "attention":
        if not n.attr("causal"):
            raise NotIncremental(f"attention{where} is not causal: a position sees later ones")
        if n.attr("dropout") or len(n.inputs) != 3:  # (eval drops none: only a train graph has it)
            raise NotIncremental(f"attention{where} drops probabilities by element")
        if any(a != len(n.shape) - 2 for a in ins):
            raise NotIncremental(f"attention{where} attends over an axis other than T")
        return out
    if out is None:
        raise NotIncremental(f"{n.op}{where} reduces over T: each position would see the others")

    def aligned(j: int, a: int | None) -> bool:  # broadcasting aligns trailing axes
        return a is None or a + len(n.shape) - len(g.nodes[j].shape) == out

    if kind in FLOAT_KINDS or n.op == "broadcast_to":
        if kind == "norm" and out in tuple(n.attr("axes")):
            raise NotIncremental(f"{n.op}{where} normalizes over T")
        if all(aligned(j, a) for j, a in zip(n.inputs, ins)):
            return out
    elif n.op in ("one_hot", "pick"):  # a last axis added (one_hot) or taken away (pick)
        if all(a is None or a == out for a in ins):
            return out
    elif kind == "reduce":
        axes = n.attr("axes")
        if ins[0] not in ((n.attr("axis"),) if axes is None else tuple(axes)):  # argmax: one axis
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


RANDOM = ("random_uniform", "random_normal")  # elementwise, but each element's draw is its index's
ROW_OPS = frozenset({"transpose", "reshape", "slice", "broadcast_to"})  # of their kinds, those kept row by row


def _readers(g: Graph, part: list[int]) -> dict[int, list[int]]:
    """Node -> the nodes of `part` that read it."""
    readers: dict[int, list[int]] = {i: [] for i in part}
    for i in part:
        for j in g.nodes[i].inputs:
            readers[j].append(i)
    return readers


def _swaps_rows_and_heads(n: Node) -> bool:
    """Whether n transposes [..., H, T, D] to [..., T, H, D]."""
    rank = len(n.shape)
    swap = (*range(rank - 3), rank - 2, rank - 3, rank - 1)
    return n.op == "transpose" and rank >= 3 and tuple(n.attr("perm")) == swap


def _last_row_only(g: Graph, part: list[int], readers: dict[int, list[int]], axis: dict[int, int | None]) -> set[int]:
    """The nodes that need computing at the last position only: those along T whose every
    reader (the root's: its last position) is one of them, of an op that computes each
    position from that position alone without knowing which it is (not an iota), or an
    attention (its last query then reads every earlier key and value, which stay whole):
    the last attention and the rest of the model (the final projection, MLP, norm and head)
    run on one row, not T."""
    out: set[int] = set()
    keys: set[int] = set()  # the keys and values of an attention computed for its last query
    for i in reversed(part):
        n = g.nodes[i]
        if axis[i] is None or i in keys or not all(c in out for c in readers[i]):
            continue
        if n.op == "attention":  # its last query over every key and value (attention_cached)
            out.add(i)
            keys.update(n.inputs[1:])
        elif _op(n.op).kind in ("elementwise", "matmul", "norm", "reduce") or n.op in ROW_OPS:
            out.add(i)
    return out


def _one_row(dims: tuple, t: str) -> tuple:
    return tuple(1 if d == t else d for d in dims)


def _transposed_param(g: Graph, i: int) -> bool:
    """Whether node i is a transpose of a param's last two axes (a weight read as W^T)."""
    n = g.nodes[i]
    if n.op != "transpose" or g.nodes[n.inputs[0]].op != "param":
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
