"""Packed matmul for the texture target: both operands repacked four k values a texel.

The per-output loop of `texture._matmul_body` fetches one float per texelFetch, and every
fetch turns a flat index into texture coordinates with an integer division and modulo by the
texture's width (scalarized per lane on llvmpipe; a long dependent chain on a GPU). Here a
matmul kernel renders two kinds of passes instead (as tfjs's packed matmul, 4 values a texel):

1. a pack pass per operand into an RGBA32F texture: row r's k = 4q..4q+3 (zero past K) in one
   texel, where row r is (batch, i) of A or (batch, j) of B: transposes, broadcasting and any
   view fused into the operand are resolved once per element here, not once per product;
2. one pass per output: fragment o loops q over ceil(K/4) texels of each packed operand,
   accumulating a vec4 of products, then runs the kernel's epilogue as the per-output loop.

A packed texture holds row r down column r % width, in bands of ceil(K/4) texels (band r /
width), so the K loop fetches (x, y + q): nothing divided per fetch, and neighbouring outputs
read neighbouring columns. The kernel spec's `packed` entries (`unit`, `rows`, `depth` = K)
tell the runtime to make these textures (`runtime/textures.packed_layout`); a pass with
`into` renders one.
"""

from __future__ import annotations

from ..plan import size_of
from .glsl import Context, Emitter, Ix, comment, kernel_source, numel_known

# Below these (known sizes) the per-output loop is as fast: too little to pack, or too few
# products for two more passes to pay (measured on llvmpipe).
MIN_DEPTH = 8
MIN_PRODUCTS = 8192


def applies(ctx: Context) -> bool:
    """Whether this kernel is a matmul the packed passes render."""
    k = ctx.kernel
    if k.kind != "matmul":
        return False
    node = ctx.graph.nodes[k.anchor]
    ash = ctx.graph.nodes[node.inputs[0]].shape
    kdim = ash[-2] if node.attr("ta") else ash[-1]
    if isinstance(kdim, int) and kdim < MIN_DEPTH:
        return False
    products = numel_known((*node.shape, kdim))
    return products is None or products >= MIN_PRODUCTS


class _Operand:
    """One side of the product as packed rows: A's rows are (batch, i), B's are (batch, j)."""

    def __init__(self, ctx: Context, tensor: int, k_last: bool, unit: int, name: str):
        self.tensor, self.unit, self.name = tensor, unit, name
        self.shape = ctx.graph.nodes[tensor].shape
        self.k_last = k_last  # k is its last axis (A untransposed, B transposed)
        self.batch = tuple(self.shape[:-2])  # its own batch axis, if any (1 or the output's)
        self.length = self.shape[-2] if k_last else self.shape[-1]  # rows: i (A) or j (B)

    def row_shape(self) -> tuple:
        return (*self.batch, self.length)


def render_kernel(ctx: Context, es: bool):
    """The kernel's pack passes and its output passes (a `texture.TextureKernel`)."""
    from .texture import TextureKernel, TexturePass

    g, k = ctx.graph, ctx.kernel
    node = g.nodes[k.anchor]
    a, b = node.inputs
    ta, tb = bool(node.attr("ta")), bool(node.attr("tb"))
    ash = g.nodes[a].shape
    kdim = ash[-2] if ta else ash[-1]
    unit = len(ctx.binding)  # the packed textures take the units after the kernel's slots
    pa = _Operand(ctx, a, not ta, unit, "A")
    pb = _Operand(ctx, b, tb, unit + 1, "B")
    passes = [TexturePass(None, _pack_pass(ctx, p, kdim, es), into=p.unit) for p in (pa, pb)]
    for o in k.outputs:
        passes.append(TexturePass(o, _product_pass(ctx, o, pa, pb, kdim, es)))
    packed = tuple(
        {
            "unit": p.unit,
            "rows": list(size_of(p.row_shape())),
            "depth": list(size_of((kdim,))),
            "label": f"'{g.label(p.tensor)}' {list(p.shape)}",  # for error messages
        }
        for p in (pa, pb)
    )
    ks = kernel_source(ctx, "", {"flat": [1], "per_group": 1}, (1, 1, 1))
    return TextureKernel(ks, tuple(passes), None, packed)


def _quads(ctx: Context, kdim) -> str:
    """ceil(K / 4): texels per packed row."""
    if isinstance(kdim, int):
        return str(-(-kdim // 4))
    return f"(({ctx.dim(kdim)} + 3) / 4)"


def _pack_pass(ctx: Context, p: _Operand, kdim, es: bool) -> str:
    """Texel t = q * R + r of operand p's packed texture: its row r, k = 4q..4q+3."""
    from .texture import _finish

    g = ctx.graph
    em = Emitter(ctx)
    rows = ctx.numel(p.row_shape())
    quads = _quads(ctx, kdim)
    K = ctx.dim(kdim)
    # the texture is dlc_width rows wide and `quads` texels deep per band of rows
    em.line(f"int r = (int(gl_FragCoord.y) / {quads}) * dlc_width + int(gl_FragCoord.x);")
    em.line(f"int k0 = (int(gl_FragCoord.y) % {quads}) * 4;")
    em.line(f"if (r >= {rows}) {{ dlc_out4 = vec4(0.0); return; }}")
    rc = em.coords(Ix(flat="r"), p.row_shape())
    batch, row = rc[:-1], rc[-1]
    values = []
    for c in range(4):
        kk = em.names.claim(f"k{c + 1}")
        em.line(f"int {kk} = min(k0 + {c}, {K} - 1);")
        v = em.value(p.tensor, Ix(multi=(*batch, *((row, kk) if p.k_last else (kk, row)))))
        values.append(v if c == 0 else f"k0 + {c} < {K} ? {v} : 0.0")
    em.line(f"dlc_out4 = vec4({', '.join(values)});")
    what = f"pack {p.name} = {g.label(p.tensor)} {list(p.shape)}: 4 values of k a texel, row r down a column"
    text = _finish(ctx, em, None, what, es)
    return _as_vec4_output(text, f"packed {p.name}")


def _as_vec4_output(text: str, label: str) -> str:
    """A pass rendering into an RGBA32F texture: its output is a vec4."""
    text = text.replace("layout(location = 0) out float dlc_out;", "layout(location = 0) out vec4 dlc_out4;", 1)
    return text.replace(", partials: ", f", {comment(label)}: ", 1)


def _product_pass(ctx: Context, output: int, pa: _Operand, pb: _Operand, kdim, es: bool) -> str:
    """One fragment per output element: the dot product over the packed rows, then the epilogue."""
    from .texture import _finish

    g, k = ctx.graph, ctx.kernel
    node = g.nodes[k.anchor]
    em = Emitter(ctx)
    n = ctx.numel(k.shape)
    em.line("int o = int(gl_FragCoord.y) * dlc_width + int(gl_FragCoord.x);")
    em.line(f"if (o >= {n}) {{ dlc_out = 0.0; return; }}")
    oc = em.coords(Ix(flat="o"), node.shape)
    i, j = oc[-2], oc[-1]
    batch = oc[:-2]
    quads = _quads(ctx, kdim)
    at = []
    for p, idx, stem in ((pa, i, "pa_"), (pb, j, "pb_")):
        own = ()
        if p.batch:  # its own batch axis: 1 (broadcast) or the output's
            own = ("0",) if p.batch[0] == 1 else (batch[0] if batch else "0",)
        r = em.flat(Ix(multi=(*own, idx)), p.row_shape())
        # row r's texels: column r % w, from (r / w) * quads down
        em.line(f"int {stem}w = textureSize(b{p.unit}, 0).x, {stem}r = {r};")
        em.line(f"int {stem}x = {stem}r % {stem}w, {stem}y = ({stem}r / {stem}w) * {quads};")
        at.append(f"texelFetch(b{p.unit}, ivec2({stem}x, {stem}y + q), 0)")
    em.line("vec4 acc4 = vec4(0.0);")
    em.open(f"for (int q = 0; q < {quads}; ++q)")
    em.line(f"acc4 += {at[0]} * {at[1]};")
    em.close()
    em.line("float acc = (acc4.x + acc4.y) + (acc4.z + acc4.w);")
    em.anchor_value = "acc"
    value = em.value(output, Ix(flat="o"))
    em.line(f"dlc_out = {value};")
    ash, bsh = g.nodes[pa.tensor].shape, g.nodes[pb.tensor].shape
    what = (
        f"matmul {list(ash)}{'^T' if node.attr('ta') else ''} @ {list(bsh)}{'^T' if node.attr('tb') else ''}, "
        "one fragment per output over the packed operands"
    )
    text = _finish(ctx, em, output, what, es)
    decl = "".join(
        f"uniform sampler2D b{p.unit};  // packed {p.name}: {comment(g.label(p.tensor))}, 4 values of k a texel\n"
        for p in (pa, pb)
    )
    return text.replace("uniform int dlc_width;", decl + "uniform int dlc_width;", 1)
