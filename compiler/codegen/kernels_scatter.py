"""gather's gradient on the compute target: each invocation owns rows of the table's gradient.

`gather_grad(g, idx)` sums g over the positions whose index names each row. Evaluated per
output element (glsl.py's `_gather_grad`, the texture target's way) that scans every index
once per element: rows x columns x positions. Here an invocation owns one row (or a chunk of
its columns, when there are too few rows to fill the GPU): it zeroes its part of the row,
scans the indices once, and adds each matching position's gradient into it in position order.
No other invocation writes there, so there are no atomics and the bits are the same every run;
the work is rows x positions compares plus positions x columns adds. Outputs merged into the
kernel (an optimizer's update of the table) are then computed from the finished row.
"""

from __future__ import annotations

from ..ir import format_shape
from ..plan import size_of
from .compute import header, kernel_source
from .glsl import LOCAL, Context, Emitter, Ix, KernelSource
from .index import numel_known

ENOUGH_INVOCATIONS = 4096  # below this many rows, columns are split into chunks


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
    chunks = _chunks(lead, post)
    em = Emitter(ctx)
    names = em.names
    w = names.claim("w")
    em.own_element(w, ctx.numel(lead) if chunks == 1 else f"{ctx.numel(lead)} * {chunks}")
    row = w if chunks == 1 else names.claim("row")
    if chunks > 1:
        em.line(f"int {row} = {w} / {chunks};")
    at = em.coords(Ix(flat=row), lead)
    first, stop = names.claim("first"), names.claim("stop")
    if chunks == 1:
        em.line(f"int {first} = 0, {stop} = {width};")
    else:
        size = -(-numel_known(post) // chunks)
        em.line(f"int {first} = ({w} % {chunks}) * {size}, {stop} = min({first} + {size}, {width});")
    out = ctx.buf(n)
    ctx.read_slots.add(ctx.plan.slot_of[n])  # the row is read back as it is summed
    base = f"{row} * {width}"
    c = names.claim("c")
    em.line(f"for (int {c} = {first}; {c} < {stop}; ++{c}) {ctx.renderer.store(out, f'{base} + {c}', '0.0')}")
    p = names.claim("p")
    em.open(f"for (int {p} = 0; {p} < {ctx.numel(idx_shape)}; ++{p})")
    hit = em.clamped_row(idx, Ix(flat=p), shape[axis])
    em.open(f"if ({hit} == {at[-1]})")
    pos = em.coords(Ix(flat=p), idx_shape) if idx_shape else ()
    em.open(f"for (int {c} = {first}; {c} < {stop}; ++{c})")
    cols = em.coords(Ix(flat=c), post) if post else ()
    v = em.value(grad, Ix(multi=(*at[:-1], *pos, *cols)))
    em.line(f"{ctx.load(out, f'{base} + {c}')} += {v};")
    em.close()
    em.close()
    em.close()
    others = [o for o in k.outputs if o != n]
    if others:  # readers merged into the kernel, element by element of the finished row
        em.open(f"for (int {c} = {first}; {c} < {stop}; ++{c})")
        cols = em.coords(Ix(flat=c), post) if post else ()
        ix = Ix(flat=f"{base} + {c}", multi=(*at, *cols))
        em.scopes[-1][("v", n, None, ix.key())] = ctx.load(out, f"{base} + {c}")
        em.store_outputs(ix, others)
        em.close()
    body = ["void main() {", *em.lines, "}"]
    what = f"gather_grad into {format_shape(shape)}, an invocation a row" + (
        f" ({chunks} chunks of its columns)" if chunks > 1 else ""
    )
    text = "\n".join(header(ctx, what, (LOCAL, 1, 1)) + body)
    grid = list(size_of(lead))
    grid[0] *= chunks
    return kernel_source(ctx, text + "\n", {"flat": grid, "per_group": LOCAL}, (LOCAL, 1, 1))


def _chunks(lead, post) -> int:
    """Column chunks per row: 1, unless the rows (known) are too few to fill the GPU."""
    rows, width = numel_known(lead), numel_known(post)
    if rows is None or width is None or rows >= ENOUGH_INVOCATIONS:
        return 1
    return max(1, min(width, -(-ENOUGH_INVOCATIONS // rows)))
