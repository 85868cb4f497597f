"""Matmul kernels: out[b, m, n] = sum_k A[b, m, k] * B[b, k, n], then the fused epilogue.

Operands are read as stored (`ta` / `tb` read A or B with its last two axes swapped, so
gradients need no transposes); a rank-2 operand or a batch of 1 is shared by every batch.
Any number of batch dims, broadcast as NumPy does: the grid's z runs over the output's batches
(their product), and each operand reads the batch its own dims broadcast to (`batch_of`).

Four templates, each exact for any size (every load and store is bounds-checked):
- `tile16`: a 16x16 shared-memory tile, one output per invocation; for small products.
- `direct`: one output per invocation summing its few K terms straight from memory (K under
  one 16-deep slab: a weight gradient over a batch of 4); no shared memory, no barrier
  (llvmpipe ran the 16x16 tiles' barriers at ~1 us an output).
- `rows`: a few rows times a long weight (a decode step's x @ W over one token): each work
  group takes 8 columns of every row, its 256 invocations splitting K 32 ways, the 32
  partial sums added in shared memory; many groups, no idle tile rows.
- `blocked`: a TM x TN tile per work group, each invocation computing RM x RN outputs from
  vec4 reads of shared memory, with the next K-slab fetched into registers (vec4 loads when
  the layout allows) while the current one is multiplied; optionally KS K-groups per work
  group, each multiplying its part of every slab, their sums added in shared memory before
  the epilogue (split-K inside the work group: more invocations per tile when tiles are few,
  and no second pass, so fused epilogues such as relu' masks and Adam updates stay fused).
  Switches (matmul_tuning.Variant): vec4 global loads and stores, double-buffered shared
  slabs, a warp-tiled invocation layout, register prefetch.

Which template, blocking and switches: `choose` picks a size class by the sizes at the plan's
reference binding, and matmul_tuning's table holds the variant of each class per device
family (the codegen option `device`, a GL_RENDERER string). Codegen options force them:
`matmul` (a template: tile16, direct, rows, thin, medium, big), `blocking` (tm, tn, bk, rm, rn[, ks[,
swizzle]]), `prefetch`, and `matmul_variant` (a dict of Variant switches, and optionally a
blocking), applied over the table's choice.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from dlc.runtime.dims import product as dim_product

from .. import registry
from ..plan import eval_size, size_of
from . import index
from . import matmul_tuning as tuning
from .compute import KEY, TILE, header, kernel_source, scratch_buffer
from .glsl import Context, Emitter, Ix, KernelSource
from .matmul_tuning import Blocking, Variant
from .options import CodegenOptions, codegen_options

__all__ = ["Blocking", "Variant", "choose", "render", "render_gemm"]

# The default family's choices, by name (the conv templates pick among them).
_DEFAULT = tuning.TABLE["default"]
BIG = tuning.lookup(None, "big").blocking
SPLIT = tuning.lookup(None, "split").blocking  # "medium" with 128 rows or more
MEDIUM = tuning.lookup(None, "medium").blocking  # "medium" under 128 rows
THIN = tuning.lookup(None, "thin").blocking  # a thin output (N = 10 classes) over a long K
FULL_WAVE = _DEFAULT["wave"]  # work groups that keep a large GPU busy
THIN_MAX_TILES = 4 * FULL_WAVE  # beyond this many 16x16 tiles, one invocation an output
THIN_MIN_K = 256
SHARED_LIMIT = _DEFAULT["shared_bytes"]  # bytes of shared memory a work group may take (GL's minimum maximum)


@dataclass(frozen=True)
class Operand:
    """How the blocked template reads one GEMM operand: A[p, k] (p: a row of the output) or
    B[k, p] (p: a column). `load(p, k)` is the element as a GLSL float, called only with p
    and k in bounds (it does any other masking itself, e.g. a conv's zero padding);
    `load4(p, k)`, when given, is the vec4 of the 4 neighbours along the axis memory runs
    along (p when `contiguous_p`, else k), called with that index a multiple of 4 and all 4
    in bounds. `tensor` is the IR tensor read (its buffer is also declared as vec4s)."""

    tensor: int
    load: Callable[[str, str], str]
    load4: Callable[[str, str], str] | None
    contiguous_p: bool


@dataclass(frozen=True)
class Gemm:
    """One GEMM for the blocked template: out[bz, row, col] = sum_k A[row, k] * B[k, col] with
    sizes M, N, K as GLSL, the functions it needs (the epilogue first) and `store(row, col,
    value)`, the statement that hands one result to the epilogue."""

    M: str
    N: str
    K: str
    a: Operand
    b: Operand
    funcs: list[str]
    store: Callable[[str, str, str], str]
    grid: dict
    describe: Callable[[str], str]
    # `store4(row, col, vec4)`: 4 neighbouring results at once (col a multiple of 4, all 4 in
    # bounds), None where the GEMM has none; the declarations it needs; why it has none
    store4: Callable[[str, str, str], str] | None = None
    store4_decls: list = dataclasses.field(default_factory=list)
    store4_why: str = ""


@dataclass(frozen=True)
class Geometry:
    a: int
    b: int
    ta: bool
    tb: bool
    batch: int | str | None  # the count of batches (the grid's z), None for a rank-2 product
    m: int | str
    n: int | str
    k: int | str
    out_batch: tuple = ()  # the output's batch dims (NumPy's broadcast of the operands')
    a_batch: tuple = ()  # each operand's own batch dims
    b_batch: tuple = ()
    # the output's batch dims folded into its rows (`m` is then their product with the rows):
    # A batched, not transposed, and B one matrix for every batch (x @ W over [B, T, C])
    folded: tuple = ()


def geometry(ctx: Context) -> Geometry:
    g = ctx.graph
    node = g.nodes[ctx.kernel.anchor]
    a, b = node.inputs
    sa, sb = g.nodes[a].shape, g.nodes[b].shape
    ta, tb = bool(node.attr("ta")), bool(node.attr("tb"))
    out = node.shape
    k = sa[-2] if ta else sa[-1]
    if len(out) >= 3 and not ta and all(d == 1 for d in sb[:-2]) and tuple(sa[:-2]) == tuple(out[:-2]):
        # one [batch * M, K] x [K, N] product: the batches' rows are contiguous in A and out,
        # so the tiles run over all of them (M = 64 rows a batch would leave tiles idle)
        m = dim_product(*out[:-1])
        return Geometry(a, b, ta, tb, None, m, out[-1], k, (), (), (), folded=tuple(out[:-1]))
    batch = dim_product(*out[:-2]) if len(out) >= 3 else None
    return Geometry(a, b, ta, tb, batch, out[-2], out[-1], k, tuple(out[:-2]), tuple(sa[:-2]), tuple(sb[:-2]))


def out_coords(ctx: Context, geo: Geometry, col: str) -> tuple[str, ...]:
    """The output's coordinates of (row, `col`) in batch bz, as GLSL, for the epilogue."""
    if geo.folded:
        rows = index.coord_exprs("row", geo.folded, ctx.dim)
        return (*(c if c.isidentifier() or c.isdigit() else f"({c})" for c in rows), col)
    return (*batch_coords(ctx, geo), "row", col) if geo.batch is not None else ("row", col)


def batch_coords(ctx: Context, geo: Geometry) -> tuple[str, ...]:
    """The output's batch coordinates of batch `bz` (bz itself for one batch dim)."""
    if len(geo.out_batch) == 1:
        return ("bz",)
    # parenthesized: they are multiplied and added into offsets as they are
    return tuple(
        c if c.isidentifier() or c.isdigit() else f"({c})" for c in index.coord_exprs("bz", geo.out_batch, ctx.dim)
    )


def batch_of(ctx: Context, geo: Geometry, own: tuple) -> str:
    """The batch an operand with batch dims `own` reads in output batch `bz`: bz itself, 0 (one
    matrix for every batch), or bz's coordinates broadcast onto its dims (NumPy's rule)."""
    if all(d == 1 for d in own):
        return "0"
    if tuple(own) == geo.out_batch:
        return "bz"
    coords = index.broadcast_coords(batch_coords(ctx, geo), geo.out_batch, own)
    return f"({index.flat_of(coords, own, ctx.dim)})"


def _sizes(ctx: Context) -> tuple[int, int, int, int]:
    """(batch, m, n, k) at the plan's reference binding."""
    geo = geometry(ctx)
    dims = ctx.plan.ref_dims
    m, n, k = (eval_size(size_of((d,)), dims) for d in (geo.m, geo.n, geo.k))
    batch = eval_size(size_of((geo.batch,)), dims) if geo.batch is not None else 1
    return batch, m, n, k


def choose(ctx: Context, forced: str | None = None, device: str | None = None) -> str:
    """'tile16', 'direct', 'rows', 'thin', 'medium' or 'big', by the sizes at the plan's reference
    binding (`device`: the renderer string whose table entry says how many work groups fill
    it)."""
    if forced:
        if forced not in TEMPLATES:
            raise ValueError(f"unknown matmul template {forced!r}: choose {', '.join(TEMPLATES)}")
        return forced
    wave = tuning.entry(device)["wave"]
    batch, m, n, k = _sizes(ctx)
    if k < DIRECT_MAX_K:
        return "direct"
    # (a K known at compile time: a symbolic one may be long at run time, and each
    # invocation of `rows` loops over a 32nd of it)
    if m <= ROWS_MAX and n >= ROWS_COLS and k >= ROWS_MIN_K and isinstance(geometry(ctx).k, int):
        return "rows"
    if min(m, n) >= 128 and k >= 8 and batch * math.ceil(m / 128) * math.ceil(n / 128) >= wave:
        return "big"
    if min(m, n) >= 64 and k >= 16:
        return "medium"
    # a thin output (one side under 64, the other not) over a long K, in few tiles
    if max(m, n) >= 64 and k >= THIN_MIN_K and batch * math.ceil(m / 16) * math.ceil(n / 16) <= 4 * wave:
        return "thin"
    return "tile16"


TEMPLATES = ("tile16", "direct", "rows", "thin", "medium", "big")
DIRECT_MAX_K = 16  # "direct" under this K (one tile16 slab)
ROWS_MAX = 8  # "rows": at most this many output rows (a 16-row tile would idle half or more)
ROWS_COLS = 8  # its columns a work group
ROWS_SPLIT = 32  # its invocations along K a column
ROWS_MIN_K = 64  # under this, 16x16 tiles' one slab is as good


SPLIT_CHUNK = 1024  # the shortest K-chunk a split-K work group sums (its partial tile is
# written and read back once: over 1024 terms that traffic is small beside the operands')


def split_k_chunk(ctx: Context, blk: Blocking, device: str | None = None) -> int | None:
    """The K-chunk when this product is split across work groups, else None: a product with
    no batch whose `blk` tiles are fewer than a wave of work groups, over a K of two chunks
    or more at the reference binding (a weight gradient: [C, N] over K = B * T), or any K
    past LONG_K. Chunks aim at two waves of work groups; a multiple of the K-slab."""
    geo = geometry(ctx)
    if geo.batch is not None:
        return None
    _, m, n, k = _sizes(ctx)
    if isinstance(geo.k, int) and geo.k > LONG_K:
        return -(-LONG_K // blk.bk) * blk.bk
    tiles = math.ceil(m / blk.tm) * math.ceil(n / blk.tn)
    row = tuning.entry(device)
    wave = row["wave"]
    if tiles >= wave:
        return None
    # in under a quarter of a wave of tiles (a 256-token prefill's projections) the family's
    # shorter chunks, if it has them: more groups where most of the device would be idle
    shortest = row["short_chunk"] if 4 * tiles < wave else SPLIT_CHUNK
    chunk = max(shortest, -(-k * tiles // (2 * wave)))
    chunk = min(-(-chunk // blk.bk) * blk.bk, LONG_K)
    return chunk if k >= 2 * chunk else None


def fit_tile(blk: Blocking, m: int, n: int, ta: bool = False, tb: bool = False, along_k: bool = False) -> Blocking:
    """`blk` with a tile side cut to 3/4 or 1/2 (not under 64) where a fifth or more of the
    tiles' area would be idle: 384 columns take two 192-wide tiles, not two 256-wide ones
    (measured on the H100: 192 beat both 256 and 128 there). Only sides the template can
    fetch with this many invocations (`_fetch_fits`)."""

    def idle(size: int, tile: int) -> float:
        tiles = -(-size // tile)
        return (tiles * tile - size) / (tiles * tile)

    def fits(b: Blocking) -> bool:
        return b.problem() is None and _fetch_fits(b, ta, tb, along_k)

    out = blk
    for side, size in (("tn", n), ("tm", m)):
        tile = getattr(out, side)
        if idle(size, tile) < 0.2:
            continue
        trials = [dataclasses.replace(out, **{side: cut}) for cut in (tile * 3 // 4, tile // 2) if cut >= 64]
        trials = [t for t in trials if fits(t) and idle(size, getattr(t, side)) < idle(size, tile)]
        if trials:  # the least idle, the larger on a tie
            out = min(trials, key=lambda t: (idle(size, getattr(t, side)), -getattr(t, side)))
    return out


def fits_whole(blk: Blocking, m: int, n: int, ta: bool, tb: bool, along_k: bool = False) -> bool:
    """Whether `blk` covers an m x n output as it is (fit_tile would cut nothing) and the
    template can fetch its slabs of these operands."""
    return fit_tile(blk, m, n, ta, tb, along_k) == blk and blk.problem() is None and _fetch_fits(blk, ta, tb, along_k)


def _fetch_fits(blk: Blocking, ta: bool, tb: bool, along_k: bool = False) -> bool:
    """Whether the template's slab fetch (`_operand`) covers each operand's slab with this
    many invocations in a whole number of rounds, or one partial round (any number for an A
    kept along K, `along_k`). Other blockings render too, their last round guarded, but
    fit_tile does not cut to them: the table's choices were measured without such rounds."""
    for tile, contiguous, guarded in ((blk.tm, ta, along_k and not ta), (blk.tn, not tb, False)):
        count = tile * blk.bk // (4 if contiguous else 16)
        if not guarded and count % blk.threads and count > blk.threads:
            return False
    return True


def size_class(ctx: Context, which: str) -> str:
    """The table's size class of a blocked template: 'medium' takes 128-row tiles split
    between two K-groups ("split") where there are 128 rows to fill them, and the "narrow"
    row's where the output has 64 columns."""
    if which == "medium":
        _, m, n, _ = _sizes(ctx)
        if m >= 128 and n <= 64:
            return "narrow"  # 64 columns: taller tiles with more outputs an invocation
        return "split" if m >= 128 else "medium"
    return which


def splits_well(ctx: Context, device: str | None) -> bool:
    """Whether the family's "splitk" variant applies: it splits this product across work
    groups (split_k_chunk) and has an eighth of a wave of tiles or more (fewer, as a
    [384, 384] weight gradient, lost to the "split" row's smaller tiles on the H200)."""
    held = tuning.lookup(device, "splitk")
    if held is None or split_k_chunk(ctx, held.blocking, device) is None:
        return False
    _, m, n, _ = _sizes(ctx)
    tiles = math.ceil(m / held.blocking.tm) * math.ceil(n / held.blocking.tn)
    return tiles * 8 >= tuning.entry(device)["wave"]


def short_k(ctx: Context, device: str | None) -> bool:
    """Whether the family's "shortk" variant applies: a K known at compile time, at most
    tuning.SHORT_K (the epilogue is then a larger share of the work)."""
    k = geometry(ctx).k
    return tuning.lookup(device, "shortk") is not None and isinstance(k, int) and k <= tuning.SHORT_K


def resolve(ctx: Context, options: CodegenOptions | Mapping | None = None) -> tuple[str, Variant | None, str]:
    """(template, variant or None for tile16, where the variant came from) for this kernel
    under the codegen options (see the module's docstring)."""
    o = codegen_options(options)
    device, forced = o.device, o.matmul_variant
    if forced is not None and not isinstance(forced, Mapping):
        raise ValueError(f"codegen option matmul_variant must be a dict of switches, not {forced!r}")
    blocking = o.blocking
    if forced and "blocking" in forced:
        blocking = forced["blocking"]
    if blocking is not None:
        base, where, which = tuning.variant({"blocking": blocking}, "codegen option blocking"), "forced", "blocked"
    else:
        which = choose(ctx, o.matmul, device)
        if which in ("tile16", "direct", "rows"):
            return which, None, ""
        cls = size_class(ctx, which)
        if cls in ("split", "medium") and splits_well(ctx, device):
            cls = "splitk"
        if cls == "big" and short_k(ctx, device):
            cls = "shortk"
        base, where = tuning.lookup(device, cls), f"{tuning.family(device)}, {cls}"
        _, m, n, _ = _sizes(ctx)
        geo = geometry(ctx)
        fitted = fit_tile(base.blocking, m, n, geo.ta, geo.tb, base.along_k)
        alt = tuning.lookup(device, "fitted") if cls in ("big", "shortk") and fitted != base.blocking else None
        if alt is not None and fits_whole(alt.blocking, m, n, geo.ta, geo.tb, alt.along_k):
            base, where = alt, f"{tuning.family(device)}, fitted"
        elif fitted != base.blocking:
            base = dataclasses.replace(base, blocking=fitted)
            where += f", tile fitted to {m}x{n}"
    if o.prefetch is not None:
        base = dataclasses.replace(base, prefetch=bool(o.prefetch))
    if forced:
        switches = {k: v for k, v in forced.items() if k != "blocking"}
        base = tuning.variant(
            {**base.literal(), **switches, "blocking": base.blocking}, "codegen option matmul_variant"
        )
        where += "" if where == "forced" else ", switches forced"
    return which, base, where


def render(ctx: Context, options: CodegenOptions | Mapping | None = None) -> KernelSource:
    """The matmul kernel under the codegen options (see the module's docstring)."""
    which, var, where = resolve(ctx, options)
    if which == "rows":
        return _render_rows(ctx)
    if which == "direct":
        return _render_direct(ctx)
    if var is None:
        return _render_tile16(ctx)
    o = codegen_options(options)
    shared = tuning.entry(o.device)["shared_bytes"]
    if o.limits:  # the device's own word, where the context gave it
        shared = min(shared, int(o.limits.get("max_shared_memory", shared)))
    slab, red_words = _shared_words(var.blocking)
    if 16 * max(slab, red_words) > shared and where != "forced":  # below the spec's 32 KiB: 16x16 tiles fit
        return _render_tile16(ctx)
    return _render_blocked(ctx, var, where, shared, split_k_chunk(ctx, var.blocking, o.device))


def _shared_words(blk: Blocking) -> tuple[int, int]:
    """(vec4s of one A and B slab pair, vec4s of the K-groups' partial sums) in shared memory."""
    return blk.bk * (blk.tm + blk.tn) // 4, (blk.ks // 2) * blk.group_threads * blk.rm * (blk.rn // 4)


def _common(ctx: Context) -> tuple[Geometry, dict[str, str], list[str]]:
    """Sizes as GLSL, the operand offset helpers and the epilogue function."""
    geo = geometry(ctx)
    d = {"M": ctx.dim(geo.m), "N": ctx.dim(geo.n), "K": ctx.dim(geo.k)}
    d["A"], d["B"] = ctx.buf(geo.a), ctx.buf(geo.b)
    for which, own, size in (
        ("a_off", geo.a_batch, _prod(d["M"], d["K"])),
        ("b_off", geo.b_batch, _prod(d["K"], d["N"])),
    ):
        at = batch_of(ctx, geo, own)
        d[which] = "0" if at == "0" else f"{at} * {size}"
    epi = Emitter(ctx, anchor_value="value")
    coords = out_coords(ctx, geo, "col")
    epi.store_outputs(Ix(flat="o", multi=coords))
    funcs = ["void epilogue(int o, int bz, int row, int col, float value) {", *epi.lines, "}", ""]
    return geo, d, funcs


def _epilogue4(ctx: Context, geo: Geometry, d: dict) -> tuple[list[str], list[str]] | str:
    """`epilogue4(o, bz, row, col, value)`: the epilogue of 4 neighbouring outputs along a row
    (o a multiple of 4), each kernel output stored as one vec4; with the declarations of the
    outputs' buffers as vec4 arrays. Or why it cannot be: N not a known multiple of 4 (a vec4
    would straddle rows or the end), or an output's buffer also read by the kernel (an
    in-place update: a vec4 alias of a buffer read as floats is not ordered against those
    reads)."""
    if not (d["N"].isdigit() and int(d["N"]) % 4 == 0):
        return f"N = {d['N']} is not a multiple of 4"
    g = ctx.graph
    outputs = list(ctx.kernel.outputs)
    anchor_size = size_of(g.nodes[ctx.kernel.anchor].shape)
    for o in outputs:
        if ctx.plan.slot_of[o] in ctx.read_slots:
            return "an output is updated in place"
        if size_of(g.nodes[o].shape) != anchor_size:
            return "an output is not the product's shape"
    epi = Emitter(ctx)
    values: dict[int, list[str]] = {o: [] for o in outputs}
    for c in range(4):
        epi.anchor_value = f"value.{'xyzw'[c]}"
        col = f"(col + {c})" if c else "col"
        coords = out_coords(ctx, geo, col)
        ix = Ix(flat=f"(o + {c})" if c else "o", multi=coords)
        for o in outputs:
            values[o].append(epi.value(o, ix))
    decls: list[str] = []
    for o in outputs:
        binding = ctx.binding[ctx.plan.slot_of[o]]
        name = f"b{binding}_o4"
        decl = f"layout(std430, binding = {binding}) restrict writeonly buffer B{binding}O4 {{ vec4 v[]; }} {name};"
        if decl not in decls:
            decls.append(decl)
        epi.line(f"{name}.v[o / 4] = vec4({', '.join(values[o])});")
    return ["void epilogue4(int o, int bz, int row, int col, vec4 value) {", *epi.lines, "}", ""], decls


def _prod(a: str, b: str) -> str:
    if a.isdigit() and b.isdigit():
        return str(int(a) * int(b))
    return f"{a} * {b}"


def _paren(x: str) -> str:
    return (
        x
        if x.isidentifier() or x.isdigit() or (x.startswith("(") and x.endswith(")") and x.count("(") == 1)
        else f"({x})"
    )


def _addr_a(geo: Geometry, d: dict, m: str, k: str) -> str:
    """The flat position of A[bz, m, k] (A stored [K, M] when transposed)."""
    m, k = _paren(m), _paren(k)
    inner = f"{k} * {d['M']} + {m}" if geo.ta else f"{m} * {d['K']} + {k}"
    return inner if d["a_off"] == "0" else f"{d['a_off']} + {inner}"


def _addr_b(geo: Geometry, d: dict, k: str, n: str) -> str:
    """The flat position of B[bz, k, n] (B stored [N, K] when transposed)."""
    k, n = _paren(k), _paren(n)
    inner = f"{n} * {d['K']} + {k}" if geo.tb else f"{k} * {d['N']} + {n}"
    return inner if d["b_off"] == "0" else f"{d['b_off']} + {inner}"


def _grid(geo: Geometry, tm: int, tn: int) -> dict:
    batch = list(size_of((geo.batch,))) if geo.batch is not None else [1]
    return {"tiles": [[list(size_of((geo.n,))), tn], [list(size_of((geo.m,))), tm], [batch, 1]]}


def _describe(geo: Geometry, how: str) -> str:
    a = f"A{'^T' if geo.ta else ''}"
    b = f"B{'^T' if geo.tb else ''}"
    batch = f"{geo.batch} x " if geo.batch is not None else ""
    return f"matmul {a} {b}: {batch}[{geo.m}, {geo.k}] x [{geo.k}, {geo.n}], {how}"


def _render_tile16(ctx: Context) -> KernelSource:
    geo, d, funcs = _common(ctx)
    M, N, K = d["M"], d["N"], d["K"]
    # Neighbouring invocations load neighbouring addresses: for a transposed operand the
    # tile is loaded with the roles of the two local ids swapped.
    if geo.ta:
        load_a = (
            f"As[lx][ly] = (m0 + lx < {M} && k0 + ly < {K}) ? "
            f"{d['A']}.v[{_addr_a(geo, d, 'm0 + lx', 'k0 + ly')}] : 0.0;"
        )
    else:
        load_a = (
            f"As[ly][lx] = (m0 + ly < {M} && k0 + lx < {K}) ? "
            f"{d['A']}.v[{_addr_a(geo, d, 'm0 + ly', 'k0 + lx')}] : 0.0;"
        )
    if geo.tb:
        load_b = (
            f"Bs[lx][ly] = (k0 + lx < {K} && n0 + ly < {N}) ? "
            f"{d['B']}.v[{_addr_b(geo, d, 'k0 + lx', 'n0 + ly')}] : 0.0;"
        )
    else:
        load_b = (
            f"Bs[ly][lx] = (k0 + ly < {K} && n0 + lx < {N}) ? "
            f"{d['B']}.v[{_addr_b(geo, d, 'k0 + ly', 'n0 + lx')}] : 0.0;"
        )
    main = [
        "void main() {",
        "    int lx = int(gl_LocalInvocationID.x), ly = int(gl_LocalInvocationID.y);",
        f"    int n0 = int({TILE}.x) * 16, m0 = int({TILE}.y) * 16;",
        f"    int bz = int({TILE}.z);",
        "    int row = m0 + ly, col = n0 + lx;",
        "    float acc = 0.0;",
        f"    for (int k0 = 0; k0 < {K}; k0 += 16) {{",
        f"        {load_a}",
        f"        {load_b}",
        "        memoryBarrierShared();",
        "        barrier();",
        "        for (int kk = 0; kk < 16; ++kk) acc += As[ly][kk] * Bs[kk][lx];",
        "        barrier();",
        "    }",
        f"    if (row < {M} && col < {N}) epilogue((bz * {M} + row) * {N} + col, bz, row, col, acc);",
        "}",
    ]
    extra = [
        "shared float As[16][17];  // [m][k], padded against bank conflicts",
        "shared float Bs[16][17];  // [k][n]",
    ]
    lines = header(ctx, _describe(geo, "16x16 tiles"), (16, 16, 1), extra) + funcs + main
    return kernel_source(ctx, "\n".join(lines) + "\n", _grid(geo, 16, 16), (16, 16, 1))


def _render_direct(ctx: Context) -> KernelSource:
    """`direct`: each invocation sums its output's K terms straight from memory, with no
    shared memory and no barrier (a kernel with a barrier anywhere, even in a branch not
    taken, ran 2-3x slower on llvmpipe). A K that is symbolic or 16 or more is summed 16
    terms an iteration: llvmpipe stops a loop after 65535 iterations in all (re-entering it
    does not reset the count), so this reaches as far as tile16's slab loop does.
    The GL backend plans a training step per class of batch size, as eval, so a weight
    gradient planned at a batch of 4 does not run at 4096 with this template."""
    geo, d, funcs = _common(ctx)
    M, N, K = d["M"], d["N"], d["K"]
    term = f"{d['A']}.v[{_addr_a(geo, d, 'row', 'k')}] * {d['B']}.v[{_addr_b(geo, d, 'k', 'col')}]"
    if K.isdigit() and int(K) < DIRECT_MAX_K:
        loop = [f"        for (int k = 0; k < {K}; ++k) acc += {term};"]
    else:  # 16 terms an iteration, as tile16's slabs: the same K/16 iterations of one loop
        loop = [
            f"        for (int k0 = 0; k0 < {K}; k0 += 16) {{",
            "            for (int j = 0; j < 16; ++j) {",
            "                int k = k0 + j;",
            f"                if (k < {K}) acc += {term};",
            "            }",
            "        }",
        ]
    main = [
        "void main() {",
        "    int lx = int(gl_LocalInvocationID.x), ly = int(gl_LocalInvocationID.y);",
        f"    int row = int({TILE}.y) * 16 + ly, col = int({TILE}.x) * 16 + lx;",
        f"    int bz = int({TILE}.z);",
        f"    if (row < {M} && col < {N}) {{",
        "        float acc = 0.0;",
        *loop,
        f"        epilogue((bz * {M} + row) * {N} + col, bz, row, col, acc);",
        "    }",
        "}",
    ]
    how = "an output an invocation, its K terms from memory"
    lines = header(ctx, _describe(geo, how), (16, 16, 1), []) + funcs + main
    return kernel_source(ctx, "\n".join(lines) + "\n", _grid(geo, 16, 16), (16, 16, 1))


def _render_rows(ctx: Context) -> KernelSource:
    """`rows`: a work group per ROWS_COLS columns and up to ROWS_MAX rows (the reference
    binding's rows; more rows at run time take more groups along y). Its invocation (c, s)
    sums column c over k = s, s + ROWS_SPLIT, ...: neighbouring invocations run along N where
    B is stored [K, N] (a warp reads 4 rows of 8 neighbouring floats) and along K where it is
    stored [N, K] (a warp reads 32 neighbouring floats). A is the same few rows for every
    column: cached reads."""
    geo, d, funcs = _common(ctx)
    M, N, K = d["M"], d["N"], d["K"]
    _, m_ref, _, _ = _sizes(ctx)
    rm, nc, ks = max(1, min(m_ref, ROWS_MAX)), ROWS_COLS, ROWS_SPLIT
    threads = nc * ks
    lane = f"int s = tid % {ks}, c = tid / {ks};" if geo.tb else f"int c = tid % {nc}, s = tid / {nc};"
    part_of_q = f"c * {ks} + q" if geo.tb else f"q * {nc} + c"  # the invocation (c, s = q)
    main = [
        "void main() {",
        "    int tid = int(gl_LocalInvocationID.x);",
        f"    {lane}",
        f"    int n0 = int({TILE}.x) * {nc}, m0 = int({TILE}.y) * {rm};",
        f"    int bz = int({TILE}.z);",
        "    int col = n0 + c;",
        *(f"    float acc{i} = 0.0;" for i in range(rm)),
        f"    if (col < {N}) {{",
        f"        for (int k = s; k < {K}; k += {ks}) {{",
        f"            float b = {d['B']}.v[{_addr_b(geo, d, 'k', 'col')}];",
        *(
            f"            if (m0 + {i} < {M}) acc{i} += {d['A']}.v[{_addr_a(geo, d, f'm0 + {i}', 'k')}] * b;"
            for i in range(rm)
        ),
        "        }",
        "    }",
        *(f"    part[{i}][tid] = acc{i};" for i in range(rm)),
        "    memoryBarrierShared();",
        "    barrier();",
        f"    if (tid < {rm * nc}) {{",
        f"        int i = tid / {nc}, c = tid % {nc};",
        "        int row = m0 + i, col = n0 + c;",
        "        float sum = 0.0;",
        f"        for (int q = 0; q < {ks}; ++q) sum += part[i][{part_of_q}];",
        f"        if (row < {M} && col < {N}) epilogue((bz * {M} + row) * {N} + col, bz, row, col, sum);",
        "    }",
        "}",
    ]
    extra = [f"shared float part[{rm}][{threads}];  // each invocation's partial sums, a row each"]
    how = f"{rm} rows x {nc} columns a work group, K split {ks} ways"
    lines = header(ctx, _describe(geo, how), (threads, 1, 1), extra) + funcs + main
    return kernel_source(ctx, "\n".join(lines) + "\n", _grid(geo, rm, nc), (threads, 1, 1))


# A K loop longer than this is split across work groups: llvmpipe silently stops an invocation
# after 65535 loop iterations (a 64x70000x64 product came out wrong), and other drivers'
# watchdogs dislike long invocations too.
LONG_K = 16384


def _render_blocked(
    ctx: Context, var: Variant, where: str = "", shared_limit: int = SHARED_LIMIT, chunk: int | None = None
) -> KernelSource:
    """The blocked template; `chunk`: K-chunks split across work groups (split_k_chunk)."""
    geo = geometry(ctx)
    gm_ = matmul_gemm(ctx, var.store4 and chunk is None)  # split-K partials are stored one by one
    if chunk is not None:
        gm_ = dataclasses.replace(gm_, grid=lambda tm, tn: _grid(geo, tm, tn))
        return render_gemm(
            ctx, gm_, var, split=(list(size_of((geo.k,))), chunk), where=where, shared_limit=shared_limit
        )
    return render_gemm(ctx, gm_, var, where=where, shared_limit=shared_limit)


def matmul_gemm(ctx: Context, store4: bool = False) -> Gemm:
    """The matmul node's operands as stored (transposed or not), batch on the grid's z; with
    vec4 stores of the epilogue's results when `store4` and the kernel allows them."""
    geo, d, funcs = _common(ctx)
    M, N, K = d["M"], d["N"], d["K"]
    vec_store = _epilogue4(ctx, geo, d) if store4 else "not asked for"
    if isinstance(vec_store, tuple):
        funcs = funcs + vec_store[0]

    def operand(which: str, tensor: int, addr, contiguous_p: bool, size_p: str) -> Operand:
        buf, vec = d[which], f"{d[which]}_{which.lower()}4"
        # vec4 loads need the contiguous axis to be a multiple of 4 (then every offset is too).
        contiguous_size = size_p if contiguous_p else K
        vec_ok = contiguous_size.isdigit() and int(contiguous_size) % 4 == 0
        return Operand(
            tensor,
            lambda p, k: f"{buf}.v[{addr(p, k)}]",
            (lambda p, k: f"{vec}.v[({addr(p, k)}) / 4]") if vec_ok else None,
            contiguous_p,
        )

    a = operand("A", geo.a, lambda p, k: _addr_a(geo, d, p, k), geo.ta, M)
    b = operand("B", geo.b, lambda p, k: _addr_b(geo, d, k, p), not geo.tb, N)
    return Gemm(
        M,
        N,
        K,
        a,
        b,
        funcs,
        lambda r, c, v: f"epilogue((bz * {M} + {r}) * {N} + {c}, bz, {r}, {c}, {v});",
        None,
        lambda how: _describe(geo, how),
        (lambda r, c, v: f"epilogue4((bz * {M} + {r}) * {N} + {c}, bz, {r}, {c}, {v});")
        if isinstance(vec_store, tuple)
        else None,
        vec_store[1] if isinstance(vec_store, tuple) else [],
        vec_store if isinstance(vec_store, str) else "",
    )


def render_gemm(
    ctx: Context,
    gm_: Gemm,
    how: Blocking | Variant,
    prefetch: bool = True,
    split: tuple | None = None,
    where: str = "",
    shared_limit: int = SHARED_LIMIT,
) -> KernelSource:
    """The blocked template over any operand accessors (matmul, conv as implicit GEMM).

    `how`: a Blocking (with `prefetch`, the other switches off) or a whole Variant; a switch
    whose precondition fails here falls back (the header says why). `where`: where the
    variant came from, for the header. `shared_limit`: the device's shared bytes a group.

    `split` = (K as a size list, chunk): split-K across work groups, for a small output over
    a long K (a conv's filter gradient). The grid's z axis then numbers K-chunks of `chunk`
    (a multiple of the K-slab), not batches (the GEMM must have none): each group writes its
    partial tile to a scratch buffer the runtime binds after the slots, and the last group to
    finish a tile (counted with an atomic) adds the partials in chunk order, so the sums do
    not depend on scheduling, and runs the epilogue once per output."""
    var = how if isinstance(how, Variant) else Variant(how, prefetch=prefetch)
    blk = var.blocking
    notes: list[str] = []  # switches that fell back, and why
    M, N, K = gm_.M, gm_.N, gm_.K
    if split is not None:
        assert gm_.grid is not None and split[1] % blk.bk == 0, (split, blk)
    funcs = gm_.funcs
    T, TG, KS = blk.threads, blk.group_threads, blk.ks
    assert blk.problem() is None, (blk, blk.problem())
    tx_count, ty_count = blk.tn // blk.rn, blk.tm // blk.rm
    gm, gn = blk.rm // 4, blk.rn // 4  # groups of 4 rows / columns per invocation
    # One shared array holds the A slab [k][m / 4], the B slab [k][n / 4] (twice over when
    # double-buffered) and, after the K loop, the partial sums of the K-groups (ks > 1) being
    # added.
    a_words = blk.bk * blk.tm // 4
    slab, red_words = _shared_words(blk)
    double = var.double_buffer
    if double and 16 * max(2 * slab, red_words) > shared_limit:
        double = False
        notes.append(f"single-buffered: two slabs need {32 * slab} bytes of shared memory, past {shared_limit}")
    shared_bytes = 16 * max(slab * (2 if double else 1), red_words)
    if shared_bytes > shared_limit:  # only a forced blocking can (the table's are tested)
        raise ValueError(
            f"matmul blocking {dataclasses.astuple(blk)} needs {shared_bytes} bytes of shared memory,"
            f" past the {shared_limit} a work group may take on this device"
        )
    prefetch = var.prefetch or double  # double buffering fetches the next slab into registers
    warp = var.warp
    if warp and (tx_count % warp[1] or ty_count % warp[0]):
        notes.append(f"no warp tiles: {ty_count}x{tx_count} invocation tiles do not hold {warp[0]}x{warp[1]} patches")
        warp = None
    store4 = gm_.store4 is not None and split is None
    if var.store4 and not store4:
        notes.append("scalar stores: " + ("split-K partials" if split is not None else gm_.store4_why))
    per = blk.bk // KS  # slab rows a K-group multiplies
    along = var.along_k and not gm_.a.contiguous_p and per % 4 == 0
    if var.along_k and not along:
        notes.append(
            "A transposed into [k][m / 4]: "
            + ("it is stored along M" if gm_.a.contiguous_p else f"a K-group's {per} slab rows are not a multiple of 4")
        )
    off = "so" if double else None  # the slab pair in use, when double-buffered
    a_width = blk.bk // 4 if along else blk.tm // 4  # vec4s a row of the A slab: [m][k / 4] or [k][m / 4]
    shared_a = _shared(0, a_width, off)
    shared_b = _shared(a_words, blk.tn // 4, off)
    body: list[str] = []
    add = body.append

    add("    int tid = int(gl_LocalInvocationID.x);")
    if KS > 1:
        add(f"    int ks = tid / {TG}, t = tid % {TG};  // this invocation's K-group")
    else:
        add("    int t = tid;")
    if warp:
        wr, wc = warp
        add(f"    // each 32 neighbouring invocations (a warp) take a {wr}x{wc} patch of invocation tiles")
        add("    int lane = t % 32, wid = t / 32;")
        add(
            f"    int tx = (wid % {tx_count // wc}) * {wc} + lane % {wc}, "
            f"ty = (wid / {tx_count // wc}) * {wr} + lane / {wc};"
        )
    else:
        add(f"    int tx = t % {tx_count}, ty = t / {tx_count};")
    add(f"    int n0 = int({TILE}.x) * {blk.tn}, m0 = int({TILE}.y) * {blk.tm};")
    if split is None:
        add(f"    int bz = int({TILE}.z);")
        k_end = K
    else:
        add(f"    int bz = 0, kz = int({TILE}.z), k_end = min({K}, (kz + 1) * {split[1]});  // this group's K-chunk")
        k_end = "k_end"
    # acc<i>_<j>: row i of this invocation's block, columns 4j..4j+3 (plain variables, so
    # they stay in registers)
    for i in range(blk.rm):
        add("    vec4 " + ", ".join(f"acc{i}_{j} = vec4(0.0)" for j in range(gn)) + ";")

    # Operand fetch: registers r<A|B><j> hold this invocation's share of the next K-slab.
    def operands(kvar: str, stash_off: str | None = None):
        sa, sb = _shared(0, a_width, stash_off), _shared(a_words, blk.tn // 4, stash_off)
        a = _operand("A", gm_.a, K, blk.tm, M, blk, T, p0="m0", kvar=kvar, shared=sa, vec=var.load4, along_k=along)
        b = _operand("B", gm_.b, K, blk.tn, N, blk, T, p0="n0", kvar=kvar, shared=sb, vec=var.load4)
        return tuple(x + y for x, y in zip(a, b))

    decls, fetch, stash, regs = operands("k0", "0" if double else None)
    _, fetch_next, stash_next, _ = operands("k1", f"({slab} - so)")
    add("    // which elements of each K-slab this invocation fetches")
    body.extend("    " + x for x in decls)
    for r in regs:
        add(f"    vec4 {r};")
    add("    int k0 = 0;" if split is None else f"    int k0 = kz * {split[1]};")
    if prefetch:
        body.extend("    " + x for x in fetch)
    if double:
        add(f"    int so = 0;  // where this slab pair starts in sm: 0 or {slab}")
        body.extend("    " + x for x in stash)
        add("    memoryBarrierShared();")
        add("    barrier();")
    add(f"    for (; k0 < {k_end}; k0 += {blk.bk}) {{")
    if not prefetch:
        body.extend("        " + x for x in fetch)
    if not double:
        body.extend("        " + x for x in stash)
        add("        memoryBarrierShared();")
        add("        barrier();")
    if prefetch:
        add(f"        int k1 = k0 + {blk.bk};")
        add(f"        if (k1 < {k_end}) {{  // fetch the next slab while this one is multiplied")
        body.extend("            " + x for x in fetch_next)
        add("        }")

    def multiply(kk: str) -> None:  # one row of the slab, at K index `kk` (GLSL)
        for g in range(gm):
            add(f"            vec4 fa{g} = {shared_a(kk, _lane('ty', g, ty_count))};")
        for g in range(gn):
            add(f"            vec4 fb{g} = {shared_b(kk, _lane('tx', g, tx_count))};")
        for i in range(blk.rm):
            g, c = divmod(i, 4)
            for j in range(gn):
                add(f"            acc{i}_{j} += fa{g}.{'xyzw'[c]} * fb{j};")

    def multiply_along(kq: str) -> None:  # 4 rows of the slab from vec4 `kq` along K (A kept along K)
        for i in range(blk.rm):  # row i of this invocation's block, 4 neighbouring k
            g, c = divmod(i, 4)
            row = f"4 * {_lane('ty', g, ty_count)} + {c}"
            add(f"            vec4 fa{i} = {shared_a(row, kq)};")
        for c in range(4):
            add("            {")
            for j in range(gn):
                add(f"                vec4 fb{j} = {shared_b(f'4 * {_paren(kq)} + {c}', _lane('tx', j, tx_count))};")
            for i in range(blk.rm):
                for j in range(gn):
                    add(f"                acc{i}_{j} += fa{i}.{'xyzw'[c]} * fb{j};")
            add("            }")

    step, each, name = (4, multiply_along, "kq") if along else (1, multiply, "kk")
    rows = per // step  # iterations of the slab loop in this K-group
    if var.unroll:  # each row of the slab written out, its offsets constant
        for q in range(rows):
            add(f"        {{  // slab row {q * step}" + (f" of this K-group's {per}" if KS > 1 else ""))
            each(f"ks * {rows} + {q}" if KS > 1 else str(q))
            add("        }")
    else:
        if KS > 1:
            add(f"        for (int q = 0; q < {rows}; ++q) {{  // this K-group's part of the slab")
            add(f"            int {name} = ks * {rows} + q;")
        else:
            add(f"        for (int {name} = 0; {name} < {rows}; ++{name}) {{")
        each(name)
        add("        }")
    if double:
        # the other pair was last read before the previous barrier: store the next slab there
        add(f"        if (k1 < {k_end}) {{")
        body.extend("            " + x for x in stash_next)
        add("        }")
        add("        memoryBarrierShared();")
        add("        barrier();")
        add(f"        so = {slab} - so;")
    else:
        add("        barrier();")
    add("    }")
    if KS > 1:
        body.extend(_add_k_groups(blk))
        if split is None:
            add("    if (ks != 0) return;  // K-group 0 holds the sums")
    # Stores through the epilogue, each element bounds-checked.
    for i in range(blk.rm):
        g, c = divmod(i, 4)
        add(f"    int row{i} = m0 + 4 * {_lane('ty', g, ty_count)} + {c};")
    for j in range(gn):
        add(f"    int col{j} = n0 + 4 * {_lane('tx', j, tx_count)};")
    grid = gm_.grid(blk.tm, blk.tn) if gm_.grid else _grid(geometry(ctx), blk.tm, blk.tn)
    extra_split: list[str] = []
    if split is not None:
        grid["tiles"][2] = [list(split[0]), split[1]]
        grid["scratch"] = 1
        extra_split = _split_k(ctx, gm_, blk, grid, body)
    for i in range(blk.rm if split is None else 0):
        add(f"    if (row{i} < {M}) {{")
        for j in range(gn):
            if store4:  # N is a multiple of 4 and so is col: all 4 are in bounds
                add(f"        if (col{j} < {N}) " + gm_.store4(f"row{i}", f"col{j}", f"acc{i}_{j}"))
                continue
            for c in range(4):
                col = f"col{j} + {c}" if c else f"col{j}"
                add(f"        if ({col} < {N}) " + gm_.store(f"row{i}", col, f"acc{i}_{j}.{'xyzw'[c]}"))
        add("    }")

    layout = f"A slab [{'m][k' if along else 'k][m'} / 4] at 0, B slab [k][n / 4] at {a_words}"
    if double:
        layout += f"; the second pair at {slab}"
    extra = [f"shared vec4 sm[{shared_bytes // 16}];  // {layout}" + ("; then partial sums" if KS > 1 else "")]
    for which, tensor in (("A", gm_.a.tensor), ("B", gm_.b.tensor)):
        binding = ctx.binding[ctx.plan.slot_of[tensor]]
        extra.append(
            f"layout(std430, binding = {binding}) restrict readonly buffer B{binding}{which}4"
            f" {{ vec4 v[]; }} b{binding}_{which.lower()}4;  // the same buffer as vec4"
        )
    if store4:
        extra.extend(d + "  // an output as vec4" for d in gm_.store4_decls)
    on = dataclasses.replace(var, double_buffer=double, warp=warp, store4=store4, prefetch=prefetch, along_k=along)
    text = (
        f"{blk.tm}x{blk.tn} tiles, {blk.rm}x{blk.rn} outputs an invocation, "
        f"K-slabs of {blk.bk}"
        + (f" split among {KS} K-groups" if KS > 1 else "")
        + (f", K-chunks of {split[1]} across work groups" if split else "")
        + f"; {on.describe()}"
        + (f" ({where})" if where else "")
        + "".join(f"; {n}" for n in notes)
    )
    lines = header(ctx, gm_.describe(text), (T, 1, 1), extra + extra_split) + funcs
    lines += ["void main() {", *body, "}"]
    return kernel_source(ctx, "\n".join(lines) + "\n", grid, (T, 1, 1))


def _tile_count(grid: dict, axis: int) -> str:
    """The tiles along a grid axis as GLSL (glsl.wrap_tiles declares the uniform it names)."""
    size, tile = grid["tiles"][axis]
    return str(-(-int(size[0]) // int(tile))) if len(size) == 1 else f"dlc_tiles_{'xyz'[axis]}"


def _split_k(ctx: Context, gm_: Gemm, blk: Blocking, grid: dict, body: list[str]) -> list[str]:
    """The end of a split-K group (render_gemm): its partial tile to scratch, then, in the
    last group of the tile, the partials added in chunk order and handed to the epilogue.
    Scratch: a counter per tile, then a [tm * tn] partial per (tile, chunk). Returns the
    declarations it needs."""
    add = body.append
    gn = blk.rn // 4
    nx, ny, nz = (_tile_count(grid, a) for a in range(3))
    area = blk.tm * blk.tn
    add(f"    int tile = int({TILE}.y) * {nx} + int({TILE}.x);")
    add(f"    int parts = {nx} * {ny} + tile * {nz} * {area};  // this tile's partials")
    add("    if (ks == 0) {" if blk.ks > 1 else "    {")
    for i in range(blk.rm):
        for j in range(gn):
            for c in range(4):
                add(
                    f"        sc.w[parts + kz * {area} + (row{i} - m0) * {blk.tn} + col{j} - n0 + {c}]"
                    f" = floatBitsToUint(acc{i}_{j}.{'xyzw'[c]});"
                )
    add("    }")
    add("    memoryBarrierBuffer();")
    add("    barrier();")
    # whether this is the tile's last group, through shared memory (the slabs are done with
    # it; a variable of its own would take the largest blockings past SHARED_LIMIT)
    add(f"    if (tid == 0) sm[0].x = atomicAdd(sc.w[tile], 1u) == uint({nz} - 1) ? 1.0 : 0.0;")
    add("    memoryBarrierShared();")
    add("    barrier();")
    add("    if (sm[0].x == 0.0) return;  // the whole group leaves together")
    add("    memoryBarrierBuffer();")
    add(f"    for (int o = tid; o < {area}; o += {blk.threads}) {{")
    add("        float sum = 0.0;")
    add(f"        for (int q = 0; q < {nz}; ++q) sum += uintBitsToFloat(sc.w[parts + q * {area} + o]);")
    add(f"        int row = m0 + o / {blk.tn}, col = n0 + o % {blk.tn};")
    add(f"        if (row < {gm_.M} && col < {gm_.N}) " + gm_.store("row", "col", "sum"))
    add("    }")
    add("    if (tid == 0) sc.w[tile] = 0u;  // ready for the next launch")
    return [scratch_buffer(ctx, "a counter per tile, then the partial tiles")]


def _shared(base: int, width: int, off: str | None = None):
    """Index into the shared array for a slab of rows of `width` vec4s at `base` (plus `off`,
    a GLSL int, for the second pair of double-buffered slabs): `at(row, word)`. A slab stored
    [k][p / 4] is indexed (k, p / 4); an A kept along K, [p][k / 4], is indexed (p, k / 4)."""

    def at(row: str, word: str) -> str:
        terms = [t for t in (off if off not in (None, "0") else None, str(base) if base else None) if t]
        return "sm[" + " + ".join([*terms, f"{_paren(row)} * {width}", word]) + "]"

    return at


def _add_k_groups(blk: Blocking) -> list[str]:
    """Add the K-groups' accumulators pairwise in shared memory (log2(ks) rounds): in each
    round the upper half of the remaining groups stores, the lower half adds. Neighbouring
    invocations touch neighbouring vec4s."""
    gn = blk.rn // 4
    TG = blk.group_threads
    regs = [f"acc{i}_{j}" for i in range(blk.rm) for j in range(gn)]
    lines = []
    half = blk.ks // 2
    while half >= 1:
        slot = f"(ks - {half}) * {len(regs) * TG} + t"
        lines.append(f"    if (ks >= {half} && ks < {2 * half}) {{")
        lines += [f"        sm[{slot} + {r * TG}] = {reg};" for r, reg in enumerate(regs)]
        lines.append("    }")
        lines += ["    memoryBarrierShared();", "    barrier();"]
        lines.append(f"    if (ks < {half}) {{")
        lines += [f"        {reg} += sm[ks * {len(regs) * TG} + t + {r * TG}];" for r, reg in enumerate(regs)]
        lines.append("    }")
        if half > 1:
            lines.append("    barrier();")
        half //= 2
    return lines


def _lane(var: str, group: int, stride: int) -> str:
    return var if group == 0 else f"({var} + {group * stride})"


def _operand(
    which: str,
    op: Operand,
    K: str,
    tp: int,
    P: str,
    blk: Blocking,
    T: int,
    p0: str,
    kvar: str,
    shared,
    vec: bool = True,
    along_k: bool = False,
):
    """Code to fetch a TP x BK slab of an operand into registers and to stash it in shared
    memory as `[k][p / 4]` vec4s (p: the row of A, the column of B).

    When memory runs along p (`contiguous_p`: A transposed, B not), an invocation fetches 4
    neighbouring p at one k and stores them as they are. Otherwise memory runs along k: an
    invocation fetches a 4 x 4 block (4 p, each 4 neighbouring k) and transposes it in
    registers, so that every shared-memory store is a whole vec4 (storing into a vec4
    component chosen at run time compiles to a chain of branches on NVIDIA).
    `vec`: vec4 loads where the operand has them (`load4`). `along_k` (memory along k): each
    invocation fetches 4 neighbouring k of one p and stores them as they are, `shared(p, kq)`
    indexing a slab stored [p][k / 4]. The last round of fetches may be partial (guarded).
    Returns (index declarations, fetch lines, stash lines, registers)."""
    contiguous_p = op.contiguous_p
    low = which.lower()
    decls: list[str] = []
    fetch: list[str] = []
    stash: list[str] = []
    regs: list[str] = []
    # elements one invocation fetches: 4 (contiguous, or kept along K) or 16 (a block to transpose)
    per = 4 if contiguous_p or along_k else 16
    count = tp * blk.bk // per  # invocations needed (a partial last round is guarded)
    vec_ok = vec and op.load4 is not None
    for j in range(-(-count // T)):
        lid = "tid" if j == 0 else f"(tid + {j * T})"
        guard = f"if ({lid} < {count}) " if (j + 1) * T > count else ""
        kk, pp = f"{low}k{j}", f"{low}p{j}"
        if contiguous_p:
            per_row = tp // 4
            decls.append(f"int {kk} = {lid} / {per_row}, {pp} = ({lid} % {per_row}) * 4;")
            rows = [(f"r{low}{j}", f"({kvar} + {kk})", f"({p0} + {pp})")]
        elif along_k:  # neighbouring invocations along k, then p: a warp reads whole runs of K
            per_row = blk.bk // 4
            decls.append(f"int {kk} = ({lid} % {per_row}) * 4, {pp} = {lid} / {per_row};")
            rows = [(f"r{low}{j}", f"({kvar} + {kk})", f"({p0} + {pp})")]
        elif blk.swizzle and tp // 4 >= 8:
            # 8 neighbouring invocations take 8 neighbouring p-groups at one k-group (so
            # their shared stores hit distinct banks); the next 8 the next k-group of the
            # same rows (so a warp still reads whole runs of K from each row).
            kq = blk.bk // 4
            decls.append(f"int {pp} = ({lid} % 8 + 8 * ({lid} / {8 * kq})) * 4, {kk} = (({lid} / 8) % {kq}) * 4;")
            rows = [(f"r{low}{j}_{r}", f"({kvar} + {kk})", f"({p0} + {pp} + {r})") for r in range(4)]
        else:
            per_row = blk.bk // 4
            decls.append(f"int {pp} = ({lid} / {per_row}) * 4, {kk} = ({lid} % {per_row}) * 4;")
            rows = [(f"r{low}{j}_{r}", f"({kvar} + {kk})", f"({p0} + {pp} + {r})") for r in range(4)]
        for reg, gk, gp in rows:
            regs.append(reg)
            if contiguous_p:
                inb = f"{gk} < {K} && {gp} + 3 < {P}"
                comps = [f"{gk} < {K} && {gp} + {c} < {P} ? {op.load(f'{gp} + {c}', gk)} : 0.0" for c in range(4)]
            else:
                inb = f"{gp} < {P} && {gk} + 3 < {K}"
                comps = [f"{gp} < {P} && {gk} + {c} < {K} ? {op.load(gp, f'{gk} + {c}')} : 0.0" for c in range(4)]
            slow = [f"{reg} = vec4("] + [f"    {c}," for c in comps[:-1]] + [f"    {comps[-1]});"]
            if vec_ok:
                fetch.append(f"{guard}if ({inb}) {reg} = {op.load4(gp, gk)};")
                fetch.append("else " + slow[0])
            else:
                fetch.append(guard + slow[0])
            fetch.extend(slow[1:])
        if contiguous_p:
            stash.append(f"{guard}{shared(kk, f'{pp} / 4')} = {rows[0][0]};")
        elif along_k:
            stash.append(f"{guard}{shared(pp, f'{kk} / 4')} = {rows[0][0]};")
        else:
            for c in range(4):
                lanes = ", ".join(f"{reg}.{'xyzw'[c]}" for reg, _, _ in rows)
                stash.append(f"{guard}{shared(f'{kk} + {c}', f'{pp} / 4')} = vec4({lanes});")
    return decls, fetch, stash, regs


registry.register_lowering("matmul", KEY, render)  # render(ctx, options)
