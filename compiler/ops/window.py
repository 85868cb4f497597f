"""Sliding-window ops over NHWC images: conv2d, pools, and their gradients.

attrs: stride (sh, sw); padding "same", "valid" or explicit (top, bottom, left, right);
for conv2d the filter is [kh, kw, Cin / groups, Cout], with optional dilation (dh, dw)
and groups G (default 1, 1); for pools size (kh, kw) and, for avg_pool,
count_include_pad (default false). Gradient ops carry the shape of what they give back
(x_shape / w_shape). "same" follows TensorFlow: ceil(H / stride) outputs with the extra
pad at the bottom/right. Max pools ignore padded positions; avg pools divide by the count
of unpadded positions, or by kh * kw with count_include_pad.
"""

from __future__ import annotations

import numpy as np

from ..opdefs import OpDef, register
from ..shapes import ShapeError

ONE = (1, 1)


def out_size(n: int, k: int, s: int, padding, d: int = 1) -> tuple[int, int]:
    """Output length and leading pad along one spatial axis; padding is "same", "valid" or
    (lo, hi); d is the dilation (the window spans (k - 1) * d + 1 inputs)."""
    span = (k - 1) * d + 1
    if padding == "same":
        out = -(-n // s)
        total = max((out - 1) * s + span - n, 0)
        return out, total // 2
    lo, hi = (0, 0) if padding == "valid" else padding
    if n + lo + hi < span:
        what = f'padding "{padding}"' if isinstance(padding, str) else f"padding {lo}, {hi}"
        dil = f" (dilated to {span})" if d > 1 else ""
        raise ShapeError(f"window {k}{dil} is larger than the input {n} with {what}")
    return (n + lo + hi - span) // s + 1, lo


def dilation(attrs) -> tuple[int, int]:
    return tuple(attrs.get("dilation", ONE))


def axis_pads(padding) -> tuple:
    """The per-axis padding argument of out_size: (height's, width's)."""
    if isinstance(padding, str):
        return padding, padding
    t, b, left, r = padding
    return (t, b), (left, r)


def window_pads(x_shape, k, attrs) -> tuple[int, int, int, int, int, int]:
    """(oh, ow, top, bottom, left, right): output size and the zero padding around the input
    that the windows read (bottom/right only as far as the last window reaches)."""
    _, h, w, _ = x_shape
    if isinstance(h, str) or isinstance(w, str):
        raise ShapeError("conv2d and pools need concrete height and width")
    (sh, sw), (dh, dw) = attrs["stride"], dilation(attrs)
    ph, pw = axis_pads(attrs["padding"])
    oh, pt = out_size(h, k[0], sh, ph, dh)
    ow, pl = out_size(w, k[1], sw, pw, dw)
    pb = max((oh - 1) * sh + (k[0] - 1) * dh + 1 - h - pt, 0)
    pr = max((ow - 1) * sw + (k[1] - 1) * dw + 1 - w - pl, 0)
    return oh, ow, pt, pb, pl, pr


def window_geometry(x_shape, k, attrs):
    oh, ow, pt, _, pl, _ = window_pads(x_shape, k, attrs)
    return oh, ow, pt, pl


def _patches(xp, kh, kw, oh, ow, sh, sw, dh=1, dw=1):
    """Yield (di, dj, view [B, oh, ow, C]) of the padded input under each filter tap."""
    for di in range(kh):
        for dj in range(kw):
            yield di, dj, _tap(xp, di * dh, dj * dw, oh, ow, sh, sw)


def _tap(xp, y0, x0, oh, ow, sh, sw):
    return xp[:, y0 : y0 + sh * (oh - 1) + 1 : sh, x0 : x0 + sw * (ow - 1) + 1 : sw, :]


def _padded(x, kh, kw, oh, ow, attrs, fill=0.0):
    _, _, pt, pb, pl, pr = window_pads(x.shape, (kh, kw), attrs)
    return np.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)), constant_values=fill), pt, pl


def _dims(shape) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"


def conv2d_shape(ins, attrs):
    x, w = ins
    if len(x) != 4 or len(w) != 4:
        raise ShapeError(
            f"conv2d takes x [B, H, W, Cin] and w [kh, kw, Cin / groups, Cout], got {_dims(x)} and {_dims(w)}"
        )
    g = attrs.get("groups", 1)
    if isinstance(x[3], str) or isinstance(w[3], str):
        raise ShapeError(f"conv2d needs concrete channel counts, got {_dims(x)} and {_dims(w)}")
    if g == 1 and x[3] != w[2]:
        raise ShapeError(f"conv2d input has Cin = {x[3]} channels but the filter expects Cin = {w[2]}")
    if g != 1:
        if x[3] % g or w[3] % g:
            raise ShapeError(
                f"conv2d groups = {g} must divide both the input's {x[3]} and the output's {w[3]} channels"
            )
        if x[3] // g != w[2]:
            raise ShapeError(
                f"conv2d input has Cin = {x[3]} channels, {x[3] // g} per group of "
                f"{g}, but the filter {_dims(w)} expects {w[2]} per group"
            )
    oh, ow, _, _ = window_geometry(x, w[:2], attrs)
    return (x[0], oh, ow, w[3])


def _grouped(a, g):
    """[..., G * n] -> [..., G, n]."""
    return a.reshape(*a.shape[:-1], g, a.shape[-1] // g)


def _conv2d(args, attrs, dims):
    x, w = args
    kh, kw, ig, cout = w.shape
    g = attrs.get("groups", 1)
    oh, ow, _, _ = window_geometry(x.shape, (kh, kw), attrs)
    xp, _, _ = _padded(x, kh, kw, oh, ow, attrs)
    out = np.zeros((x.shape[0], oh, ow, g, cout // g), dtype=np.result_type(x, w))
    for di, dj, patch in _patches(xp, kh, kw, oh, ow, *attrs["stride"], *dilation(attrs)):
        out += np.einsum("bhwgi,igo->bhwgo", _grouped(patch, g), _grouped(w[di, dj], g))
    return out.reshape(*out.shape[:3], cout)


def _conv2d_grad_input(args, attrs, dims):
    dy, w = args
    x_shape = (dy.shape[0], *attrs["x_shape"][1:])
    kh, kw = w.shape[:2]
    g = attrs.get("groups", 1)
    oh, ow = dy.shape[1:3]
    (sh, sw), (dh, dw) = attrs["stride"], dilation(attrs)
    xp, pt, pl = _padded(np.zeros(x_shape, dy.dtype), kh, kw, oh, ow, attrs)
    dyg = _grouped(dy, g)
    for di in range(kh):
        for dj in range(kw):
            part = np.einsum("bhwgo,igo->bhwgi", dyg, _grouped(w[di, dj], g))
            _tap(xp, di * dh, dj * dw, oh, ow, sh, sw)[...] += part.reshape(*part.shape[:3], -1)
    return xp[:, pt : pt + x_shape[1], pl : pl + x_shape[2], :]


def _conv2d_grad_filter(args, attrs, dims):
    x, dy = args
    kh, kw, cin, cout = attrs["w_shape"]
    g = attrs.get("groups", 1)
    oh, ow = dy.shape[1:3]
    xp, _, _ = _padded(x, kh, kw, oh, ow, attrs)
    dw = np.zeros((kh, kw, cin, g, cout // g), dtype=dy.dtype)
    dyg = _grouped(dy, g)
    for di, dj, patch in _patches(xp, kh, kw, oh, ow, *attrs["stride"], *dilation(attrs)):
        dw[di, dj] = np.einsum("bhwgi,bhwgo->igo", _grouped(patch, g), dyg)
    return dw.reshape(kh, kw, cin, cout)


def pool_shape(ins, attrs):
    x = ins[0]
    if len(x) != 4:
        raise ShapeError(f"pools take x [B, H, W, C], got {_dims(x)}")
    kh, kw = attrs["size"]
    pad = attrs["padding"]
    if not isinstance(pad, str) and (max(pad[:2]) >= kh or max(pad[2:]) >= kw):
        # a window wholly inside the padding would have nothing to pool
        raise ShapeError(f"pool padding {list(pad)} must be smaller than the window {[kh, kw]}")
    oh, ow, _, _ = window_geometry(x, attrs["size"], attrs)
    return (x[0], oh, ow, x[3])


def _max_pool(args, attrs, dims):
    x = args[0]
    kh, kw = attrs["size"]
    oh, ow, _, _ = window_geometry(x.shape, (kh, kw), attrs)
    xp, _, _ = _padded(x, kh, kw, oh, ow, attrs, fill=-np.inf)
    return np.max([p for _, _, p in _patches(xp, kh, kw, oh, ow, *attrs["stride"])], axis=0)


def _pool_counts(x_shape, attrs, dtype):
    kh, kw = attrs["size"]
    if attrs.get("count_include_pad", False):
        # every window lies inside the padded input: it always counts kh * kw positions
        return np.asarray(float(kh * kw), dtype)
    oh, ow, _, _ = window_geometry(x_shape, (kh, kw), attrs)
    ones = np.ones((1, *x_shape[1:3], 1), dtype)
    op, _, _ = _padded(ones, kh, kw, oh, ow, attrs)
    return sum(p for _, _, p in _patches(op, kh, kw, oh, ow, *attrs["stride"]))


def _avg_pool(args, attrs, dims):
    x = args[0]
    kh, kw = attrs["size"]
    oh, ow, _, _ = window_geometry(x.shape, (kh, kw), attrs)
    xp, _, _ = _padded(x, kh, kw, oh, ow, attrs)
    total = sum(p for _, _, p in _patches(xp, kh, kw, oh, ow, *attrs["stride"]))
    return total / _pool_counts(x.shape, attrs, x.dtype)


def _max_pool_grad(args, attrs, dims):
    """dy routed to the first maximum of each window (as TensorFlow does), or its first NaN."""
    x, dy = args
    kh, kw = attrs["size"]
    sh, sw = attrs["stride"]
    oh, ow = dy.shape[1:3]
    xp, pt, pl = _padded(x, kh, kw, oh, ow, attrs, fill=-np.inf)
    best = np.max([p for _, _, p in _patches(xp, kh, kw, oh, ow, sh, sw)], axis=0)
    taken = np.zeros(best.shape, bool)
    dxp = np.zeros(xp.shape, dy.dtype)
    for di, dj, p in _patches(xp, kh, kw, oh, ow, sh, sw):
        hit = ((p == best) | np.isnan(p)) & ~taken  # a window's first NaN is its maximum
        taken |= hit
        _tap(dxp, di, dj, oh, ow, sh, sw)[...] += np.where(hit, dy, 0)
    return dxp[:, pt : pt + x.shape[1], pl : pl + x.shape[2], :]


def _avg_pool_grad(args, attrs, dims):
    dy = args[0]
    x_shape = (dy.shape[0], *attrs["x_shape"][1:])
    kh, kw = attrs["size"]
    sh, sw = attrs["stride"]
    oh, ow = dy.shape[1:3]
    share = dy / _pool_counts(x_shape, attrs, dy.dtype)
    dxp, pt, pl = _padded(np.zeros(x_shape, dy.dtype), kh, kw, oh, ow, attrs)
    for di in range(kh):
        for dj in range(kw):
            _tap(dxp, di, dj, oh, ow, sh, sw)[...] += share
    return dxp[:, pt : pt + x_shape[1], pl : pl + x_shape[2], :]


# -- gradient rules (emit, node, y, g; see ops/adjoint.py) --------------------------

# conv2d is bilinear: y = C(x, w). conv2d_grad_input(dy, w) = C_x^T dy and
# conv2d_grad_filter(x, dy) = C_w^T dy are bilinear too, so the gradients of all
# three are the other two (and conv2d itself).


def _window(n) -> dict:
    """The geometry attrs a window op's gradient ops share (those the node has)."""
    keys = ("stride", "padding", "dilation", "groups", "count_include_pad")
    return {k: v for k, v in n.attrs if k in keys}


def _conv2d_rule(e, n, y, g):
    x, w = n.inputs
    gx = e("conv2d_grad_input", g, w, x_shape=e.shape(x), **_window(n))
    gw = e("conv2d_grad_filter", x, g, w_shape=e.shape(w), **_window(n))
    return gx, gw


def _conv2d_grad_input_rule(e, n, y, g):
    dy, w = n.inputs
    return (e("conv2d", g, w, **_window(n)), e("conv2d_grad_filter", g, dy, w_shape=e.shape(w), **_window(n)))


def _conv2d_grad_filter_rule(e, n, y, g):
    x, dy = n.inputs
    return (e("conv2d_grad_input", dy, g, x_shape=e.shape(x), **_window(n)), e("conv2d", x, g, **_window(n)))


def _avg_pool_rule(e, n, y, g):
    x = n.inputs[0]
    return (e("avg_pool_grad", g, size=n.attr("size"), x_shape=e.shape(x), **_window(n)),)


def _avg_pool_grad_rule(e, n, y, g):
    # avg_pool_grad is avg_pool's adjoint, so its adjoint is avg_pool.
    return (e("avg_pool", g, size=n.attr("size"), **_window(n)),)


def _max_pool_rule(e, n, y, g):
    x = n.inputs[0]
    return (e("max_pool_grad", x, g, size=n.attr("size"), **_window(n)),)


def _max_pool_grad_rule(e, n, y, g):
    # max_pool_grad(x, dy) scatters dy to the first maximum of each window; its adjoint
    # gathers g from there. Windows are laid out as channels with a one-hot conv2d
    # (im2col), padding is masked out, and argmax picks the first maximum. In x it is
    # piecewise constant: no gradient.
    x = n.inputs[0]
    b, _, _, c = e.shape(x)
    kh, kw = n.attr("size")
    taps = kh * kw
    # eye[di, dj, ch, tap * C + ch] = 1 with tap = di * kw + dj: window taps as channels
    eye_values = np.zeros((kh, kw, c, taps * c))
    for di in range(kh):
        for dj in range(kw):
            for ch in range(c):
                eye_values[di, dj, ch, (di * kw + dj) * c + ch] = 1.0
    eye = e.b.const(tuple(eye_values.ravel()), eye_values.shape, e.loc)

    def windows(t: int) -> int:  # [B, oh, ow, C, taps]
        p = e("conv2d", t, eye, **_window(n))
        _, oh, ow, _ = e.shape(p)
        p = e("reshape", p, shape=(b, oh, ow, taps, c))
        return e("transpose", p, perm=(0, 1, 2, 4, 3))

    valid = windows(e("broadcast_to", e.const(1.0), shape=e.shape(x)))
    vx = e("where", valid, windows(x), e.const(-3.0e38))
    first = e("one_hot", e("argmax", vx, axis=4), depth=taps)
    picked = e("sum", e("mul", first, windows(g)), axes=(4,), keepdims=False)
    return None, picked


register(OpDef("conv2d", "window", conv2d_shape, _conv2d, arity=2, gradient=_conv2d_rule))
register(
    OpDef(
        "conv2d_grad_input",
        "window",
        lambda ins, a: (ins[0][0], *a["x_shape"][1:]),
        _conv2d_grad_input,
        arity=2,
        gradient=_conv2d_grad_input_rule,
    )
)
register(
    OpDef(
        "conv2d_grad_filter",
        "window",
        lambda ins, a: tuple(a["w_shape"]),
        _conv2d_grad_filter,
        arity=2,
        gradient=_conv2d_grad_filter_rule,
    )
)
register(OpDef("max_pool", "window", pool_shape, _max_pool, arity=1, gradient=_max_pool_rule))
register(OpDef("avg_pool", "window", pool_shape, _avg_pool, arity=1, gradient=_avg_pool_rule))
register(OpDef("max_pool_grad", "window", lambda ins, a: ins[0], _max_pool_grad, arity=2, gradient=_max_pool_grad_rule))
register(
    OpDef(
        "avg_pool_grad",
        "window",
        lambda ins, a: (ins[0][0], *a["x_shape"][1:]),
        _avg_pool_grad,
        arity=1,
        gradient=_avg_pool_grad_rule,
    )
)
