"""Norm kernels (layer_norm, rms_norm and their gradients for x): each output row from the
statistics of its own input row, then the fused epilogue (a residual add, ...).

- compute target, rows of up to HELD x 256 elements (`render_held`): a run of lanes (32 for
  rows of 32 to 512) per row and several rows a work group; each lane reads its elements of
  the row once into registers (columns lane, lane + lanes, ...), the lanes' partial sums are
  added in shared memory (a fixed tree within the row's lanes: the same bits every run), and
  each lane writes its columns through the epilogue from the registers. The rows of a GPT
  (384) took 39 us a row block of [16384, 384] on the H200 when a group of 128 owned each row
  and read it three times from memory;
- compute target, longer rows (`render`): one work group per row (32 to 256 invocations,
  about one per 4 elements): each invocation strides over the row, their partial sums are
  added in shared memory (a fixed tree), then each writes its columns through the epilogue;
- texture target (`texture_body`): one fragment per output element, looping over its row for
  the statistics (the only shape a fragment shader has).

Both write the same GLSL for the statistics and for an element (`_stats`, `_element`), in the
order of the NumPy reference (ops/norm.py): mean, then the mean of squared deviations, then
inversesqrt(var + eps).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import registry
from ..ir import format_shape
from ..ops.norm import row_axes
from ..plan import size_of
from .compute import KEY, group_index, header, kernel_source
from .glsl import LOCAL, Context, Emitter, Ix, KernelSource
from .options import CodegenOptions
from .renderer import float_lit


def _geometry(ctx: Context):
    node = ctx.graph.nodes[ctx.kernel.anchor]
    xshape = ctx.graph.nodes[node.inputs[0]].shape
    axes = row_axes(node)
    width = math.prod(xshape[a] for a in axes)  # concrete (the shape rule checks)
    return node, xshape[: len(xshape) - len(axes)], width


def _param(em: Emitter, tensor: int, col: str) -> str:
    """gamma (or beta) at column `col`: a per-column tensor or a scalar."""
    scalar = size_of(em.ctx.graph.nodes[tensor].shape) == (1,)
    return em.value(tensor, Ix(flat="0" if scalar else col))


def _stats(ctx: Context, em: Emitter, row: str, group: int = 0) -> None:
    """Declares the row's statistics: nm_mean (layer_norm), nm_rstd, and for a gradient
    nm_gmean (mean of g * gamma, layer_norm) and nm_gxmean (mean of g * gamma * xhat).
    `group`: that many invocations share the row (each loops from `lid` by `group`, their
    partial sums added in shared memory); 0: one invocation loops over all of it."""
    node, _, width = _geometry(ctx)
    center = node.op.startswith("layer_norm")
    x = node.inputs[0]
    n = float_lit(float(width))  # means divide by the count, as NumPy's do
    at = f"({row} * {width} + nm_c)"
    loop = f"for (int nm_c = {'lid' if group else '0'}; nm_c < {width}; nm_c += {group or 1})"
    if center:
        em.line("float nm_sum = 0.0;")
        em.open(loop)
        em.line(f"nm_sum += {em.value(x, Ix(flat=at))};")
        em.close()
        _group_sum(em, group, "nm_sum")
        em.line(f"float nm_mean = nm_sum / {n};")
    em.line("float nm_sq = 0.0;")
    em.open(loop)
    em.line(f"float nm_d = {em.value(x, Ix(flat=at))}{' - nm_mean' if center else ''};")
    em.line("nm_sq += nm_d * nm_d;")
    em.close()
    _group_sum(em, group, "nm_sq")
    em.line(f"float nm_rstd = inversesqrt(nm_sq / {n} + {float_lit(float(node.attr('eps')))});")
    if node.op.endswith("_grad"):
        gamma, g = node.inputs[1], node.inputs[2]
        em.line("float nm_gsum = 0.0, nm_gxsum = 0.0;")
        em.open(loop)
        em.line(f"float nm_gh = {em.value(g, Ix(flat=at))} * {_param(em, gamma, 'nm_c')};")
        em.line(f"float nm_xh = ({em.value(x, Ix(flat=at))}{' - nm_mean' if center else ''}) * nm_rstd;")
        em.line("nm_gsum += nm_gh;")
        em.line("nm_gxsum += nm_gh * nm_xh;")
        em.close()
        _group_sum(em, group, "nm_gsum")
        _group_sum(em, group, "nm_gxsum")
        em.line(f"float nm_gmean = nm_gsum / {n}, nm_gxmean = nm_gxsum / {n};")


def _group_sum(em: Emitter, group: int, var: str) -> None:
    """`var` becomes the sum of every invocation's `var` (a tree in shared memory, in a fixed
    order: the same bits every run); nothing when one invocation has the row."""
    if not group:
        return
    em.line(f"nm_part[lid] = {var};")
    em.line("memoryBarrierShared();")
    em.line("barrier();")
    em.open(f"for (int s = {group // 2}; s > 0; s >>= 1)")
    em.line("if (lid < s) nm_part[lid] += nm_part[lid + s];")
    em.line("memoryBarrierShared();")
    em.line("barrier();")
    em.close()
    em.line(f"{var} = nm_part[0];")
    em.line("barrier();  // all have read it before the next sum writes nm_part")


def _element(ctx: Context, em: Emitter, row: str, col: str, held: tuple[str, str] | None = None) -> str:
    """The output at column `col` of row `row` (the statistics declared), as a variable.
    `held`: x and (for a gradient) g * gamma there, already in registers."""
    node, _, width = _geometry(ctx)
    center = node.op.startswith("layer_norm")
    x, gamma = node.inputs[0], node.inputs[1]
    at = Ix(flat=f"({row} * {width} + {col})")
    xv = held[0] if held else em.value(x, at)
    em.line(f"float nm_xhat = ({xv}{' - nm_mean' if center else ''}) * nm_rstd;")
    if node.op.endswith("_grad"):
        gh = held[1] if held else f"{em.value(node.inputs[2], at)} * {_param(em, gamma, col)}"
        em.line(f"float nm_out = nm_rstd * ({gh}{' - nm_gmean' if center else ''} - nm_xhat * nm_gxmean);")
    else:
        beta = f" + {_param(em, node.inputs[2], col)}" if center else ""
        em.line(f"float nm_out = nm_xhat * {_param(em, gamma, col)}{beta};")
    return "nm_out"


def _what(ctx: Context, how: str) -> str:
    node, rows, width = _geometry(ctx)
    return f"{node.op} over rows of {width} ({format_shape(rows)} rows), {how}"


def group_size(width: int) -> int:
    """Invocations sharing a row: a power of two, about one per 4 elements, 32 to 256."""
    size = 32
    while size < LOCAL and size * 4 < width:
        size *= 2
    return size


HELD = 16  # elements of a row each lane keeps in registers, at most
ROWS_GROUP = 128  # invocations a work group of `render_held`


@dataclass(frozen=True)
class RowLayout:
    """`lanes` lanes a row, `held` of the row's elements a lane in registers, `rows` rows a
    work group of `rows * lanes` invocations (render_held, kernels_reduce_rows)."""

    lanes: int
    held: int

    @property
    def rows(self) -> int:
        return max(1, ROWS_GROUP // self.lanes)

    @property
    def group(self) -> int:
        return self.rows * self.lanes


ROW_NAMES = ("lid", "rl", "lane", "live", "s")  # what row_lanes and the lanes' trees declare


def held_layout(width: int) -> RowLayout | None:
    """The layout of `render_held` for rows of `width` elements: 32 lanes (fewer for a row
    under 32 elements; more, up to LOCAL, where 32 would hold more than HELD each); None past
    HELD x LOCAL elements."""
    lanes = 1
    while lanes < min(32, width):
        lanes *= 2
    while -(-width // lanes) > HELD and lanes < LOCAL:
        lanes *= 2
    held = -(-width // lanes)
    return None if held > HELD else RowLayout(lanes, held)


def row_lanes(em: Emitter, count: str, lay: RowLayout, width: int, row: str) -> list[str]:
    """The start of a kernel of `lay`'s rows a work group (`count` rows in all): declares
    lid, rl (the row in the group), lane, `row` (the row) and live (the row exists), the
    whole group leaving past the last row; returns the GLSL of each held element's inside
    condition (live, and for the last element of a ragged row its column in the row), with
    the element's column `column(i, lanes)`."""
    em.line(f"if ({group_index()} * {lay.rows} >= {count}) return;  // the whole group leaves together")
    em.line("int lid = int(gl_LocalInvocationID.x);")
    em.line(
        f"int rl = lid / {lay.lanes}, lane = lid % {lay.lanes};  // this lane's row in the group, its place in the row"
    )
    em.line(f"int {row} = {group_index()} * {lay.rows} + rl;")
    em.line(f"bool live = {row} < {count};  // a lane of a row past the last reads nothing, stores nothing")
    last = lay.held - 1
    ragged = width % lay.lanes != 0  # the last element of some lanes lies past the row
    return [f"live && {column(i, lay.lanes)} < {width}" if ragged and i == last else "live" for i in range(lay.held)]


def column(i: int, lanes: int) -> str:
    """The column of a lane's held element i."""
    return f"(lane + {i * lanes})" if i else "lane"


def _row_sum(em: Emitter, lanes: int, *names: str) -> None:
    """Each of `names` (one, or two summed side by side as a vec2: half the barriers) becomes
    the sum of its row's lanes' values: a tree in shared memory within each row's run of
    lanes, in a fixed order (the same bits every run)."""
    if lanes == 1:
        return
    part = "nm_part" if len(names) == 1 else "nm_part2"
    value = names[0] if len(names) == 1 else f"vec2({', '.join(names)})"
    em.line(f"{part}[lid] = {value};")
    em.line("memoryBarrierShared();")
    em.line("barrier();")
    em.open(f"for (int s = {lanes // 2}; s > 0; s >>= 1)")
    em.line(f"if (lane < s) {part}[lid] += {part}[lid + s];")
    em.line("memoryBarrierShared();")
    em.line("barrier();")
    em.close()
    if len(names) == 1:
        em.line(f"{names[0]} = {part}[rl * {lanes}];")
    else:
        em.line(f"{names[0]} = {part}[rl * {lanes}].x, {names[1]} = {part}[rl * {lanes}].y;")
    em.line(f"barrier();  // all have read it before the next sum writes {part}")


def render_held(ctx: Context, lay: RowLayout) -> KernelSource:
    """Several rows a work group, a run of lanes a row, some elements a lane in registers
    (the module's docstring)."""
    node, rows, width = _geometry(ctx)
    center = node.op.startswith("layer_norm")
    grad = node.op.endswith("_grad")
    lanes, held = lay.lanes, lay.held
    ctx.names.taken.update({"r", "o", *ROW_NAMES})
    epi = Emitter(ctx, anchor_value="value")
    epi.store_outputs(Ix(flat="o"))
    em = Emitter(ctx)
    inside = row_lanes(em, ctx.numel(rows), lay, width, "r")
    cols = [column(i, lanes) for i in range(held)]
    ragged = width % lanes != 0  # the last element of some lanes lies past the row

    x, gamma = node.inputs[0], node.inputs[1]
    xs = [f"nm_x{i}" for i in range(held)]
    ghs = [f"nm_gh{i}" for i in range(held)] if grad else []
    for i in range(held):
        at = Ix(flat=f"(r * {width} + {cols[i]})")
        em.line(f"float {xs[i]} = 0.0;" + (f" float {ghs[i]} = 0.0;" if grad else ""))
        em.open(f"if ({inside[i]})")
        em.line(f"{xs[i]} = {em.value(x, at)};")
        if grad:
            em.line(f"{ghs[i]} = {em.value(node.inputs[2], at)} * {_param(em, gamma, cols[i])};")
        em.close()
    n = float_lit(float(width))  # means divide by the count, as NumPy's do
    if center:
        em.line(f"float nm_sum = {' + '.join(xs)};")
        _row_sum(em, lanes, "nm_sum")
        em.line(f"float nm_mean = nm_sum / {n};")
    ds = []
    for i in range(held):
        d = f"({xs[i]} - nm_mean)" if center else xs[i]
        if ragged and i == held - 1 and center:  # a padded zero minus the mean is no deviation
            d = f"({cols[i]} < {width} ? {d} : 0.0)"
        ds.append(d)
    em.line("float nm_sq = " + " + ".join(f"{d} * {d}" for d in ds) + ";")
    _row_sum(em, lanes, "nm_sq")
    em.line(f"float nm_rstd = inversesqrt(nm_sq / {n} + {float_lit(float(node.attr('eps')))});")
    if grad:
        em.line(f"float nm_gsum = {' + '.join(ghs)};")
        em.line("float nm_gxsum = " + " + ".join(f"{ghs[i]} * ({ds[i]} * nm_rstd)" for i in range(held)) + ";")
        _row_sum(em, lanes, "nm_gsum", "nm_gxsum")
        em.line(f"float nm_gmean = nm_gsum / {n}, nm_gxmean = nm_gxsum / {n};")
    for i in range(held):
        em.open(f"if ({inside[i]})")
        out = _element(ctx, em, "r", cols[i], (xs[i], ghs[i] if grad else ""))
        em.line(f"epilogue(r * {width} + {cols[i]}, {out});")
        em.close()
    local = (lay.group, 1, 1)
    each = f"{held} element{'s' if held > 1 else ''} a lane in registers"
    what = _what(ctx, f"{lay.rows} rows a work group of {lay.group}, {each}")
    shared = [f"shared float nm_part[{lay.group}];"] + ([f"shared vec2 nm_part2[{lay.group}];"] if grad else [])
    lines = header(ctx, what, local, shared)
    lines += ["void epilogue(int o, float value) {", *epi.lines, "}", ""]
    lines += ["void main() {", *em.lines, "}"]
    grid = {"flat": list(size_of(rows)), "per_group": lay.rows}
    return kernel_source(ctx, "\n".join(lines) + "\n", grid, local)


def render(ctx: Context) -> KernelSource:
    _, rows, width = _geometry(ctx)
    layout = held_layout(width)
    if layout is not None:
        return render_held(ctx, layout)
    group = group_size(width)
    ctx.names.taken.update({"r", "o", "c", "s", "lid"})
    epi = Emitter(ctx, anchor_value="value")
    epi.store_outputs(Ix(flat="o"))
    em = Emitter(ctx)
    em.line(f"int r = {group_index()};")
    em.line(f"if (r >= {ctx.numel(rows)}) return;  // the whole group leaves together")
    em.line("int lid = int(gl_LocalInvocationID.x);")
    _stats(ctx, em, "r", group)
    em.open(f"for (int c = lid; c < {width}; c += {group})")
    em.line(f"epilogue(r * {width} + c, {_element(ctx, em, 'r', 'c')});")
    em.close()
    local = (group, 1, 1)
    what = _what(ctx, f"one work group of {group} per row")
    lines = header(ctx, what, local, [f"shared float nm_part[{group}];"])
    lines += ["void epilogue(int o, float value) {", *epi.lines, "}", ""]
    lines += ["void main() {", *em.lines, "}"]
    grid = {"flat": list(size_of(rows)), "per_group": 1}
    return kernel_source(ctx, "\n".join(lines) + "\n", grid, local)


def texture_body(ctx: Context, em: Emitter) -> str:
    """The texture target's body for output element `o`: sets `acc`, says what it computes."""
    _, _, width = _geometry(ctx)
    em.line(f"int nm_row = o / {width}, nm_col = o - nm_row * {width};")
    _stats(ctx, em, "nm_row")
    em.line(f"float acc = {_element(ctx, em, 'nm_row', 'nm_col')};")
    return _what(ctx, "one fragment per output")


def lower(ctx: Context, options: CodegenOptions) -> KernelSource:
    """The compute target's lowering of norm kernels."""
    return render(ctx)


registry.register_lowering("norm", KEY, lower)
