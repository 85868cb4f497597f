"""Window kernels over NHWC images: conv2d, the pools, and their gradients.

One invocation per output element, looping over the window (or, for gradients, over the
windows that touch the element). Geometry follows `compiler/ops/window.py` (TensorFlow's
"same" / "valid" padding; pools skip padded positions). Results go through the epilogue.
"""

from __future__ import annotations

from .. import registry
from ..ops.window import dilation, window_geometry
from ..plan import size_of
from . import index, kernels_conv
from .compute import KEY, header, kernel_source
from .glsl import LOCAL, Context, Emitter, Ix, KernelSource
from .options import CodegenOptions


def render(
    ctx: Context, conv: str | None = None, conv_blocking: tuple | None = None, conv_split: int | None = None
) -> KernelSource:
    """`conv` ("gemm" / "direct") forces how conv2d and its gradients run; by default they
    take the implicit GEMM (kernels_conv.py) where the sizes fill its tiles."""
    g = ctx.graph
    node = g.nodes[ctx.kernel.anchor]
    if kernels_conv.applies(node, conv):
        x_shape = node.attr("x_shape") if node.op == "conv2d_grad_input" else g.nodes[node.inputs[0]].shape
        k = (node.attr("w_shape") if node.op == "conv2d_grad_filter" else g.nodes[node.inputs[1]].shape)[:2]
        out = kernels_conv.render(ctx, node, geometry(x_shape, k, node.attrs), conv, conv_blocking, conv_split)
        if out is not None:
            return out
    epi = Emitter(ctx, anchor_value="value")
    epi.store_outputs(Ix(flat="o"))
    em = Emitter(ctx)
    em.own_element("o", ctx.numel(node.shape))
    what = BODIES[node.op](ctx, em, node)
    em.line("epilogue(o, acc);")
    lines = header(ctx, what, (LOCAL, 1, 1))
    lines += ["void epilogue(int o, float value) {", *epi.lines, "}", ""]
    lines += ["void main() {", *em.lines, "}"]
    grid = {"flat": list(size_of(node.shape)), "per_group": LOCAL}
    return kernel_source(ctx, "\n".join(lines) + "\n", grid, (LOCAL, 1, 1))


def geometry(x_shape, k, attrs) -> dict:
    attrs = dict(attrs)
    oh, ow, pt, pl = window_geometry(x_shape, k, attrs)
    (sh, sw), (dh, dw) = attrs["stride"], dilation(attrs)
    _, h, w, _ = x_shape
    return {
        "OH": oh,
        "OW": ow,
        "PT": pt,
        "PL": pl,
        "SH": sh,
        "SW": sw,
        "H": h,
        "W": w,
        "KH": k[0],
        "KW": k[1],
        "DH": dh,
        "DW": dw,
        "G": attrs.get("groups", 1),
    }


def _coords(em: Emitter, shape) -> tuple[str, ...]:
    return em.coords(Ix(flat="o"), shape)


def _conv2d(ctx: Context, em: Emitter, node) -> str:
    g = ctx.graph
    x, w = node.inputs
    xs, ws = g.nodes[x].shape, g.nodes[w].shape
    p = geometry(xs, ws[:2], node.attrs)
    ci, co = ws[2], ws[3]  # ci: input channels per group
    b, oy, ox, c = _coords(em, node.shape)
    X, Wb = ctx.buf(x), ctx.buf(w)
    em.line("float acc = 0.0;")
    each_tap(em, p, oy, ox)
    first = f" + ({c} / {co // p['G']}) * {ci}" if p["G"] > 1 else ""
    em.line(f"int xb = (({b} * {p['H']} + iy) * {p['W']} + ix) * {ci * p['G']}{first};")
    em.line(f"int wb = (di * {p['KW']} + dj) * {ci * co} + {c};")
    xv, wv = ctx.load(X, "xb + k"), ctx.load(Wb, f"wb + k * {co}")
    em.line(f"for (int k = 0; k < {ci}; ++k) acc += {xv} * {wv};")
    em.close()
    em.close()
    return f"conv2d {list(xs)} * {list(ws)}, {describe_options(node)}"


def _conv2d_grad_input(ctx: Context, em: Emitter, node) -> str:
    g = ctx.graph
    dy, w = node.inputs
    ws = g.nodes[w].shape
    xs = node.attr("x_shape")
    p = geometry(xs, ws[:2], node.attrs)
    ci, co = ws[2], ws[3]
    og = co // p["G"]  # outputs per group: input channel c feeds outputs [g * og, g * og + og)
    b, y, xx, c = _coords(em, node.shape)
    DY, Wb = ctx.buf(dy), ctx.buf(w)
    em.line("float acc = 0.0;")
    grp = f"({c} / {ci})" if p["G"] > 1 else "0"
    each_window_touching(em, p, y, xx)
    em.line(f"int db = (({b} * {p['OH']} + oy) * {p['OW']} + ox) * {co} + {grp} * {og};")
    cg = f"{c} % {ci}" if p["G"] > 1 else c  # c's index inside its group
    em.line(f"int wb = ((di * {p['KW']} + dj) * {ci} + {cg}) * {co} + {grp} * {og};")
    em.line(f"for (int k = 0; k < {og}; ++k) acc += {ctx.load(DY, 'db + k')} * {ctx.load(Wb, 'wb + k')};")
    em.close()
    em.close()
    return f"conv2d gradient for the input {list(xs)}, filter {list(ws)}, {describe_options(node)}"


def _conv2d_grad_filter(ctx: Context, em: Emitter, node) -> str:
    g = ctx.graph
    x, dy = node.inputs
    xs = g.nodes[x].shape
    ws = node.attr("w_shape")
    p = geometry(xs, ws[:2], node.attrs)
    di, dj, c, k = _coords(em, node.shape)
    X, DY = ctx.buf(x), ctx.buf(dy)
    ci, co = ws[2], ws[3]
    em.line("float acc = 0.0;")
    em.open(f"for (int b = 0; b < {ctx.dim(xs[0])}; ++b)")
    em.open(f"for (int oy = 0; oy < {p['OH']}; ++oy)")
    em.line(f"int iy = oy * {p['SH']} + {di} * {p['DH']} - {p['PT']};")
    em.line(f"if (iy < 0 || iy >= {p['H']}) continue;")
    em.open(f"for (int ox = 0; ox < {p['OW']}; ++ox)")
    em.line(f"int ix = ox * {p['SW']} + {dj} * {p['DW']} - {p['PL']};")
    em.line(f"if (ix < 0 || ix >= {p['W']}) continue;")
    xc = f"({k} / {co // p['G']}) * {ci} + {c}" if p["G"] > 1 else c
    xat = f"((b * {p['H']} + iy) * {p['W']} + ix) * {ci * p['G']} + {xc}"
    dyat = f"((b * {p['OH']} + oy) * {p['OW']} + ox) * {co} + {k}"
    em.line(f"acc += {ctx.load(X, xat)} * {ctx.load(DY, dyat)};")
    em.close()
    em.close()
    em.close()
    return f"conv2d gradient for the filter {list(ws)}, input {list(xs)}, {describe_options(node)}"


def _pool(ctx: Context, em: Emitter, node) -> str:
    g = ctx.graph
    x = node.inputs[0]
    xs = g.nodes[x].shape
    p = geometry(xs, node.attr("size"), node.attrs)
    b, oy, ox, c = _coords(em, node.shape)
    X = ctx.buf(x)
    C = xs[3]
    is_max = node.op == "max_pool"
    em.line(f"float acc = {'(-DLC_INF)' if is_max else '0.0'};")
    if not is_max:
        em.line("float count = 0.0;")
    each_tap(em, p, oy, ox)
    v = ctx.load(X, f"(({b} * {p['H']} + iy) * {p['W']} + ix) * {C} + {c}")
    if is_max:
        em.line(f"float v = {v};")
        em.line("acc = (v > acc || isnan(v)) ? v : acc;")
    else:
        em.line(f"acc += {v};")
        em.line("count += 1.0;")
    em.close()
    em.close()
    if not is_max:
        whole = node.attr("count_include_pad", False)
        em.line(f"acc /= {float(p['KH'] * p['KW'])};" if whole else "acc /= count;")
    return f"{node.op} {list(node.attr('size'))} over {list(xs)}, {describe_options(node)}"


def _max_pool_grad(ctx: Context, em: Emitter, node) -> str:
    """dy goes to the first maximum of each window (as the reference and TensorFlow do), or
    to its first NaN."""
    g = ctx.graph
    x, dy = node.inputs
    xs = g.nodes[x].shape
    p = geometry(xs, node.attr("size"), node.attrs)
    b, y, xx, c = _coords(em, node.shape)
    X, DY = ctx.buf(x), ctx.buf(dy)
    C = xs[3]
    em.line("float acc = 0.0;")
    tiled = _tiled(p)
    if tiled:  # the windows tile the image: (y, x) lies in one window at most
        shifts = ctx.renderer.shifts
        oy = index.div(f"({y} + {p['PT']})", str(p["SH"]), shifts)
        ox = index.div(f"({xx} + {p['PL']})", str(p["SW"]), shifts)
        em.line(f"int oy = {oy}, ox = {ox};")
        em.open(f"if (oy < {p['OH']} && ox < {p['OW']})")
    else:
        each_window_touching(em, p, y, xx)
    em.line("float best = -DLC_INF;")
    em.line("int by = -1, bx = -1;")
    each_tap(em, p, "oy", "ox", taps=("ei", "ej"))
    xat = f"(({b} * {p['H']} + iy) * {p['W']} + ix) * {C} + {c}"
    em.line(f"float v = {ctx.load(X, xat)};")
    em.line("if (v > best || by < 0 || (dlc_isnan(v) && !dlc_isnan(best))) { best = v; by = iy; bx = ix; }")
    em.close()
    em.close()
    dyat = f"(({b} * {p['OH']} + oy) * {p['OW']} + ox) * {C} + {c}"
    em.line(f"if (by == {y} && bx == {xx}) acc += {ctx.load(DY, dyat)};")
    em.close()
    if not tiled:
        em.close()
    how = ", windows tiling the image" if tiled else ""
    return f"max_pool gradient {list(node.attr('size'))} over {list(xs)}{how}"


def _tiled(p: dict) -> bool:
    """Whether the windows tile the image (stride = size, no dilation): each input position
    lies in the window (y + PT) / SH, (x + PL) / SW (when there is one), at no other."""
    return p["SH"] == p["KH"] and p["SW"] == p["KW"] and p["DH"] == 1 and p["DW"] == 1


def _avg_pool_grad(ctx: Context, em: Emitter, node) -> str:
    dy = node.inputs[0]
    xs = node.attr("x_shape")
    p = geometry(xs, node.attr("size"), node.attrs)
    b, y, xx, c = _coords(em, node.shape)
    DY = ctx.buf(dy)
    C = xs[3]
    em.line("float acc = 0.0;")
    each_window_touching(em, p, y, xx)
    # The window's count of unpadded positions, as the forward pool divided by.
    if node.attr("count_include_pad", False):
        em.line(f"float count = {float(p['KH'] * p['KW'])};")
    else:
        em.line(f"int y0 = oy * {p['SH']} - {p['PT']}, x0 = ox * {p['SW']} - {p['PL']};")
        em.line(
            f"float count = float((min(y0 + {p['KH']}, {p['H']}) - max(y0, 0)) * "
            f"(min(x0 + {p['KW']}, {p['W']}) - max(x0, 0)));"
        )
    dyat = f"(({b} * {p['OH']} + oy) * {p['OW']} + ox) * {C} + {c}"
    em.line(f"acc += {ctx.load(DY, dyat)} / count;")
    em.close()
    em.close()
    return f"avg_pool gradient {list(node.attr('size'))} for {list(xs)}"


def each_tap(em: Emitter, p: dict, oy: str, ox: str, taps: tuple[str, str] = ("di", "dj")) -> None:
    """Open loops (counters `taps`) over the unpadded positions (iy, ix) of output (oy, ox)'s
    window."""
    di, dj = taps
    em.open(f"for (int {di} = 0; {di} < {p['KH']}; ++{di})")
    em.line(f"int iy = {oy} * {p['SH']} + {di} * {p['DH']} - {p['PT']};")
    em.line(f"if (iy < 0 || iy >= {p['H']}) continue;")
    em.open(f"for (int {dj} = 0; {dj} < {p['KW']}; ++{dj})")
    em.line(f"int ix = {ox} * {p['SW']} + {dj} * {p['DW']} - {p['PL']};")
    em.line(f"if (ix < 0 || ix >= {p['W']}) continue;")


def each_window_touching(em: Emitter, p: dict, y: str, x: str) -> None:
    """Open loops over the outputs (oy, ox) whose window holds input (y, x), at tap (di, dj)."""
    em.open(f"for (int di = 0; di < {p['KH']}; ++di)")
    em.line(f"int ty = {y} + {p['PT']} - di * {p['DH']};")
    em.line(f"if (ty < 0 || ty % {p['SH']} != 0) continue;")
    em.line(f"int oy = ty / {p['SH']};")
    em.line(f"if (oy >= {p['OH']}) continue;")
    em.open(f"for (int dj = 0; dj < {p['KW']}; ++dj)")
    em.line(f"int tx = {x} + {p['PL']} - dj * {p['DW']};")
    em.line(f"if (tx < 0 || tx % {p['SW']} != 0) continue;")
    em.line(f"int ox = tx / {p['SW']};")
    em.line(f"if (ox >= {p['OW']}) continue;")


def describe_options(node) -> str:
    """The node's geometry as the kernel's description says it."""
    a = dict(node.attrs)
    pad = a["padding"]
    out = [f"stride {list(a['stride'])}", f"padding {pad if isinstance(pad, str) else list(pad)}"]
    out += [
        f"{k} {list(a[k]) if isinstance(a[k], tuple) else a[k]}"
        for k in ("dilation", "groups", "count_include_pad")
        if k in a
    ]
    return ", ".join(out)


BODIES = {
    "conv2d": _conv2d,
    "conv2d_grad_input": _conv2d_grad_input,
    "conv2d_grad_filter": _conv2d_grad_filter,
    "max_pool": _pool,
    "avg_pool": _pool,
    "max_pool_grad": _max_pool_grad,
    "avg_pool_grad": _avg_pool_grad,
}


def lower(ctx: Context, options: CodegenOptions) -> KernelSource:
    """The compute target's lowering of window kernels."""
    return render(ctx, options.conv, options.conv_blocking, options.conv_split)


registry.register_lowering("window", KEY, lower)
