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

Long reductions are split into chunks (`split`): no invocation loops more than `CHUNK_ITERS`
times, because drivers bound the work of one invocation (llvmpipe ends any invocation's loops
after 65535 iterations in all, silently; other GPUs' watchdogs reset a long-running kernel),
and so that enough work groups share a long reduction to fill a big GPU. A
"group" or "columns" kernel whose reduced size is not known to fit one chunk then runs one work
group per (outputs, chunk); each writes its partial result to a scratch buffer the runtime
binds after the slots, and the last group to finish an output (counted with an atomic) combines
its partials in chunk order (so sums do not depend on scheduling) and runs the epilogue.

A sum overflows only where its terms' exact sum does (`guarded`): where an output's plain sum
is inf or NaN (rare), its invocations sum again, each term times 2^-32, and the result is that
times 2^32; a split sum keeps each chunk's scaled partial beside its plain one for the same.
"""

from __future__ import annotations

from collections.abc import Callable

from .. import registry
from ..plan import size_of
from . import kernels_reduce_rows
from .compute import KEY, count_in, group_index, header, kernel_source, scratch_buffer
from .glsl import LOCAL, Context, Emitter, Ix, KernelSource, numel_known
from .options import CodegenOptions
from .reductions import BETTER, DOWN, INIT, UP

SHORT = 64  # a reduction of at most this many elements runs in one invocation
THREAD_MAX = 4096  # nor one of more than this many (past it: a work group per output)
COLS = 16  # outputs per work group of the column template (and invocations per output)
# Loop iterations of one invocation over one chunk of a split reduction. Also what fills a
# big GPU: a bias or layer-norm gradient over 16,384 rows of 384 columns ran as 24 work groups
# with 1024 (0.48 ms on the H100) and ran as 384 with 64; a gradient's squared norm over
# 590k elements as 3 groups (0.125 ms), then 36. On the H200 (2026-12-02, the GPT step) 32
# took the [16384, 384] column sums from 46.8 to 32.7 us and the weights' squared norms from
# 17.8 to 14.2 (16: 35.3 and 12.4).
CHUNK_ITERS = 32


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
    if reduced is None or reduced > THREAD_MAX:
        return "group"  # one invocation must not loop over a long reduction
    return "thread"


def chunk_size(shape_of_kernel: str) -> int:
    """Reduced elements one work group covers in one chunk of a split reduction."""
    return (LOCAL if shape_of_kernel == "group" else LOCAL // COLS) * CHUNK_ITERS


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
    chunk = chunk_size(shape_of_kernel)
    known = numel_known(red_shape)
    split = (per_group or columns) and (known is None or known > chunk)
    ctx.names.taken.update(
        {
            "overflowed",
            "o",
            "r",
            "lid",
            "cx",
            "ry",
            "live",
            "acc",
            "best",
            "nchunk",
            "grp",
            "blk",
            "chunk",
            "rbase",
            "rlen",
            "q",
            "i",
            "sc",
        }
    )

    epi = Emitter(ctx, anchor_value="value")
    epi.store_outputs(Ix(flat="o"))
    em = Emitter(ctx)
    n_out, n_red = ctx.numel(out_shape), ctx.numel(red_shape)
    rows = LOCAL // COLS
    if split:
        em.line(f"int nchunk = {n_red} / {chunk} + ({n_red} % {chunk} != 0 ? 1 : 0);  // chunks of the reduction")
        em.line(f"int grp = {group_index()};")
    if per_group:
        if split:
            em.line("int o = grp / nchunk, chunk = grp - o * nchunk;")
        else:
            em.line(f"int o = {group_index()};")
        em.line(f"if (o >= {n_out}) return;  // the whole group leaves together")
        em.line("int lid = int(gl_LocalInvocationID.x);")
        first, step = "lid", LOCAL
    elif columns:
        em.line(f"int cx = int(gl_LocalInvocationID.x) % {COLS}, ry = int(gl_LocalInvocationID.x) / {COLS};")
        if split:
            em.line("int blk = grp / nchunk, chunk = grp - blk * nchunk;")
            em.line(f"if (blk * {COLS} >= {n_out}) return;  // the whole group leaves together")
            em.line(f"int o = blk * {COLS} + cx;")
        else:
            em.line(f"int o = {group_index()} * {COLS} + cx;")
        em.line(f"bool live = o < {n_out};  // no early return: the group meets at barriers")
        first, step = "ry", rows
    else:
        em.own_element("o", n_out)
    if split:
        # Offsets within the chunk: no int overflow near 2^31 elements.
        em.line(f"int rbase = chunk * {chunk}, rlen = min({n_red} - rbase, {chunk});")
        cond = "live && " if columns else ""
        loop = f"for (int i = {first}; {cond}i < rlen; i += {step})"
    elif per_group:
        loop = f"for (int r = lid; r < {n_red}; r += {LOCAL})"
    elif columns:
        loop = f"for (int r = ry; live && r < {n_red}; r += {rows})"
    else:
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

    def combine(v: str, index: str) -> None:
        """acc (and best) take value `v` found at reduced position `index`."""
        if op == "sum":
            em.line(f"acc += {v};")
        elif arg:
            em.line(f"if ({v} {BETTER[op]} acc || (isnan({v}) && !isnan(acc))) {{ acc = {v}; best = {index}; }}")
        else:
            em.line(f"acc = ({v} {BETTER[op]} acc || isnan({v})) ? {v} : acc;")

    def scan(scaled: bool = False) -> None:
        """The loop over this invocation's reduced elements into acc (scaled: a sum's terms
        times 2^-32)."""
        em.open(loop)
        if split:
            em.line("int r = rbase + i;")
        v = em.value(x, x_index())
        combine(f"dlc_down32({v})" if scaled else v, "r")
        em.close()

    def tree() -> str:
        """Combine the group's accumulators in shared memory; the expression of the result."""
        if columns:
            em.line("part[ry][cx] = acc;")
            if op == "sum":  # any output's sum inf or NaN: `guarded`'s one decision for the group
                em.line("if (gl_LocalInvocationIndex == 0u) overflowed = false;")
            em.line("memoryBarrierShared();")
            em.line("barrier();")
            em.open(f"for (int s = {rows // 2}; s > 0; s >>= 1)")
            em.open("if (ry < s)")
            em.line("float a = part[ry][cx], b = part[ry + s][cx];")
            if op == "sum":
                em.line("part[ry][cx] = a + b;")
                em.line("if (s == 1 && !dlc_isfinite(a + b)) overflowed = true;")
            else:
                em.line(f"part[ry][cx] = (b {BETTER[op]} a || isnan(b)) ? b : a;")
            em.close()
            em.line("memoryBarrierShared();")
            em.line("barrier();")
            em.close()
            return "part[0][cx]"
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
            em.line(
                f"if (b {BETTER[op]} a || (b == a && ib < ia) || (isnan(b) && (!isnan(a) "
                "|| ib < ia))) { part[lid] = b; part_arg[lid] = ib; }"
            )
        else:
            em.line(f"part[lid] = (b {BETTER[op]} a || isnan(b)) ? b : a;")
        em.close()
        em.line("memoryBarrierShared();")
        em.line("barrier();")
        em.close()
        return "float(part_arg[0])" if arg else "part[0]"

    def guarded(run_pass: Callable[[bool], str]) -> tuple[str, str]:
        """A sum that overflows only where its terms' exact sum does: `run_pass(scaled)` emits
        the reduction (scaled: of the terms times 2^-32) and gives its result. It runs plain;
        where that is inf or NaN (a partial sum overflowed, or a term is inf or NaN), again
        scaled. Returns the variables (plain, scaled): the sum is plain where finite, else
        scaled * 2^32 (inf again only where the terms' sum is, or a term is inf or NaN)."""
        plain, scaled = em.names.claim("total"), em.names.claim("scaled")
        em.line(f"float {plain} = {run_pass(False)}, {scaled} = {plain} * {DOWN};")
        # thread: its own; group: part[0], the same for all; columns: one decision for the group
        # (it meets at barriers), any of its outputs (tree() sets `overflowed`)
        redo = "overflowed" if columns else f"!dlc_isfinite({plain})"
        em.line("// rare: a partial sum overflowed, or a term is inf or NaN")
        em.open(f"if ({redo})")
        if per_group or columns:
            em.line("barrier();  // every invocation has read the plain result")
        em.line("acc = 0.0;")
        em.line(f"if (!dlc_isfinite({plain})) {scaled} = {run_pass(True)};")
        em.close()
        return plain, scaled

    def first_pass(scaled: bool) -> str:
        scan(scaled)
        return tree() if per_group or columns else "acc"

    extra: list[str] = []
    done = "if (ry != 0 || !live) return;" if columns else "if (lid != 0) return;"
    if columns:
        extra = [f"shared float part[{rows}][{COLS + 1}];  // [row group][output], padded"]
        extra += ["shared bool overflowed;  // a sum of the group's outputs is inf or NaN"] if op == "sum" else []
    if per_group:
        extra = [f"shared float part[{LOCAL}];"] + ([f"shared int part_arg[{LOCAL}];"] if arg else [])
    if op == "sum":
        plain, scaled = guarded(first_pass)
        result = f"(dlc_isfinite({plain}) ? {plain} : {scaled} * {UP})"
    else:
        scan()
        result = tree() if per_group or columns else "float(best)" if arg else "acc"
    if split:
        extra += [
            scratch_buffer(ctx, "a counter per output (or column block), then the partials"),
            "shared bool last_group;",
        ]
        em.open("if (nchunk == 1)")
        em.line(done)
        em.line(f"epilogue(o, {result});")
        em.line("return;")
        em.close()
        # This chunk's partial, then count the chunks done; the last group combines them.
        parts = f"({n_out} + o * nchunk)"
        em.open("if (ry == 0 && live)" if columns else "if (lid == 0)")
        em.line(f"sc.w[{parts} + chunk] = floatBitsToUint({'part[0]' if arg else plain if op == 'sum' else result});")
        if arg:
            em.line(f"sc.w[{parts} + {n_out} * nchunk + chunk] = uint(part_arg[0]);")
        if op == "sum":  # its scaled partial beside it
            em.line(f"sc.w[{parts} + {n_out} * nchunk + chunk] = floatBitsToUint({scaled});")
        em.close()
        counter = "blk" if columns else "o"
        count_in(em, counter, "nchunk")
        em.line(f"acc = {INIT[op]};")
        if arg:
            em.line("best = 0;")

        def partials(scaled: bool) -> str:
            """Combine the chunks' partials (a sum's scaled ones: the second word of each)."""
            em.open(f"for (int q = {first}; {'live && ' if columns else ''}q < nchunk; q += {step})")
            v = em.names.claim("partial")
            em.line(f"float {v} = uintBitsToFloat(sc.w[{parts} + {f'{n_out} * nchunk + ' if scaled else ''}q]);")
            combine(v, f"int(sc.w[{parts} + {n_out} * nchunk + q])")
            em.close()
            return tree()

        if op == "sum":
            plain, scaled = guarded(partials)
            result = f"(dlc_isfinite({plain}) ? {plain} : {scaled} * {UP})"
        else:
            result = partials(False)
        em.line(f"if (gl_LocalInvocationIndex == 0u) sc.w[{counter}] = 0u;  // ready for the next launch")
    if per_group or columns:
        em.line(done)
    em.line(f"epilogue(o, {result});")

    how = {
        "group": "one work group per output",
        "thread": "one invocation per output",
        "columns": f"{COLS} outputs a work group, {LOCAL // COLS} invocations each",
    }[shape_of_kernel]
    if split:
        how += f", in chunks of {chunk}"
    what = f"{op} over axes {list(axes)} of {list(xshape)}, {how}"
    local = (LOCAL, 1, 1)
    lines = header(ctx, what, local, extra)
    lines += ["void epilogue(int o, float value) {", *epi.lines, "}", ""]
    lines += ["void main() {", *em.lines, "}"]
    per = 1 if per_group else COLS if columns else LOCAL
    grid = {"flat": list(size_of(out_shape)), "per_group": per}
    if split:
        # Groups: one per (per_group outputs, chunk); scratch: a uint per output, then
        # `scratch` uints per (output, chunk).
        grid["split"] = [list(size_of(red_shape)), chunk]
        grid["scratch"] = 2 if arg or op == "sum" else 1  # arg: the index; sum: the scaled partial
    return kernel_source(ctx, "\n".join(lines) + "\n", grid, local)


def lower(ctx: Context, options: CodegenOptions) -> KernelSource:
    """The compute target's lowering of reduce kernels: rows of a known length over trailing
    axes, many of them, take kernels_reduce_rows' layout; the rest `render`'s templates."""
    rows = kernels_reduce_rows.layout(ctx)
    if rows is not None:
        return kernels_reduce_rows.render(ctx, rows)
    return render(ctx)


registry.register_lowering("reduce", KEY, lower)
