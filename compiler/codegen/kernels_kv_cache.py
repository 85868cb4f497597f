"""attention_cached's kernels (ops/kv_cache.py).

On the compute target: one work group per (leading index, new query row),
64 to 256 invocations splitting the keys that row sees (0 .. p + i) between them (one key
each in a decode step's cache of 256 rows), each with its own online softmax (running max m,
sum l and output row, rescaled as the max grows), then merged through shared memory: the
group's max M, l = sum l_t exp(m_t - M), each output word sum acc_t exp(m_t - M) / l (64
partial rows at a time). The query row is read once a group into shared memory, and a
stored cache as vec4s. A decode step has one new row a sequence, so the parallelism is
over the keys, not over query rows as FlashAttention's tiles are (kernels_attention.py).
On the texture target, two passes: a fragment per (query row, key) writes the row's score
of that key into a scratch texture (the keys past the row's last, -inf), then a fragment per
output element runs the online softmax over its row's scores and the values' column (its
row's scores computed once, not once per output column).
"""

from __future__ import annotations

from .. import registry
from ..ir import format_shape
from ..plan import size_of
from .attention_rows import each_word, row_blocks_source, row_ix, row_word
from .compute import KEY, TILE
from .fragment import TextureKernel, TexturePass, finish
from .glsl import Context, Emitter, Ix, KernelSource, mul
from .options import CodegenOptions
from .renderer import float_lit
from .texture import KEY as TEXTURE_KEY
from .texture import output_pass, spec_source

KEYS = 64  # the fewest invocations a work group, splitting one query row's keys
MAX_KEYS = 256  # the most (keys_a_group)
# A row's words are written out (constant array indices: the rows stay in registers, as in
# kernels_attention.py) up to this many.
UNROLL_WORDS = 32


def _out_index(ctx: Context, node, lead, n: str, row: str, col: str) -> str:
    """The flat output index of (query row `row` = lead index * n + i, column `col`): as is,
    or with the last lead axis and n swapped (`rows_first`)."""
    d = int(ctx.graph.nodes[node.inputs[0]].shape[-1])
    if not node.attr("rows_first"):
        return f"{row} * {d} + {col}"
    heads = ctx.dim(lead[-1])
    # row = (outer * H + h) * n + i  ->  ((outer * n + i) * H + h)
    return f"((({row}) / ({heads} * {n}) * {n} + ({row}) % {n}) * {heads} + (({row}) / {n}) % {heads}) * {d} + {col}"


def _geometry(ctx: Context):
    node = ctx.graph.nodes[ctx.kernel.anchor]
    q, kv, pos = node.inputs
    qshape = ctx.graph.nodes[q].shape
    rows = ctx.graph.nodes[kv].shape[-2]  # (symbolic: a window's own keys and values)
    return node, qshape[:-2], qshape[-2], int(qshape[-1]), ctx.dim(rows), pos


def keys_a_group(rows) -> int:
    """Invocations splitting a query row's keys: one key each for a cache of up to 256 rows
    (a decode step's keys in one round of loads), at least KEYS."""
    if isinstance(rows, str) and not rows.isdigit():  # symbolic: a window's own keys
        return MAX_KEYS
    return min(MAX_KEYS, max(KEYS, -(-int(rows) // KEYS) * KEYS))


def render(ctx: Context) -> KernelSource:
    node, lead, n_dim, d, rows, pos = _geometry(ctx)
    q, kv, _ = node.inputs
    scale = float_lit(float(node.attr("scale")))
    lanes = 4 if d % 4 == 0 else 1
    words, ty = d // lanes, "vec4" if lanes == 4 else "float"
    keys = keys_a_group(rows)
    names = ("o", "lid", "qi", "bh", "n", "p", "qrow", "orow", "last", "j", "krow", "vrow", "w", "t", "result")
    ctx.names.taken.update(names + ("f", "r", "kv_q"))

    epi = Emitter(ctx, anchor_value="value")
    epi.store_outputs(Ix(flat="o"))
    em = Emitter(ctx)
    extra: list[str] = []
    # the cache as stored (fusion.py stores a cache that is computed): its rows read as vec4s
    direct = lanes == 4 and kv in ctx.kernel.inputs
    if direct:
        binding = ctx.binding[ctx.plan.slot_of[kv]]
        extra.append(
            f"layout(std430, binding = {binding}) restrict readonly buffer B{binding}KV4"
            f" {{ vec4 v[]; }} b{binding}_kv4;  // the same buffer as vec4"
        )

    def kv_word(row: str, w: str) -> str:
        if direct:
            return f"b{binding}_kv4.v[{row} * {words} + {w}]"
        return row_word(em, kv, row, w, d, lanes)

    em.line(f"int qi = int({TILE}.x), bh = int({TILE}.y);")
    em.line("int lid = int(gl_LocalInvocationID.x);")
    em.line(f"int n = {ctx.dim(n_dim)};")
    em.line(f"int p = {em.integer(pos, Ix(flat='0'))};")
    em.line("int qrow = bh * n + qi;")
    em.line(f"int last = min(p + qi, {rows} - 1);  // the last key this query sees")

    def per_word(line) -> None:
        each_word(em, words, line, words <= UNROLL_WORDS)

    # the query row once a group (its index arithmetic is the fused layout's), then to registers
    em.open(f"for (int w = lid; w < {words}; w += {keys})")
    em.line(f"kv_q[w] = {row_word(em, q, 'qrow', 'w', d, lanes)};")
    em.close()
    em.line("memoryBarrierShared();")
    em.line("barrier();")
    em.line(f"{ty} qr[{words}];")
    per_word(lambda w: f"qr[{w}] = kv_q[{w}];")
    em.line(f"{ty} acc[{words}];")
    per_word(lambda w: f"acc[{w}] = {ty}(0.0);")
    em.line("float m = -DLC_INF, l = 0.0;")
    em.open(f"for (int j = lid; j <= last; j += {keys})")
    em.line(f"int krow = bh * {rows} + j, vrow = krow + {ctx.numel(lead)} * {rows};  // kv[0], kv[1]")
    em.line("float s = 0.0;")
    per_word(lambda w: f"s += dot(qr[{w}], {kv_word('krow', w)});")
    em.line(f"s *= {scale};")
    em.line("float mt = max(m, s);")
    em.line("float corr = m == mt ? 1.0 : exp(m - mt);  // m == mt == -inf: nothing yet to rescale")
    em.line("float pj = s == -DLC_INF ? 0.0 : exp(s - mt);")
    em.line("l = l * corr + pj;")
    per_word(lambda w: f"acc[{w}] = acc[{w}] * corr + pj * {kv_word('vrow', w)};")
    em.line("m = mt;")
    em.close()
    # merge the invocations' partial softmaxes: the group's max, each part rescaled to it
    em.line("kv_m[lid] = m;")
    em.line("memoryBarrierShared();")
    em.line("barrier();")
    em.line("float top = -DLC_INF;")
    em.open(f"for (int t = 0; t < {keys}; t++)")
    em.line("top = max(top, kv_m[t]);")
    em.close()
    em.line("float f = m == top ? 1.0 : exp(m - top);  // an invocation with no key: m = -inf, f = 0")
    em.line("kv_l[lid] = l * f;")
    per_word(lambda w: f"acc[{w}] *= f;")
    # the output rows summed KEYS at a time (shared memory for KEYS partial rows, not `keys`)
    for r in range(keys // KEYS):
        if r:
            em.line("memoryBarrierShared();")
            em.line("barrier();")
        em.open(f"if (lid / {KEYS} == {r})")
        op = "+=" if r else "="
        per_word(lambda w, op=op: f"kv_acc[(lid % {KEYS}) * {words} + {w}] {op} acc[{w}];")
        em.close()
    em.line("memoryBarrierShared();")
    em.line("barrier();")
    em.open(f"for (int w = lid; w < {words}; w += {keys})")
    em.line("float total = 0.0;")
    em.open(f"for (int t = 0; t < {keys}; t++)")
    em.line("total += kv_l[t];")
    em.close()
    em.line(f"{ty} sum = {ty}(0.0);")
    em.open(f"for (int t = 0; t < {KEYS}; t++)")
    em.line(f"sum += kv_acc[t * {words} + w];")
    em.close()
    em.line(f"{ty} result = sum / total;")
    em.line(f"int orow = {_out_index(ctx, node, lead, 'n', 'qrow', '0')};  // the row's first output")
    if lanes == 1:
        em.line("epilogue(orow + w, result);")
    for c, lane in enumerate("xyzw"[: lanes if lanes > 1 else 0]):
        em.line(f"epilogue(orow + w * 4 + {c}, result.{lane});")
    em.close()

    shared = [
        f"shared float kv_m[{keys}];",
        f"shared float kv_l[{keys}];",
        f"shared {ty} kv_acc[{KEYS * words}];",
        f"shared {ty} kv_q[{words}];",
        *extra,
    ]
    what = (
        f"attention_cached over {format_shape(lead)} x [{n_dim}, {d}] new rows, a cache of {rows} rows: "
        f"a work group per query row, {keys} invocations over its keys{', vec4 words' if lanes == 4 else ''}"
        f"{', the cache read as vec4s' if direct else ''}"
    )
    return row_blocks_source(ctx, what, keys, shared, epi, em, n_dim, lead, 1)


def _scores_pass(ctx: Context) -> str:
    """Fragment p = (query row r, key j), r in q's row order: r's score of key j (scaled), or
    -inf past the last key r sees."""
    node, lead, n_dim, d, rows, pos = _geometry(ctx)
    q, kv, _ = node.inputs
    scale = float_lit(float(node.attr("scale")))
    em = Emitter(ctx)
    em.own_element("p", mul(mul(ctx.numel(lead), ctx.dim(n_dim)), rows))
    em.line(f"int kv_n = {ctx.dim(n_dim)};")
    em.line(f"int kv_row = p / {rows}, kv_j = p - kv_row * {rows};")
    em.line("int kv_bh = kv_row / kv_n, kv_i = kv_row - kv_bh * kv_n;")
    em.line(f"int kv_p = {em.integer(pos, Ix(flat='0'))};")
    em.line("float kv_s = -DLC_INF;")
    em.open(f"if (kv_j <= min(kv_p + kv_i, {rows} - 1))")
    em.line(f"int kv_krow = kv_bh * {rows} + kv_j;")
    em.line("kv_s = 0.0;")
    em.open(f"for (int kv_d = 0; kv_d < {d}; kv_d++)")
    qv = em.value(q, row_ix(em, q, "kv_row", "kv_d", f"(kv_row * {d} + kv_d)"))
    kd = em.value(kv, row_ix(em, kv, "kv_krow", "kv_d", f"(kv_krow * {d} + kv_d)"))
    em.line(f"kv_s += {qv} * {kd};")
    em.close()
    em.line(f"kv_s *= {scale};")
    em.close()
    em.line(ctx.renderer.store("partials", "p", "kv_s"))
    what = f"attention_cached over {format_shape(lead)} x [{n_dim}, {d}], a cache of {rows} rows: the scores"
    return finish(ctx, em, None, what)


def texture_body(ctx: Context, em: Emitter, unit: int) -> str:
    """Output element o: its query row's online softmax over the scores of the keys it sees
    (the first pass's, on texture unit `unit`) and the values' column."""
    node, lead, n_dim, d, rows, pos = _geometry(ctx)
    _, kv, _ = node.inputs
    em.line(f"int kv_n = {ctx.dim(n_dim)};")
    em.line(f"int kv_row = o / {d}, kv_col = o - kv_row * {d};")
    if node.attr("rows_first"):  # o's row is (outer * n + i) * H + h: back to (outer * H + h) * n + i
        heads = ctx.dim(lead[-1])
        outer, head, i = f"kv_row / ({heads} * kv_n)", f"kv_row % {heads}", f"(kv_row / {heads}) % kv_n"
        em.line(f"kv_row = (({outer}) * {heads} + {head}) * kv_n + {i};")
    em.line("int kv_bh = kv_row / kv_n, kv_i = kv_row - kv_bh * kv_n;")
    em.line(f"int kv_p = {em.integer(pos, Ix(flat='0'))};")
    em.line(f"int kv_last = min(kv_p + kv_i, {rows} - 1);")
    em.line("float kv_m = -DLC_INF, kv_l = 0.0, kv_acc = 0.0;")
    em.open("for (int kv_j = 0; kv_j <= kv_last; kv_j++)")
    em.line(f"int kv_vrow = kv_bh * {rows} + kv_j + {ctx.numel(lead)} * {rows};  // kv[1]")
    em.line(f"float kv_s = {ctx.load(f'b{unit}', f'kv_row * {rows} + kv_j')};")
    em.line("float kv_mt = max(kv_m, kv_s);")
    em.line("float kv_corr = kv_m == kv_mt ? 1.0 : exp(kv_m - kv_mt);")
    em.line("float kv_pj = kv_s == -DLC_INF ? 0.0 : exp(kv_s - kv_mt);")
    em.line("kv_l = kv_l * kv_corr + kv_pj;")
    vj = em.value(kv, row_ix(em, kv, "kv_vrow", "kv_col", f"(kv_vrow * {d} + kv_col)"))
    em.line(f"kv_acc = kv_acc * kv_corr + kv_pj * {vj};")
    em.line("kv_m = kv_mt;")
    em.close()
    em.line("float acc = kv_acc / kv_l;")
    return f"attention_cached over {format_shape(lead)} x [{n_dim}, {d}], a cache of {rows} rows, a fragment an output"


def lower(ctx: Context, options: CodegenOptions) -> KernelSource:
    """The compute target's lowering of attention_cached."""
    return render(ctx)


def lower_texture(ctx: Context, options: CodegenOptions) -> TextureKernel:
    """The texture target's lowering of attention_cached: the scores pass into the scratch
    texture (read on the unit after the kernel's own), then a pass per output."""
    node = ctx.graph.nodes[ctx.kernel.anchor]
    q, kv, _ = node.inputs
    qshape = ctx.graph.nodes[q].shape
    unit = len(ctx.binding)
    scratch = {"size": list(size_of((*qshape[:-1], ctx.graph.nodes[kv].shape[-2]))), "unit": unit}
    passes = [TexturePass(None, _scores_pass(ctx))]
    body = lambda ctx, em: texture_body(ctx, em, unit)  # noqa: E731
    passes += [TexturePass(o, output_pass(ctx, o, body)) for o in ctx.kernel.outputs]
    return TextureKernel(spec_source(ctx), tuple(passes), scratch)


registry.register_lowering("cached_attention", KEY, lower)
registry.register_lowering("cached_attention", TEXTURE_KEY, lower_texture)
