"""gather's gradient on the compute target: each work group owns a block of one row of the
table's gradient, over all positions or over one chunk of them.

`gather_grad(g, idx)` sums g over the positions whose index names each row. Evaluated per
output element (glsl.py's `_gather_grad`, the texture target's way) that scans every index
once per element: rows x columns x positions. Here a work group owns one row and a block of
COLUMNS consecutive columns, an invocation a column: the group loads the indices in tiles of
TILE x COLUMNS into shared memory (one read of each index per group, not per column), and
each invocation tests them four at a time and adds the matching positions' gradients into a
register in position order (the whole group takes the same branch, and neighbouring
invocations read neighbouring floats of g). No other invocation writes there, so there are
no atomics on floats and the bits are the same every run; the work is rows x positions
compares (in shared memory) plus positions x columns adds. Outputs merged into the kernel (an
optimizer's update of the table) are computed from the finished element.

Few rows over many positions (a GPT's [65, 384] embedding over 64 x 256 tokens: 390 groups,
each a loop over 16,384 positions) leave a large GPU nearly empty and each group's loop long
and latency-bound. Then (`split_chunk`) the positions are cut into chunks and a group owns
(row, column block, chunk): it sums its chunk in position order into a partial row block in
a scratch buffer, counts itself in on the block's counter, and the last group of the block
adds the partials in chunk order (kernels_reduce's split, compute.count_in: the same bits
every run) and stores the sum and the merged outputs once.
"""

from __future__ import annotations

from ..ir import format_shape
from ..limits import capabilities
from ..plan import eval_size, size_of
from . import matmul_tuning as tuning
from .compute import count_in, header, kernel_source, scratch_buffer
from .glsl import Context, Emitter, Ix, KernelSource
from .index import numel_known
from .options import CodegenOptions

COLUMNS = 64  # columns a work group (invocations); fewer for a narrower row
TILE = 4  # indices each invocation loads into a tile
MIN_CHUNK = 512  # the shortest chunk of positions a split group sums (two tiles of 64 columns)
# Work groups a split aims at, per the tuning table's wave (matmul groups of 256 invocations
# that keep a large GPU busy): these groups of 64 mostly wait on loads, so enough of them to
# fill every core's resident invocations (an H200: 132 SMs x 2048 = 270k, 4096 groups of 64)
FILL = 32


def owns_rows(ctx: Context) -> bool:
    """Whether this kernel is a stored gather_grad (and what its readers merged into it)."""
    return ctx.graph.nodes[ctx.kernel.primary].op == "gather_grad"


def split_chunk(ctx: Context, options: CodegenOptions) -> int | None:
    """The positions a work group sums when they are split across groups, else None: when
    the (row, column block) groups are too few to fill the device (FILL groups a wave of
    the tuning table's `device` row) over positions of two chunks or more, both at the plan's
    reference binding (a GPT's B and T), chunks of MIN_CHUNK or more that make about that
    many groups, a whole number of tiles. `options.gather_chunk` forces a chunk (0: no
    split). Never where the scratch buffer would pass the device's storage blocks."""
    node = ctx.graph.nodes[ctx.kernel.primary]
    axis = node.attr("axis")
    lead, post = (*node.shape[:axis], node.shape[axis]), node.shape[axis + 1 :]
    positions = ctx.graph.nodes[node.inputs[1]].shape
    if len(ctx.binding) + 1 > capabilities("compute", options.limits, options.nan_flags).max_bindings:
        return None
    dims = ctx.plan.ref_dims
    count = eval_size(size_of(positions), dims)
    forced = options.gather_chunk
    if forced is not None:
        if forced < 0:
            raise ValueError(f"gather_chunk must be 0 (no split) or a positive chunk of positions, not {forced}")
        known = numel_known(positions)
        return forced if forced and (known is None or known > forced) else None
    cols = _block(post)
    groups = eval_size(size_of(lead), dims) * -(-eval_size(size_of(post), dims) // cols)
    aim = FILL * tuning.entry(options.device)["wave"]
    if groups >= aim:
        return None
    tile = TILE * cols
    chunk = max(MIN_CHUNK, -(-count * groups // aim))
    chunk = -(-chunk // tile) * tile
    return chunk if count >= 2 * chunk else None


def render(ctx: Context, options: CodegenOptions) -> KernelSource:
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
    chunk = split_chunk(ctx, options)
    blocks = f"(({width} + {cols - 1}) / {cols})"
    em = Emitter(ctx)
    names = em.names
    grp, lid, row, c = (names.claim(x) for x in ("grp", "lid", "row", "c"))
    acc, p0, j, q, count, me = (names.claim(x) for x in ("acc", "p0", "j", "q", "count", "me"))
    end, nchunk, part, blk = (names.claim(x) for x in ("end", "nchunk", "part", "blk"))
    em.line(f"int {grp} = {ctx.renderer.group_index()};")
    if chunk is None:
        blk = grp
    else:  # a group per (row, column block, chunk), the chunks of a block neighbours
        em.line(f"int {nchunk} = ({ctx.numel(idx_shape)} + {chunk - 1}) / {chunk};  // chunks of the positions")
        em.line(f"int {blk} = {grp} / {nchunk}, {part} = {grp} - {blk} * {nchunk};")
    # a whole group past the rows ends here, before any barrier
    em.line(f"if ({blk} >= {ctx.numel(lead)} * {blocks}) return;")
    em.line(f"int {lid} = int(gl_LocalInvocationID.x);")
    em.line(f"int {row} = {blk} / {blocks}, {c} = ({blk} % {blocks}) * {cols} + {lid};")
    at = em.coords(Ix(flat=row), lead)
    tile = TILE * cols  # positions a tile: each invocation loads TILE indices
    em.line(f"float {acc} = 0.0;")
    em.line(f"int {count} = {ctx.numel(idx_shape)};")
    em.line(f"int {me} = {at[-1]};")
    if chunk is None:
        first, end = "0", count
    else:
        first = f"{part} * {chunk}"
        em.line(f"int {end} = min({count}, {first} + {chunk});  // this group's chunk ends here")
    em.open(f"for (int {p0} = {first}; {p0} < {end}; {p0} += {tile})")
    em.line("barrier();  // every invocation is done with the last tile")
    for t in range(TILE):
        p = names.claim("p")
        em.line(f"int {p} = {p0} + {t * cols} + {lid};")
        em.open(f"if ({p} < {end})")
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
    base = f"{row} * {width}"
    extra = [f"shared int dlc_rows[{TILE * cols}];"]
    if chunk is not None:
        extra += [scratch_buffer(ctx, "a counter per row block, then the partial rows"), "shared bool last_group;"]
        _add_partials(em, f"{ctx.numel(lead)} * {width}", f"{base} + {c}", c, width, acc, blk, part, nchunk)
    out = ctx.buf(n)
    em.open(f"if ({c} < {width})")
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
    if chunk is not None:
        what += f" and a chunk of {chunk} positions"
    text = "\n".join(header(ctx, what, (cols, 1, 1), extra) + body)
    grid: dict = {"flat": list(_groups(lead, post, cols)), "per_group": cols}
    if chunk is not None:
        # a group per (row block, chunk); scratch_words gives a word per invocation of the
        # flat grid, then one per (invocation, chunk): room for a counter per row block, then
        # a partial per (element, chunk)
        grid["split"] = [list(size_of(idx_shape)), chunk]
        grid["scratch"] = 1
    return kernel_source(ctx, text + "\n", grid, (cols, 1, 1))


def _add_partials(
    em: Emitter, elements: str, e: str, c: str, width: str, acc: str, blk: str, part: str, nchunk: str
) -> None:
    """A split group's end: its partial row block into scratch (a row of `elements` a chunk,
    after a counter per block: neighbouring invocations store neighbouring words), then in
    the block's last group the partials added in chunk order into `acc`. One chunk (a
    symbolic count of positions that came short): `acc` is the sum, no scratch."""
    em.open(f"if ({nchunk} > 1)")
    em.line(f"if ({c} < {width}) sc.w[{elements} * (1 + {part}) + {e}] = floatBitsToUint({acc});")
    count_in(em, blk, nchunk)
    em.line(f"{acc} = 0.0;")
    em.open(f"if ({c} < {width})")
    q = em.names.claim("q")
    em.line(f"for (int {q} = 0; {q} < {nchunk}; ++{q}) {acc} += uintBitsToFloat(sc.w[{elements} * (1 + {q}) + {e}]);")
    em.close()
    em.line(f"if (gl_LocalInvocationIndex == 0u) sc.w[{blk}] = 0u;  // ready for the next launch")
    em.close()


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
