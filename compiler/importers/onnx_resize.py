"""ONNX's Resize (opset 10 to 19) and Upsample as gathers along the resized axes.

Resize is separable: each resized axis is interpolated on its own, one after another (as
onnx's reference does). Along an axis, output element i is sum_k w[i, k] * x[idx[i, k]]: a
few taps (1 for nearest, 2 linear, 4 cubic, more with antialias), each a `gather` at
constant indices times a constant column of weights. The indices and weights are computed
here at import from the coordinate transformation, so every mode is exact, and an inf or
NaN in x reaches only the outputs whose taps read it (0-weight taps are left out).
tf_crop_and_resize's extrapolated positions are `where`d to extrapolation_value after
their axis, as the reference does.
"""

from __future__ import annotations

import math

import numpy as np

from . import sym_shapes as sym
from .onnx_converter import TO_NHWC, fmt_num
from .onnx_ops import _const_ints, _norm_axis, _one_out, _out_shape, handler
from .onnx_types import INT_TYPES

COORD_MODES = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_crop_and_resize",
)
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _text(v, default: str) -> str:
    if v is None:
        return default
    return v.decode() if isinstance(v, bytes) else v


# -- the taps of one axis ----------------------------------------------------------


def source_coords(mode: str, n_in: int, n_out: int, scale: float, roi: tuple[float, float]) -> np.ndarray:
    """x_original of each output position (float64): ONNX's coordinate transformations."""
    y = np.arange(n_out, dtype=np.float64)
    width = scale * n_in  # the real-valued output length
    if mode == "align_corners":
        return np.zeros(n_out) if width == 1 else y * (n_in - 1) / (width - 1)
    if mode == "asymmetric":
        return y / scale
    if mode == "tf_crop_and_resize":
        lo, hi = roi
        if width == 1:
            return np.full(n_out, (hi - lo) * (n_in - 1) / 2) + lo * (n_in - 1)
        return y * (hi - lo) * (n_in - 1) / (width - 1) + lo * (n_in - 1)
    if mode == "pytorch_half_pixel":
        return np.full(n_out, -0.5) if width == 1 else (y + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        offset = n_in / 2 * (1 - n_out / width)
        return offset + (y + 0.5) / scale - 0.5
    return (y + 0.5) / scale - 0.5  # half_pixel


def _nearest(ratio: float, nearest_mode: str) -> list[float]:
    if float(ratio).is_integer():
        return [0.0, 1.0]
    if nearest_mode == "round_prefer_floor":
        return [float(ratio <= 0.5), float(ratio > 0.5)]
    if nearest_mode == "round_prefer_ceil":
        return [float(ratio < 0.5), float(ratio >= 0.5)]
    return [1.0, 0.0] if nearest_mode == "floor" else [0.0, 1.0]


def _linear(ratio: float, scale: float, antialias: bool) -> list[float]:
    if not antialias:
        return [1 - ratio, ratio]
    scale = min(scale, 1.0)
    start = int(np.floor(-1 / scale) + 1)
    args = (np.arange(start, 2 - start) - ratio) * scale
    w = np.clip(1 - np.abs(args), 0, 1)
    return list(w / w.sum())


def _cubic(ratio: float, scale: float, antialias: bool, a: float) -> list[float]:
    def k(x):  # Keys' cubic convolution kernel
        x = abs(x)
        if x <= 1:
            return (a + 2) * x**3 - (a + 3) * x**2 + 1
        return a * x**3 - 5 * a * x**2 + 8 * a * x - 4 * a if x < 2 else 0.0

    if not antialias:
        return [k(ratio + 1), k(ratio), k(1 - ratio), k(2 - ratio)]
    scale = min(scale, 1.0)
    start = int(np.floor(-2 / scale) + 1)
    w = np.array([k(scale * (i - ratio)) for i in range(start, 2 - start)])
    return list(w / w.sum())


def axis_taps(
    n_in: int, n_out: int, scale: float, roi: tuple[float, float], attrs: dict
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(indices [n_out, n] into the axis, weights [n_out, n], extrapolated [n_out] or None)."""
    mode, coord = attrs["mode"], attrs["coord"]
    x = source_coords(coord, n_in, n_out, scale, roi)
    floor = np.floor(x)
    ratios = np.where(x == floor, 1.0, x - floor)  # in (0, 1]: the left pixel is preferred
    if mode == "nearest":
        w = np.array([_nearest(r, attrs["nearest_mode"]) for r in ratios])
    elif mode == "linear":
        w = np.array([_linear(r, scale, attrs["antialias"]) for r in ratios])
    else:
        w = np.array([_cubic(r, scale, attrs["antialias"], attrs["cubic_a"]) for r in ratios])
    n = w.shape[1]
    # The n nearest positions to x (ties to the smaller), as the reference picks them.
    pad = math.ceil(n / 2)
    xp = x + pad
    p = np.floor(xp).astype(np.int64)
    frac = xp - p
    if n % 2 == 0:
        start = p + np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        start = p + np.where(frac <= 0.5, -((n - 1) // 2), -((n - 1) // 2) + 1)
    idx = start[:, None] + np.arange(n)[None, :] - pad
    if attrs["exclude_outside"]:
        w = np.where((idx < 0) | (idx >= n_in), 0.0, w)
        total = w.sum(axis=1, keepdims=True)
        w = w / np.where(total == 0, 1.0, total)
    idx = np.clip(idx, 0, n_in - 1)  # edge padding
    if mode == "nearest":  # one tap: the neighbor whose weight is 1
        rows = np.arange(n_out)
        idx, w = idx[rows, w.argmax(axis=1)][:, None], np.ones((n_out, 1))
    extrapolated = None
    if coord == "tf_crop_and_resize":
        out_of_range = (x < 0) | (x > n_in - 1)
        extrapolated = out_of_range if out_of_range.any() else None
    return idx, w, extrapolated


# -- the handler -------------------------------------------------------------------


def _geometry(c, node, ins, attrs, x) -> tuple[list[int], list[float], list[tuple[float, float]]]:
    """Per axis of x: the output size, the scale and the roi (start, end)."""
    r = x.rank
    if node.op_type == "Upsample" or c.opset < 11:
        if len(ins) > 1 and ins[1] is not None:
            scales = [float(s) for s in np.asarray(_const_value(c, ins[1], "the scales")).reshape(-1)]
        else:
            scales = [float(s) for s in attrs.get("scales", [])]
        sizes, roi_v, axes = None, None, list(range(r))
    else:
        axes = [_norm_axis(c, a, r) for a in attrs.get("axes", range(r))]
        roi_v = _floats(c, ins, 1, "roi")
        scales = _floats(c, ins, 2, "scales")
        sizes = _sizes(c, ins[3]) if len(ins) > 3 and ins[3] is not None else None
    if (scales is None) == (sizes is None):
        raise c.fail("exactly one of scales and sizes must be given")
    n = len(axes)
    if len(sizes if sizes is not None else scales) != n:
        raise c.fail(f"{n} scales or sizes are needed (one per resized axis)")
    if attrs["coord"] != "tf_crop_and_resize":
        roi_v = None  # only tf_crop_and_resize reads the roi
    elif roi_v is None or len(roi_v) != 2 * n:
        raise c.fail(f"tf_crop_and_resize needs a roi of {2 * n} values (starts, then ends)")
    out = [x.shape[a] for a in range(r)]
    scale = [1.0] * r
    roi = [(0.0, 1.0)] * r
    for k, a in enumerate(axes):
        if roi_v is not None:
            roi[a] = (roi_v[k], roi_v[n + k])
        d = x.shape[a]
        resized = sizes[k] != d if sizes is not None else scales[k] != 1.0
        if isinstance(d, str):
            if resized or roi[a] != (0.0, 1.0):
                raise c.fail(f"resizing the symbolic dim {d} is not supported (its size must be known at import)")
            continue
        if sizes is not None:
            scale[a] = sizes[k] / d
            out[a] = sizes[k]
        else:
            if scales[k] <= 0:
                raise c.fail(f"scale {scales[k]} must be positive")
            scale[a] = scales[k]
            out[a] = int(scales[k] * d)
    policy = _text(attrs.get("keep_aspect_ratio_policy"), "stretch")
    if sizes is not None and policy != "stretch":
        if policy not in ("not_larger", "not_smaller"):
            raise c.fail(f"keep_aspect_ratio_policy '{policy}' is not supported")
        s = (min if policy == "not_larger" else max)(scale[a] for a in axes)
        for a in axes:
            scale[a] = s
            out[a] = int(s * x.shape[a] + 0.5)
    if any(isinstance(o, int) and o < 1 for o in out):
        raise c.fail(f"the output shape {out} has an empty dim: dlc tensors are never empty")
    return out, scale, roi


def _sizes(c, v) -> list | None:
    """Resize's sizes: ints, or a dim of the input (Shape -> Concat keeps the batch's)."""
    if v.const is not None and sym.is_symbolic(v.const):
        return list(sym.dl_shape(v.const)) or None
    return _const_ints(c, v, "Resize's sizes") or None


def _const_value(c, v, what):
    if v.const is None:
        raise c.fail(f"{what} must be known at import (a constant), not computed at run time")
    return v.const


def _floats(c, ins, k, what) -> list[float] | None:
    if len(ins) <= k or ins[k] is None:
        return None
    a = np.asarray(_const_value(c, ins[k], f"Resize's {what}"), dtype=np.float64).reshape(-1)
    return [float(v) for v in a] if a.size else None


def _options(c, node, attrs) -> dict:
    upsample = node.op_type == "Upsample" or c.opset < 11
    mode = _text(attrs.get("mode"), "nearest")
    if mode == "bilinear":  # Upsample-7's name for it
        mode = "linear"
    if mode not in ("nearest", "linear", "cubic"):
        raise c.fail(f"mode '{mode}' is not supported (nearest, linear, cubic)")
    coord = "asymmetric" if upsample else _text(attrs.get("coordinate_transformation_mode"), "half_pixel")
    if coord not in COORD_MODES:
        raise c.fail(f"coordinate_transformation_mode '{coord}' is not supported ({', '.join(COORD_MODES)})")
    nearest = "floor" if upsample else _text(attrs.get("nearest_mode"), "round_prefer_floor")
    if nearest not in NEAREST_MODES:
        raise c.fail(f"nearest_mode '{nearest}' is not supported ({', '.join(NEAREST_MODES)})")
    return {
        "mode": mode,
        "coord": coord,
        "nearest_mode": nearest,
        "antialias": bool(attrs.get("antialias", 0)) and mode != "nearest",
        "cubic_a": float(attrs.get("cubic_coeff_a", -0.75)),
        "exclude_outside": bool(attrs.get("exclude_outside", 0)),
        "extrapolation": float(attrs.get("extrapolation_value", 0.0)),
    }


@handler("Resize", "Upsample")
def _resize(c, node, ins, attrs):
    x = ins[0]
    out = _one_out(c, node)
    opts = _options(c, node, attrs)
    if c.types.get(node.input[0]) in INT_TYPES and opts["mode"] != "nearest":
        raise c.fail(f"{opts['mode']} Resize of an integer tensor is not supported (nearest is)")
    sizes, scales, rois = _geometry(c, node, ins, {**attrs, **opts}, x)
    resized = [a for a in range(x.rank) if (sizes[a], scales[a], rois[a]) != (x.shape[a], 1.0, (0.0, 1.0))]
    # a conv's NHWC output is resized as it is held (H and W are axes 1 and 2 there)
    nhwc = x.nhwc and x.rank == 4 and set(resized) <= {2, 3}
    layout = TO_NHWC if nhwc else tuple(range(x.rank))
    cur, shape = (x.name if nhwc else c.data(x)), list(x.shape)
    for a in resized:
        idx, w, extrapolated = axis_taps(shape[a], sizes[a], scales[a], rois[a], opts)
        shape[a] = sizes[a]
        held = layout.index(a)  # the axis in the layout the tensor is held in
        cur = _apply_taps(c, f"{out}_ax{a}", cur, held, x.rank, idx, w)
        if extrapolated is not None:
            mask = _along(extrapolated.astype(np.float32), held, x.rank)
            mask = c.declare_const(f"{out}_extrapolated{a}", mask, False)
            cur = c.temp(f"{out}_ax{a}", f"where({mask}, {fmt_num(opts['extrapolation'])}, {cur})")
    c.emit(out, cur, _out_shape(c, out, tuple(shape)), nhwc=nhwc)


def _along(col: np.ndarray, axis: int, rank: int) -> np.ndarray:
    """A [n] column shaped to broadcast along `axis` of a rank-`rank` tensor."""
    return col.reshape([len(col) if k == axis else 1 for k in range(rank)])


def _apply_taps(c, base: str, x: str, axis: int, rank: int, idx: np.ndarray, w: np.ndarray) -> str:
    """sum_k w[:, k] * gather(x, idx[:, k], axis): taps whose weights are all 0 left out,
    a weight of 1 not multiplied."""
    terms = []
    for k in range(w.shape[1]):
        col = w[:, k]
        if not col.any():
            continue
        i = c.declare_const(f"{base}_i{k}", idx[:, k].astype(np.float32), False)
        g = f"gather({x}, int({i}), axis={axis})"
        if np.all(col == 1.0):
            terms.append(g)
        else:
            wk = c.declare_const(f"{base}_w{k}", _along(col.astype(np.float32), axis, rank), False)
            terms.append(f"{g} * {wk}")
    if not terms:
        raise c.fail("every interpolation weight is 0 (exclude_outside with no input inside the window)")
    return c.temp(base, " + ".join(terms))
