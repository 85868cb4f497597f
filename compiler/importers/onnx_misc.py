"""Small ONNX ops written with existing functions: CastLike (Cast to the type of its second
input), elementwise activations (Swish, Celu, ThresholdedRelu, Shrink, Asinh, Acosh,
Atanh), Hardmax, DepthToSpace/SpaceToDepth, BitShift, ReduceProd, DynamicQuantizeLinear,
EyeLike, CenterCropPad, Compress, and the forms onnx_ops refuses of
ArgMax/ArgMin (select_last_index), Mod (fmod=1) and OneHot (an axis other than the last)."""

from __future__ import annotations

import numpy as np
from onnx import helper

from .onnx_converter import fmt_list, fmt_num, fmt_shape
from .onnx_ops import HANDLERS, REDUCE, _elementwise, _norm_axis, _out_shape, handler
from .onnx_types import INT_TYPES


@handler("CastLike")
def _cast_like(c, node, ins, attrs):
    target = ins[1]
    to = c.types.get(node.input[1])
    if not to and target.const is not None:
        to = helper.np_dtype_to_tensor_dtype(target.const.dtype)
    if not to:
        raise c.fail(f"the element type of '{node.input[1]}' is unknown")
    HANDLERS["Cast"](c, node, ins[:1], {"to": to})


def _activation(op: str, template: str, **defaults):
    """An elementwise op of one input whose float attributes fill `template`."""

    def fn(c, node, ins, attrs):
        values = {k: fmt_num(attrs.get(k, v)) for k, v in defaults.items()}
        _elementwise(c, node, ins[:1], lambda x: template.format(x=x, **values))

    HANDLERS[op] = fn


_activation("Swish", "({x} * sigmoid({alpha} * {x}))", alpha=1.0)
_activation("Celu", "(maximum({x}, 0.0) + minimum(0.0, {alpha} * (exp({x} / {alpha}) - 1.0)))", alpha=1.0)
_activation("ThresholdedRelu", "where(gt({x}, {alpha}), {x}, 0.0)", alpha=1.0)
_activation(
    "Shrink", "where(lt({x}, -{lambd}), {x} + {bias}, where(gt({x}, {lambd}), {x} - {bias}, 0.0))", lambd=0.5, bias=0.0
)
_activation("Asinh", "(sign({x}) * log(abs({x}) + sqrt(square({x}) + 1.0)))")  # no cancellation below 0
_activation("Acosh", "log({x} + sqrt(square({x}) - 1.0))")
_activation("Atanh", "(0.5 * log((1.0 + {x}) / (1.0 - {x})))")


_arg_first = {op: HANDLERS[op] for op in ("ArgMax", "ArgMin")}
_mod_floor = HANDLERS["Mod"]
_one_hot_last = HANDLERS["OneHot"]


@handler("ArgMax", "ArgMin")
def _arg(c, node, ins, attrs):
    """select_last_index=1: the largest position holding the extremum (ties to the last)."""
    if not attrs.get("select_last_index", 0):
        return _arg_first[node.op_type](c, node, ins, attrs)
    x = ins[0]
    out = node.output[0]
    axis = _norm_axis(c, attrs.get("axis", 0), x.rank)
    n = x.shape[axis]
    if isinstance(n, str):
        raise c.fail(f"select_last_index over the symbolic dim {n} is not supported")
    keep = bool(attrs.get("keepdims", 1))
    fn = "max" if node.op_type == "ArgMax" else "min"
    xs = c.data(x)
    best = c.temp(out + "_best", f"{fn}({xs}, axis={axis}, keepdims=true)")
    pos = f"reshape(arange({n}), {fmt_shape([n if k == axis else 1 for k in range(x.rank)])})"
    expr = f"max(where(eq({xs}, {best}), {pos}, -1.0), axis={axis}, keepdims={str(keep).lower()})"
    c.emit(out, expr, _out_shape(c, out))


@handler("Mod")
def _mod(c, node, ins, attrs):
    """fmod=1 (C's fmod: the sign of the dividend): the floor mod, less the divisor where
    the two signs differ."""
    if not attrs.get("fmod", 0):
        return _mod_floor(c, node, ins, attrs)

    def expr(a, b):
        r = c.temp(node.output[0] + "_floor_mod", f"mod({a}, {b})")
        return f"where(logical_and(ne({r}, 0.0), ne(sign({r}), sign({a}))), {r} - {b}, {r})"

    _elementwise(c, node, ins[:2], expr)


@handler("OneHot")
def _one_hot(c, node, ins, attrs):
    """Along another axis than the last: the last, then moved there."""
    idx = ins[0]
    axis = _norm_axis(c, attrs.get("axis", -1), idx.rank + 1)
    if axis == idx.rank:
        return _one_hot_last(c, node, ins, attrs)
    out = node.output[0]
    last = helper.make_node("OneHot", list(node.input), [out + "_last"], axis=-1)
    depth = _out_shape(c, out)[axis]
    c.shapes[out + "_last"] = (*idx.shape, depth)
    _one_hot_last(c, last, ins, {**attrs, "axis": -1})
    perm = [*range(axis), idx.rank, *range(axis, idx.rank)]
    c.emit(out, f"transpose({c.data(c.values[out + '_last'])}, perm={fmt_list(perm)})", _out_shape(c, out))


@handler("Hardmax")
def _hardmax(c, node, ins, attrs):
    """1 at the first largest element along the axis, else 0: `one_hot` of `argmax`."""
    x = ins[0]
    out = node.output[0]
    axis = _norm_axis(c, attrs.get("axis", -1), x.rank)
    n = x.shape[axis]
    if isinstance(n, str):
        raise c.fail(f"Hardmax along the symbolic dim {n} is not supported")
    hot = f"one_hot(int(argmax({c.data(x)}, axis={axis})), {n})"  # the axis comes out last
    if axis != x.rank - 1:
        perm = [*range(axis), x.rank - 1, *range(axis, x.rank - 1)]
        hot = f"transpose({hot}, perm={fmt_list(perm)})"
    c.emit(out, hot, _out_shape(c, out, x.shape))


@handler("DepthToSpace", "SpaceToDepth")
def _depth_space(c, node, ins, attrs):
    """Blocks of channels to pixels and back: a reshape, a transpose and a reshape."""
    x = ins[0]
    out = node.output[0]
    b = attrs["blocksize"]
    if x.rank != 4 or any(isinstance(d, str) for d in x.shape[1:]):
        raise c.fail(f"{node.op_type} needs [N, C, H, W] with C, H, W known, got {fmt_shape(x.shape)}")
    n, ch, h, w = x.shape
    mode = attrs.get("mode", b"DCR")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if node.op_type == "SpaceToDepth":  # DCR: the block's offsets before the channel; CRD: after
        perm = [0, 1, 3, 5, 2, 4] if mode == "CRD" else [0, 3, 5, 1, 2, 4]
        split, shape = [n, ch, h // b, b, w // b, b], [n, ch * b * b, h // b, w // b]
    elif mode == "CRD":
        split, perm, shape = [n, ch // (b * b), b, b, h, w], [0, 1, 4, 2, 5, 3], [n, ch // (b * b), h * b, w * b]
    else:
        split, perm, shape = [n, b, b, ch // (b * b), h, w], [0, 3, 4, 1, 5, 2], [n, ch // (b * b), h * b, w * b]
    moved = f"transpose(reshape({c.data(x)}, {fmt_shape(split)}), perm={fmt_list(perm)})"
    c.emit(out, f"reshape({moved}, {fmt_shape(shape)})", _out_shape(c, out, tuple(shape)))


@handler("BitShift")
def _bit_shift(c, node, ins, attrs):
    """Unsigned shifts as arithmetic: x * 2^y (wrapped to 8 and 16 bits) or floor(x / 2^y),
    exact below 2^24 as dlc's integers are. Signed shifts are refused."""
    bits = {2: 8, 4: 16, 12: 32, 13: 64}.get(c.types.get(node.input[0]))
    if bits is None:
        raise c.fail("BitShift of a signed or non-integer type is not supported (unsigned integers are)")
    left = (attrs["direction"].decode() if isinstance(attrs["direction"], bytes) else attrs["direction"]) == "LEFT"
    if not left:
        template = "floor({} / pow(2.0, {}))"
    elif bits <= 16:
        template = "mod({} * pow(2.0, {}), " + fmt_num(2.0**bits) + ")"
    else:
        template = "({} * pow(2.0, {}))"
    _elementwise(c, node, ins[:2], lambda x, y: template.format(x, y))


# ReduceProd through onnx_ops' reductions: the product's magnitude as exp(sum(log |x|)) (a
# zero gives exp(-inf) = 0), its sign from the parity of the negative factors; an integer
# product is rounded back to its integer.
REDUCE["ReduceProd"] = (
    "exp(sum(log(abs({x})), axis={a}, keepdims={k}))"
    " * (1.0 - 2.0 * mod(sum(lt({x}, 0.0), axis={a}, keepdims={k}), 2.0))"
)
_reduce = HANDLERS["ReduceSum"]


@handler("ReduceProd")
def _reduce_prod(c, node, ins, attrs):
    _reduce(c, node, ins, attrs)
    if c.types.get(node.input[0]) in INT_TYPES:
        v = c.values[node.output[0]]
        c.emit(node.output[0], f"round({c.data(v)})", v.shape)


@handler("DynamicQuantizeLinear")
def _dynamic_quantize(c, node, ins, attrs):
    """uint8 quantization by x's own range (0 included): scale = (max - min) / 255, the zero
    point the rounded -min / scale, y = clip(round(x / scale) + zero point, 0, 255)."""
    x = ins[0]
    y, scale_out, zp_out = (list(node.output) + ["", "", ""])[:3]
    base = y or scale_out or zp_out
    xs = c.data(x)
    lo = f"minimum(min({xs}), 0.0)"
    hi = f"maximum(max({xs}), 0.0)"
    scale = c.temp(base + "_scale", f"({hi} - {lo}) / 255.0")
    zp = c.temp(base + "_zero_point", f"clip(round(0.0 - {lo} / {scale}), 0.0, 255.0)")
    if y:
        c.emit(y, f"clip(round({xs} / {scale}) + {zp}, 0.0, 255.0)", _out_shape(c, y, x.shape))
    for o, name in ((scale_out, scale), (zp_out, zp)):
        if o:
            c.emit(o, name, _out_shape(c, o, ()))


@handler("EyeLike")
def _eye_like(c, node, ins, attrs):
    """Ones on diagonal k of x's [rows, cols] shape: a constant (the shape is known)."""
    x = ins[0]
    if len(x.shape) != 2 or any(isinstance(d, str) for d in x.shape):
        raise c.fail(f"EyeLike needs a 2-D input of known shape, got {fmt_shape(x.shape)}")
    eye = np.eye(*x.shape, k=attrs.get("k", 0), dtype=np.float32)
    c.set_const(node.output[0], eye, False)


@handler("CenterCropPad")
def _center_crop_pad(c, node, ins, attrs):
    """Each listed axis cropped or zero-padded to its target length about its center (an
    odd difference's extra element at the end, as ONNX's reference)."""
    x = ins[0]
    out = node.output[0]
    target = [int(v) for v in np.asarray(ins[1].const if ins[1].const is not None else _fail_shape(c)).reshape(-1)]
    axes = [_norm_axis(c, a, x.rank) for a in attrs.get("axes", range(x.rank))]
    if len(axes) != len(target):
        raise c.fail(f"{len(target)} target lengths for {len(axes)} axes")
    cur, shape = c.data(x), list(x.shape)
    for a, t in zip(axes, target):
        d = shape[a]
        if isinstance(d, str):
            raise c.fail(f"CenterCropPad along the symbolic dim {d} is not supported")
        if t < d:
            begin, size = [0] * x.rank, [-1] * x.rank
            begin[a], size[a] = (d - t) // 2, t
            cur = c.temp(f"{out}_crop{a}", f"slice({cur}, {fmt_list(begin)}, {fmt_list(size)})")
        elif t > d:
            before, after = [0] * x.rank, [0] * x.rank
            before[a], after[a] = (t - d) // 2, t - d - (t - d) // 2
            cur = c.temp(f"{out}_pad{a}", f"pad({cur}, {fmt_list(before)}, {fmt_list(after)})")
        shape[a] = t
    c.emit(out, cur, _out_shape(c, out, tuple(shape)))


def _fail_shape(c):
    raise c.fail("CenterCropPad's shape must be known at import (a constant)")


@handler("Compress")
def _compress(c, node, ins, attrs):
    """The slices where the condition (known at import) is true: a gather of their indices,
    along the axis, or of the flattened input without one."""
    x, cond = ins
    out = node.output[0]
    if cond.const is None:
        raise c.fail("Compress's condition must be known at import (a constant)")
    keep = np.flatnonzero(np.asarray(cond.const).reshape(-1))
    if not keep.size:
        raise c.fail("Compress keeps nothing: dlc tensors are never empty")
    idx = f"int({c.declare_const(out + '_kept', keep.astype(np.float32), False)})"
    if "axis" not in attrs:
        c.emit(out, f"gather(reshape({c.data(x)}, [-1]), {idx})", _out_shape(c, out, (len(keep),)))
        return
    axis = _norm_axis(c, attrs["axis"], x.rank)
    shape = [len(keep) if k == axis else d for k, d in enumerate(x.shape)]
    c.emit(out, f"gather({c.data(x)}, {idx}, axis={axis})", _out_shape(c, out, tuple(shape)))
