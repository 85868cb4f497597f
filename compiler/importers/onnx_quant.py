"""ONNX's QuantizeLinear and DequantizeLinear (8- and 16-bit integers).

Of a constant (a quantized weight): folded at import with onnx's reference evaluator, as
every node of constants is; the f32 result is a `const`, or a `frozen param` when it has
more than 16 elements (a dequantized weight is not trained: its integers are the model).
Of a run-time tensor: written out, `(x - zero_point) * scale` and
`clip(round(x / scale) + zero_point, lo, hi)` (round half to even, as ONNX), the scale and
zero point per tensor, per axis or per block (known at import).
"""

from __future__ import annotations

import numpy as np

from .onnx_converter import fmt_num, fmt_shape
from .onnx_ops import _norm_axis, _one_out, _out_shape, handler

# ONNX element type -> the integer range QuantizeLinear saturates to
RANGES = {2: (0, 255), 3: (-128, 127), 4: (0, 65535), 5: (-32768, 32767)}


def _param_shape(c, node, x, p, attrs) -> str | None:
    """The scale or zero point `p` as a .dl operand broadcasting against x: a scalar as is,
    a [C] vector along `axis`, a blocked one repeated block_size times along it."""
    if p is None:
        return None
    if p.rank == 0 or (p.rank == 1 and p.shape[0] == 1):
        return c.data(p) if p.rank == 0 else f"reshape({c.data(p)}, [])"
    axis = _norm_axis(c, attrs.get("axis", 1), x.rank)
    block = attrs.get("block_size", 0)
    if block:
        if p.const is None:
            raise c.fail("a blocked scale or zero point must be known at import")
        a = np.repeat(p.const, block, axis=axis)
        a = a[tuple(slice(0, d) if k == axis else slice(None) for k, d in enumerate(x.shape))]
        return c.declare_const(p.onnx_name + "_blocks", a.astype(np.float32), False)
    if p.rank != 1 or p.shape[0] != x.shape[axis]:
        raise c.fail(
            f"'{p.onnx_name}' of shape {fmt_shape(p.shape)} does not match axis {axis} of {fmt_shape(x.shape)}"
        )
    return f"reshape({c.data(p)}, {fmt_shape([d if k == axis else 1 for k, d in enumerate(x.shape)])})"


def _zero_point_type(c, node, k: int, default: int) -> int:
    if len(node.input) > k and node.input[k]:
        return c.types.get(node.input[k]) or default
    return default


@handler("DequantizeLinear")
def _dequantize(c, node, ins, attrs):
    x, scale = ins[:2]
    zp = ins[2] if len(ins) > 2 else None
    src = c.types.get(node.input[0])
    if src not in RANGES and src != 6:  # int32 too: a bias
        raise c.fail("DequantizeLinear of this element type is not supported (8- and 16-bit integers, int32)")
    out = _one_out(c, node)
    xs = c.data(x)
    z = _param_shape(c, node, x, zp, attrs)
    s = _param_shape(c, node, x, scale, attrs)
    expr = f"({xs} - {z}) * {s}" if z is not None else f"{xs} * {s}"
    c.emit(out, expr, _out_shape(c, out, x.shape))


@handler("QuantizeLinear")
def _quantize(c, node, ins, attrs):
    x, scale = ins[:2]
    zp = ins[2] if len(ins) > 2 else None
    to = attrs.get("output_dtype") or _zero_point_type(c, node, 2, 2)  # uint8 by default
    if to not in RANGES:
        raise c.fail("QuantizeLinear to this element type is not supported (8- and 16-bit integers)")
    if not attrs.get("saturate", 1):
        raise c.fail("QuantizeLinear with saturate=0 is not supported")
    lo, hi = RANGES[to]
    out = _one_out(c, node)
    s = _param_shape(c, node, x, scale, attrs)
    z = _param_shape(c, node, x, zp, attrs)
    q = f"round({c.data(x)} / {s})"
    if z is not None:
        q = f"{q} + {z}"
    c.emit(out, f"clip({q}, {fmt_num(lo)}, {fmt_num(hi)})", _out_shape(c, out, x.shape))
