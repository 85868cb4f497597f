"""Ops over i32 tensors (dtypes.py): the casts, gather (an embedding lookup) and its
gradient, and the logit at a class id (the integer-label cost).

Indices are i32. Out of range (negative included, as nn.Embedding), an index is an error on
the reference and clamped to the nearest row on GL, which never reads past a buffer.

gather's gradient is `gather_grad`: for each row of the table, the sum of the upstream
gradient over the positions whose index names that row, in position order, with no atomics
(the same bits every run). It is always stored by a kernel of its own: on the compute target
an invocation owns a row and scans the indices once (codegen/kernels_scatter.py: rows x
positions compares plus positions x columns adds); on the texture target each element loops
over the indices (glsl.py's `_gather_grad`: rows x columns x positions).
"""

from __future__ import annotations

import numpy as np

from dlc.runtime.errors import CompileError, DataError

from ..dtypes import F32, I32, integer_at
from ..opdefs import OpDef, Oracle, Param, register, update
from ..shapes import ShapeError, format_shape, norm_axis
from .elementwise import unary

T = "tensor"

# -- casts ----------------------------------------------------------------------------


def _to_int(x, attrs):
    # Truncation toward zero (PyTorch's .int(), NumPy's astype); NaN is 0 and the rest is
    # clamped into int32, where C leaves the conversion undefined.
    x = np.asarray(x, dtype=np.float64)
    out = np.clip(np.trunc(np.where(np.isnan(x), 0.0, x)), -(2.0**31), 2.0**31 - 1)
    return out.astype(np.int32)


unary(
    "float",
    lambda x, a: np.asarray(x, dtype=np.float64),
    "a",  # an i32 operand reaches an elementwise expression already converted (glsl.py)
    doc="x as f32 (an i32 id becomes its value)",
    grad=lambda e, n, y, g: (g,),
    dtype=lambda op: lambda ins, attrs: F32,
    oracle=Oracle(lambda x: x, lambda t, x: x if x.is_floating_point() else x.double()),
)
unary(
    "int",
    _to_int,
    "intBitsToFloat(dlc_to_int(a))",
    doc="x as i32, truncated toward zero (NaN is 0; clamped to the int32 range)",
    helpers="""
// float -> int32 as NumPy's trunc then clip (GLSL's int() of NaN or of |x| >= 2^31 is undefined).
int dlc_to_int(float x) {
    if (dlc_isnan(x)) return 0;
    if (x >= 2147483647.0) return 2147483647;
    if (x <= -2147483648.0) return int(0x80000000u);
    return int(x);
}
""",
    dtype=lambda op: lambda ins, attrs: I32,
    oracle=Oracle(
        lambda x: np.nan_to_num(np.trunc(x), nan=0.0, posinf=2.0**31 - 1, neginf=-(2.0**31)) + 0.0,  # no -0
        lambda t, x: x.int().float(),
        domain=("wide",),
    ),
)
# Its own reference: the unary helper's would round 2^31 - 1 through float32.
update("int", ref=lambda args, attrs, dims: _to_int(args[0], attrs))


def _cast(to: str):
    """The front end of a cast: a tensor already of type `to` is itself (int of an id above
    2^24 would otherwise go through a float)."""
    return lambda b, loc, x: x if b.dtype(x) == to else b.add(to_op[to], [x], loc)


to_op = {F32: "float", I32: "int"}
update("float", build=_cast(F32))
update("int", build=_cast(I32))


# -- gather ---------------------------------------------------------------------------


def _check_range(idx: np.ndarray, rows: int, what: str, noun: str = "index") -> None:
    bad = (idx < 0) | (idx >= rows)
    if bad.any():
        at = tuple(int(k) for k in np.argwhere(bad)[0])
        raise DataError(f"{what}: {noun} {int(idx[at])} at position {list(at)} is out of range [0, {rows})")


def _gather_shape(ins, attrs):
    table, idx = ins
    if not table:
        raise ShapeError("gather needs a table of rank >= 1, got a scalar")
    axis = norm_axis(attrs["axis"], len(table))
    return (*table[:axis], *idx, *table[axis + 1 :])


def _gather(args, attrs, dims):
    table, idx = args
    _check_range(idx, table.shape[attrs["axis"]], "gather")
    return np.take(table, idx.astype(np.int64), axis=attrs["axis"])


def _gather_grad_shape(ins, attrs):
    return tuple(attrs["table"])


def _gather_grad(args, attrs, dims):
    g, idx = args
    axis, rows = attrs["axis"], attrs["table"][attrs["axis"]]
    _check_range(idx, rows, "gather")
    rank = idx.ndim
    # g is [pre, *idx.shape, post]: positions flattened into one axis, summed per row in order.
    flat = np.moveaxis(g.reshape(*g.shape[:axis], -1, *g.shape[axis + rank :]), axis, 0)
    out = np.zeros((rows, *flat.shape[1:]), dtype=g.dtype)
    np.add.at(out, idx.reshape(-1).astype(np.int64), flat)
    return np.moveaxis(out, 0, axis)


def _gather_rule(e, n, y, g):
    table, idx = n.inputs
    return e("gather_grad", g, idx, axis=n.attr("axis"), table=e.shape(table)), None


def _gather_build(b, loc, table, indices, axis):
    rank = len(b.shape(table))
    try:
        axis = norm_axis(int(axis), rank)
    except ShapeError as e:
        raise CompileError(f"gather: {e} (the table is {format_shape(b.shape(table))})", loc) from None
    return b.add("gather", [table, indices], loc, axis=axis)


def _gather_torch(t, table, idx, axis=0):
    return t.index_select(table, axis, idx.reshape(-1).long()).reshape(
        *table.shape[:axis], *idx.shape, *table.shape[axis + 1 :]
    )


register(
    OpDef(
        "gather",
        "layout",
        _gather_shape,
        _gather,
        arity=2,
        gradient=_gather_rule,
        params=(Param("table", T), Param("indices", T), Param("axis", "int", 0)),
        build=_gather_build,
        doc="NumPy's take: the table's slices along axis at i32 indices (an embedding lookup)",
        group="shape",
        dtype=integer_at(1),
        oracle=Oracle(torch=_gather_torch, domain=("normal", "ids"), attrs=({"axis": 0}, {"axis": 1})),
    )
)
register(
    OpDef(
        "gather_grad",
        "layout",
        _gather_grad_shape,
        _gather_grad,
        arity=2,
        differentiable=False,
        dtype=integer_at(1, result=F32),
        oracle=Oracle(domain=("normal", "ids"), attrs=({"axis": 0, "table": (4, 3)},)),
    )
)


# -- the logit at a class id ----------------------------------------------------------


def _pick_shape(ins, attrs):
    x, labels = ins
    if not x or tuple(x[:-1]) != tuple(labels):
        raise ShapeError(
            f"class ids {format_shape(labels)} must have the shape of the logits {format_shape(x)} "
            "without their last axis"
        )
    return tuple(labels)


def _pick(args, attrs, dims):
    x, labels = args
    _check_range(labels, x.shape[-1], "softmax_cross_entropy", "class id")
    return np.take_along_axis(x, labels[..., None].astype(np.int64), axis=-1)[..., 0]


def _pick_rule(e, n, y, g):
    x, labels = n.inputs
    shape = e.shape(x)
    hot = e("one_hot", labels, depth=shape[-1])
    return e("mul", hot, e("reshape", g, shape=(*shape[:-1], 1))), None


# out[i...] = x[i..., labels[i...]]: the cost's logit at the label, with no one-hot tensor.
register(
    OpDef(
        "pick",
        "layout",
        _pick_shape,
        _pick,
        arity=2,
        gradient=_pick_rule,
        dtype=integer_at(1, result=F32),
        oracle=Oracle(torch=lambda t, x, i: t.gather(x, -1, i.long()[..., None])[..., 0], domain=("normal", "ids")),
    )
)
