"""Reduction kernels: sum, max, min, argmax, argmin over a set of axes.

The reduced input is evaluated through the kernel's prologue (its fused elementwise
producers) at every reduced position; the result goes through the epilogue (fused
consumers of the output's shape) to the outputs. Two shapes of kernel:

- one invocation per output element, looping over the reduced elements: for short
  reductions, and for reductions over leading axes (neighbouring invocations then read
  neighbouring elements);
- one work group per output element, its invocations striding over the reduced elements and
  combining partial results in shared memory: for long reductions over the last axis and
  for few outputs (a loss over the whole batch);
- columns: for long reductions over leading axes with many outputs (a bias gradient summed
  over the batch), a work group takes 16 neighbouring outputs with 16 invocations each, which
  stride down the rows and combine in shared memory: reads stay coalesced and 16 times as
  many invocations share the work as with one per output.
"""

from __future__ import annotations

from ..plan import size_of
from .glsl import (
    LOCAL,
    Context,
    Emitter,
    Ix,
    KernelSource,
    global_index,
    group_index,
    header,
    kernel_source,
    numel_known,
)

INIT = {"sum": "0.0", "max": "(-DLC_INF)", "min": "DLC_INF", "argmax": "(-DLC_INF)",
        "argmin": "DLC_INF"}
BETTER = {"max": ">", "min": "<", "argmax": ">", "argmin": "<"}
SHORT = 64  # a reduction of at most this many elements runs in one invocation
COLS = 16  # outputs per work group of the column template (and invocations per output)


def geometry(ctx: Context) -> tuple[tuple[int, ...], bool]:
    node = ctx.graph.nodes[ctx.kernel.anchor]
    if node.op in ("argmax", "argmin"):
        return (node.attr("axis"),), False
    return tuple(node.attr("axes")), bool(node.attr("keepdims"))


def template(ctx: Context) -> str:
    """'group' (one work group per output), 'columns' or 'thread' (one invocation each)."""
    if one_group_per_output(ctx):
        return "group"
    node = ctx.graph.nodes[ctx.kernel.anchor]
    xshape = ctx.graph.nodes[node.inputs[0]].shape
    axes, _ = geometry(ctx)
    reduced = numel_known(tuple(xshape[a] for a in axes))
    leading = list(axes) == list(range(len(axes)))
    if leading and (reduced is None or reduced > SHORT) and node.op in ("sum", "max", "min"):
        return "columns"
    return "thread"


def one_group_per_output(ctx: Context) -> bool:
    node = ctx.graph.nodes[ctx.kernel.anchor]
    xshape = ctx.graph.nodes[node.inputs[0]].shape
    axes, _ = geometry(ctx)
    reduced = numel_known(tuple(xshape[a] for a in axes))
    if reduced is not None and reduced <= SHORT:
        return False
    outputs = numel_known(node.shape)
    return (len(xshape) - 1) in axes or (outputs is not None and outputs <= LOCAL)


def render(ctx: Context) -> KernelSource:
    k, g = ctx.kernel, ctx.graph
    node = g.nodes[k.anchor]
    op = node.op
    x = node.inputs[0]
    xshape = g.nodes[x].shape
    axes, keepdims = geometry(ctx)
    red_shape = tuple(xshape[a] for a in axes)
    kept = [a for a in range(len(xshape)) if a not in axes]
    out_shape = node.shape
    shape_of_kernel = template(ctx)
    per_group = shape_of_kernel == "group"
    columns = shape_of_kernel == "columns"

    epi = Emitter(ctx, anchor_value="value")
    epi.store_outputs(Ix(flat="o"))
    em = Emitter(ctx)
    n_out, n_red = ctx.numel(out_shape), ctx.numel(red_shape)
    if per_group:
        em.line(f"int o = {group_index()};")
        em.line(f"if (o >= {n_out}) return;  // the whole group leaves together")
        em.line("int lid = int(gl_LocalInvocationID.x);")
        loop = f"for (int r = lid; r < {n_red}; r += {LOCAL})"
    elif columns:
        em.line(f"int cx = int(gl_LocalInvocationID.x) % {COLS}, "
                f"ry = int(gl_LocalInvocationID.x) / {COLS};")
        em.line(f"int o = {group_index()} * {COLS} + cx;")
        em.line(f"bool live = o < {n_out};  // no early return: the group meets at barriers")
        loop = f"for (int r = ry; live && r < {n_red}; r += {LOCAL // COLS})"
    else:
        em.line(f"int o = {global_index()};")
        em.line(f"if (o >= {n_out}) return;")
        loop = f"for (int r = 0; r < {n_red}; ++r)"
    arg = op in ("argmax", "argmin")
    em.line(f"float acc = {INIT[op]};")
    if arg:
        em.line("int best = 0;")

    def x_index() -> Ix:
        # Reductions over trailing or leading axes read contiguous runs: no coordinates.
        if list(axes) == list(range(len(xshape) - len(axes), len(xshape))):
            return Ix(flat=f"(o * {n_red} + r)" if n_red != "1" else "o")
        if list(axes) == list(range(len(axes))):
            return Ix(flat=f"(r * {n_out} + o)" if n_out != "1" else "r")
        oc = em.coords(Ix(flat="o"), out_shape)
        rc = em.coords(Ix(flat="r"), red_shape)
        coords = [""] * len(xshape)
        for j, a in enumerate(kept):
            coords[a] = oc[a] if keepdims else oc[j]
        for j, a in enumerate(axes):
            coords[a] = rc[j]
        return Ix(multi=tuple(coords))

    em.open(loop)
    v = em.value(x, x_index())
    if op == "sum":
        em.line(f"acc += {v};")
    elif arg:
        em.line(f"if ({v} {BETTER[op]} acc || (isnan({v}) && !isnan(acc))) {{ acc = {v}; "
                "best = r; }")
    else:
        em.line(f"acc = ({v} {BETTER[op]} acc || isnan({v})) ? {v} : acc;")
    em.close()
    result = "float(best)" if arg else "acc"
    extra: list[str] = []
    if columns:
        rows = LOCAL // COLS
        extra = [f"shared float part[{rows}][{COLS + 1}];  // [row group][output], padded"]
        em.line("part[ry][cx] = acc;")
        em.line("memoryBarrierShared();")
        em.line("barrier();")
        em.open(f"for (int s = {rows // 2}; s > 0; s >>= 1)")
        em.open("if (ry < s)")
        em.line("float a = part[ry][cx], b = part[ry + s][cx];")
        if op == "sum":
            em.line("part[ry][cx] = a + b;")
        else:
            em.line(f"part[ry][cx] = (b {BETTER[op]} a || isnan(b)) ? b : a;")
        em.close()
        em.line("memoryBarrierShared();")
        em.line("barrier();")
        em.close()
        em.line("if (ry != 0 || !live) return;")
        result = "part[0][cx]"
    if per_group:
        extra = [f"shared float part[{LOCAL}];"] + ([f"shared int part_arg[{LOCAL}];"] if arg else [])
        em.line("part[lid] = acc;")
        if arg:
            em.line("part_arg[lid] = best;")
        em.line("memoryBarrierShared();")
        em.line("barrier();")
        em.open(f"for (int s = {LOCAL // 2}; s > 0; s >>= 1)")
        em.open("if (lid < s)")
        em.line("float a = part[lid], b = part[lid + s];")
        if op == "sum":
            em.line("part[lid] = a + b;")
        elif arg:
            em.line("int ia = part_arg[lid], ib = part_arg[lid + s];")
            em.line(f"if (b {BETTER[op]} a || (b == a && ib < ia) || (isnan(b) && (!isnan(a) "
                    "|| ib < ia))) { part[lid] = b; part_arg[lid] = ib; }")
        else:
            em.line(f"part[lid] = (b {BETTER[op]} a || isnan(b)) ? b : a;")
        em.close()
        em.line("memoryBarrierShared();")
        em.line("barrier();")
        em.close()
        em.line("if (lid != 0) return;")
        result = "float(part_arg[0])" if arg else "part[0]"
    em.line(f"epilogue(o, {result});")

    how = {"group": "one work group per output", "thread": "one invocation per output",
           "columns": f"{COLS} outputs a work group, {LOCAL // COLS} invocations each"}[
        shape_of_kernel]
    what = f"{op} over axes {list(axes)} of {list(xshape)}, {how}"
    local = (LOCAL, 1, 1)
    lines = header(ctx, what, local, extra)
    lines += ["void epilogue(int o, float value) {", *epi.lines, "}", ""]
    lines += ["void main() {", *em.lines, "}"]
    per = 1 if per_group else COLS if columns else LOCAL
    grid = {"flat": list(size_of(out_shape)), "per_group": per}
    return kernel_source(ctx, "\n".join(lines) + "\n", grid, local)
