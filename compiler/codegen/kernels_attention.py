"""Attention kernels (ops/attention.py): on the compute target FlashAttention's tiling in GLSL
(`render`), on the texture target a fragment per output (`texture_body`); no kernel writes or
holds a T x T matrix. The compute target's gradients that kernels_attention_tiled.py tiles
(heads of vec4 words up to 64 whose tiles fit shared memory; by default dk and dv, not dq)
are register-tiled there instead (`lower`).

One work group per (leading index, block of ROWS own rows, or the codegen option
attention_rows), one invocation per own row, which keeps that row of its operands and its
output row in registers; the other side's rows stream through shared memory in tiles of
`cols` rows (the whole group loads a tile, then each invocation reads all of it):

- attention, attention_lse, attention_packed (both): own rows are query rows, tiles of k (and
  v); an online softmax (running max m and sum l, the output rescaled by exp(m_old - m_new)
  as the max grows);
- attention_grad wrt q: own query rows, tiles of k and v; p recomputed from the saved lse;
- attention_grad wrt k or v: own key rows, tiles of q, g, lse and delta (FlashAttention-2's
  dK/dV loop), so each output is summed by one invocation in a fixed order (deterministic,
  no atomics); wrt kv: both in one loop (p recomputed once), each row's dk then its dv.

Dropout (ops/attention.py): each term's weight w = m / (1 - p), m from the random ops' hash of
the probability's flat index in the [..., T, T] tensor (dlc_random_uniform, as the unfused
dropout draws it), recomputed wherever a kernel visits the term.

Rows are vec4 words where D is a multiple of 4. Causal kernels skip the tiles wholly above
the diagonal and, within a tile, each row's masked terms (left out, not added as 0: a NaN
there stays out, as in the reference). Rows past T (T not a multiple of the block) load a
clamped row, take part in every barrier, and store nothing.
"""

from __future__ import annotations

from .. import registry
from ..ir import format_shape
from . import kernels_attention_tiled
from .attention_rows import dropout_weight, each_word, geometry, row_blocks_source, row_ix, row_word
from .compute import KEY, TILE
from .glsl import Context, Emitter, Ix, KernelSource
from .options import CodegenOptions
from .renderer import float_lit

ROWS = 64  # own rows a work group (invocations), at any size: taking 16 or 32 where 64 made
# few groups (a one-sequence prefill: 24 groups of 64) was measured on the lent H200 after it
# went in (2026-12-01, .devtree/gen_ab.py, two alternating rounds): the full char GPT
# generated 500 tokens at 2.61 ms a token that way against 2.23 with 64 rows, the same ids.
# Floats of all streamed tiles together: 3.5 KiB. Small tiles leave shared memory for more
# resident work groups: on the H100, fwd + bwd of [64, 6, 256, 64] took 3.36 ms with 28 KiB
# tiles, 2.36 with 14 KiB and 2.04 with 7 KiB (loops); written out (UNROLL_MAX), 1.91 with
# 14 KiB, 1.48 with 7 and 1.44 with 3.5.
TILE_FLOATS = 896
# The loops over a tile's rows and a row's words are written out (constant array indices,
# so the rows stay in registers: 2.04 -> 1.44 ms above) where a tile holds at most this
# many words; past it (narrow heads as floats: 64 rows of 5) the text would swamp the
# shader compiler (llvmpipe took minutes).
UNROLL_MAX = 128


def tile_rows(d: int, streamed: int, tile_floats: int = TILE_FLOATS, own: int = ROWS) -> int:
    """Rows of a streamed tile (a power of two): `streamed` row tensors of width d within
    `tile_floats` floats (the k and v gradients' few row statistics fit beside them), at
    most `own` (a group's own rows: its invocations load the tile's statistics)."""
    rows = 1
    while rows * 2 <= min(own, tile_floats // (streamed * d)):
        rows *= 2
    return rows


def render(
    ctx: Context, unroll: bool | None = None, tile_floats: int | None = None, rows: int | None = None
) -> KernelSource:
    """`unroll`: the loops over a tile's rows and a row's words written out, so every array
    index is a constant (drivers then keep the rows in registers); None: where a tile holds
    UNROLL_MAX words or fewer. `tile_floats`: the streamed tiles' size (TILE_FLOATS); `rows`:
    a group's own rows (None: ROWS)."""
    node, lead, t_dim, d = geometry(ctx)
    group_rows = rows or ROWS
    op, wrt = node.op, node.attr("wrt")
    causal = bool(node.attr("causal"))
    scale = float_lit(float(node.attr("scale")))
    q, k, v = (*node.inputs[:3], None)[:3]  # attention_lse has no v
    g, lse, delta = node.inputs[3:6] if op == "attention_grad" else (None, None, None)
    by_key = wrt in ("k", "v", "kv")  # own rows are key rows
    both = wrt == "kv"  # dk and dv: an output row is dk's D columns, then dv's
    packed = op == "attention_packed"
    if packed:  # the forward, and each row's lse after its D outputs
        op = "attention"
    width = d + 1 if packed else 2 * d if both else d  # of an output row
    streamed = {"attention": [k, v], "attention_lse": [k]}.get(op) or ([q, g] if by_key else [k, v])
    cols = tile_rows(d, len(streamed), tile_floats or TILE_FLOATS, group_rows)
    # rows held as vec4 words where D allows: one shared-memory load feeds four multiply-adds
    lanes = 4 if d % 4 == 0 else 1
    words, ty = d // lanes, "vec4" if lanes == 4 else "float"
    if unroll is None:
        unroll = cols * words <= UNROLL_MAX
    zero = f"{ty}(0.0)"
    ctx.names.taken.update({"o", "lid", "blk", "bh", "T", "own", "row", "j0", "jj", "jn", "e", "w", "end", "result"})

    epi = Emitter(ctx, anchor_value="value")
    epi.store_outputs(Ix(flat="o"))
    em = Emitter(ctx)

    def word(tensor: int, row: str, w: str) -> str:
        return row_word(em, tensor, row, w, d, lanes)

    em.line(f"int blk = int({TILE}.x), bh = int({TILE}.y);")
    em.line("int lid = int(gl_LocalInvocationID.x);")
    em.line(f"int T = {ctx.dim(t_dim)};")
    em.line(f"int own = blk * {group_rows} + lid;")
    em.line("int row = bh * T + min(own, T - 1);  // a row past T loads the last one, stores nothing")
    em.line("int own_clamped = min(own, T - 1);")

    def per_word(line) -> None:
        each_word(em, words, line, unroll)

    def own_row(name: str, tensor: int) -> None:
        em.line(f"{ty} {name}[{words}];")
        per_word(lambda w: f"{name}[{w}] = {word(tensor, 'row', w)};")

    if by_key:
        own_row("kr", k)
        if wrt in ("k", "kv"):
            own_row("vr", v)
    else:
        own_row("qr", q)
        if op == "attention_grad":
            own_row("gr", g)
            em.line(f"float row_lse = {em.value(lse, Ix(flat='row'))};")
            em.line(f"float row_delta = {em.value(delta, Ix(flat='row'))};")
    weight = dropout_weight(ctx, em, node)
    if op != "attention_lse":
        em.line(f"{ty} acc[{words}];")
        per_word(lambda w: f"acc[{w}] = {zero};")
    if both:
        em.line(f"{ty} accv[{words}];")
        per_word(lambda w: f"accv[{w}] = {zero};")
    if op in ("attention", "attention_lse"):
        em.line("float m = -DLC_INF, l = 0.0;")

    # The streamed side's range: causal query blocks see keys up to their last row; causal key
    # blocks see queries from their first row.
    if by_key:
        em.line(f"int start = {f'blk * {group_rows}' if causal else '0'}, end = T;")
    else:
        em.line(f"int start = 0, end = {f'min(T, (blk + 1) * {group_rows})' if causal else 'T'};")
    em.open(f"for (int j0 = start; j0 < end; j0 += {cols})")
    em.line("barrier();  // every invocation is done with the last tile")
    em.open(f"for (int e = lid; e < {cols * words}; e += {group_rows})")
    em.line(f"int srow = bh * T + min(j0 + e / {words}, T - 1), sw = e % {words};")
    for i, t in enumerate(streamed):
        em.line(f"tile{i}[e] = {word(t, 'srow', 'sw')};")
    em.close()
    if by_key:
        em.open(f"if (lid < {cols})")
        em.line("int srow = bh * T + min(j0 + lid, T - 1);")
        em.line(f"tile_lse[lid] = {em.value(lse, Ix(flat='srow'))};")
        if wrt in ("k", "kv"):
            em.line(f"tile_delta[lid] = {em.value(delta, Ix(flat='srow'))};")
        em.close()
    em.line("memoryBarrierShared();")
    em.line("barrier();")
    em.line(f"int jn = min({cols}, end - j0);")
    # this row's unmasked part of the tile (causal: keys <= own query; queries >= own key)
    if not causal:
        em.line("int jlo = 0, jhi = jn;")
    elif by_key:
        em.line("int jlo = max(0, own_clamped - j0), jhi = jn;")
    else:
        em.line("int jlo = 0, jhi = min(jn, own_clamped + 1 - j0);")

    def tile_loop(body) -> None:
        """`body()` for each row jj of the tile this row sees (jlo <= jj < jhi)."""
        if not unroll:
            # constant bounds, so that drivers may unroll it and keep s[] and the rows in registers
            em.open(f"for (int jj = 0; jj < {cols}; jj++)")
            em.line("if (jj < jlo || jj >= jhi) continue;  // masked, or past the tile's last row")
            body()
            em.close()
            return
        for j in range(cols):
            em.open(f"if ({j} >= jlo && {j} < jhi)")
            em.line(f"const int jj = {j};")
            body()
            em.close()

    def dot(a: str, tile: str, var: str) -> None:
        em.line(f"float {var} = 0.0;")
        per_word(lambda w: f"{var} += dot({a}[{w}], {tile}[jj * {words} + {w}]);")

    def accumulate(weight: str, tile: str, into: str = "acc") -> None:
        per_word(lambda w: f"{into}[{w}] += {weight} * {tile}[jj * {words} + {w}];")

    mine = "kr" if by_key else "qr"

    def grad_terms() -> None:
        dot(mine, "tile0", "sdot")
        em.line(f"float sj = sdot * {scale};")
        row_lse = "tile_lse[jj]" if by_key else "row_lse"
        em.line(f"float p = sj == -DLC_INF ? 0.0 : exp(sj - {row_lse});")
        if weight is not None:  # the probability (query i, key j)'s flat index
            i, j = ("j0 + jj", "own_clamped") if by_key else ("own_clamped", "j0 + jj")
            em.line(f"float drop_w = {weight(f'(bh * T + {i}) * T + {j}')};")
        if wrt in ("v", "kv"):  # dv_j += p_ij w_ij g_i
            accumulate("p" if weight is None else "(p * drop_w)", "tile1", "accv" if both else "acc")
        if wrt != "v":  # dp_ij = w_ij g_i . v_j; ds = p (dp - delta_i); dq_i += ds k_j, dk_j += ds q_i
            dot("vr" if by_key else "gr", "tile1", "dp")
            if weight is not None:
                em.line("dp *= drop_w;")
            em.line(f"float ds = p * (dp - {'tile_delta[jj]' if by_key else 'row_delta'});")
            accumulate("ds", "tile0")

    if op in ("attention", "attention_lse"):
        em.line(f"float s[{cols}];")
        em.line("float mt = m;")

        def scores() -> None:
            dot(mine, "tile0", "sdot")
            em.line(f"s[jj] = sdot * {scale};")
            em.line("mt = max(mt, s[jj]);")

        tile_loop(scores)
        em.line("float corr = m == mt ? 1.0 : exp(m - mt);  // m == mt == -inf: nothing yet to rescale")
        em.line("l *= corr;")
        if op == "attention":
            per_word(lambda w: f"acc[{w}] *= corr;")

        def weights() -> None:
            em.line("float p = s[jj] == -DLC_INF ? 0.0 : exp(s[jj] - mt);")
            em.line("l += p;")
            if op == "attention":
                if weight is not None:  # this query row's probability of key j0 + jj
                    em.line(f"p *= {weight('(bh * T + own_clamped) * T + j0 + jj')};")
                accumulate("p", "tile1")

        tile_loop(weights)
        em.line("m = mt;")
    else:
        tile_loop(grad_terms)
    em.close()  # the tile loop

    em.line("if (own >= T) return;  // after the last barrier")
    if op == "attention_lse":
        em.line("epilogue(row, m + log(l));")
    else:
        post = {"attention": " / l", "attention_grad": f" * {scale}" if wrt in ("q", "k", "kv") else ""}[op]
        for arr, post_, at in (("acc", post, ""), ("accv", "", f" + {d}"))[: 2 if both else 1]:
            em.open(f"for (int w = 0; w < {words}; w++)")
            em.line(f"{ty} result = {arr}[w]{post_};")
            if lanes == 1:
                em.line(f"epilogue(row * {width}{at} + w, result);")
            for c, lane in enumerate("xyzw"[: lanes if lanes > 1 else 0]):
                em.line(f"epilogue(row * {width}{at} + w * 4 + {c}, result.{lane});")
            em.close()
        if packed:
            em.line(f"epilogue(row * {width} + {d}, m + log(l));")

    shared = [f"shared {ty} tile{i}[{cols * words}];" for i in range(len(streamed))]
    if by_key:
        shared.append(f"shared float tile_lse[{cols}];")
        if wrt in ("k", "kv"):
            shared.append(f"shared float tile_delta[{cols}];")
    what = (
        f"{node.op}{f' wrt {wrt}' if wrt else ''}{' causal' if causal else ''} over {format_shape(lead)} x "
        f"[{t_dim}, {d}]: a work group per {group_rows} {'key' if by_key else 'query'} rows, tiles of {cols} rows"
        f"{', vec4 words' if lanes == 4 else ''}"
    )
    return row_blocks_source(ctx, what, group_rows, shared, epi, em, t_dim, lead, group_rows)


def texture_body(ctx: Context, em: Emitter) -> str:
    """The texture target's body for output element `o`: sets `acc`, says what it computes.
    A fragment has its own row (query row, or key row for a k or v gradient) and one column;
    it loops over the other side's rows (the online softmax of the compute kernels, one row
    at a time): T x D work an element, no T x T storage."""
    node, lead, t_dim, d = geometry(ctx)
    op, wrt = node.op, node.attr("wrt")
    causal = bool(node.attr("causal"))
    scale = float_lit(float(node.attr("scale")))
    q, k, v = (*node.inputs[:3], None)[:3]
    g, lse, delta = node.inputs[3:6] if op == "attention_grad" else (None, None, None)
    by_key = wrt in ("k", "v", "kv")
    both = wrt == "kv"  # a row's dk columns, then its dv columns: each fragment computes one
    packed = op == "attention_packed"
    if packed:  # the forward, and each row's lse in column D
        op = "attention"
    width = d + 1 if packed else 2 * d if both else d
    em.line(f"int at_T = {ctx.dim(t_dim)};")
    if op == "attention_lse":
        em.line("int at_row = o, at_col = 0;")
    elif both:
        em.line(f"int at_row = o / {width}, at_c = o - at_row * {width};")
        em.line(f"bool at_isv = at_c >= {d};  // a dv column")
        em.line(f"int at_col = at_isv ? at_c - {d} : at_c;")
    else:
        em.line(f"int at_row = o / {width}, at_col = min(o - at_row * {width}, {d - 1});")
    em.line("int at_base = (at_row / at_T) * at_T, at_own = at_row - at_base;")
    if by_key:
        lo, hi = ("at_own" if causal else "0"), "at_T"
    else:
        lo, hi = "0", ("at_own + 1" if causal else "at_T")

    def at(tensor: int, row: str, col: str) -> str:
        return em.value(tensor, row_ix(em, tensor, row, col, f"(({row}) * {d} + {col})"))

    def dot(a: int, a_row: str, b: int, b_row: str, var: str) -> None:
        em.line(f"float {var} = 0.0;")
        em.open(f"for (int at_d = 0; at_d < {d}; at_d++)")
        em.line(f"{var} += {at(a, a_row, 'at_d')} * {at(b, b_row, 'at_d')};")
        em.close()

    weight = dropout_weight(ctx, em, node)
    em.line("float at_m = -DLC_INF, at_l = 0.0, at_acc = 0.0;")
    em.open(f"for (int at_j = {lo}; at_j < {hi}; at_j++)")
    em.line("int at_other = at_base + at_j;")
    qrow, krow = ("at_other", "at_row") if by_key else ("at_row", "at_other")
    dot(q, qrow, k, krow, "at_s")
    em.line(f"at_s *= {scale};")
    if weight is not None:  # the probability (qrow, krow)'s flat index
        em.line(f"float drop_w = {weight(f'({qrow}) * at_T + ({krow}) - at_base')};")
    if op in ("attention", "attention_lse"):
        em.line("float at_mt = max(at_m, at_s);")
        em.line("float at_corr = at_m == at_mt ? 1.0 : exp(at_m - at_mt);")
        em.line("float at_p = at_s == -DLC_INF ? 0.0 : exp(at_s - at_mt);")
        em.line("at_l = at_l * at_corr + at_p;")
        if op == "attention":
            w = "at_p" if weight is None else "(at_p * drop_w)"
            em.line(f"at_acc = at_acc * at_corr + {w} * {at(v, 'at_other', 'at_col')};")
        em.line("at_m = at_mt;")
    else:
        em.line(f"float at_p = at_s == -DLC_INF ? 0.0 : exp(at_s - {em.value(lse, Ix(flat=qrow))});")
        if wrt in ("v", "kv"):
            if both:
                em.open("if (at_isv)")
            w = "at_p" if weight is None else "(at_p * drop_w)"
            em.line(f"at_acc += {w} * {at(g, 'at_other', 'at_col')};")
            if both:
                em.close()
        if wrt != "v":
            if both:
                em.open("else")
            dot(g, qrow, v, krow, "at_dp")
            if weight is not None:
                em.line("at_dp *= drop_w;")
            em.line(f"float at_ds = at_p * (at_dp - {em.value(delta, Ix(flat=qrow))});")
            em.line(f"at_acc += at_ds * {at(k if wrt == 'q' else q, 'at_other', 'at_col')};")
            if both:
                em.close()
    em.close()
    result = {
        "attention": f"o - at_row * {width} == {d} ? at_m + log(at_l) : at_acc / at_l" if packed else "at_acc / at_l",
        "attention_lse": "at_m + log(at_l)",
    }.get(op, f"at_isv ? at_acc : at_acc * {scale}" if both else f"at_acc * {scale}" if wrt in ("q", "k") else "at_acc")
    em.line(f"float acc = {result};")
    what = f"{node.op}{f' wrt {wrt}' if wrt else ''} over {format_shape(lead)} x [{t_dim}, {d}]"
    return what + ", one fragment per output"


def lower(ctx: Context, options: CodegenOptions) -> KernelSource:
    """The compute target's lowering of attention kernels: a gradient the tiled layout takes
    is register-tiled (kernels_attention_tiled.py) unless the option attention_tiled is off."""
    tiling = kernels_attention_tiled.tiling_for(ctx, options)
    if tiling is not None:
        return kernels_attention_tiled.render(ctx, tiling)
    return render(ctx, options.attention_unroll, options.attention_tile, options.attention_rows)


registry.register_lowering("attention", KEY, lower)
