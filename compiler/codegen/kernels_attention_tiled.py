"""Attention's gradient as register-tiled kernels on the compute target (FlashAttention-2's
backward). kernels_attention.py's layout (an invocation per own row, the row in registers)
stays for the forward, for dq by default (it measured faster), for heads this layout does
not take, and on the texture target.

A work group owns `own` rows of one leading index (key rows for wrt k, v or kv; query rows
for wrt q) and streams the other side's rows through shared memory in tiles of `stream`
rows (`Tiling`; the default: 32 and 32, 128 invocations). Its two own operands (k and v, or
q and g) sit in shared memory for the whole kernel; each tile brings the two streamed ones
(q and g, or k and v) and, by key, the tile's lse and delta. Rows in shared memory are W + 1
vec4 words apart (W = D / 4), so that rows a quarter warp reads together fall in distinct
banks. With `prefetch`, the next tile's rows are loaded into registers while this one's two
steps run, and stored to shared memory after them. Per tile:

1. Each invocation computes a 4 x `block` block of s = own1 . streamed1 and dp = own2 .
   streamed2: own rows to + A r (r < 4, A = own / 4 invocations across), streamed rows ts +
   S x (x < block, S = stream / block). It turns them into p = exp(s scale - lse) (times the
   dropout weight w where there is dropout) and ds = p (dp w - delta), and stores each as
   one vec4 per streamed row and `to`: its own rows to, to + A, to + 2A, to + 3A.
2. Each invocation adds into items of 4 own rows (og + A r) x one vec4 word of D (several
   items an invocation where the group has fewer invocations than A x W): by key dk += ds q
   and dv += p w g, by query dq += ds k, reading per streamed row one vec4 of p or ds (its 4
   rows) and one of the streamed operand.

Each output is summed by one invocation in a fixed order (deterministic, no atomics). Terms
left out are never added (a NaN there stays out, as in the reference): in step 1 a masked or
padded term stores 0 without computing; streamed rows past T load as zeros, so step 2 adds
0 * 0 for them; causal tiles the diagonal crosses check each term in step 2, since their
masked rows hold real values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..ir import format_shape
from ..ops.attention import KV_PACKED_MAX
from .attention_rows import dropout_weight, geometry, row_blocks_source, row_word
from .compute import TILE, shared_limit
from .glsl import Context, Emitter, Ix, KernelSource
from .options import CodegenOptions
from .renderer import float_lit

MAX_WORDS = KV_PACKED_MAX // 4  # vec4 words of a row: the heads whose k and v gradients are one node


@dataclass(frozen=True)
class Tiling:
    """own rows a work group, streamed rows a tile, streamed rows an invocation's block in
    step 1 (its own rows are 4): the group has (own / 4) x (stream / block) invocations."""

    own: int = 32
    stream: int = 32
    block: int = 2
    prefetch: bool = True  # the next streamed tile loaded into registers during this one's steps
    # the gradients this layout computes (the row layout the others): dq's row kernel measured
    # faster on the H200 ([64, 6, 256, 64], dropout 0.2: the GPT step's 12 gradient kernels
    # 7.10 GPU ms with dq tiled, 6.63 with dq by rows; the row layout's 18 took 8.37)
    wrt: tuple = ("k", "v", "kv")

    @property
    def across(self) -> int:  # invocations along the own rows in step 1 (`to`), and in step 2
        return self.own // 4

    @property
    def lanes(self) -> int:
        return self.across * (self.stream // self.block)


TILING = Tiling()


# the names the kernel declares (the emitter's own temporaries stay clear of them)
_NAMES = {
    *("lid", "blk", "bh", "T", "own0", "to", "ts", "start", "end", "j0", "e", "r", "w", "s"),
    *("row", "sj", "p", "o", "value"),
    *(f"{stem}{r}" for stem in ("qrow", "lse", "delta", "out", "a1_", "a2_") for r in range(4)),
    *(f"{stem}{r}{x}" for stem in ("s", "dp", "p", "ds") for r in range(4) for x in range(16)),
    *(f"{stem}{x}" for stem in ("srow", "b1_", "b2_") for x in range(16)),
    *(f"tile_{name}" for name in ("a1", "a2", "b1", "b2", "p", "ds", "lse", "delta")),
}
# and, for each step-2 item k of an invocation: og<k>, wd<k>, (acc|dk|dv)<k>_<r>, tile_<x>_s<k>;
# for each prefetched word n: pf<i>_<n> (and by key ps<i>_<n>)
_ITEM_STEMS = ("og", "wd", "acc", "dk", "dv", "tile_b1_s", "tile_b2_s", "tile_p_s", "tile_ds_s")
_TAILS = ("", "_0", "_1", "_2", "_3")


def shared_bytes(tiling: Tiling, wrt: str, d: int) -> int:
    """The shared memory the kernel for `wrt` and a head of d declares."""
    words, own, stream = d // 4, tiling.own, tiling.stream
    need_ds, want_dv, by_key = wrt != "v", wrt in ("v", "kv"), wrt != "q"
    vec4s = own * (words + 1) * (1 + need_ds) + stream * (words + 1) * 2 + stream * tiling.across * (need_ds + want_dv)
    return 16 * vec4s + (4 * stream * (1 + need_ds) if by_key else 0)


def tiling_of(options: CodegenOptions) -> Tiling:
    """The option attention_tiled's tiling (a mapping of Tiling's fields), else TILING."""
    chosen = options.attention_tiled
    if not isinstance(chosen, Mapping):
        return TILING
    unknown = set(chosen) - {"own", "stream", "block", "prefetch", "wrt"}
    if unknown:
        raise ValueError(
            f"codegen option attention_tiled: no field {sorted(unknown)}; it takes own, stream, block, prefetch, wrt"
        )
    sizes = {k: chosen[k] for k in ("own", "stream", "block") if k in chosen}
    if any(not isinstance(v, int) or isinstance(v, bool) or v < 1 for v in sizes.values()):
        raise ValueError(f"codegen option attention_tiled: own, stream and block are positive integers, got {sizes}")
    wrt = tuple(chosen.get("wrt", TILING.wrt))
    if not set(wrt) <= {"q", "k", "v", "kv"}:
        raise ValueError(f"codegen option attention_tiled: wrt names gradients among q, k, v, kv, got {list(wrt)}")
    tiling = Tiling(**{**chosen, "wrt": wrt, "prefetch": bool(chosen.get("prefetch", TILING.prefetch))})
    if tiling.own % 4 or tiling.stream % tiling.block or tiling.block > 16 or tiling.lanes > 1024:
        raise ValueError(
            f"codegen option attention_tiled: own {tiling.own}, stream {tiling.stream}, block {tiling.block} is no"
            " tiling (own a multiple of 4, stream a multiple of block, block at most 16, at most 1024 invocations)"
        )
    return tiling


def tiling_for(ctx: Context, options: CodegenOptions) -> Tiling | None:
    """The tiling this layout computes the attention_grad kernel of `ctx` in, or None where it
    does not: the option attention_tiled off, a head not of vec4 words or wider than 4 *
    MAX_WORDS, a gradient the tiling leaves to the row layout, or tiles past the device's
    shared memory (4 operand tiles of 32 rows: a head of 64 takes 43 KiB, past the spec's
    minimum of 32)."""
    node, _, _, d = geometry(ctx)
    if options.attention_tiled is False or node.op != "attention_grad" or d % 4 or d // 4 > MAX_WORDS:
        return None
    tiling = tiling_of(options)
    if node.attr("wrt") not in tiling.wrt or shared_bytes(tiling, node.attr("wrt"), d) > shared_limit(options):
        return None
    return tiling


def render(ctx: Context, tiling: Tiling = TILING) -> KernelSource:
    """The attention_grad kernel of `ctx` (one `tiling_for` gives a tiling) in `tiling`'s layout."""
    node, lead, t_dim, d = geometry(ctx)
    own, stream, block, across, lanes = tiling.own, tiling.stream, tiling.block, tiling.across, tiling.lanes
    down = stream // block  # invocations along the streamed rows in step 1 (`ts`)
    wrt = node.attr("wrt")
    causal = bool(node.attr("causal"))
    scale = float_lit(float(node.attr("scale")))
    q, k, v, g, lse, delta = node.inputs[:6]
    by_key = wrt in ("k", "v", "kv")
    want_dv = wrt in ("v", "kv")
    need_ds = wrt != "v"  # dp and ds: every gradient but dv's
    own1, own2 = (k, v) if by_key else (q, g)
    streamed1, streamed2 = (q, g) if by_key else (k, v)
    words = d // 4
    stride = words + 1  # vec4 words between rows in shared memory: each starts a bank over
    width = 2 * d if wrt == "kv" else d  # of an output row
    items = across * words  # step 2's: 4 own rows (og + across r) by one word wd
    per = -(-items // lanes)  # items an invocation
    fetches = -(-stream * words // lanes)  # vec4 words of each streamed operand an invocation loads
    stat_fetches = -(-stream // lanes)
    ctx.names.taken.update(_NAMES)
    ctx.names.taken.update(f"{stem}{k}{tail}" for stem in _ITEM_STEMS for k in range(per) for tail in _TAILS)
    ctx.names.taken.update(f"{stem}{i}_{n}" for stem in ("pf", "ps") for i in range(2) for n in range(fetches))

    epi = Emitter(ctx, anchor_value="value")
    epi.store_outputs(Ix(flat="o"))
    em = Emitter(ctx)

    em.line(f"int blk = int({TILE}.x), bh = int({TILE}.y);")
    em.line("int lid = int(gl_LocalInvocationID.x);")
    em.line(f"int T = {ctx.dim(t_dim)};")
    em.line(f"int own0 = blk * {own};  // this group's first own row")
    em.line(f"int to = lid % {across}, ts = lid / {across};  // step 1: own rows to + {across}r, streamed ts + {down}x")
    for k in range(per):
        at = f"lid + {lanes * k}" if k else "lid"
        em.line(
            f"int og{k} = ({at}) / {words}, wd{k} = ({at}) % {words};  // step 2: rows og{k} + {across}r, word wd{k}"
        )
    weight = dropout_weight(ctx, em, node)

    # the own rows into shared memory once (rows past T as the last row: their outputs are not stored)
    em.open(f"for (int e = lid; e < {own * words}; e += {lanes})")
    em.line(f"int r = own0 + e / {words}, w = e % {words};")
    em.line("int row = bh * T + min(r, T - 1);")
    for name, tensor in [("tile_a1", own1), ("tile_a2", own2)][: 2 if need_ds else 1]:
        em.line(f"{name}[(e / {words}) * {stride} + w] = {row_word(em, tensor, 'row', 'w', d, 4)};")
    em.close()
    if not by_key:  # each invocation's own query rows' statistics, for step 1
        for r in range(4):
            em.line(f"int qrow{r} = bh * T + min(own0 + to + {across * r}, T - 1);")
            em.line(f"float lse{r} = {em.value(lse, Ix(flat=f'qrow{r}'))};")
            if need_ds:
                em.line(f"float delta{r} = {em.value(delta, Ix(flat=f'qrow{r}'))};")
    outputs = ["dk", "dv"] if wrt == "kv" else ["acc"]
    for out in outputs:
        for k in range(per):
            em.line("vec4 " + ", ".join(f"{out}{k}_{r} = vec4(0.0)" for r in range(4)) + ";")

    if by_key:  # causal key blocks see queries from their own first row
        em.line(f"int start = {'own0' if causal else '0'}, end = T;")
    else:  # causal query blocks see keys up to their last row
        em.line(f"int start = 0, end = {f'min(T, own0 + {own})' if causal else 'T'};")
    streamed = [("tile_b1", streamed1), ("tile_b2", streamed2)]
    stats = [("tile_lse", lse), *([("tile_delta", delta)] if need_ds else [])] if by_key else []

    def fetch(first: str) -> None:
        """The streamed tile from row `first` into this invocation's registers
        (pf<operand>_<n>, and by key ps<stat>_<n>), rows past T as zeros; a scope of its own,
        so that no later read reuses its loads."""
        em.open("")
        for n in range(fetches):
            em.line(f"int e = min(lid + {lanes * n}, {stream * words - 1});  // an invocation past the last repeats it")
            em.line(f"int r = {first} + e / {words}, w = e % {words};")
            em.line("int row = bh * T + min(r, T - 1);")
            for i, (_, tensor) in enumerate(streamed):
                em.line(f"pf{i}_{n} = r < T ? {row_word(em, tensor, 'row', 'w', d, 4)} : vec4(0.0);")
            em.close()
            em.open("")
        for n in range(stat_fetches):
            em.line(f"int row = bh * T + min({first} + min(lid + {lanes * n}, {stream - 1}), T - 1);")
            for i, (_, tensor) in enumerate(stats):
                em.line(f"ps{i}_{n} = {em.value(tensor, Ix(flat='row'))};")
            em.close()
            em.open("")
        em.close()

    def keep() -> None:
        """The registers `fetch` filled into the shared tiles."""
        for n in range(fetches):
            e = f"lid + {lanes * n}"
            guarded = (n + 1) * lanes > stream * words
            text = f"{{}}[(({e}) / {words}) * {stride} + ({e}) % {words}] = {{}};"
            for i, (name, _) in enumerate(streamed):
                line = text.format(name, f"pf{i}_{n}")
                em.line(f"if ({e} < {stream * words}) {line}" if guarded else line)
        for n in range(stat_fetches):
            e = f"lid + {lanes * n}"
            for i, (name, _) in enumerate(stats):
                line = f"{name}[{e}] = ps{i}_{n};"
                em.line(f"if ({e} < {stream}) {line}" if (n + 1) * lanes > stream else line)

    for n in range(fetches):
        em.line(f"vec4 {', '.join(f'pf{i}_{n}' for i in range(len(streamed)))};")
    for n in range(stat_fetches if stats else 0):
        em.line(f"float {', '.join(f'ps{i}_{n}' for i in range(len(stats)))};")
    if tiling.prefetch:
        fetch("start")
    em.open(f"for (int j0 = start; j0 < end; j0 += {stream})")
    em.line("barrier();  // every invocation is done with the last tile")
    if not tiling.prefetch:  # this tile's rows, just before they are stored
        fetch("j0")
    keep()
    em.line("memoryBarrierShared();")
    em.line("barrier();")
    if tiling.prefetch:  # the next tile's loads in flight during this one's steps (past end: clamped rows)
        fetch(f"j0 + {stream}")

    # step 1: s (and dp) of own rows to + across r and streamed rows ts + down x
    pairs = [(r, x) for r in range(4) for x in range(block)]
    em.line("float " + ", ".join(f"s{r}{x} = 0.0" for r, x in pairs) + ";")
    if need_ds:
        em.line("float " + ", ".join(f"dp{r}{x} = 0.0" for r, x in pairs) + ";")
    em.open(f"for (int w = 0; w < {words}; w++)")
    for x in range(block):
        em.line(f"vec4 b1_{x} = tile_b1[(ts + {down * x}) * {stride} + w];")
        if need_ds:
            em.line(f"vec4 b2_{x} = tile_b2[(ts + {down * x}) * {stride} + w];")
    for r in range(4):
        em.line(f"vec4 a1_{r} = tile_a1[(to + {across * r}) * {stride} + w];")
        if need_ds:
            em.line(f"vec4 a2_{r} = tile_a2[(to + {across * r}) * {stride} + w];")
    for r, x in pairs:
        em.line(f"s{r}{x} += dot(a1_{r}, b1_{x});")
        if need_ds:
            em.line(f"dp{r}{x} += dot(a2_{r}, b2_{x});")
    em.close()
    for x in range(block):
        em.line(f"int srow{x} = j0 + ts + {down * x};  // a streamed row (past T: left out)")
    for r, x in pairs:
        own_row, other = f"(own0 + to + {across * r})", f"srow{x}"
        i, j = (other, own_row) if by_key else (own_row, other)  # query, key
        ok = f"{other} < T" + (f" && {i} >= {j}" if causal else "")
        row_lse = f"tile_lse[ts + {down * x}]" if by_key else f"lse{r}"
        row_delta = f"tile_delta[ts + {down * x}]" if by_key else f"delta{r}"
        em.line(f"float p{r}{x} = 0.0, ds{r}{x} = 0.0;")
        em.open(f"if ({ok})")
        em.line(f"float sj = s{r}{x} * {scale};")
        em.line(f"float p = sj == -DLC_INF ? 0.0 : exp(sj - {row_lse});")
        drop = ""
        if weight is not None:  # the probability (query i, key j)'s flat index
            em.line(f"float drop_w = {weight(f'(bh * T + {i}) * T + {j}')};")
            drop = " * drop_w"
        if need_ds:
            em.line(f"ds{r}{x} = p * (dp{r}{x}{drop} - {row_delta});")
        em.line(f"p{r}{x} = p{drop};")
        em.close()
    for x in range(block):
        at = f"(ts + {down * x}) * {across} + to"
        if want_dv:
            em.line(f"tile_p[{at}] = vec4({', '.join(f'p{r}{x}' for r in range(4))});")
        if need_ds:
            em.line(f"tile_ds[{at}] = vec4({', '.join(f'ds{r}{x}' for r in range(4))});")
    em.line("memoryBarrierShared();")
    em.line("barrier();")

    # step 2: an invocation's items k (4 own rows og_k + across r, word wd_k) over the tile's
    # streamed rows s
    terms = []  # (accumulator stem, shared array of the weights, streamed operand's tile)
    if need_ds:
        terms.append(("dk" if wrt == "kv" else "acc", "tile_ds", "tile_b1"))
    if want_dv:
        terms.append(("dv" if wrt == "kv" else "acc", "tile_p", "tile_b2"))
    ragged = items % lanes != 0  # the last item of some invocations is past the last

    def add_terms(check: str | None) -> None:
        em.open(f"for (int s = 0; s < {stream}; s++)")
        for k in range(per):
            if ragged and k == per - 1:
                em.open(f"if (og{k} < {across})")
            for _, weights, operand in terms:
                em.line(
                    f"vec4 {weights}_s{k} = {weights}[s * {across} + og{k}], "
                    f"{operand}_s{k} = {operand}[s * {stride} + wd{k}];"
                )
            for r, lane in enumerate("xyzw"):
                for acc, weights, operand in terms:
                    line = f"{acc}{k}_{r} += {weights}_s{k}.{lane} * {operand}_s{k};"
                    em.line(line if check is None else f"if ({check.format(o=f'og{k} + {across * r}')}) {line}")
            if ragged and k == per - 1:
                em.close()
        em.close()

    if causal:  # tiles the diagonal crosses: each term checked (query i >= key j)
        crossed = f"j0 < own0 + {own - 1}" if by_key else f"j0 + {stream - 1} > own0"
        em.open(f"if ({crossed})")
        add_terms("j0 + s >= own0 + {o}" if by_key else "j0 + s <= own0 + {o}")
        em.close()
        em.open("else")
        add_terms(None)
        em.close()
    else:
        add_terms(None)
    em.close()  # the tile loop

    for k in range(per):
        em.open(f"if (og{k} < {across})")
        for r in range(4):
            em.line(f"int out{r} = own0 + og{k} + {across * r};")
            em.open(f"if (out{r} < T)")
            em.line(f"int row = bh * T + out{r};")
            for out in outputs:  # dq and dk are sums of ds times a row: times scale here
                post = f" * {scale}" if out != "dv" and need_ds else ""
                at = f" + {d}" if out == "dv" else ""
                for c, lane in enumerate("xyzw"):
                    em.line(f"epilogue(row * {width}{at} + wd{k} * 4 + {c}, {out}{k}_{r}.{lane}{post});")
            em.close()
        em.close()

    shared = [
        f"shared vec4 tile_a1[{own * stride}];  // own rows",
        *([f"shared vec4 tile_a2[{own * stride}];"] if need_ds else []),
        f"shared vec4 tile_b1[{stream * stride}], tile_b2[{stream * stride}];  // a tile of streamed rows",
    ]
    if want_dv:
        shared.append(f"shared vec4 tile_p[{stream * across}];  // p w: [streamed row][to] (own rows to + {across}r)")
    if need_ds:
        shared.append(f"shared vec4 tile_ds[{stream * across}];  // ds, as tile_p")
    if by_key:
        shared.append(f"shared float tile_lse[{stream}];")
        if need_ds:
            shared.append(f"shared float tile_delta[{stream}];")
    what = (
        f"attention_grad wrt {wrt}{' causal' if causal else ''} over {format_shape(lead)} x [{t_dim}, {d}]: "
        f"a work group per {own} {'key' if by_key else 'query'} rows, tiles of {stream}, 4 x {block} register tiles"
    )
    return row_blocks_source(ctx, what, lanes, shared, epi, em, t_dim, lead, own)
