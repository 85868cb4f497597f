"""Fusion: the IR grouped into kernels, each one GPU launch.

Every non-leaf node of the work is either *stored* (written to GPU storage by the kernel that
computes it) or *inlined* (recomputed, as an expression, inside the kernels that read it).
A kernel has at most one *anchor* (a reduce, matmul, window or norm node); everything else in it is
elementwise or layout arithmetic evaluated per output element:

- a chain of elementwise ops, broadcasting and layout ops (as index maps) included, is one
  kernel;
- a reduction takes its elementwise producers as a prologue (evaluated at each reduced
  position) and elementwise consumers of its own shape as an epilogue (`mean` = sum / n);
- a matmul or window op takes elementwise consumers of its own shape as an epilogue
  (`relu(x @ W + b)` is one kernel); their operands are read from storage.

The pass walks the nodes from the outputs back. A node is inlined when all its readers sit in
one kernel (or it is trivially cheap to recompute: a dim size, a value made from scalars
alone such as a dropout mask, or a layout view of a leaf or of an anchor's stored result);
otherwise it is stored, starting a kernel of its own, or joining its readers' kernel as an
extra output when it must be stored anyway (a fetch or an update) and has that kernel's shape
(where the target's kernels may write several results: `Capabilities`, from the device's
limits through compiler/limits.py). A kernel that would bind more stored tensors than the
device allows is cut (`fuse`), so every kernel fits the device it is compiled for.
Each kernel then computes only ancestors of its *primary* node (the one that started it), so
ordering kernels by primary node is a valid schedule and the kernel graph has no cycles. The
schedule (`_schedule`) follows that order except where a ready kernel frees at least what it
writes: it runs first, so the backward pass drops each activation as soon as it can.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from . import registry
from .grad_names import backward_start
from .ir import Graph, Shape, cone, format_node
from .limits import Capabilities, capabilities

STORED_LEAVES = ("input", "param", "state")
NOT_VIEWS = ("concat", "one_hot", "gather_grad")  # layout ops that are no index map of their inputs


@dataclass(frozen=True)
class Kernel:
    """One launch. `nodes` are computed here (topological order); `outputs` are written to
    storage (the primary first); `inputs` are stored tensors read; `shape` is the iteration
    space, the shape of every output."""

    index: int
    kind: str  # "elementwise" | "reduce" | "matmul" | "window" | "norm"
    anchor: int | None
    primary: int
    nodes: tuple[int, ...]
    outputs: tuple[int, ...]
    inputs: tuple[int, ...]
    shape: Shape
    name: str


@dataclass(frozen=True)
class Fusion:
    """The kernels of one program: what to compute (`roots`, `updates`) and how it is grouped.

    `storage[n]` says how tensor n lives: "leaf" (input, param, state or const buffer),
    "kernel" (written by `producer[n]`), "alias" (a reshape sharing `alias[n]`'s storage),
    or "inline" (never stored). `literals` are scalar consts written into shader text.
    `ident[n]` is True when an inlined node is only ever evaluated at its kernel's own
    output index (anchors fuse an epilogue only through such nodes; in-place updates need it).
    """

    graph: Graph
    roots: tuple[int, ...]
    updates: tuple[tuple[str, int], ...]
    kernels: tuple[Kernel, ...]
    storage: dict[int, str]
    producer: dict[int, int]
    alias: dict[int, int]
    literals: frozenset[int]
    ident: dict[int, bool] = field(default_factory=dict)

    def base(self, n: int) -> int:
        """The tensor whose storage n uses (itself unless n is an alias)."""
        return _base(self.alias, n)


@dataclass
class _Building:
    kind: str
    primary: int
    shape: Shape
    anchor: int | None = None
    nodes: set[int] = field(default_factory=set)
    outputs: list[int] = field(default_factory=list)


def kind_of(graph: Graph, n: int) -> str:
    return registry.get(graph.nodes[n].op).kind


def reads_own_element(graph: Graph, ident: dict[int, bool], c: int, shape: Shape) -> bool:
    """Reader c is elementwise over `shape` and evaluated only at its kernel's own index, so it
    reads each input element where it writes. Epilogue fusion, merging kernels, pruning outputs
    and in-place updates are all safe only under this rule."""
    return kind_of(graph, c) == "elementwise" and graph.nodes[c].shape == shape and ident.get(c, False)


def _numel(shape: Shape) -> int | None:
    if any(isinstance(d, str) for d in shape):
        return None
    return math.prod(shape)


def fuse(
    graph: Graph,
    roots: Sequence[int],
    updates: Iterable[tuple[str, int]] = (),
    caps: Capabilities | None = None,
) -> Fusion:
    """Group the work of fetching `roots` (and computing `updates`) into kernels for a target
    of `caps` (None: the compute target at the spec minimums), none binding more than it
    allows: values inlined into an over-full kernel are stored in kernels of their own (an
    anchor's epilogue, last, split from it), then fusion runs again. Each round cuts every
    over-full kernel as far as one pass over it can, so the rounds are few, whatever the
    size of the model."""
    if caps is None:
        caps = capabilities("compute")
    roots, updates = tuple(roots), tuple(updates)
    multi = caps.max_outputs > 1
    split: set[int] = set()
    while True:
        f = _fuse(graph, roots, updates, frozenset(split), multi, caps)
        more = _cuts(f, caps) - split
        if not more:  # within the limits, or nothing left to cut (codegen then refuses it)
            return f
        split |= more


def bound(f: Fusion, k: Kernel, caps: Capabilities) -> int:
    """The stored tensors kernel k binds (inputs, and outputs where they bind)."""
    return len({f.base(i) for i in k.inputs} | (set(k.outputs) if caps.outputs_bind else set()))


def _cuts(f: Fusion, caps: Capabilities) -> set[int]:
    """Nodes to store in kernels of their own so that over-full kernels bind fewer tensors.

    One walk over an over-full kernel's nodes, inputs first, tracks the stored tensors each
    inlined value reads; where a value would read more than the kernel has room for, its
    largest inlined input is cut (stored by a kernel of its own, then read as one tensor).
    A chain of 800 adds is cut every `room` nodes in one round."""
    out: set[int] = set()
    g = f.graph
    for k in f.kernels:
        if caps.fits(k.kind, (f.base(i) for i in k.inputs), k.outputs):
            continue
        if len(k.outputs) > caps.max_outputs:  # many results (updates of many params): move some out
            out.update(o for o in k.outputs[caps.max_outputs :] if kind_of(g, o) == "elementwise")
            continue
        out |= _cut_kernel(f, k, caps)
    return out


def _cut_kernel(f: Fusion, k: Kernel, caps: Capabilities) -> set[int]:
    """The cuts of over-full kernel k (see _cuts)."""
    g = f.graph
    writes = len(k.outputs) if caps.outputs_bind else 0
    room = caps.budget(k.kind) - writes
    nodes = set(k.nodes)
    cut: set[int] = set()
    reads: dict[int, frozenset[int]] = {}

    def cuttable(j: int) -> bool:
        return (
            j in nodes
            and f.storage.get(j) == "inline"
            and j not in f.literals
            and g.nodes[j].op not in ("dim_size", "reshape")
            and kind_of(g, j) in ("elementwise", "layout")
        )

    def reads_of(m: int) -> set[int]:
        acc: set[int] = set()
        for j in g.nodes[m].inputs:
            if j in f.literals:
                continue
            if j in nodes and f.storage.get(j) == "inline" and j not in cut:
                acc |= reads[j]
            else:
                acc.add(j if j in cut else f.base(j))
        return acc

    for m in k.nodes:  # topological order: inputs first
        acc = reads_of(m)
        while len(acc) > room:
            choices = [j for j in g.nodes[m].inputs if cuttable(j) and j not in cut and len(reads[j]) >= 2]
            if not choices:
                break
            cut.add(max(choices, key=lambda j: (len(reads[j]), j)))
            acc = reads_of(m)
        reads[m] = frozenset(acc)
    if not cut:
        # Every value fits, but not all together: the outputs after the primary go to
        # kernels of their own, then the anchor leaves its epilogue.
        extra = [o for o in k.outputs[1:] if kind_of(g, o) == "elementwise"]
        if extra:
            cut.update(extra)
        elif k.anchor is not None and len(k.nodes) > 1:
            cut.add(k.anchor)
    return cut


def _fuse(
    graph: Graph,
    roots: tuple[int, ...],
    updates: tuple[tuple[str, int], ...],
    split: frozenset[int],
    multi: bool,
    caps: Capabilities,
) -> Fusion:
    """One grouping; `multi`: a kernel may write several results; `split`: values stored
    in kernels of their own (anchors: without an epilogue)."""
    want = [*roots, *(i for _, i in updates)]
    order = cone(graph, want)
    in_work = set(order)
    readers: dict[int, list[int]] = {i: [] for i in order}
    for i in order:
        for j in graph.nodes[i].inputs:
            readers[j].append(i)

    free = recomputed_where_read(graph, order)
    must = set(want)  # stored because someone outside the kernels needs the values
    forced: set[int] = set()  # stored because an alias (reshape view) reads their storage
    storage: dict[int, str] = {}
    alias: dict[int, int] = {}
    literals: set[int] = set()
    home: dict[int, set[int]] = {}  # node -> kernels that compute it
    ident: dict[int, bool] = {}
    building: list[_Building] = []

    def start(kind: str, n: int, anchor: int | None = None) -> None:
        k = len(building)
        building.append(_Building(kind, n, graph.nodes[n].shape, anchor, {n}, [n]))
        home[n] = {k}
        ident[n] = True
        storage[n] = "kernel"

    for n in reversed(order):
        node = graph.nodes[n]
        users = readers[n]
        write = n in must or n in forced
        if node.op in STORED_LEAVES:
            storage[n] = "leaf"
            continue
        if node.op == "const":
            if _numel(node.shape) == 1 and not write:
                storage[n] = "inline"
                literals.add(n)
                home[n] = set().union(*(home[c] for c in users))
            else:
                storage[n] = "leaf"
            continue

        kind = kind_of(graph, n)
        feeds_anchor = any(kind_of(graph, c) in ("matmul", "window") or _stored_for(graph, n, c) for c in users)
        where = set().union(*(home[c] for c in users)) if users else set()
        if n in split and (kind == "elementwise" or (kind == "layout" and node.op != "reshape")):
            start("elementwise", n)  # cut out of an over-full kernel (fuse)
            continue
        if kind in ("elementwise", "layout"):
            # Cheap enough to recompute in every kernel that reads it: a dim size, a scalar
            # (Adam's bias corrections), a value made from scalars alone (a dropout mask,
            # redrawn from its hash in the backward kernel rather than kept from the forward),
            # a layout view of a leaf or of an anchor's result (stored anyway).
            cheap = (
                node.op == "dim_size"
                or (kind == "elementwise" and _numel(node.shape) == 1)
                or n in free
                or (
                    kind == "layout"
                    and node.op not in NOT_VIEWS
                    and all(graph.nodes[j].is_leaf or _is_anchor(graph, j) for j in node.inputs)
                )
            )
            # gather_grad loops over its indices: stored in a kernel of its own, where the compute
            # target's template owns rows (codegen/kernels_scatter.py), never recomputed inline.
            loops = node.op == "gather_grad"
            if loops:
                forced.add(n)  # its template sums each row in its stored output
            if not write and not feeds_anchor and not loops and (len(where) == 1 or (cheap and where)):
                storage[n] = "inline"
                home[n] = where
                for k in where:
                    building[k].nodes.add(n)
                ident[n] = len(where) == 1 and all(reads_own_element(graph, ident, c, node.shape) for c in users)
                continue
            if node.op == "reshape":
                # A reshape that must be stored is a view: it shares its input's storage.
                storage[n] = "alias"
                alias[n] = node.inputs[0]
                forced.add(node.inputs[0])
                home[n] = set()
                continue
            if multi and n in must and n not in forced and not feeds_anchor and len(where) == 1:
                (k,) = where
                if building[k].shape == node.shape:
                    # A fetch or update computed by its readers' kernel anyway: write it there.
                    building[k].nodes.add(n)
                    building[k].outputs.append(n)
                    home[n] = {k}
                    ident[n] = True
                    storage[n] = "kernel"
                    continue
            start("elementwise", n)
            continue

        # an anchor: reduce, matmul or window
        if not feeds_anchor and len(where) == 1 and n not in forced and n not in split:
            (k,) = where
            b = building[k]
            if (
                b.anchor is None
                and (multi or n not in must)
                and b.shape == node.shape
                and all(reads_own_element(graph, ident, c, node.shape) for c in users)
            ):
                b.kind, b.anchor = kind, n
                b.nodes.add(n)
                if n in must:
                    b.outputs.append(n)
                home[n] = {k}
                ident[n] = True
                storage[n] = "kernel" if n in must else "inline"
                continue
        start(kind, n, anchor=n)

    if multi:
        _merge_consumers(graph, building, alias, literals, ident, split, caps, backward_start(graph))
    _prune_outputs(graph, building, must | forced, literals, storage, ident)
    ranked = _schedule(graph, building, alias, literals, must)
    kernels: list[Kernel] = []
    producer: dict[int, int] = {}
    for index, k in enumerate(ranked):
        b = building[k]
        nodes = tuple(sorted(b.nodes))
        inputs = sorted(_stored_inputs(graph, b, literals))
        outputs = tuple(b.outputs)
        for o in outputs:
            producer[o] = index
        kernels.append(
            Kernel(
                index,
                b.kind,
                b.anchor,
                b.primary,
                nodes,
                outputs,
                tuple(inputs),
                b.shape,
                kernel_name(graph, index, nodes, b.anchor),
            )
        )
    assert all(i in storage for i in in_work)
    return Fusion(graph, roots, updates, tuple(kernels), storage, producer, alias, frozenset(literals), ident)


def _stored_for(graph: Graph, n: int, c: int) -> bool:
    """Whether n is an input node `c`'s kernel wants stored, not recomputed there (the op's
    `stored_inputs`: attention_cached's keys and values, read whole by every group)."""
    node = graph.nodes[c]
    return n in (node.inputs[i] for i in registry.get(node.op).stored_inputs)


def _is_anchor(graph: Graph, n: int) -> bool:
    return not graph.nodes[n].is_leaf and kind_of(graph, n) not in ("elementwise", "layout")


def recomputed_where_read(graph: Graph, order: Sequence[int]) -> set[int]:
    """Nodes (of `order`, inputs first) recomputed in each kernel that reads them, never stored
    for their own sake: elementwise values of more than one element made from scalars alone
    (random draws from the seed and step, dropout masks: their arithmetic costs less than
    keeping them from the forward pass to the backward), and layout views of leaves."""
    scalar_made: set[int] = set()  # elementwise values of scalars alone
    views: set[int] = set()
    for n in order:
        node = graph.nodes[n]
        if node.is_leaf:
            continue
        kind = kind_of(graph, n)
        if kind == "elementwise" and _numel(node.shape) != 1:
            if all(j in scalar_made or _numel(graph.nodes[j].shape) == 1 for j in node.inputs):
                scalar_made.add(n)
        elif kind == "layout" and node.op not in NOT_VIEWS and all(graph.nodes[j].is_leaf for j in node.inputs):
            views.add(n)
    return scalar_made | views


def _stored_inputs(graph: Graph, b: _Building, literals: set[int]) -> set[int]:
    return {j for m in b.nodes for j in graph.nodes[m].inputs if j not in b.nodes and j not in literals}


def _producers(graph: Graph, building: list[_Building], alias: dict[int, int], literals: set[int]) -> list[set[int]]:
    """For each kernel, the kernels whose outputs it reads."""
    made = {o: k for k, b in enumerate(building) if b is not None for o in b.outputs}
    deps: list[set[int]] = []
    for k, b in enumerate(building):
        found: set[int] = set()
        if b is not None:
            for j in _stored_inputs(graph, b, literals):
                j = _base(alias, j)
                if j in made and made[j] != k:
                    found.add(made[j])
        deps.append(found)
    return deps


def _merge_consumers(
    graph: Graph, building: list, alias, literals, ident, split, caps: Capabilities, backward: int | None
) -> None:
    """Fold an elementwise kernel into the kernel that makes its input, when it reads that
    input element for element and has its shape: `h = relu(x @ W + b)` where the backward pass
    also reads `x @ W + b` is then still one kernel, writing both. Skipped when another kernel
    lies between the two (that would make a cycle), when either was cut out of an over-full
    kernel (`split`, see fuse: folding the cut back in would refill it), when the two
    together would bind more than `caps` allow, or when a backward kernel (node `backward` on)
    would join a forward one and spare it no result (other kernels read all it reads from the
    forward kernel): its result would then be kept from the forward pass to the
    backward, which is what compiler/remat.py's copies avoid. The kernels' dependencies are
    kept up to date as kernels merge, so a pass costs one look at each kernel."""
    deps = _producers(graph, building, alias, literals)
    users: list[set[int]] = [set() for _ in building]
    for k, d in enumerate(deps):
        for p in d:
            users[p].add(k)
    changed = True
    while changed:
        changed = False
        for k2, b2 in enumerate(building):
            if b2 is None or b2.kind != "elementwise":
                continue
            for k1 in sorted(deps[k2]):
                b1 = building[k1]
                cut = b1.primary in split or b2.primary in split
                if cut or b1.shape != b2.shape or _reaches_via_other(deps, k1, k2):
                    continue
                made = set(b1.outputs)
                reads = [
                    (c, j) for c in b2.nodes for j in graph.nodes[c].inputs if j not in b2.nodes and j not in literals
                ]
                if any(_base(alias, j) in made and j not in made for _, j in reads):
                    continue  # read through a view
                if not all(reads_own_element(graph, ident, c, b2.shape) for c, j in reads if j in made):
                    continue
                if backward is not None and b1.primary < backward < b2.primary:
                    shared = {j for _, j in reads if j in made}
                    elsewhere = set().union(*(_stored_inputs(graph, building[u], literals) for u in users[k1] - {k2}))
                    if shared <= elsewhere:
                        continue  # the forward kernel would write one more value kept for the backward
                nodes, outputs = b1.nodes | b2.nodes, b1.outputs + b2.outputs
                merged = _Building(b1.kind, b1.primary, b1.shape, b1.anchor, nodes, outputs)
                inputs = {_base(alias, j) for j in _stored_inputs(graph, merged, literals)}
                if not caps.fits(merged.kind, inputs, merged.outputs):
                    continue
                b1.nodes, b1.outputs = nodes, outputs
                building[k2] = None
                # k1 now reads what k2 read, and k2's readers read k1.
                deps[k1] = (deps[k1] | deps[k2]) - {k1, k2}
                for d in deps[k2] - {k1}:
                    users[d].discard(k2)
                    users[d].add(k1)
                for u in users[k2]:
                    deps[u].discard(k2)
                    deps[u].add(k1)
                users[k1] = (users[k1] | users[k2]) - {k1, k2}
                deps[k2], users[k2] = set(), set()
                changed = True
                break
    building[:] = [b for b in building if b is not None]


def _prune_outputs(
    graph: Graph, building: list[_Building], keep: set[int], literals, storage: dict[int, str], ident: dict[int, bool]
) -> None:
    """After merging, an output only its own kernel reads need not be stored."""
    read_outside = {j for b in building for j in _stored_inputs(graph, b, literals)}
    for b in building:
        for o in list(b.outputs):
            if o in keep or o in read_outside:
                continue
            if len(b.outputs) == 1:
                continue  # a kernel writes something (only happens for unread fetches)
            b.outputs.remove(o)
            storage[o] = "inline"
            readers = [c for c in b.nodes if o in graph.nodes[c].inputs]
            ident[o] = all(reads_own_element(graph, ident, c, graph.nodes[o].shape) for c in readers)


def _base(alias: dict[int, int], j: int) -> int:
    while j in alias:
        j = alias[j]
    return j


def _reaches_via_other(deps: list[set[int]], k1: int, k2: int) -> bool:
    """Does k2 depend on k1 through some third kernel?"""
    stack = [d for d in deps[k2] if d != k1]
    seen: set[int] = set()
    while stack:
        k = stack.pop()
        if k == k1:
            return True
        if k not in seen:
            seen.add(k)
            stack.extend(deps[k])
    return False


def _schedule(graph: Graph, building: list[_Building], alias, literals, keep: set[int]) -> list[int]:
    """A topological order of the kernels that keeps stored tensors alive briefly: among the
    ready kernels, first those that free at least the bytes they write (the last reader of
    an activation: a weight gradient), most freed first, then the earliest primary node.
    `keep`: tensors stored to the end (fetches, updates), never freed."""
    deps = _producers(graph, building, alias, literals)
    waiting = [len(d) for d in deps]
    users: list[list[int]] = [[] for _ in building]
    for k, d in enumerate(deps):
        for p in d:
            users[p].append(k)
    reads = [{_base(alias, j) for j in _stored_inputs(graph, b, literals)} for b in building]
    made = {o for b in building for o in b.outputs} - keep
    readers: dict[int, list[int]] = {}  # stored tensor (freed when read) -> its reading kernels
    for k, r in enumerate(reads):
        for j in r & made:
            readers.setdefault(j, []).append(k)
    left = {j: len(ks) for j, ks in readers.items()}  # kernels still to read it
    size = {o: _elements(graph.nodes[o].shape) for b in building for o in b.outputs}

    def rank(k: int) -> tuple[bool, int, int]:
        grows = sum(size[o] for o in building[k].outputs) - sum(size[j] for j in reads[k] if left.get(j) == 1)
        return grows > 0, min(grows, 0), building[k].primary

    ranks: dict[int, tuple] = {}  # ready kernel -> its rank now (the heap may hold stale ones)
    heap: list[tuple[tuple, int]] = []

    def offer(k: int) -> None:
        ranks[k] = rank(k)
        heapq.heappush(heap, (ranks[k], k))

    for k in range(len(building)):
        if not waiting[k]:
            offer(k)
    out: list[int] = []
    while heap:
        r, k = heapq.heappop(heap)
        if ranks.get(k) != r:
            continue  # ranked again since, or done
        del ranks[k]
        out.append(k)
        for j in reads[k]:
            if j in left:
                left[j] -= 1
                if left[j] == 1:  # its last reader now frees it
                    for u in readers[j]:
                        if u in ranks:
                            offer(u)
        for u in users[k]:
            waiting[u] -= 1
            if not waiting[u]:
                offer(u)
    assert len(out) == len(building), "kernel graph has a cycle"
    return out


def _elements(shape: Shape) -> int:
    """Elements of `shape`, a symbolic dim counted as 64 (the order needs only which is larger)."""
    return math.prod(64 if isinstance(d, str) else d for d in shape)


def kernel_name(graph: Graph, index: int, nodes: Sequence[int], anchor: int | None) -> str:
    """`k03_matmul_add_relu`: the index, then the ops it fuses (anchor first), at most four."""
    ops: list[str] = []
    if anchor is not None:
        ops.append(graph.nodes[anchor].op)
    for n in nodes:
        op = graph.nodes[n].op
        if op not in ops and op != "const":
            ops.append(op)
    shown = ops[:4] + ([f"{len(ops) - 4}more"] if len(ops) > 4 else [])
    return f"k{index:02d}_" + "_".join(shown)


def format_fusion(f: Fusion) -> str:
    """The IR grouped into kernels (`dlc compile --emit ir` with kernels shown)."""
    g = f.graph
    label = g.label
    lines: list[str] = []
    for k in f.kernels:
        outs = ", ".join(label(o) for o in k.outputs)
        lines.append(f"kernel {k.name} ({k.kind}) -> {outs}")
        reads = ", ".join(label(i) for i in k.inputs) or "nothing"
        lines.append(f"  reads {reads}")
        for n in k.nodes:
            mark = "*" if n in k.outputs else " "
            lines.append(f"  {mark} {format_node(g, n)}")
    aliases = [f"{label(a)} = view of {label(b)}" for a, b in sorted(f.alias.items())]
    if aliases:
        lines.append("views (no kernel): " + "; ".join(aliases))
    for target, i in f.updates:
        lines.append(f"update {target} <- {label(i)}")
    return "\n".join(lines)
