"""conv2d and its two gradients as implicit GEMMs through the blocked matmul template.

No im2col buffer: the template's operand accessors decode a GEMM index into image
coordinates and read the tensor where it lies (zero in the padding). For groups = 1:

- forward:          rows = B*OH*OW output pixels, K = KH*KW*Cin (tap, channel), cols = Cout;
                    A = the input under each tap, B = the filter viewed as [K, Cout].
- input gradient:   rows = B*H*W input pixels, K = KH*KW*Cout, cols = Cin; A = the output
                    gradient at the output pixel each tap reaches back to (zero where the
                    stride skips it), B = the filter read as [tap, Cout] x Cin.
- filter gradient:  rows = KH*KW*Cin, K = B*OH*OW, cols = Cout; A = the input under each tap,
                    B = the output gradient viewed as [K, Cout]. K is long and the output
                    small: a filter under 64 wide takes the thin blocking (K-groups inside
                    each work group), and when its tiles are too few to fill the GPU, K is
                    also split across work groups (kernels_matmul.render_gemm's `split`:
                    partials in a scratch buffer, added in chunk order by the last group of
                    each tile, so the sums are deterministic).

An input gradient with 16 to 63 input channels takes 128x32 tiles (THIN_N), not 64-wide
ones half empty.

In every case the GEMM's [rows, cols] result is the op's NHWC (or filter) layout, so the
fused epilogue (bias, relu, ...) sees flat output positions as the direct kernels do.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from ..plan import eval_size, size_of
from . import kernels_matmul as mm
from .glsl import Context, Emitter, Ix, KernelSource

GEMM_OPS = ("conv2d", "conv2d_grad_input", "conv2d_grad_filter")


def applies(node, variant: str | None) -> bool:
    """Whether the conv node goes through the GEMM template (`variant`: "gemm" or "direct"
    forces a choice; grouped convs always take the direct kernels)."""
    if node.op not in GEMM_OPS or dict(node.attrs).get("groups", 1) != 1 or variant == "direct":
        return False
    return True


def render(
    ctx: Context, node, p: dict, variant: str | None = None, blocking: tuple | None = None, split: int | None = None
) -> KernelSource | None:
    """The GEMM kernel, or None when the sizes suit the direct kernel better (auto choice).
    `blocking` forces a blocked shape (a tuple) or a whole variant (a dict of the matmul
    table's form: a blocking and switches; without a blocking, switches over the one chosen
    here), `split` a split-K chunk (0: none)."""
    gemm, rows, k_shape = _GEMMS[node.op](ctx, node, p)
    dims = ctx.plan.ref_dims
    m = eval_size(size_of(rows), dims)
    n = int(gemm.N)
    k = eval_size(size_of(k_shape), dims)
    how: mm.Blocking | mm.Variant
    switches = None  # a Mapping without a blocking: switches over the conv's own blocking
    if isinstance(blocking, Mapping) and "blocking" not in blocking:
        switches, blocking = blocking, None
    if isinstance(blocking, Mapping):
        how = mm.tuning.variant(blocking, "codegen option conv_blocking")
    elif blocking is not None:
        how = mm.Blocking(*blocking)
    else:
        how = _blocking(node.op, m, n, k)
        if how is None:
            if variant != "gemm":
                return None
            how = mm.MEDIUM  # forced: exact at any size
        if switches is not None:
            how = mm.tuning.variant({**switches, "blocking": how}, "codegen option conv_blocking")
    blk = how.blocking if isinstance(how, mm.Variant) else how
    if split is None:
        split = _split_chunk(node.op, blk, m, n, k)
    if split:
        chunk = -(-split // blk.bk) * blk.bk
        return mm.render_gemm(ctx, gemm, how, split=(list(size_of(k_shape)), chunk))
    return mm.render_gemm(ctx, gemm, how)


# 128 x 32 tiles, 8 x 4 outputs an invocation, 2 K-groups: for outputs of 16 to 63 columns
# (an input gradient with few input channels) over many rows, where 64-wide tiles would
# leave half their columns empty.
THIN_N = mm.Blocking(128, 32, 32, 8, 4, 2)
SPLIT_GROUPS = 4 * mm.FULL_WAVE  # work groups a split-K product aims at
SPLIT_MIN_SLABS = 8  # K-slabs each chunk keeps, at least
WAVE_SPLIT_MIN_K = 1024  # K each chunk keeps where a product of one to two waves is split


def _blocking(op: str, m: int, n: int, k: int) -> mm.Blocking | None:
    if (
        op == "conv2d_grad_filter"
        and k >= mm.THIN_MIN_K
        and (math.ceil(m / 16) * math.ceil(n / 16) <= mm.THIN_MAX_TILES)
    ):
        if min(m, n) >= 64:  # enough of a tile for the blocked shapes; split-K fills the GPU
            return mm.SPLIT if m >= 128 else mm.MEDIUM
        return mm.THIN  # a small filter over a long sum: K-groups share each tile
    if min(m, n) >= 128 and k >= 8 and math.ceil(m / 128) * math.ceil(n / 128) >= mm.FULL_WAVE:
        return mm.BIG
    if min(m, n) >= 64 and k >= 16:
        return mm.SPLIT if m >= 128 else mm.MEDIUM
    if 16 <= n < 64 and k >= 32 and m >= 8 * THIN_N.tm:  # (3x the thin 16x16 on llvmpipe)
        return THIN_N
    if m >= 64 and k >= mm.THIN_MIN_K and math.ceil(m / 16) * math.ceil(n / 16) <= mm.THIN_MAX_TILES:
        return mm.THIN
    if n >= 64 and k >= 64:
        # Few rows (a deep stage's 7x7 pixels at batch 1) of a wide, deep product: 64-row tiles
        # part idle, split-K filling the GPU, beat the direct kernel's loop over K per output
        # by far (H100: [1, 7, 7, 512] * [3, 3, 512, 512] took 1.48 ms direct), and the
        # choice, made once for a symbolic batch, suits larger batches too.
        return mm.MEDIUM
    return None


def _split_chunk(op: str, blk: mm.Blocking, m: int, n: int, k: int) -> int:
    """The K-chunk of a product split across work groups (0: no split): when its tiles alone
    would leave the GPU mostly idle (a filter gradient's few tiles, any conv's very few),
    enough chunks to make about SPLIT_GROUPS groups, each at least SPLIT_MIN_SLABS K-slabs
    long; under two waves of tiles over a K of two WAVE_SPLIT_MIN_K or more, chunks of that
    K at least."""
    tiles = math.ceil(m / blk.tm) * math.ceil(n / blk.tn)
    few = SPLIT_GROUPS // 2 if op == "conv2d_grad_filter" else mm.FULL_WAVE // 4
    shortest = SPLIT_MIN_SLABS * blk.bk
    if op != "conv2d_grad_filter" and few <= tiles < 2 * mm.FULL_WAVE and k >= 2 * WAVE_SPLIT_MIN_K:
        # under two waves of tiles the last is part idle (a batch-32 ResNet's 14x14x256 3x3
        # convs: 196 tiles of 128x64, K = 2304; H200: 0.47 ms, under 0.38 split in two), where
        # K is long enough that each chunk keeps a long loop (the 28x28x128 convs, K = 1152,
        # lost 11% split in two)
        few, shortest = 2 * mm.FULL_WAVE, WAVE_SPLIT_MIN_K
    if tiles >= few:
        return 0
    chunks = min(SPLIT_GROUPS // tiles, k // shortest)
    if chunks < 2:
        return 0
    return -(-k // chunks)


def _epilogue(ctx: Context, N: str, rows: tuple, how: str, what: str):
    epi = Emitter(ctx, anchor_value="value")
    epi.store_outputs(Ix(flat="o"))
    funcs = ["void epilogue(int o, float value) {", *epi.lines, "}", ""]

    def grid(tm: int, tn: int) -> dict:  # cols, rows, and no batch on z
        return {"tiles": [[list(size_of((int(N),))), tn], [list(size_of(rows)), tm], [[1], 1]]}

    def store(r: str, c: str, v: str) -> str:  # the GEMM's [rows, cols] is the op's layout
        return f"epilogue({r} * {N} + {c}, {v});"

    return funcs, store, grid, (lambda blk_how: f"{what} as implicit GEMM ({how}), {blk_how}")


def _image_read(
    name: str, vec: bool, decode: list[str], guard: str, addr: str, args: str = "int m, int k"
) -> list[str]:
    """A GLSL accessor: decode the GEMM indexes, 0 outside the image, else read."""
    t, zero = ("vec4", "vec4(0.0)") if vec else ("float", "0.0")
    lines = [f"{t} {name}({args}) {{", *("    " + d for d in decode), f"    if ({guard}) return {zero};"]
    return lines + [f"    return {addr};", "}", ""]


def _tap(k: str, per: int, p: dict) -> list[str]:
    """Split GEMM index `k` into (di, dj, channel c) with `per` channels a tap."""
    return [f"int tap = {k} / {per}, c = {k} - tap * {per};", f"int di = tap / {p['KW']}, dj = tap - di * {p['KW']};"]


def _pixel(m: str, h, w, names: tuple[str, str]) -> list[str]:
    """Split a flat pixel index over [B, h, w] into (b, names)."""
    y, x = names
    return [f"int t = {m} / {w}, {x} = {m} - t * {w};", f"int b = t / {h}, {y} = t - b * {h};"]


def _image_operand(ctx: Context, x: int, ci: int, p: dict, tap: str, pixel: str, trans: bool):
    """The input image x [B, H, W, ci] read as the im2col matrix of the forward conv (rows:
    output pixels, K: filter taps x channels), its tap index in `tap` and its output pixel in
    `pixel` (the filter gradient reads it transposed): the read functions and the operand."""
    X = ctx.buf(x)
    decode = (
        _tap(tap, ci, p)
        + _pixel(pixel, p["OH"], p["OW"], ("oy", "ox"))
        + [f"int iy = oy * {p['SH']} + di * {p['DH']} - {p['PT']}, ix = ox * {p['SW']} + dj * {p['DW']} - {p['PL']};"]
    )
    guard = f"iy < 0 || iy >= {p['H']} || ix < 0 || ix >= {p['W']}"
    at = f"((b * {p['H']} + iy) * {p['W']} + ix) * {ci} + c"
    funcs = _image_read("conv_a", False, decode, guard, f"{X}.v[{at}]")
    if ci % 4 == 0:
        funcs += _image_read("conv_a4", True, decode, guard, f"{X}_a4.v[({at}) / 4]")
    a = mm.Operand(
        x, lambda r, k: f"conv_a({r}, {k})", (lambda r, k: f"conv_a4({r}, {k})") if ci % 4 == 0 else None, trans
    )
    return funcs, a


def _rows_operand(ctx: Context, t: int, n: int) -> mm.Operand:
    """Tensor t read as a [K, n] matrix stored row-major (the filter of the forward conv, the
    output gradient of the filter gradient)."""
    T = ctx.buf(t)
    return mm.Operand(
        t,
        lambda col, k: f"{T}.v[{mm._paren(k)} * {n} + {col}]",
        (lambda col, k: f"{T}_b4.v[({mm._paren(k)} * {n} + {col}) / 4]") if n % 4 == 0 else None,
        True,
    )


def _forward(ctx: Context, node, p: dict):
    g = ctx.graph
    x, w = node.inputs
    ci, co = g.nodes[w].shape[2], g.nodes[w].shape[3]
    funcs, a = _image_operand(ctx, x, ci, p, tap="k", pixel="m", trans=False)
    b = _rows_operand(ctx, w, co)
    rows = (g.nodes[x].shape[0], p["OH"], p["OW"])
    K = p["KH"] * p["KW"] * ci
    return _gemm(ctx, rows, str(co), str(K), a, b, funcs, "conv2d", node), rows, (K,)


def _grad_input(ctx: Context, node, p: dict):
    g = ctx.graph
    dy, w = node.inputs
    ci, co = g.nodes[w].shape[2], g.nodes[w].shape[3]
    DY, Wb = ctx.buf(dy), ctx.buf(w)
    decode = (
        _tap("k", co, p)
        + _pixel("m", p["H"], p["W"], ("y", "x"))
        + [
            f"int ty = y + {p['PT']} - di * {p['DH']}, tx = x + {p['PL']} - dj * {p['DW']};",
            f"int oy = ty / {p['SH']}, ox = tx / {p['SW']};",
        ]
    )
    guard = "ty < 0 || tx < 0"
    if p["SH"] > 1:
        guard += f" || ty % {p['SH']} != 0"
    if p["SW"] > 1:
        guard += f" || tx % {p['SW']} != 0"
    guard += f" || oy >= {p['OH']} || ox >= {p['OW']}"
    at = f"((b * {p['OH']} + oy) * {p['OW']} + ox) * {co} + c"
    funcs = _image_read("conv_a", False, decode, guard, f"{DY}.v[{at}]")
    # B[k, n] = w[di, dj, n, co]: k runs along the filter's last axis
    wat = f"(k / {co} * {ci} + n) * {co} + k % {co}"
    funcs += ["float conv_b(int n, int k) {", f"    return {Wb}.v[{wat}];", "}", ""]
    if co % 4 == 0:
        funcs += _image_read("conv_a4", True, decode, guard, f"{DY}_a4.v[({at}) / 4]")
        funcs += ["vec4 conv_b4(int n, int k) {", f"    return {Wb}_b4.v[({wat}) / 4];", "}", ""]
    a = mm.Operand(
        dy, lambda r, k: f"conv_a({r}, {k})", (lambda r, k: f"conv_a4({r}, {k})") if co % 4 == 0 else None, False
    )
    b = mm.Operand(
        w, lambda n, k: f"conv_b({n}, {k})", (lambda n, k: f"conv_b4({n}, {k})") if co % 4 == 0 else None, False
    )
    rows = (node.shape[0], p["H"], p["W"])
    K = p["KH"] * p["KW"] * co
    return (_gemm(ctx, rows, str(ci), str(K), a, b, funcs, "conv2d input gradient", node), rows, (K,))


def _grad_filter(ctx: Context, node, p: dict):
    g = ctx.graph
    x, dy = node.inputs
    kh, kw, ci, co = node.shape
    funcs, a = _image_operand(ctx, x, ci, p, tap="m", pixel="k", trans=True)
    b = _rows_operand(ctx, dy, co)
    rows = (kh * kw * ci,)
    k_shape = (g.nodes[x].shape[0], p["OH"], p["OW"])
    return (_gemm(ctx, rows, str(co), ctx.numel(k_shape), a, b, funcs, "conv2d filter gradient", node), rows, k_shape)


def _gemm(ctx: Context, rows: tuple, N: str, K: str, a, b, funcs, what: str, node) -> mm.Gemm:
    M = ctx.numel(rows)
    epi, store, grid, describe = _epilogue(
        ctx, N, rows, f"[{', '.join(map(str, rows))}] x {N}, K = {K}", f"{what} {list(node.shape)}"
    )
    return mm.Gemm(M, N, K, a, b, epi + funcs, store, grid, describe)


_GEMMS = {"conv2d": _forward, "conv2d_grad_input": _grad_input, "conv2d_grad_filter": _grad_filter}
