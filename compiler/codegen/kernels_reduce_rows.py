"""Reductions over the trailing axes of rows of a known length (16 to 4096 elements: the
attention gradient's rowsum(dO * O) over a head of 64, a softmax's or a loss's row over the
vocabulary), with many rows: the layout of the norm kernels (kernels_norm.render_held).

A run of lanes a row (32 for rows of 32 to 512) and several rows a work group; each lane
reads its elements of the row (columns lane, lane + lanes, ...) once into registers,
combines them in column order, and the lanes' results are combined in shared memory (a fixed
tree within the row's lanes: the same bits every run). Neighbouring lanes read neighbouring
floats. One invocation an output looping over its row (kernels_reduce's "thread" template)
read 64 floats of its own row while its neighbours read other rows: 55 us for the GPT's
[64, 6, 256, 64] on the H200.

A sum overflows only where its terms' exact sum does, as in kernels_reduce: where any row of
the work group sums to inf or NaN (rare; one decision for the group, which meets at
barriers), its lanes sum again, each term times 2^-32, and that row's result is the scaled
sum times 2^32.
"""

from __future__ import annotations

from ..plan import size_of
from .compute import header, kernel_source
from .glsl import Context, Emitter, Ix, KernelSource, numel_known
from .kernels_norm import ROW_NAMES, ROWS_GROUP, RowLayout, column, held_layout, row_lanes
from .reductions import BETTER, DOWN, INIT, UP

OPS = ("sum", "max", "min")
SHORTEST = 16  # rows shorter than this stay one invocation an output


def layout(ctx: Context) -> RowLayout | None:
    """The rows' layout where this reduce kernel takes the rows template, else
    None: sum, max or min over the trailing axes, rows of SHORTEST to 16 x 256 known
    elements, and more rows than one work group's invocations (few rows, as a loss's, take a
    work group each)."""
    node = ctx.graph.nodes[ctx.kernel.anchor]
    if node.op not in OPS:
        return None
    xshape = ctx.graph.nodes[node.inputs[0]].shape
    axes = tuple(node.attr("axes"))
    if not axes or list(axes) != list(range(len(xshape) - len(axes), len(xshape))):
        return None
    width = numel_known(tuple(xshape[a] for a in axes))
    outputs = numel_known(node.shape)
    if width is None or width < SHORTEST or (outputs is not None and outputs <= ROWS_GROUP):
        return None
    return held_layout(width)


def render(ctx: Context, lay: RowLayout) -> KernelSource:
    node = ctx.graph.nodes[ctx.kernel.anchor]
    op, x = node.op, node.inputs[0]
    xshape = ctx.graph.nodes[x].shape
    axes = tuple(node.attr("axes"))
    width = numel_known(tuple(xshape[a] for a in axes))
    lanes, held = lay.lanes, lay.held
    ctx.names.taken.update({"o", "acc", "overflowed", "rd_part", *ROW_NAMES})
    epi = Emitter(ctx, anchor_value="value")
    epi.store_outputs(Ix(flat="o"))
    em = Emitter(ctx)
    inside = row_lanes(em, ctx.numel(node.shape), lay, width, "o")
    xs = [f"rd_x{i}" for i in range(held)]
    for i in range(held):
        em.line(f"float {xs[i]} = {INIT[op]};")
        em.open(f"if ({inside[i]})")
        em.line(f"{xs[i]} = {em.value(x, Ix(flat=f'(o * {width} + {column(i, lanes)})'))};")
        em.close()

    def row_result(scaled: bool) -> str:
        """This lane's elements combined in column order, then the row's lanes in a tree."""
        terms = [f"dlc_down32({v})" if scaled else v for v in xs]
        if op == "sum":  # a padded element is 0.0 (INIT): no term
            em.line(f"acc = {' + '.join(terms)};")
        else:
            em.line(f"acc = {terms[0]};")
            for v in terms[1:]:  # a padded element is the identity (INIT): no change
                em.line(f"acc = ({v} {BETTER[op]} acc || isnan({v})) ? {v} : acc;")
        if lanes == 1:
            return "acc"
        em.line("rd_part[lid] = acc;")
        em.line("memoryBarrierShared();")
        em.line("barrier();")
        em.open(f"for (int s = {lanes // 2}; s > 0; s >>= 1)")
        em.open("if (lane < s)")
        em.line("float a = rd_part[lid], b = rd_part[lid + s];")
        em.line("rd_part[lid] = a + b;" if op == "sum" else f"rd_part[lid] = (b {BETTER[op]} a || isnan(b)) ? b : a;")
        em.close()
        em.line("memoryBarrierShared();")
        em.line("barrier();")
        em.close()
        return f"rd_part[rl * {lanes}]"

    em.line("float acc;")
    extra = [f"shared float rd_part[{lay.group}];"]
    if op == "sum":
        extra.append("shared bool overflowed;  // a row of the group sums to inf or NaN")
        em.line("if (lid == 0) overflowed = false;  // seen by all after the tree's first barrier")
        em.line(f"float total = {row_result(False)};")
        em.line("if (lane == 0 && live && !dlc_isfinite(total)) overflowed = true;")
        em.line("memoryBarrierShared();")
        em.line("barrier();")
        em.line(f"float scaled = total * {DOWN};")
        em.line("// rare: a partial sum overflowed, or a term is inf or NaN")
        em.open("if (overflowed)")
        em.line("barrier();  // every lane has read its plain result")
        em.line(f"float again = {row_result(True)};")
        em.line("if (!dlc_isfinite(total)) scaled = again;")
        em.close()
        result = f"(dlc_isfinite(total) ? total : scaled * {UP})"
    else:
        em.line(f"float best = {row_result(False)};")
        result = "best"
    em.line("if (lane != 0 || !live) return;")
    em.line(f"epilogue(o, {result});")
    local = (lay.group, 1, 1)
    each = f"{held} element{'s' if held > 1 else ''} a lane"
    what = f"{op} over axes {list(axes)} of {list(xshape)}, {lay.rows} rows a work group of {lay.group}, {each}"
    lines = header(ctx, what, local, extra)
    lines += ["void epilogue(int o, float value) {", *epi.lines, "}", ""]
    lines += ["void main() {", *em.lines, "}"]
    grid = {"flat": list(size_of(node.shape)), "per_group": lay.rows}
    return kernel_source(ctx, "\n".join(lines) + "\n", grid, local)
