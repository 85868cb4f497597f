"""What the attention kernels of both layouts share (kernels_attention.py: a row an
invocation; kernels_attention_tiled.py: register tiles; kernels_kv_cache.py): the geometry of
an attention node, the dropout weight's GLSL, reads of [..., T, D] rows by word, and the
compute shader of a grid of row blocks."""

from __future__ import annotations

from collections.abc import Callable

from ..ops.attention import keep_scale
from ..plan import size_of
from . import index
from .compute import header, kernel_source
from .glsl import Context, Emitter, Ix, KernelSource
from .renderer import float_lit

# names the dropout code declares (both targets)
DROP_NAMES = {"drop_seed", "drop_step", "drop_w"}


def geometry(ctx: Context):
    """The kernel's attention node, q's leading dims, its T and its (concrete) D."""
    node = ctx.graph.nodes[ctx.kernel.anchor]
    qshape = ctx.graph.nodes[node.inputs[0]].shape
    return node, qshape[:-2], qshape[-2], int(qshape[-1])


def dropout_weight(ctx: Context, em: Emitter, node) -> Callable[[str], str] | None:
    """Where `node` drops probabilities: declares its seed and step, and returns the GLSL of
    w (m / (1 - p)) for a flat index expression of the [..., T, T] probabilities; else None."""
    p = node.attr("dropout")
    if p is None:
        return None
    ctx.names.taken.update(DROP_NAMES)
    counters = node.inputs[-1]  # [$seed, $step]
    em.line(f"float drop_seed = {em.value(counters, Ix(flat='0'))}, drop_step = {em.value(counters, Ix(flat='1'))};")
    key, keep, scale = float_lit(float(node.attr("key"))), float_lit(float(p)), float_lit(keep_scale(p))
    return lambda index: f"dlc_random_uniform(drop_seed, drop_step, {key}, {index}) >= {keep} ? {scale} : 0.0"


def row_ix(em: Emitter, tensor: int, row: str, col: str, flat: str) -> Ix:
    """Element `col` of row `row` of a [..., T, D] tensor (`flat`: its flat index). A tensor
    computed in the kernel (a fused slice-reshape-transpose of the qkv product) is read at
    coordinates, the row's found once: from the flat index each element would re-derive them,
    dividing by the symbolic T."""
    if tensor in em.inside:
        shape = em.g.nodes[tensor].shape
        return Ix(multi=(*em.coords(Ix(flat=row), shape[:-1]), index.atom(col)))
    return Ix(flat=flat)


def row_word(em: Emitter, tensor: int, row: str, w: str, d: int, lanes: int) -> str:
    """Word w of row `row` of a [..., T, D] tensor, as a float (lanes 1) or a vec4 (lanes 4)."""
    parts = [
        em.value(tensor, row_ix(em, tensor, row, f"{w} * {lanes} + {c}", f"({row} * {d} + {w} * {lanes} + {c})"))
        for c in range(lanes)
    ]
    return parts[0] if lanes == 1 else f"vec4({', '.join(parts)})"


def each_word(em: Emitter, words: int, line, unroll: bool) -> None:
    """`line(w)` for every word w of a row: written out with constant w (`unroll`), or a loop."""
    if not unroll:
        em.open(f"for (int w = 0; w < {words}; w++)")
        em.line(line("w"))
        em.close()
        return
    for w in range(words):
        em.line(line(str(w)))


def row_blocks_source(
    ctx: Context, what: str, lanes: int, shared: list[str], epi: Emitter, em: Emitter, t_dim, lead, rows: int
) -> KernelSource:
    """The compute shader of a kernel of `lanes` invocations a work group over blocks of `rows`
    rows of a [..., T] axis (the tile's x) and each leading index (its y): `epi` the body of
    its epilogue(o, value), `em` that of main(), `shared` its shared declarations."""
    local = (lanes, 1, 1)
    lines = header(ctx, what, local, shared)
    lines += ["void epilogue(int o, float value) {", *epi.lines, "}", ""]
    lines += ["void main() {", *em.lines, "}"]
    grid = {"tiles": [[list(size_of((t_dim,))), rows], [list(size_of(lead)), 1], [[1], 1]]}
    return kernel_source(ctx, "\n".join(lines) + "\n", grid, local)
