"""Packed matmul and conv2d for the texture target: both operands repacked four k values a
texel.

The per-output loop of `texture.matmul_body` fetches one float per texelFetch, and every
fetch turns a flat index into texture coordinates with an integer division and modulo by the
texture's width (scalarized per lane on llvmpipe; a long dependent chain on a GPU). Here a
matmul kernel renders these passes instead (as tfjs's packed matmul, 4 values a texel):

1. a pack pass per operand into an RGBA32F texture: row r's k = 4q..4q+3 (zero past K) in one
   texel, where row r is (batch, i) of A or (batch, j) of B: transposes, broadcasting and any
   view fused into the operand are resolved once per element here, not once per product;
2. a products pass into a third RGBA32F texture (rows (batch, i), 4 values of j a texel):
   each fragment computes outputs j..j+3 of row i, looping q over ceil(K/4) texels with one
   fetch of A and four of B (5 fetches for 16 products, against 2 for 1 in the plain loop;
   1.5-2x faster on llvmpipe than one output a fragment from the same packed operands); a
   matmul whose B is a matrix computes 2 rows x 2 columns a fragment instead (`_paired`: 4
   fetches for 16 products), and the loops fetch with texture() at texel centres (on
   SwiftShader both count: ~1.8x on the MLP and matmul passes); for WebGL2 (`es`) that
   matmul computes 8 rows x 4 columns a fragment into 8 render targets at once (`_quad`: 12
   fetches for 128 products; 4 x 4, 8 for 64, was 1.3-1.4x faster on SwiftShader than the
   pairs, and 8 x 4 1.1-1.2x faster again, each measured A/B in one page), the 8 layers of one
   RGBA32F array texture (dlc.js), which its output passes read with one fetch (a layer by
   index); a context of 4 draw buffers (WebGL2's least) compiles the pass with FOUR_TARGETS
   defined and draws it twice, 4 rows each;
3. one pass per output: fragment o reads its product and runs the kernel's epilogue (an
   output stored in a param kept 4 values a texel, the `packed_params` option: 4 outputs a
   fragment, `_unpack4_pass`).

conv2d (one group) is the same product per tap: x's rows are its pixels (b, y, x), w's are
(di, dj, output channel), k runs over input channels, and the products pass loops over the
taps inside the image. Its input gradient likewise: dy's pixels, w's (di, dj, input channel)
rows, k over output channels, looping over the output pixels whose windows hold the input
pixel. The filter gradient packs x's pixels (4 input channels a texel) and dy's (4 output
channels a texel); its products fragment (di, dj, c) x 4 output channels walks every output
pixel whose tap lies inside the image, 2 fetches for 4 products (`_filter_products`). The
products texture's rows are the output's coordinates but the last in every case.

A packed texture holds row r down column r % width, in bands of ceil(K/4) texels (band r /
width), so the K loop fetches (x, y + q): nothing divided per fetch, and neighbouring outputs
read neighbouring columns. The kernel spec's `packed` entries (`unit`, `rows`, `depth` = K)
tell the runtime to make these textures (`runtime/textures.packed_layout`); a pass with
`into` renders one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..plan import size_of
from . import index
from .fragment import TextureKernel, TexturePass, finish
from .glsl import Context, Emitter, Ix, comment, kernel_source, numel_known
from .kernels_window import describe_options, each_tap, each_window_touching, geometry

# Below these (known sizes) the per-output loop is as fast: too little to pack, or too few
# products for two more passes to pay (measured on llvmpipe).
MIN_DEPTH = 8
MIN_PRODUCTS = 8192


# Texture units every GL 3.3 / WebGL2 fragment shader has: the packed textures take 3 more
# after the kernel's slots
TEXTURE_UNITS = 16


def applies(ctx: Context) -> bool:
    """Whether this kernel is a matmul (or a conv2d) the packed passes render."""
    k = ctx.kernel
    if k.kind not in ("matmul", "window") or len(ctx.binding) + 3 > TEXTURE_UNITS:
        return False
    node = ctx.graph.nodes[k.anchor]
    if k.kind == "window":  # conv2d and its gradients over one group: a product per tap
        if node.attr("groups", 1) != 1:
            return False
        if node.op == "conv2d_grad_filter":
            return _filter_pays(ctx, node)
        return node.op in ("conv2d", "conv2d_grad_input") and _conv_pays(ctx, node)
    ash = ctx.graph.nodes[node.inputs[0]].shape
    kdim = ash[-2] if node.attr("ta") else ash[-1]
    if isinstance(kdim, int) and kdim < MIN_DEPTH:
        return False
    products = numel_known((*node.shape, kdim))
    return products is None or products >= MIN_PRODUCTS


def _conv_pays(ctx: Context, node) -> bool:
    ws = ctx.graph.nodes[node.inputs[1]].shape
    channels = ws[2] if node.op == "conv2d" else ws[3]  # what each tap's product sums over
    products = numel_known((*node.shape, *ws[:2], channels))
    if node.op == "conv2d_grad_input" and channels < CONV_MIN_CHANNELS:
        return False
    return products is None or products >= MIN_PRODUCTS


CONV_MIN_CHANNELS = 2  # the input gradient's output channels: with one, packing measured no faster
FEW_CHANNELS = 4  # a conv2d over fewer input channels packs its filter along the output channels


def _few_channels(ctx: Context, node) -> int | None:
    """A conv2d's input channels when fewer than FEW_CHANNELS (a texel of x holds them all)."""
    if node.op != "conv2d":
        return None
    c = ctx.graph.nodes[node.inputs[1]].shape[2]
    return c if isinstance(c, int) and c < FEW_CHANNELS else None


def _filter_pays(ctx: Context, node) -> bool:
    """A filter gradient packs when its products (filter x output pixels) are many (or
    symbolically many): each fragment loops over every output pixel, as the per-output loop does."""
    ds = ctx.graph.nodes[node.inputs[1]].shape
    products = numel_known((*node.shape, *ds[:3]))
    return products is None or products >= MIN_PRODUCTS


@dataclass(frozen=True)
class _Operand:
    """One side of the product as packed rows of `depth` values (k)."""

    tensor: int
    rows: tuple  # the shape its rows are numbered in (row r's coordinates)
    index: Callable[[tuple, str], tuple]  # (row coordinates, k) -> the tensor's multi-index
    unit: int  # its packed texture's texture unit
    name: str
    depth: object = None  # its k's extent when the two sides' differ (the filter gradient)

    def spec(self, ctx: Context, depth) -> dict:
        shape = ctx.graph.nodes[self.tensor].shape
        return {
            "unit": self.unit,
            "rows": list(size_of(self.rows)),
            "depth": list(size_of((depth,))),
            "label": f"'{ctx.graph.label(self.tensor)}' {list(shape)}",  # for error messages
        }


def _matmul_operands(ctx: Context, node, unit: int) -> tuple[_Operand, _Operand, object]:
    """A's rows are (batch, i), B's are (batch, j); k is A's last axis unless transposed, B's
    first of two unless transposed."""
    g = ctx.graph
    a, b = node.inputs
    ta, tb = bool(node.attr("ta")), bool(node.attr("tb"))
    ash, bsh = g.nodes[a].shape, g.nodes[b].shape

    def operand(t, shape, k_last: bool, unit: int, name: str) -> _Operand:
        rows = (*shape[:-2], shape[-2] if k_last else shape[-1])
        if k_last:
            return _Operand(t, rows, lambda rc, k: (*rc, k), unit, name)
        return _Operand(t, rows, lambda rc, k: (*rc[:-1], k, rc[-1]), unit, name)

    kdim = ash[-2] if ta else ash[-1]
    return operand(a, ash, not ta, unit, "A"), operand(b, bsh, tb, unit + 1, "B"), kdim


def _conv_operands(ctx: Context, node, unit: int) -> tuple[_Operand, _Operand, object]:
    """x [B, H, W, C]'s rows are its pixels (b, y, x); w [KH, KW, C, CO]'s are (di, dj, co)."""
    g = ctx.graph
    x, w = node.inputs
    xs, ws = g.nodes[x].shape, g.nodes[w].shape
    px = _Operand(x, tuple(xs[:3]), lambda rc, k: (*rc, k), unit, "x")
    pw = _Operand(w, (ws[0], ws[1], ws[3]), lambda rc, k: (rc[0], rc[1], k, rc[2]), unit + 1, "w")
    return px, pw, ws[2]


def _conv_few_operands(ctx: Context, node, unit: int) -> tuple[_Operand, _Operand, object]:
    """A conv2d over fewer than 4 input channels: x's pixels hold all their channels in one
    texel; w's rows are (di, dj, c), 4 output channels a texel (as the products texture)."""
    g = ctx.graph
    x, w = node.inputs
    xs, ws = g.nodes[x].shape, g.nodes[w].shape
    px = _Operand(x, tuple(xs[:3]), lambda rc, k: (*rc, k), unit, "x", xs[3])
    pw = _Operand(w, tuple(ws[:3]), lambda rc, k: (*rc, k), unit + 1, "w", ws[3])
    return px, pw, ws[3]


def _conv_grad_filter_operands(ctx: Context, node, unit: int) -> tuple[_Operand, _Operand, object]:
    """x [B, H, W, C] and dy [B, OH, OW, CO], both with their pixels as rows: x 4 channels a
    texel, dy 4 output channels a texel (the filter's last axis, as the products texture)."""
    g = ctx.graph
    x, dy = node.inputs
    xs, ds = g.nodes[x].shape, g.nodes[dy].shape
    px = _Operand(x, tuple(xs[:3]), lambda rc, k: (*rc, k), unit, "x", xs[3])
    pd = _Operand(dy, tuple(ds[:3]), lambda rc, k: (*rc, k), unit + 1, "dy", ds[3])
    return px, pd, ds[3]


def _conv_grad_input_operands(ctx: Context, node, unit: int) -> tuple[_Operand, _Operand, object]:
    """dy [B, OH, OW, CO]'s rows are its pixels; w [KH, KW, C, CO]'s are (di, dj, c); k runs
    over the output channels."""
    g = ctx.graph
    dy, w = node.inputs
    ds, ws = g.nodes[dy].shape, g.nodes[w].shape
    pd = _Operand(dy, tuple(ds[:3]), lambda rc, k: (*rc, k), unit, "dy")
    pw = _Operand(w, tuple(ws[:3]), lambda rc, k: (*rc, k), unit + 1, "w")
    return pd, pw, ws[3]


def render_kernel(ctx: Context, es: bool, packed_params: frozenset = frozenset()):
    """The kernel's pack passes and its output passes (a `fragment.TextureKernel`); an output
    stored in a param of `packed_params` (4 values a texel) is rendered 4 outputs a fragment."""
    k = ctx.kernel
    node = ctx.graph.nodes[k.anchor]
    unit = len(ctx.binding)  # the packed textures take the units after the kernel's slots
    operands = {
        "matmul": _matmul_operands,
        "conv2d": _conv_operands,
        "conv2d_grad_input": _conv_grad_input_operands,
        "conv2d_grad_filter": _conv_grad_filter_operands,
    }[node.op]
    if _few_channels(ctx, node):
        operands = _conv_few_operands
    pa, pb, depth = operands(ctx, node, unit)
    own = [depth if p.depth is None else p.depth for p in (pa, pb)]
    passes = [TexturePass(None, _pack_pass(ctx, p, d, es, packed_params), into=p.unit) for p, d in zip((pa, pb), own)]
    packed = [p.spec(ctx, d) for p, d in zip((pa, pb), own)]
    # the products, four outputs a fragment, into a third RGBA texture (rows: the output's
    # coordinates but the last, j; 4 values of j a texel); then each output pass reads its own
    # and runs the epilogue
    rows, n = tuple(node.shape[:-1]), node.shape[-1]
    quad = _quad(ctx, es)  # its layers, or 0
    for t in range(quad or 1):
        label = f"the products of kernel {k.name}" + (f" (render target {t})" if quad else "")
        packed.append({"unit": unit + 2 + t, "rows": list(size_of(rows)), "depth": list(size_of((n,))), "label": label})
    products = _quad_products_pass(ctx, pa, pb, depth, quad) if quad else _products_pass(ctx, pa, pb, depth, es)
    passes.append(TexturePass(None, products, into=unit + 2))
    for o in k.outputs:
        if quad and _stored_packed(ctx, o, packed_params):
            passes.append(TexturePass(o, _unpack4_pass(ctx, o, unit + 2, quad)))
        else:
            passes.append(TexturePass(o, _unpack_pass(ctx, o, unit + 2, es, quad)))
    ks = kernel_source(ctx, "", {"flat": [1], "per_group": 1}, (1, 1, 1))
    return TextureKernel(ks, tuple(passes), None, tuple(packed))


def _quads(ctx: Context, depth) -> str:
    """ceil(depth / 4): texels per packed row."""
    if isinstance(depth, int):
        return str(-(-depth // 4))
    return f"(({ctx.dim(depth)} + 3) / 4)"


def _line_div(quads: str, es: bool) -> str:
    """The fragment's line over `quads` texels a row (WebGL2: by a power of two as a shift)."""
    q = index.div("int(gl_FragCoord.y)", quads, es)
    return q if q.startswith("(") else f"({q})"


def _line_mod(quads: str, es: bool) -> str:
    q = index.mod("int(gl_FragCoord.y)", quads, es)
    return q if q.startswith("(") else f"({q})"


def _texel_rows(ctx: Context, p: _Operand, depth, packed_params: frozenset) -> int | None:
    """The unit of the param operand p is when it is stored 4 values a texel (`packed_params`)
    with k along its last axis, a multiple of 4 long: each packed texel is one of its texels."""
    node = ctx.graph.nodes[p.tensor]
    slot = ctx.plan.slot_of.get(p.tensor)
    if node.op != "param" or slot is None or ctx.plan.slots[slot].name not in packed_params:
        return None
    rows = tuple(f"r{i}" for i in range(len(p.rows)))
    if p.index(rows, "k") != (*rows, "k") or not isinstance(depth, int) or depth % 4 or node.shape[-1] != depth:
        return None
    return ctx.binding.get(slot)


def _pack_pass(ctx: Context, p: _Operand, depth, es: bool, packed_params: frozenset = frozenset()) -> str:
    """Operand p's packed texture: row r down column r % width, texel q of it at
    ((r / width) * quads + q), holding k = 4q..4q+3 (zeros past the depth)."""
    g = ctx.graph
    em = Emitter(ctx)
    quads = _quads(ctx, depth)
    K = ctx.dim(depth)
    em.line(f"int r = {_line_div(quads, es)} * dlc_width + int(gl_FragCoord.x);")
    em.line(f"int k0 = {_line_mod(quads, es)} * 4;")
    em.line(f"if (r >= {ctx.numel(p.rows)}) {{ dlc_out4 = vec4(0.0); return; }}")
    rc = em.coords(Ix(flat="r"), p.rows)
    unit = _texel_rows(ctx, p, depth, packed_params)
    if unit is not None:  # a param stored 4 values a texel, k along its rows: one fetch a texel
        em.line(
            f"dlc_out4 = dlc_texel4(b{unit}, {em.flat(Ix(multi=p.index(rc, 'k0')), g.nodes[p.tensor].shape)} >> 2);"
        )
    values = [] if unit is None else None
    for c in range(4 if unit is None else 0):
        kk = em.names.claim(f"k{c + 1}")
        em.line(f"int {kk} = min(k0 + {c}, {K} - 1);")
        v = em.value(p.tensor, Ix(multi=p.index(rc, kk)))
        values.append(v if c == 0 else f"k0 + {c} < {K} ? {v} : 0.0")
    if values is not None:
        em.line(f"dlc_out4 = vec4({', '.join(values)});")
    shape = list(g.nodes[p.tensor].shape)
    what = f"pack {p.name} = {g.label(p.tensor)} {shape}: 4 values of k a texel, row r down a column"
    text = finish(ctx, em, None, what)
    text = text.replace("layout(location = 0) out float dlc_out;", "layout(location = 0) out vec4 dlc_out4;", 1)
    return text.replace(", partials: ", f", {comment('packed ' + p.name)}: ", 1)


def _matmul_rows(
    em: Emitter, pa: _Operand, pb: _Operand, out_batch: tuple, batch: tuple, i: str, j: str
) -> tuple[str, str]:
    """The packed rows of A and B that output (batch, i, j) reads: each operand's own batch
    coordinates are the output's broadcast onto its batch dims (NumPy's rule)."""
    rows = []
    for p, idx in ((pa, i), (pb, j)):
        own = index.broadcast_coords(batch, out_batch, p.rows[:-1])
        rows.append(em.flat(Ix(multi=(*own, idx)), p.rows))
    return rows[0], rows[1]


def _products_pass(ctx: Context, pa: _Operand, pb: _Operand, depth, es: bool) -> str:
    """Fragment (row r, texel jq) of the products texture: outputs j = 4jq..4jq+3 of output
    row r (the output's coordinates but the last), from one fetch of A and four of B per 4 k."""
    g, k = ctx.graph, ctx.kernel
    node = g.nodes[k.anchor]
    em = Emitter(ctx)
    rows_shape, n = tuple(node.shape[:-1]), node.shape[-1]
    nq, quads, N = _quads(ctx, n), _quads(ctx, depth), ctx.dim(n)
    em.line(f"int r = {_line_div(nq, es)} * dlc_width + int(gl_FragCoord.x);")
    em.line(f"int j0 = {_line_mod(nq, es)} * 4;")
    em.line(f"if (r >= {ctx.numel(rows_shape)}) {{ dlc_out4 = vec4(0.0); return; }}")
    rc = em.coords(Ix(flat="r"), rows_shape)
    em.line(f"int pa_w = textureSize(b{pa.unit}, 0).x, pb_w = textureSize(b{pb.unit}, 0).x;")
    # texture() at texel centres, not texelFetch: SwiftShader (WebGL on the CPU) runs it ~1.4x faster
    em.line(f"vec2 pa_inv = 1.0 / vec2(textureSize(b{pa.unit}, 0)), pb_inv = 1.0 / vec2(textureSize(b{pb.unit}, 0));")
    js = []
    own_sum = node.op == "conv2d_grad_filter" or _few_channels(ctx, node)  # (into one vec4)
    for c in range(0 if own_sum else 4):
        js.append(em.names.claim(f"j{c + 1}"))
        em.line(f"int {js[-1]} = min(j0 + {c}, {N} - 1);")
        em.line(f"float acc{c} = 0.0;" if es else f"vec4 acc{c} = vec4(0.0);")
    ash, bsh = g.nodes[pa.tensor].shape, g.nodes[pb.tensor].shape
    if node.op == "matmul" and _paired(ctx):
        _paired_products(ctx, em, pa, pb, quads, rc, js, es)
        ta, tb = ("^T" if node.attr(t) else "" for t in ("ta", "tb"))
        what = f"matmul {list(ash)}{ta} @ {list(bsh)}{tb}, row pairs"
    elif node.op == "matmul":
        rows = [_matmul_rows(em, pa, pb, tuple(node.shape[:-2]), rc[:-1], rc[-1], j) for j in js]
        _accumulate(em, quads, pa, rows[0][0], pb, [rb for _, rb in rows], es)
        ta, tb = ("^T" if node.attr(t) else "" for t in ("ta", "tb"))
        what = f"matmul {list(ash)}{ta} @ {list(bsh)}{tb}"
    elif _few_channels(ctx, node):
        _few_channel_products(ctx, em, pa, pb, rc)
        what = f"conv2d {list(ash)} * {list(bsh)}, {describe_options(node)}"
    elif node.op == "conv2d":
        geo = geometry(ash, bsh[:2], node.attrs)
        b, oy, ox = rc
        each_tap(em, geo, oy, ox)  # opens the loops over the taps inside the image
        ra = f"({b} * {geo['H']} + iy) * {geo['W']} + ix"
        _accumulate(em, quads, pa, ra, pb, [f"(di * {geo['KW']} + dj) * {bsh[3]} + {j}" for j in js], es)
        em.close()
        em.close()
        what = f"conv2d {list(ash)} * {list(bsh)}, {describe_options(node)}"
    elif node.op == "conv2d_grad_filter":
        _filter_products(ctx, em, pa, pb, rc)
        what = f"conv2d gradient for the filter {list(node.shape)}, input {list(ash)}, {describe_options(node)}"
    else:  # conv2d_grad_input
        geo = geometry(node.attr("x_shape"), bsh[:2], node.attrs)
        b, y, x = rc
        each_window_touching(em, geo, y, x)  # opens the loops over the outputs reading (y, x)
        ra = f"({b} * {geo['OH']} + oy) * {geo['OW']} + ox"
        _accumulate(em, quads, pa, ra, pb, [f"(di * {geo['KW']} + dj) * {bsh[2]} + {j}" for j in js], es)
        em.close()
        em.close()
        what = f"conv2d gradient for the input {list(node.shape)}, filter {list(bsh)}, {describe_options(node)}"
    if js:
        sums = ", ".join(f"acc{c}" if es else f"(acc{c}.x + acc{c}.y) + (acc{c}.z + acc{c}.w)" for c in range(4))
        em.line(f"dlc_out4 = vec4({sums});")
    text = finish(ctx, em, None, what + ", 4 outputs a fragment over the packed operands")
    text = text.replace("layout(location = 0) out float dlc_out;", "layout(location = 0) out vec4 dlc_out4;", 1)
    text = text.replace(", partials: ", ", the products: ", 1)
    return text.replace("uniform int dlc_width;", _declare(ctx, (pa, pb)) + "uniform int dlc_width;", 1)


def _accumulate(em: Emitter, quads: str, pa: _Operand, ra: str, pb: _Operand, rbs: list[str], dot: bool) -> None:
    """acc<c> += row ra of packed A times row rbs[c] of packed B, c = 0..3, texel by texel."""
    _accumulate_rows(em, quads, pa, [ra], pb, rbs, [(0, c) for c in range(len(rbs))], dot=dot)


def _accumulate_rows(
    em: Emitter,
    quads: str,
    pa: _Operand,
    ras: list[str],
    pb: _Operand,
    rbs: list[str],
    products: list,
    one_band: bool = False,
    dot: bool = False,
) -> None:
    """acc<c> += row ras[i] of packed A times row rbs[j] of packed B for each (i, j) =
    products[c], texel by texel (a row's texel q at column r % width, line (r / width) * quads + q).
    one_band: each side's rows lie in the band of its first (or are never read): one texel
    line a side per q. dot: acc<c> is a float and takes dot() of the two texels (else a vec4
    of 4 partial sums, summed by the caller)."""
    for side, rows, width in (("pa", ras, "pa_w"), ("pb", rbs, "pb_w")):
        for i, row in enumerate(rows):
            em.line(f"int {side}{i}_r = {row};")
            em.line(f"float {side}{i}_u = (float({side}{i}_r % {width}) + 0.5) * {side}_inv.x;")
            if i == 0 or not one_band:
                em.line(f"int {side}{i}_y = ({side}{i}_r / {width}) * {quads};")
    em.open(f"for (int q = 0; q < {quads}; ++q)")
    if one_band:
        for side in ("pa", "pb"):
            em.line(f"float {side}_v = (float({side}0_y + q) + 0.5) * {side}_inv.y;")
    for side, rows, unit in (("pa", ras, pa.unit), ("pb", rbs, pb.unit)):
        for i in range(len(rows)):
            v = f"{side}_v" if one_band else f"(float({side}{i}_y + q) + 0.5) * {side}_inv.y"
            em.line(f"vec4 {side}{i}_t = texture(b{unit}, vec2({side}{i}_u, {v}));")
    for c, (i, j) in enumerate(products):
        em.line(f"acc{c} += dot(pa{i}_t, pb{j}_t);" if dot else f"acc{c} += pa{i}_t * pb{j}_t;")
    em.close()


def _filter_products(ctx: Context, em: Emitter, px: _Operand, pd: _Operand, rc: tuple) -> None:
    """dlc_out4 = filter gradient (di, dj, c) x output channels j0..j0+3: the sum over the
    output pixels (b, oy, ox) whose tap (di, dj) lies inside the image of x[b, iy, ix, c] (one
    component of x's texel) times dy[b, oy, ox, j0..j0+3] (one texel): 2 fetches for 4
    products, where the per-output loop fetches 2 for 1. Every fragment walks the same pixels
    in the same order as that loop; the range of ox inside the image is worked out once, and
    the texel positions step along a row of pixels without dividing."""
    node = ctx.graph.nodes[ctx.kernel.anchor]
    xs = ctx.graph.nodes[px.tensor].shape
    p = geometry(xs, node.shape[:2], node.attrs)
    di, dj, c = rc
    xq, dq = _quads(ctx, px.depth), _quads(ctx, pd.depth)
    em.line(f"int xq = {c} / 4, xc = {c} % 4, dq = int(gl_FragCoord.y) % {dq};")
    # the outputs (oy, ox) whose tap (di, dj) is inside the image: [lo, hi) along each axis
    axes = (("oy", di, "SH", "DH", "PT", "H", "OH"), ("ox", dj, "SW", "DW", "PL", "W", "OW"))
    for o, t, s, d, pad, size, out in axes:
        em.line(f"int {o}_t = {p[pad]} - {t} * {p[d]}, {o}_u = {p[size] - 1 + p[pad]} - {t} * {p[d]};")
        em.line(f"int {o}_lo = {o}_t > 0 ? ({o}_t + {p[s] - 1}) / {p[s]} : 0;")
        em.line(f"int {o}_hi = {o}_u < 0 ? 0 : min({p[out]}, {o}_u / {p[s]} + 1);")
    em.line("vec4 accf = vec4(0.0);")
    em.open(f"for (int b = 0; b < {ctx.dim(xs[0])}; ++b)")
    em.open("for (int oy = oy_lo; oy < oy_hi; ++oy)")
    em.line(f"int iy = oy * {p['SH']} + {di} * {p['DH']} - {p['PT']};")
    em.line(f"int xr = (b * {p['H']} + iy) * {p['W']} + ox_lo * {p['SW']} + {dj} * {p['DW']} - {p['PL']};")
    em.line(f"int dr = (b * {p['OH']} + oy) * {p['OW']} + ox_lo;")
    em.line(f"int xu = xr % pa_w, xv = (xr / pa_w) * {xq} + xq, du = dr % pb_w, dv = (dr / pb_w) * {dq} + dq;")
    em.open("for (int ox = ox_lo; ox < ox_hi; ++ox)")
    em.line(f"vec4 xt = texture(b{px.unit}, vec2((float(xu) + 0.5) * pa_inv.x, (float(xv) + 0.5) * pa_inv.y));")
    em.line(f"vec4 dt = texture(b{pd.unit}, vec2((float(du) + 0.5) * pb_inv.x, (float(dv) + 0.5) * pb_inv.y));")
    em.line("accf += xt[xc] * dt;")
    # the next pixel's texels: SW rows on in x's texture, 1 in dy's (a band further at the edge)
    em.line(f"xu += {p['SW']};")
    em.line(f"while (xu >= pa_w) {{ xu -= pa_w; xv += {xq}; }}")
    em.line(f"if (++du == pb_w) {{ du = 0; dv += {dq}; }}")
    em.close()
    em.close()
    em.close()
    em.line("dlc_out4 = accf;")


def _few_channel_products(ctx: Context, em: Emitter, px: _Operand, pw: _Operand, rc: tuple) -> None:
    """dlc_out4 = conv2d at pixel (b, oy, ox), output channels j0..j0+3, over fewer than 4
    input channels: per tap inside the image one texel of x (all its channels) and one of w
    per channel (4 output channels): 1 + C fetches for 4C products, where the per-output loop
    fetches 2 for 1 (and the 4-channel packing 5 for 16, mostly zeros here). Summed in the
    per-output loop's order (taps, then channels)."""
    node = ctx.graph.nodes[ctx.kernel.anchor]
    xs, ws = ctx.graph.nodes[px.tensor].shape, ctx.graph.nodes[pw.tensor].shape
    p = geometry(xs, ws[:2], node.attrs)
    c_count, wq = ws[2], _quads(ctx, pw.depth)
    b, oy, ox = rc
    em.line(f"int wq = int(gl_FragCoord.y) % {wq};")
    em.line("vec4 accf = vec4(0.0);")
    each_tap(em, p, oy, ox)  # opens the loops over the taps inside the image
    em.line(f"int xr = ({b} * {p['H']} + iy) * {p['W']} + ix;")
    u, v = "(float(xr % pa_w) + 0.5) * pa_inv.x", "(float(xr / pa_w) + 0.5) * pa_inv.y"
    em.line(f"vec4 xt = texture(b{px.unit}, vec2({u}, {v}));")
    for c in range(c_count):
        em.line(f"int wr{c} = (di * {p['KW']} + dj) * {c_count} + {c};")
        v = f"(float((wr{c} / pb_w) * {wq} + wq) + 0.5) * pb_inv.y"
        em.line(f"accf += xt.{'xyz'[c]} * texture(b{pw.unit}, vec2((float(wr{c} % pb_w) + 0.5) * pb_inv.x, {v}));")
    em.close()
    em.close()
    em.line("dlc_out4 = accf;")


QUAD_LAYERS = 8  # rows a fragment of the 8 x 4 products pass: the layers it renders
QUAD_MIN_LAYERS = 4  # with fewer texture units for the layers' numbers: 4 rows a fragment
# Defined by dlc.js where the context draws into fewer than 8 buffers at once (WebGL2 promises
# 4): the 8-row pass then runs as two draws of 4 rows, into layers 0-3 and 4-7 (dlc_rows0)
FOUR_TARGETS = "DLC_FOUR_TARGETS"
QUAD_MIN_COLUMNS = 128


def _quad(ctx: Context, es: bool) -> int:
    """The rows a fragment (and layers of the products' array texture) when the products
    pass computes several rows x 4 columns a fragment into as many render targets at once
    (WebGL2, `es`: dlc.js makes them the layers of one array texture), else 0: a paired
    matmul with the texture units for it and QUAD_MIN_COLUMNS columns or more. 8 rows: 12
    fetches for 128 products (4 rows, 8 fetches for 64: twice the pairs' rate; 8 rows are
    1.1x faster again on SwiftShader, matmul 512^3 alone); a small one (the digits MLP's 64
    columns) ran slower than pairs (measured while its unpack pass fetched from 4 textures an
    output; fewer fragments share the work)."""
    if not (es and _paired(ctx)):
        return 0
    n = ctx.graph.nodes[ctx.kernel.anchor].shape[-1]
    if not (isinstance(n, int) and n >= QUAD_MIN_COLUMNS):
        return 0
    for layers in (QUAD_LAYERS, QUAD_MIN_LAYERS):
        if len(ctx.binding) + 2 + layers <= TEXTURE_UNITS:
            return layers
    return 0


def _quad_products_pass(ctx: Context, pa: _Operand, pb: _Operand, depth, layers: int) -> str:
    """Fragment (x, y) renders rows r = band * width + L x + t (t = 0..L-1 for L = `layers`,
    band = y / nq) x outputs j = 4jq..4jq+3 (jq = y % nq) into render target t at (x, y): layer
    t holds row r's texel where the products texture would hold it, but at column (r % width)
    / L. A pass with L render targets covers the first ceil(width / L) columns of them
    (dlc.js). With FOUR_TARGETS defined (8 layers, a context of 4 draw buffers) each draw
    renders 4 of the rows, from dlc_rows0, into 4 of the layers."""
    g, k = ctx.graph, ctx.kernel
    node = g.nodes[k.anchor]
    em = Emitter(ctx)
    if layers > 4:
        em.lines = [f"#ifndef {FOUR_TARGETS}"]
        em.lines += _quad_rows(ctx, pa, pb, depth, layers, layers, "")
        em.lines += ["#else"] + _quad_rows(ctx, pa, pb, depth, layers, 4, " + dlc_rows0") + ["#endif"]
    else:
        em.lines = _quad_rows(ctx, pa, pb, depth, layers, layers, "")
    ash, bsh = g.nodes[pa.tensor].shape, g.nodes[pb.tensor].shape
    ta = "^T" if node.attr("ta") else ""
    tb = "^T" if node.attr("tb") else ""
    what = (
        f"matmul {list(ash)}{ta} @ {list(bsh)}{tb}, {layers} rows x 4 columns a fragment into {layers} render targets"
    )
    text = finish(ctx, em, None, what)

    def outs(n: int) -> str:
        return "\n".join(f"layout(location = {t}) out vec4 dlc_out{t};" for t in range(n))

    if layers > 4:
        first = "uniform int dlc_rows0;  // the first of the 4 rows (and layers) this draw renders"
        decl = f"#ifndef {FOUR_TARGETS}\n{outs(layers)}\n#else\n{outs(4)}\n{first}\n#endif"
    else:
        decl = outs(layers)
    text = text.replace("layout(location = 0) out float dlc_out;", decl, 1)
    text = text.replace(", partials: ", ", the products: ", 1)
    return text.replace("uniform int dlc_width;", _declare(ctx, (pa, pb)) + "uniform int dlc_width;", 1)


def _quad_rows(ctx: Context, pa: _Operand, pb: _Operand, depth, layers: int, rows: int, first: str) -> list[str]:
    """main()'s lines of the products pass over `rows` of a fragment's `layers` rows (from
    r0`first`)."""
    g, k = ctx.graph, ctx.kernel
    node = g.nodes[k.anchor]
    em = Emitter(ctx)
    rows_shape, n, out_batch = tuple(node.shape[:-1]), node.shape[-1], tuple(node.shape[:-2])
    nq, quads, N, R = _quads(ctx, n), _quads(ctx, depth), ctx.dim(n), ctx.numel(rows_shape)
    em.line(f"int band = {_line_div(nq, True)}, j0 = {_line_mod(nq, True)} * 4;")
    em.line(f"int r0 = band * dlc_width + {layers} * int(gl_FragCoord.x){first};")
    em.line(f"int pa_w = textureSize(b{pa.unit}, 0).x, pb_w = textureSize(b{pb.unit}, 0).x;")
    em.line(f"vec2 pa_inv = 1.0 / vec2(textureSize(b{pa.unit}, 0)), pb_inv = 1.0 / vec2(textureSize(b{pb.unit}, 0));")
    ras, rbs = [], []
    for t in range(rows):  # past the last row: the last row again (never read)
        em.line(f"int rq{t} = min(r0 + {t}, {R} - 1);")
        rrc = em.coords(Ix(flat=f"rq{t}"), rows_shape)
        ras.append(_matmul_rows(em, pa, pb, out_batch, rrc[:-1], rrc[-1], "0")[0])
    for c in range(4):  # B is a matrix: its rows are the columns j alone
        em.line(f"int jq{c} = min(j0 + {c}, {N} - 1);")
        rbs.append(_matmul_rows(em, pa, pb, out_batch, rrc[:-1], rrc[-1], f"jq{c}")[1])
    # one float a product, dot() of two texels added each q: 16 floats live where 16 vec4 of
    # partial sums were 64, which SwiftShader kept spilling (the pass 1.5x faster, measured
    # alone in one page; the sums' error stays within NumPy's own)
    for a in range(4 * rows):
        em.line(f"float acc{a} = 0.0;")
    # A's rows are the products' (B is a matrix), so rows r0..r0+L-1 share r0's band unless
    # past the band's width (a multiple of L, or all rows: never read); B's j0..j0+3 share j0's
    # (a band is 4k wide, or all of B)
    products = [(t, c) for t in range(rows) for c in range(4)]
    _accumulate_rows(em, quads, pa, ras, pb, rbs, products, one_band=True, dot=True)
    for t in range(rows):
        em.line(f"dlc_out{t} = vec4({', '.join(f'acc{a}' for a in range(4 * t, 4 * t + 4))});")
    return em.lines


def _paired(ctx: Context) -> bool:
    """Whether the products pass computes 2 rows x 2 columns a fragment: a matmul whose B is a
    matrix (a layer's weights), so that two rows read the same columns of B. 4 fetches give 16
    products (5 in the 1 row x 4 columns pass), and fetches are what the pass costs."""
    node = ctx.graph.nodes[ctx.kernel.anchor]
    return node.op == "matmul" and len(ctx.graph.nodes[node.inputs[1]].shape) == 2


def _paired_products(
    ctx: Context, em: Emitter, pa: _Operand, pb: _Operand, quads: str, rc: tuple, js: list, dot: bool
) -> None:
    """The products of a paired matmul into acc0..acc3. The texels of rows rb = r - r % 2 and
    rb + 1 at texel column jq hold outputs (rb, rb + 1) x (4jq, 4jq + 1) (row rb's texel) and
    (rb, rb + 1) x (4jq + 2, 4jq + 3) (row rb + 1's), each (rb j, rb j', rb+1 j, rb+1 j'); a last
    row without a partner keeps its own 4 columns (`_unpack_pass` reads both)."""
    g = ctx.graph
    node = g.nodes[ctx.kernel.anchor]
    rows_shape, out_batch = tuple(node.shape[:-1]), tuple(node.shape[:-2])
    R, N = ctx.numel(rows_shape), ctx.dim(node.shape[-1])
    em.line("int rb0 = r - r % 2, rb1 = rb0 + 1;")
    em.open(f"if (rb1 < {R})")
    em.line(f"int ja = min(j0 + 2 * (r % 2), {N} - 1), jb = min(j0 + 2 * (r % 2) + 1, {N} - 1);")
    ras, rbs = [], []
    for row in ("rb0", "rb1"):
        rrc = em.coords(Ix(flat=row), rows_shape)
        ras.append(_matmul_rows(em, pa, pb, out_batch, rrc[:-1], rrc[-1], "ja")[0])
    rrc = em.coords(Ix(flat="rb0"), rows_shape)
    rbs = [_matmul_rows(em, pa, pb, out_batch, rrc[:-1], rrc[-1], j)[1] for j in ("ja", "jb")]
    _accumulate_rows(em, quads, pa, ras, pb, rbs, [(0, 0), (0, 1), (1, 0), (1, 1)], dot=dot)
    em.close()
    em.open("else")
    rows = [_matmul_rows(em, pa, pb, out_batch, rc[:-1], rc[-1], j) for j in js]
    _accumulate(em, quads, pa, rows[0][0], pb, [rb for _, rb in rows], dot)
    em.close()


def _unpack_pass(ctx: Context, output: int, unit: int, es: bool, quad: int = 0) -> str:
    """One fragment per output element: its product from the products texture, then the
    epilogue."""
    g, k = ctx.graph, ctx.kernel
    node = g.nodes[k.anchor]
    em = Emitter(ctx)
    rows_shape, n = tuple(node.shape[:-1]), node.shape[-1]
    em.line("int o = int(gl_FragCoord.y) * dlc_width + int(gl_FragCoord.x);")
    em.line(f"if (o >= {ctx.numel(k.shape)}) {{ dlc_out = 0.0; return; }}")
    oc = em.coords(Ix(flat="o"), node.shape)
    r = em.flat(Ix(multi=oc[:-1]), rows_shape)
    em.line(f"int pc_w = textureSize(b{unit}, 0).x, pc_r = {r};")
    j = oc[-1]
    if quad:  # row pc_r's texel is at column (pc_r % width) / L of layer (pc_r % width) % L (L layers)
        # (layer pc_t of one array texture: a fetch, where a choice among 4 textures fetched all
        # 4 on SwiftShader, whose lanes take both sides of a select: the pass 2-3x faster)
        em.line(f"int pc_in = pc_r % pc_w, pc_t = pc_in & {quad - 1};")
        line = f"(pc_r / pc_w) * {_quads(ctx, n)} + ({j} >> 2)"
        em.line(f"ivec3 pc_at = ivec3(pc_in >> {quad.bit_length() - 1}, {line}, pc_t);")
        em.line(f"vec4 pc = texelFetch(b{unit}, pc_at, 0);")
        em.line(f"float acc = pc[{j} & 3];")
    elif _paired(ctx):  # the texel and component `_paired_products` put output (pc_r, j) in
        em.line(f"int pc_b = pc_r - pc_r % 2, pc_t = pc_r, pc_c = {j} % 4;")
        paired = f"pc_b + 1 < {ctx.numel(rows_shape)}"
        em.line(f"if ({paired}) {{ pc_t = pc_b + pc_c / 2; pc_c = (pc_r - pc_b) * 2 + pc_c % 2; }}")
        em.line(f"vec4 pc = texelFetch(b{unit}, ivec2(pc_t % pc_w, (pc_t / pc_w) * {_quads(ctx, n)} + {j} / 4), 0);")
        em.line("float acc = pc[pc_c];")
    else:
        em.line(f"vec4 pc = texelFetch(b{unit}, ivec2(pc_r % pc_w, (pc_r / pc_w) * {_quads(ctx, n)} + {j} / 4), 0);")
        em.line(f"float acc = pc[{j} % 4];")
    em.anchor_value = "acc"
    value = em.value(output, Ix(flat="o"))
    em.line(f"dlc_out = {value};")
    text = finish(ctx, em, output, f"{node.op}: one output a fragment from the products texture")
    if quad:  # the render targets are the layers of one array texture (dlc.js)
        decl = f"uniform highp sampler2DArray b{unit};  // the products, 4 values of j a texel, layer t: target t\n"
    else:
        decl = f"uniform sampler2D b{unit};  // the products, 4 values of j a texel\n"
    return text.replace("uniform int dlc_width;", decl + "uniform int dlc_width;", 1)


def _stored_packed(ctx: Context, output: int, packed_params: frozenset) -> bool:
    """Whether `output` is stored in a param kept 4 values a texel (`packed_params`)."""
    slot = ctx.plan.slot_of.get(output)
    return slot is not None and ctx.plan.slots[slot].kind == "param" and ctx.plan.slots[slot].name in packed_params


def _unpack4_pass(ctx: Context, output: int, unit: int, layers: int) -> str:
    """The 8 x 4 matmul's output pass into a param stored 4 values a texel (RGBA32F, element
    i in texel i / 4: `packed_params`): fragment p renders outputs 4p..4p+3 (one row, as the
    last dim is a multiple of 4), one products texel for all four, and the epilogue once for
    each in a block of its own. A load of a param of the output's size at the output's own
    element reads the fragment's own texel (the same layout), fetched once for all four."""
    g, k = ctx.graph, ctx.kernel
    node = g.nodes[k.anchor]
    rows_shape, n = tuple(node.shape[:-1]), node.shape[-1]
    em = Emitter(ctx)
    em.line("int p = int(gl_FragCoord.y) * dlc_width + int(gl_FragCoord.x);")
    em.line(f"if (4 * p >= {ctx.numel(k.shape)}) {{ dlc_out4 = vec4(0.0); return; }}")
    em.line(OWN_TEXELS)
    em.line("int op = 4 * p;")
    oc = em.coords(Ix(flat="op"), node.shape)
    r = em.flat(Ix(multi=oc[:-1]), rows_shape)
    # row pc_r's texel is at column (pc_r % width) / L of layer (pc_r % width) % L (_unpack_pass)
    em.line(f"int pc_w = textureSize(b{unit}, 0).x, pc_r = {r};")
    em.line("int pc_in = pc_r % pc_w;")
    em.line(
        f"ivec3 pc_at = ivec3(pc_in >> {layers.bit_length() - 1}, (pc_r / pc_w) * {_quads(ctx, n)} + ({oc[-1]} >> 2),"
        f" pc_in & {layers - 1});"
    )
    em.line(f"vec4 pc = texelFetch(b{unit}, pc_at, 0);")
    em.line("vec4 dlc_v;")
    for c in range(4):
        sub = Emitter(ctx)
        sub.anchor_value = "acc"
        value = sub.value(output, Ix(flat="o"))
        em.open("")
        em.line(f"const int dlc_c = {c};")
        em.line("int o = op + dlc_c;")
        em.line("float acc = pc[dlc_c];")
        for line in sub.lines:
            em.line(line)
        em.line(f"dlc_v[dlc_c] = {value};")
        em.close()
    em.line("dlc_out4 = dlc_v;")
    what = f"{node.op}: 4 outputs a fragment from the products texture, into a param stored 4 values a texel"
    text = finish(ctx, em, output, what)
    text = text.replace("layout(location = 0) out float dlc_out;", "layout(location = 0) out vec4 dlc_out4;", 1)
    decl = f"uniform highp sampler2DArray b{unit};  // the products, 4 values of j a texel, layer t: target t\n"
    text = text.replace("uniform int dlc_width;", decl + "uniform int dlc_width;", 1)
    # the params of the output's size read at its own element: the fragment's own texel
    size = size_of(g.nodes[output].shape)
    own = []
    for slot, u in sorted(ctx.binding.items(), key=lambda su: su[1]):
        s = ctx.plan.slots[slot]
        if s.kind == "param" and f"dlc_load(b{u}, o)" in text and tuple(s.sizes) == (size,):
            own.append(f"vec4 dlc_t{u} = texelFetch(b{u}, ivec2(gl_FragCoord.xy), 0);")
            text = text.replace(f"dlc_load(b{u}, o)", f"dlc_t{u}[dlc_c]")
    indent = text[text.index(OWN_TEXELS) - 4 : text.index(OWN_TEXELS)]
    return text.replace(OWN_TEXELS, f"\n{indent}".join(own) if own else "// (no own texels)", 1)


OWN_TEXELS = "// own texels"


def _declare(ctx: Context, operands) -> str:
    """The packed operands' sampler declarations."""
    lines = []
    for p in operands:
        what = comment(ctx.graph.label(p.tensor))
        lines.append(f"uniform sampler2D b{p.unit};  // packed {p.name}: {what}, 4 values of k a texel\n")
    return "".join(lines)
