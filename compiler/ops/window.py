"""Sliding-window ops over NHWC images: conv2d, pools, and their gradients.

attrs: stride (sh, sw); padding "same" or "valid"; for conv2d the filter is
[kh, kw, Cin, Cout]; for pools size (kh, kw). Gradient ops carry the shape of
what they give back (x_shape / w_shape). Padding follows TensorFlow: "same"
gives ceil(H / stride) outputs with the extra pad at the bottom/right; pools
ignore padded positions.
"""

from __future__ import annotations

import numpy as np

from ..registry import OpDef, register
from ..shapes import ShapeError


def out_size(n: int, k: int, s: int, padding: str) -> tuple[int, int]:
    """Output length and leading pad along one spatial axis."""
    if padding == "same":
        out = -(-n // s)
        total = max((out - 1) * s + k - n, 0)
        return out, total // 2
    if n < k:
        raise ShapeError(f"window {k} is larger than the input {n} with padding \"valid\"")
    return (n - k) // s + 1, 0


def window_geometry(x_shape, k, attrs):
    _, h, w, _ = x_shape
    if isinstance(h, str) or isinstance(w, str):
        raise ShapeError("conv2d and pools need concrete height and width")
    (sh, sw), pad = attrs["stride"], attrs["padding"]
    oh, pt = out_size(h, k[0], sh, pad)
    ow, pl = out_size(w, k[1], sw, pad)
    return oh, ow, pt, pl


def _patches(xp, kh, kw, oh, ow, sh, sw):
    """Yield (di, dj, view [B, oh, ow, C]) of the padded input under each filter tap."""
    for di in range(kh):
        for dj in range(kw):
            yield di, dj, xp[:, di: di + sh * (oh - 1) + 1: sh, dj: dj + sw * (ow - 1) + 1: sw, :]


def _padded(x, kh, kw, oh, ow, attrs, fill=0.0):
    (sh, sw) = attrs["stride"]
    _, h, w, _ = x.shape
    _, _, pt, pl = window_geometry(x.shape, (kh, kw), attrs)
    pb = max((oh - 1) * sh + kh - h - pt, 0)
    pr = max((ow - 1) * sw + kw - w - pl, 0)
    return np.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)), constant_values=fill), pt, pl


def conv2d_shape(ins, attrs):
    x, w = ins
    if len(x) != 4 or len(w) != 4:
        raise ShapeError(f"conv2d takes x [B, H, W, Cin] and w [kh, kw, Cin, Cout], got "
                         f"[{', '.join(map(str, x))}] and [{', '.join(map(str, w))}]")
    if x[3] != w[2]:
        raise ShapeError(f"conv2d input has Cin = {x[3]} channels but the filter expects Cin = {w[2]}")
    oh, ow, _, _ = window_geometry(x, w[:2], attrs)
    return (x[0], oh, ow, w[3])


def _conv2d(args, attrs, dims):
    x, w = args
    kh, kw = w.shape[:2]
    oh, ow, _, _ = window_geometry(x.shape, (kh, kw), attrs)
    xp, _, _ = _padded(x, kh, kw, oh, ow, attrs)
    out = np.zeros((x.shape[0], oh, ow, w.shape[3]), dtype=np.result_type(x, w))
    for di, dj, patch in _patches(xp, kh, kw, oh, ow, *attrs["stride"]):
        out += patch @ w[di, dj]
    return out


def _conv2d_grad_input(args, attrs, dims):
    dy, w = args
    x_shape = (dy.shape[0], *attrs["x_shape"][1:])
    kh, kw = w.shape[:2]
    oh, ow = dy.shape[1:3]
    sh, sw = attrs["stride"]
    xp, pt, pl = _padded(np.zeros(x_shape, dy.dtype), kh, kw, oh, ow, attrs)
    for di in range(kh):
        for dj in range(kw):
            xp[:, di: di + sh * (oh - 1) + 1: sh, dj: dj + sw * (ow - 1) + 1: sw, :] += dy @ w[di, dj].T
    return xp[:, pt: pt + x_shape[1], pl: pl + x_shape[2], :]


def _conv2d_grad_filter(args, attrs, dims):
    x, dy = args
    kh, kw, cin, cout = attrs["w_shape"]
    oh, ow = dy.shape[1:3]
    xp, _, _ = _padded(x, kh, kw, oh, ow, attrs)
    dw = np.zeros((kh, kw, cin, cout), dtype=dy.dtype)
    for di, dj, patch in _patches(xp, kh, kw, oh, ow, *attrs["stride"]):
        dw[di, dj] = np.einsum("bijc,bijo->co", patch, dy)
    return dw


def pool_shape(ins, attrs):
    x = ins[0]
    if len(x) != 4:
        raise ShapeError(f"pools take x [B, H, W, C], got [{', '.join(map(str, x))}]")
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
        dxp[:, di: di + sh * (oh - 1) + 1: sh, dj: dj + sw * (ow - 1) + 1: sw, :] += np.where(hit, dy, 0)
    return dxp[:, pt: pt + x.shape[1], pl: pl + x.shape[2], :]


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
            dxp[:, di: di + sh * (oh - 1) + 1: sh, dj: dj + sw * (ow - 1) + 1: sw, :] += share
    return dxp[:, pt: pt + x_shape[1], pl: pl + x_shape[2], :]


register(OpDef("conv2d", "window", conv2d_shape, _conv2d, arity=2))
register(OpDef("conv2d_grad_input", "window",
               lambda ins, a: (ins[0][0], *a["x_shape"][1:]), _conv2d_grad_input, arity=2))
register(OpDef("conv2d_grad_filter", "window",
               lambda ins, a: tuple(a["w_shape"]), _conv2d_grad_filter, arity=2))
register(OpDef("max_pool", "window", pool_shape, _max_pool, arity=1))
register(OpDef("avg_pool", "window", pool_shape, _avg_pool, arity=1))
register(OpDef("max_pool_grad", "window",
               lambda ins, a: ins[0], _max_pool_grad, arity=2))
register(OpDef("avg_pool_grad", "window",
               lambda ins, a: (ins[0][0], *a["x_shape"][1:]), _avg_pool_grad, arity=1))
