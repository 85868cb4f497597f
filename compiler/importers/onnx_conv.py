"""ONNX's window ops beyond onnx_ops' 1-D and 2-D Conv, ConvTranspose and pools:

- Conv 3-D: a sum over the depth taps of `conv2d` over [N * D_out, H, W, C] (each tap the
  depth slices that tap reads, folded into the batch), the filter one param in dlc's layout
  `[kd, kh, kw, Cin/G, Cout]` sliced per tap.
- MaxPool and AveragePool with dilations or over 3-D input, and LpPool: one strided slice of
  the (zero-)padded input per kernel offset, combined by `maximum` (padding masked to -inf),
  a sum divided by the count of the window's elements (separable: per axis), or the p-norm.
- ConvTranspose with auto_pad SAME_* or output_shape: the pads and output_padding these
  mean, then onnx_ops' ConvTranspose.
"""

from __future__ import annotations

import itertools

import numpy as np

from .onnx_converter import fmt_list, fmt_num, fmt_shape
from .onnx_ops import HANDLERS, _one_out, _out_shape, _take_along

_conv_2d = HANDLERS["Conv"]
_pools_2d = {"MaxPool": HANDLERS["MaxPool"], "AveragePool": HANDLERS["AveragePool"]}
_conv_transpose = HANDLERS["ConvTranspose"]


def _text(v, default: str) -> str:
    return default if v is None else (v.decode() if isinstance(v, bytes) else v)


def window_pads(c, node, attrs, spatial, eff, strides) -> tuple[list[int], list[int]]:
    """(pads before, pads after) per spatial axis from pads / auto_pad."""
    auto = _text(attrs.get("auto_pad"), "NOTSET")
    r = len(spatial)
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        lo, hi = [], []
        for n, k, s in zip(spatial, eff, strides):
            total = max((-(-n // s) - 1) * s + k - n, 0)
            small = total // 2
            lo.append(small if auto == "SAME_UPPER" else total - small)
            hi.append(total - lo[-1])
        return lo, hi
    if auto == "VALID":
        return [0] * r, [0] * r
    pads = list(attrs.get("pads", [0] * (2 * r)))
    if len(pads) != 2 * r:
        raise c.fail(f"pads {pads} must have {2 * r} values for a {r}-D {node.op_type}")
    return pads[:r], pads[r:]


# -- Conv 3-D ------------------------------------------------------------------------


def _conv(c, node, ins, attrs):
    x, w = ins[:2]
    if x.rank != 5:
        return _conv_2d(c, node, ins, attrs)
    bias = ins[2] if len(ins) > 2 else None
    out = _one_out(c, node)
    n, ch, *spatial = x.shape
    if any(isinstance(d, str) for d in spatial):
        raise c.fail("a 3-D Conv's depth, height and width must be known at import")
    kernel = list(attrs.get("kernel_shape", w.shape[2:]))
    strides = list(attrs.get("strides", [1, 1, 1]))
    dil = list(attrs.get("dilations", [1, 1, 1]))
    groups = attrs.get("group", 1)
    eff = [(k - 1) * d + 1 for k, d in zip(kernel, dil)]
    lo, hi = window_pads(c, node, attrs, spatial, eff, strides)
    d_out = (spatial[0] + lo[0] + hi[0] - eff[0]) // strides[0] + 1
    xs = c.temp(out + "_ndhwc", f"transpose({c.data(x)}, perm=[0, 2, 3, 4, 1])")
    depth = spatial[0]
    if lo[0] or hi[0]:
        xs = c.temp(out + "_padded", f"pad({xs}, [0, {lo[0]}, 0, 0, 0], [0, {hi[0]}, 0, 0, 0])")
        depth += lo[0] + hi[0]
    # [Cout, Cin/G, kd, kh, kw] -> [kd, kh, kw, Cin/G, Cout]: per depth tap, conv2d's layout
    if w.const is not None:
        wn = c.declare_const(w.onnx_name, w.const.transpose(2, 3, 4, 1, 0), w.param)
    else:
        wn = c.temp(w.onnx_name + "_dhwio", f"transpose({c.data(w)}, perm=[2, 3, 4, 1, 0])")
    kd, kh, kw = kernel
    cin_g, cout = w.shape[1], w.shape[0]
    padding = fmt_list([lo[1], hi[1], lo[2], hi[2]])
    h, wd = spatial[1:]
    terms = []
    for t in range(kd):
        idx = [t * dil[0] + o * strides[0] for o in range(d_out)]
        taken = _take_along(c, f"{out}_d{t}", xs, [n, depth, h, wd, ch], 1, idx, strides[0])
        batch = c.temp(f"{out}_d{t}_batch", f"reshape({taken}, {fmt_shape([-1, h, wd, ch])})")
        wt = f"reshape(slice({wn}, [{t}, 0, 0, 0, 0], [1, -1, -1, -1, -1]), {fmt_shape([kh, kw, cin_g, cout])})"
        args = [batch, wt, f"stride={fmt_list(strides[1:])}", f"padding={padding}", f"dilation={fmt_list(dil[1:])}"]
        if groups != 1:
            args.append(f"groups={groups}")
        terms.append(f"conv2d({', '.join(args)})")
    summed = c.temp(out + "_taps", " + ".join(terms))
    shape = _out_shape(c, out)
    y = f"reshape({summed}, {fmt_shape([n, d_out, *shape[3:], cout])})"
    if bias is not None:
        y = f"{y} + {c.data(bias)}"
    c.emit(out, f"transpose({y}, perm=[0, 4, 1, 2, 3])", shape)


HANDLERS["Conv"] = _conv


# -- pools by taps -------------------------------------------------------------------


def _pool(c, node, ins, attrs):
    x = ins[0]
    r = x.rank - 2
    dil = list(attrs.get("dilations", [1] * r))
    if node.op_type != "LpPool" and x.rank in (3, 4) and dil == [1] * r:
        return _pools_2d[node.op_type](c, node, ins, attrs)
    out = _one_out(c, node)
    n, ch, *spatial = x.shape
    if any(isinstance(d, str) for d in spatial):
        raise c.fail(f"{node.op_type}'s spatial dims must be known at import, got {fmt_shape(x.shape)}")
    kernel = list(attrs["kernel_shape"])
    strides = list(attrs.get("strides", [1] * r))
    eff = [(k - 1) * d + 1 for k, d in zip(kernel, dil)]
    lo, hi = window_pads(c, node, attrs, spatial, eff, strides)
    outs, extra = [], []
    for size, k, s, a, b in zip(spatial, eff, strides, lo, hi):
        o = (size + a + b - k) // s + 1
        if attrs.get("ceil_mode", 0):
            o = -(-(size + a + b - k) // s) + 1
            if (o - 1) * s >= size + a:  # the last window must start inside the input or its pad
                o -= 1
        outs.append(o)
        extra.append(max((o - 1) * s + k - (size + a + b), 0))
    xs, shape = c.data(x), list(x.shape)
    if any(lo) or any(hi) or any(extra):
        after = [h + e for h, e in zip(hi, extra)]
        xs = c.temp(out + "_padded", f"pad({xs}, {fmt_list([0, 0, *lo])}, {fmt_list([0, 0, *after])})")
        shape = [n, ch, *(size + a + b for size, a, b in zip(spatial, lo, after))]
    # per axis and kernel offset: the input positions the outputs read
    positions = [
        [np.arange(o) * s + t * d - a for t in range(k)] for o, s, d, a, k in zip(outs, strides, dil, lo, kernel)
    ]
    taps = []
    for offsets in itertools.product(*(range(k) for k in kernel)):
        cur, cur_shape = xs, list(shape)
        for i, t in enumerate(offsets):
            idx = [int(p) + lo[i] for p in positions[i][t]]
            cur = _take_along(
                c, f"{out}_t{'_'.join(map(str, offsets[: i + 1]))}", cur, cur_shape, 2 + i, idx, strides[i]
            )
            cur_shape[2 + i] = outs[i]
        if node.op_type == "MaxPool":
            for i, t in enumerate(offsets):  # a padded position is no candidate
                p = positions[i][t]
                inside = (p >= 0) & (p < spatial[i])
                if not inside.all():
                    m = c.declare_const(f"{out}_inside{i}_{t}", _along(inside, 2 + i, x.rank), False)
                    cur = f"where({m}, {cur}, -inf)"
        taps.append(cur)
    y = _combine(c, node, out, taps, attrs, positions, spatial, hi, x.rank)
    c.emit(out, y, _out_shape(c, out, (n, ch, *outs)))


def _along(col: np.ndarray, axis: int, rank: int) -> np.ndarray:
    return col.astype(np.float32).reshape([len(col) if k == axis else 1 for k in range(rank)])


def _combine(c, node, out, taps, attrs, positions, spatial, hi, rank) -> str:
    if node.op_type == "MaxPool":
        y = taps[0]
        for t in taps[1:]:
            y = f"maximum({y}, {t})"
        return y
    if node.op_type == "LpPool":
        p = attrs.get("p", 2)
        if p == 2:
            return f"sqrt({' + '.join(f'square({t})' for t in taps)})"
        total = " + ".join(f"pow(abs({t}), {fmt_num(p)})" for t in taps)
        return f"pow({total}, {fmt_num(1.0 / p)})"
    total = c.temp(out + "_sum", " + ".join(taps))
    include = attrs.get("count_include_pad", 0)
    y = total
    for i, per_tap in enumerate(positions):  # the window's count is a product over the axes
        p = np.stack(per_tap)  # [k, out]
        # count_include_pad counts the pads (p >= -pad always), not ceil_mode's extra
        counted = (p < spatial[i] + hi[i]) if include else ((p >= 0) & (p < spatial[i]))
        count = counted.sum(axis=0)
        if (count == count[0]).all():
            y = f"{y} / {fmt_num(float(count[0]))}"
        else:
            y = f"{y} / {c.declare_const(f'{out}_count{i}', _along(count, 2 + i, rank), False)}"
    return y


for _op in ("MaxPool", "AveragePool", "LpPool"):
    HANDLERS[_op] = _pool


# -- ConvTranspose's auto_pad and output_shape ---------------------------------------


def _conv_transpose_geometry(c, node, ins, attrs):
    x, w = ins[:2]
    auto = _text(attrs.get("auto_pad"), "NOTSET")
    if auto not in ("SAME_UPPER", "SAME_LOWER") and "output_shape" not in attrs:
        return _conv_transpose(c, node, ins, attrs)
    spatial = list(x.shape[2:])
    r = len(spatial)
    if any(isinstance(d, str) for d in spatial):
        raise c.fail("ConvTranspose with auto_pad or output_shape needs the spatial dims known at import")
    kernel = list(attrs.get("kernel_shape", w.shape[2:]))
    strides = list(attrs.get("strides", [1] * r))
    dil = list(attrs.get("dilations", [1] * r))
    extra = list(attrs.get("output_padding", [0] * r))
    full = [s * (n - 1) + e + (k - 1) * d + 1 for n, s, e, k, d in zip(spatial, strides, extra, kernel, dil)]
    new = {k: v for k, v in attrs.items() if k not in ("auto_pad", "output_shape")}
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        target = list(attrs.get("output_shape", [n * s for n, s in zip(spatial, strides)]))[-r:]
        lo, hi = [], []
        for f, t in zip(full, target):
            total = f - t
            if total < 0:
                raise c.fail(f"output_shape {target} is larger than the full transposed convolution {full}")
            small = total // 2
            lo.append(small if auto == "SAME_UPPER" else total - small)
            hi.append(total - lo[-1])
        new["pads"] = lo + hi
    else:  # NOTSET with output_shape: ONNX's reference keeps the pads; the rest is zeros at the end
        pads = list(attrs.get("pads", [0] * (2 * r)))
        target = list(attrs["output_shape"])[-r:]
        got = [f - pads[i] - pads[r + i] for i, f in enumerate(full)]
        grow = [t - g for t, g in zip(target, got)]
        if min(grow) < 0:
            raise c.fail(f"output_shape {target} is smaller than the transposed convolution's {got}")
        new["output_padding"] = [e + g for e, g in zip(extra, grow)]
    return _conv_transpose(c, node, ins, new)


HANDLERS["ConvTranspose"] = _conv_transpose_geometry
