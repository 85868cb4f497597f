"""gather's gradient on the compute target: each work group owns a block of one row of the
table's gradient.

`gather_grad(g, idx)` sums g over the positions whose index names each row. Evaluated per
output element (glsl.py's `_gather_grad`, the texture target's way) that scans every index
once per element: rows x columns x positions. Here a work group owns one row and a block of
COLUMNS consecutive columns, an invocation a column: the group loads the indices in tiles of
TILE x COLUMNS into shared memory (one read of each index per group, not per column), and
each invocation tests them four at a time and adds the matching positions' gradients into a
register in position order (the whole group takes the same branch, and neighbouring
invocations read neighbouring floats of g). No other invocation writes there, so there are
no atomics and the bits are the same every run; the work is rows x positions compares (in
shared memory) plus positions x columns adds. Outputs merged into the kernel (an
optimizer's update of the table) are computed from the finished element.
"""

from __future__ import annotations

from ..ir import format_shape
from ..plan import size_of
from .compute import header, kernel_source
from .glsl import Context, Emitter, Ix, KernelSource
from .index import numel_known

COLUMNS = 64  # columns a work group (invocations); fewer for a narrower row
TILE = 4  # indices each invocation loads into a tile


def owns_rows(ctx: Context) -> bool:
    """Whether this kernel is a stored gather_grad (and what its readers merged into it)."""
    return ctx.graph.nodes[ctx.kernel.primary].op == "gather_grad"


def render(ctx: Context) -> KernelSource:
    g, k = ctx.graph, ctx.kernel
    n = k.primary
    node = g.nodes[n]
    grad, idx = node.inputs
    axis = node.attr("axis")
    shape = node.shape
    lead, post = (*shape[:axis], shape[axis]), shape[axis + 1 :]
    idx_shape = g.nodes[idx].shape
    width = ctx.numel(post)
    cols = _block(post)
    blocks = f"(({width} + {cols - 1}) / {cols})"
    em = Emitter(ctx)
    names = em.names
    grp, lid, row, c = (names.claim(x) for x in ("grp", "lid", "row", "c"))
    # a whole group past the rows ends here, before any barrier
    em.line(f"int {grp} = {ctx.renderer.group_index()};")
    em.line(f"if ({grp} >= {ctx.numel(lead)} * {blocks}) return;")
    em.line(f"int {lid} = int(gl_LocalInvocationID.x);")
    em.line(f"int {row} = {grp} / {blocks}, {c} = ({grp} % {blocks}) * {cols} + {lid};")
    at = em.coords(Ix(flat=row), lead)
    acc, p0, j, q, count, me = (names.claim(x) for x in ("acc", "p0", "j", "q", "count", "me"))
    tile = TILE * cols  # positions a tile: each invocation loads TILE indices
    em.line(f"float {acc} = 0.0;")
    em.line(f"int {count} = {ctx.numel(idx_shape)};")
    em.line(f"int {me} = {at[-1]};")
    em.open(f"for (int {p0} = 0; {p0} < {count}; {p0} += {tile})")
    em.line("barrier();  // every invocation is done with the last tile")
    for t in range(TILE):
        p = names.claim("p")
        em.line(f"int {p} = {p0} + {t * cols} + {lid};")
        em.open(f"if ({p} < {count})")
        em.line(f"dlc_rows[{t * cols} + {lid}] = {em.clamped_row(idx, Ix(flat=p), shape[axis])};")
        em.close()
        em.line(f"else dlc_rows[{t * cols} + {lid}] = -1;  // past the end: names no row")
    em.line("barrier();")
    em.open(f"if ({c} < {width})")
    # four ids a test: most positions name another row, and the four loads overlap
    em.open(f"for (int {q} = 0; {q} < {tile}; {q} += 4)")
    words = ", ".join(f"dlc_rows[{q} + {i}]" for i in range(4))
    em.open(f"if (any(equal(ivec4({words}), ivec4({me}))))")
    em.open(f"for (int {j} = {q}; {j} < {q} + 4; ++{j})")
    em.open(f"if (dlc_rows[{j}] == {me})")
    pj = names.claim("pj")
    em.line(f"int {pj} = {p0} + {j};")
    pos = em.coords(Ix(flat=pj), idx_shape) if idx_shape else ()
    cc = em.coords(Ix(flat=c), post) if post else ()
    em.line(f"{acc} += {em.value(grad, Ix(multi=(*at[:-1], *pos, *cc)))};")
    for _ in range(5):
        em.close()
    em.close()
    out = ctx.buf(n)
    em.open(f"if ({c} < {width})")
    base = f"{row} * {width}"
    em.line(ctx.renderer.store(out, f"{base} + {c}", acc))
    others = [o for o in k.outputs if o != n]
    if others:  # readers merged into the kernel, from the finished element
        cc = em.coords(Ix(flat=c), post) if post else ()
        ix = Ix(flat=f"{base} + {c}", multi=(*at, *cc))
        em.scopes[-1][("v", n, None, ix.key())] = acc
        em.store_outputs(ix, others)
    em.close()
    body = ["void main() {", *em.lines, "}"]
    what = f"gather_grad into {format_shape(shape)}, a work group a row and {cols} columns"
    text = "\n".join(header(ctx, what, (cols, 1, 1), [f"shared int dlc_rows[{TILE * cols}];"]) + body)
    return kernel_source(ctx, text + "\n", {"flat": list(_groups(lead, post, cols)), "per_group": cols}, (cols, 1, 1))


def _block(post) -> int:
    """Columns a work group: COLUMNS, or the row's width rounded up to a power of two (at
    least 8) when it is narrower and known."""
    width = numel_known(post)
    if width is None or width >= COLUMNS:
        return COLUMNS
    cols = 8
    while cols < width:
        cols *= 2
    return cols


def _groups(lead, post, cols: int) -> tuple:
    """The launch's flat size (a Size: a known factor, then symbolic dims): rows x column
    blocks x cols invocations. A symbolic width launches a group per element of each row
    (the groups past the blocks end at once): a Size is a product, it has no ceiling."""
    known, *symbolic = size_of(lead)
    wknown, *wsymbolic = size_of(post)
    if not wsymbolic:
        return (known * -(-wknown // cols) * cols, *symbolic)
    return (known * wknown * cols, *symbolic, *wsymbolic)
