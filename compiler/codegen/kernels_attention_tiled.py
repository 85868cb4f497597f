"""Attention's gradient as register-tiled kernels on the compute target (FlashAttention-2's
backward): kernels_attention.py's layout (an invocation per own row, the row in registers)
stays for the forward, for heads this layout does not take, and on the texture target.

A work group of LANES invocations owns OWN rows of one leading index (key rows for wrt k, v
or kv; query rows for wrt q) and streams the other side's rows through shared memory in
tiles of STREAM rows. Its two own operands (k and v, or q and g) sit in shared memory for
the whole kernel; each tile brings the two streamed ones (q and g, or k and v) and, by key,
the tile's lse and delta. Per tile:

1. Each invocation computes a 4 x 2 block of s = own1 . streamed1 and dp = own2 . streamed2:
   own rows to + 8r (r < 4), streamed rows ts + 16x (x < 2), so that the 8 invocations of a
   quarter warp read 8 distinct rows (rows are W + 1 vec4 words apart: a bank each) and
   share one streamed row. It turns them into p = exp(s scale - lse) (times the dropout
   weight w where there is dropout) and ds = p (dp w - delta), and stores each as one vec4
   per streamed row and `to`: the own rows to, to + 8, to + 16, to + 24.
2. Each invocation adds into 4 own rows (og + 8r) x one vec4 word of D: by key dk += ds q and
   dv += p w g, by query dq += ds k, reading per streamed row one vec4 of p or ds (its 4
   rows, a broadcast across its quarter warp) and one of the streamed operand.

Each output is summed by one invocation in a fixed order (deterministic, no atomics). Terms
left out are never added (a NaN there stays out, as in the reference): in step 1 a masked or
padded term stores 0 without computing; streamed rows past T load as zeros, so step 2 adds
0 * 0 for them; a causal tile on the diagonal (the first one by key, the last one by query:
both sides' blocks start at multiples of OWN = STREAM) checks each term in step 2, since its
masked rows hold real values.
"""

from __future__ import annotations

from ..ir import format_shape
from ..plan import size_of
from .attention_rows import dropout_weight, geometry, row_word
from .compute import TILE, header, kernel_source, shared_limit
from .glsl import Context, Emitter, Ix, KernelSource
from .options import CodegenOptions
from .renderer import float_lit

OWN = 32  # own rows a work group
STREAM = 32  # streamed rows a tile (= OWN: the causal diagonal is one whole tile)
LANES = 128  # invocations a group: 8 x 16 in step 1 (8 x 4 own by 16 x 2 streamed rows)
MAX_WORDS = 16  # vec4 words of a row: step 2 gives an invocation one word of 4 own rows


# the names the kernel declares (the emitter's own temporaries stay clear of them)
_NAMES = {
    *("lid", "blk", "bh", "T", "own0", "to", "ts", "og", "wd", "start", "end", "j0", "e", "r", "w", "s"),
    *("row", "sj", "p", "o", "value", "srow0", "srow1"),
    *(f"{stem}{r}" for stem in ("qrow", "lse", "delta", "out", "acc", "dk", "dv", "a1_", "a2_") for r in range(4)),
    *(f"{stem}{r}{x}" for stem in ("s", "dp", "p", "ds") for r in range(4) for x in range(2)),
    *("b1_0", "b1_1", "b2_0", "b2_1"),
    *(f"tile_{name}" for name in ("a1", "a2", "b1", "b2", "p", "ds", "lse", "delta")),
    *(f"tile_{name}_s" for name in ("b1", "b2", "p", "ds")),
}


def shared_bytes(wrt: str, d: int) -> int:
    """The shared memory the kernel for `wrt` and a head of d declares."""
    words = d // 4
    need_ds, want_dv, by_key = wrt != "v", wrt in ("v", "kv"), wrt != "q"
    vec4s = OWN * (words + 1) * (2 if need_ds else 1) + STREAM * words * 2 + STREAM * 8 * (need_ds + want_dv)
    return 16 * vec4s + (4 * STREAM * (1 + need_ds) if by_key else 0)


def takes(ctx: Context, options: CodegenOptions) -> bool:
    """Whether this layout computes the attention_grad kernel of `ctx`: a head of vec4 words,
    at most 4 * MAX_WORDS wide, whose tiles fit the device's shared memory (4 operand tiles
    of 32 rows: a head of 64 takes 42 KiB, past the spec's minimum of 32)."""
    node, _, _, d = geometry(ctx)
    if node.op != "attention_grad" or d % 4 or d // 4 > MAX_WORDS:
        return False
    return shared_bytes(node.attr("wrt"), d) <= shared_limit(options)


def render(ctx: Context) -> KernelSource:
    node, lead, t_dim, d = geometry(ctx)
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
    stride = words + 1  # vec4 words between own rows in shared memory: each starts a bank over
    width = 2 * d if wrt == "kv" else d  # of an output row
    ctx.names.taken.update(_NAMES)

    epi = Emitter(ctx, anchor_value="value")
    epi.store_outputs(Ix(flat="o"))
    em = Emitter(ctx)

    em.line(f"int blk = int({TILE}.x), bh = int({TILE}.y);")
    em.line("int lid = int(gl_LocalInvocationID.x);")
    em.line(f"int T = {ctx.dim(t_dim)};")
    em.line(f"int own0 = blk * {OWN};  // this group's first own row")
    em.line("int to = lid % 8, ts = lid / 8;  // step 1: own rows to + 8r, streamed rows ts + 16x")
    em.line(f"int og = lid / {words}, wd = lid % {words};  // step 2: own rows og + 8r, word wd")
    weight = dropout_weight(ctx, em, node)

    def load_rows(dst: list[tuple[str, int]], first: str, zero_past: bool, pitch: int) -> None:
        """Rows first .. first + 31 of each (shared array, tensor) into shared memory, `pitch`
        vec4 words apart: rows past T as zeros (`zero_past`) or as the last row."""
        em.open(f"for (int e = lid; e < {OWN * words}; e += {LANES})")
        em.line(f"int r = {first} + e / {words}, w = e % {words};")
        em.line("int row = bh * T + min(r, T - 1);")
        for name, tensor in dst:
            word = row_word(em, tensor, "row", "w", d, 4)
            value = f"r < T ? {word} : vec4(0.0)" if zero_past else word
            em.line(f"{name}[(e / {words}) * {pitch} + w] = {value};")
        em.close()

    load_rows([("tile_a1", own1), ("tile_a2", own2)] if need_ds else [("tile_a1", own1)], "own0", False, stride)
    if not by_key:  # each invocation's own query rows' statistics, for step 1
        for r in range(4):
            em.line(f"int qrow{r} = bh * T + min(own0 + to + {8 * r}, T - 1);")
            em.line(f"float lse{r} = {em.value(lse, Ix(flat=f'qrow{r}'))};")
            if need_ds:
                em.line(f"float delta{r} = {em.value(delta, Ix(flat=f'qrow{r}'))};")
    outputs = ["dk", "dv"] if wrt == "kv" else ["acc"]
    for out in outputs:
        em.line(f"vec4 {out}0 = vec4(0.0), {out}1 = vec4(0.0), {out}2 = vec4(0.0), {out}3 = vec4(0.0);")

    if by_key:  # causal key blocks see queries from their own first row
        em.line(f"int start = {'own0' if causal else '0'}, end = T;")
    else:  # causal query blocks see keys up to their last row
        em.line(f"int start = 0, end = {f'min(T, own0 + {OWN})' if causal else 'T'};")
    em.open(f"for (int j0 = start; j0 < end; j0 += {STREAM})")
    em.line("barrier();  // every invocation is done with the last tile")
    load_rows([("tile_b1", streamed1), ("tile_b2", streamed2)], "j0", True, words)
    if by_key:
        em.open(f"if (lid < {STREAM})")
        em.line("int row = bh * T + min(j0 + lid, T - 1);")
        em.line(f"tile_lse[lid] = {em.value(lse, Ix(flat='row'))};")
        if need_ds:
            em.line(f"tile_delta[lid] = {em.value(delta, Ix(flat='row'))};")
        em.close()
    em.line("memoryBarrierShared();")
    em.line("barrier();")

    # step 1: s (and dp) of own rows to + 8r and streamed rows ts + 16x
    pairs = [(r, x) for r in range(4) for x in range(2)]
    em.line("float " + ", ".join(f"s{r}{x} = 0.0" for r, x in pairs) + ";")
    if need_ds:
        em.line("float " + ", ".join(f"dp{r}{x} = 0.0" for r, x in pairs) + ";")
    em.open(f"for (int w = 0; w < {words}; w++)")
    for x in range(2):
        em.line(f"vec4 b1_{x} = tile_b1[(ts + {16 * x}) * {words} + w];")
        if need_ds:
            em.line(f"vec4 b2_{x} = tile_b2[(ts + {16 * x}) * {words} + w];")
    for r in range(4):
        em.line(f"vec4 a1_{r} = tile_a1[(to + {8 * r}) * {stride} + w];")
        if need_ds:
            em.line(f"vec4 a2_{r} = tile_a2[(to + {8 * r}) * {stride} + w];")
    for r, x in pairs:
        em.line(f"s{r}{x} += dot(a1_{r}, b1_{x});")
        if need_ds:
            em.line(f"dp{r}{x} += dot(a2_{r}, b2_{x});")
    em.close()
    for x in range(2):
        em.line(f"int srow{x} = j0 + ts + {16 * x};  // a streamed row (past T: left out)")
    for r, x in pairs:
        own_row, other = f"(own0 + to + {8 * r})", f"srow{x}"
        i, j = (other, own_row) if by_key else (own_row, other)  # query, key
        ok = f"{other} < T" + (f" && {i} >= {j}" if causal else "")
        row_lse = f"tile_lse[ts + {16 * x}]" if by_key else f"lse{r}"
        row_delta = f"tile_delta[ts + {16 * x}]" if by_key else f"delta{r}"
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
    for x in range(2):
        at = f"(ts + {16 * x}) * 8 + to"
        if want_dv:
            em.line(f"tile_p[{at}] = vec4({', '.join(f'p{r}{x}' for r in range(4))});")
        if need_ds:
            em.line(f"tile_ds[{at}] = vec4({', '.join(f'ds{r}{x}' for r in range(4))});")
    em.line("memoryBarrierShared();")
    em.line("barrier();")

    # step 2: 4 own rows og + 8r, word wd, over the tile's streamed rows s
    terms = []  # (accumulator stem, shared array of the weights, streamed operand's tile)
    if need_ds:
        terms.append(("dk" if wrt == "kv" else "acc", "tile_ds", "tile_b1"))
    if want_dv:
        terms.append(("dv" if wrt == "kv" else "acc", "tile_p", "tile_b2"))

    def add_terms(check: str | None) -> None:
        em.open(f"for (int s = 0; s < {STREAM}; s++)")
        for _, weights, operand in terms:
            em.line(f"vec4 {weights}_s = {weights}[s * 8 + og], {operand}_s = {operand}[s * {words} + wd];")
        for r, lane in enumerate("xyzw"):
            for acc, weights, operand in terms:
                line = f"{acc}{r} += {weights}_s.{lane} * {operand}_s;"
                em.line(line if check is None else f"if ({check.format(o=f'og + {8 * r}')}) {line}")
        em.close()

    em.line(f"// {8 * words} of the {LANES} invocations hold outputs")
    em.open("if (og < 8)")
    if causal:  # the diagonal tile: query i >= key j, own and streamed rows from one start
        em.open("if (j0 == own0)")
        add_terms("s >= {o}" if by_key else "s <= {o}")
        em.close()
        em.open("else")
        add_terms(None)
        em.close()
    else:
        add_terms(None)
    em.close()
    em.close()  # the tile loop

    em.open("if (og < 8)")
    for r in range(4):
        em.line(f"int out{r} = own0 + og + {8 * r};")
        em.open(f"if (out{r} < T)")
        em.line(f"int row = bh * T + out{r};")
        for out in outputs:  # dq and dk are sums of ds times a row: times scale here
            post = f" * {scale}" if out != "dv" and need_ds else ""
            at = f" + {d}" if out == "dv" else ""
            for c, lane in enumerate("xyzw"):
                em.line(f"epilogue(row * {width}{at} + wd * 4 + {c}, {out}{r}.{lane}{post});")
        em.close()
    em.close()

    shared = [
        f"shared vec4 tile_a1[{OWN * stride}];  // own rows",
        *([f"shared vec4 tile_a2[{OWN * stride}];"] if need_ds else []),
        f"shared vec4 tile_b1[{STREAM * words}], tile_b2[{STREAM * words}];  // a tile of streamed rows",
    ]
    if want_dv:
        shared.append(f"shared vec4 tile_p[{STREAM * 8}];  // p w: [streamed row][to] (own rows to + 8r)")
    if need_ds:
        shared.append(f"shared vec4 tile_ds[{STREAM * 8}];  // ds, as tile_p")
    if by_key:
        shared.append(f"shared float tile_lse[{STREAM}];")
        if need_ds:
            shared.append(f"shared float tile_delta[{STREAM}];")
    local = (LANES, 1, 1)
    what = (
        f"attention_grad wrt {wrt}{' causal' if causal else ''} over {format_shape(lead)} x [{t_dim}, {d}]: "
        f"a work group per {OWN} {'key' if by_key else 'query'} rows, tiles of {STREAM}, 4 x 2 register tiles"
    )
    lines = header(ctx, what, local, shared)
    lines += ["void epilogue(int o, float value) {", *epi.lines, "}", ""]
    lines += ["void main() {", *em.lines, "}"]
    grid = {"tiles": [[list(size_of((t_dim,))), OWN], [list(size_of(lead)), 1], [[1], 1]]}
    return kernel_source(ctx, "\n".join(lines) + "\n", grid, local)
