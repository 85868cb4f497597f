"""Layout ops: each output element is one element of an input at a computed
position (or zero), so codegen can fuse them as gathers."""

from __future__ import annotations

import numpy as np

from ..dtypes import any_to_f32, same_as_input, take_rule
from ..opdefs import OpDef, register
from ..shapes import ShapeError, bind, format_shape
from .adjoint import unbroadcast


def _reshape(args, attrs, dims):
    return args[0].reshape(bind(attrs["shape"], dims))


def _broadcast_to(args, attrs, dims):
    return np.broadcast_to(args[0], bind(attrs["shape"], dims)).copy()


def _transpose_shape(ins, attrs):
    return tuple(ins[0][p] for p in attrs["perm"])


def _slice_shape(ins, attrs):
    return tuple(attrs["size"])


def _slice(args, attrs, dims):
    idx = tuple(slice(b, b + s) for b, s in zip(attrs["begin"], bind(attrs["size"], dims)))
    return args[0][idx]


def _pad_shape(ins, attrs):
    return tuple(d if isinstance(d, str) else d + lo + hi for d, lo, hi in zip(ins[0], attrs["before"], attrs["after"]))


def _pad(args, attrs, dims):
    return np.pad(args[0], list(zip(attrs["before"], attrs["after"])))


def _concat_shape(ins, attrs):
    ax = attrs["axis"]
    out = list(ins[0])
    out[ax] = sum(s[ax] for s in ins)
    return tuple(out)


def _one_hot(args, attrs, dims):
    idx = args[0]
    return (idx[..., None] == np.arange(attrs["depth"])).astype(idx.dtype)


def _take_shape(ins, attrs):
    x, idx = ins
    if not x or len(idx) != 1:
        raise ShapeError(
            f"take needs a tensor of rank >= 1 and an index vector, got {format_shape(x)} and {format_shape(idx)}"
        )
    return (idx[0], *x[1:])


def _take(args, attrs, dims):
    # Rows of x by index (idx holds whole numbers as floats, like one_hot's indices), clamped
    # to the rows there are as on GL; a NaN index gives a row of NaN.
    x, idx = args
    nan = np.isnan(idx)
    rows = np.clip(np.where(nan, 0, idx), 0, x.shape[0] - 1).astype(int)
    out = np.take(x, rows, axis=0)
    out[nan] = np.nan
    return out


def _iota(args, attrs, dims):
    shape = bind(attrs["shape"], dims)
    axis = attrs["axis"]
    along = np.arange(shape[axis], dtype=np.float64).reshape([-1 if k == axis else 1 for k in range(len(shape))])
    return np.broadcast_to(along, shape).copy()


# -- gradient rules (emit, node, y, g; see ops/adjoint.py) --------------------------


def _reshape_rule(e, n, y, g):
    return (e("reshape", g, shape=e.shape(n.inputs[0])),)


def _broadcast_to_rule(e, n, y, g):
    return (unbroadcast(e, g, e.shape(n.inputs[0])),)


def _transpose_rule(e, n, y, g):
    perm = n.attr("perm")
    inverse = tuple(sorted(range(len(perm)), key=lambda k: perm[k]))
    return (e("transpose", g, perm=inverse),)


def _slice_rule(e, n, y, g):
    x_shape = e.shape(n.inputs[0])
    begin, size = n.attr("begin"), n.attr("size")
    after = tuple(0 if isinstance(d, str) else d - b - s for d, b, s in zip(x_shape, begin, size))
    return (e("pad", g, before=tuple(begin), after=after),)


def _pad_rule(e, n, y, g):
    return (e("slice", g, begin=tuple(n.attr("before")), size=e.shape(n.inputs[0])),)


def _concat_rule(e, n, y, g):
    axis = n.attr("axis")
    rank = len(n.shape)
    out, offset = [], 0
    for x in n.inputs:
        shape = e.shape(x)
        begin = tuple(offset if k == axis else 0 for k in range(rank))
        out.append(e("slice", g, begin=begin, size=shape))
        offset += shape[axis]
    return out


register(
    OpDef(
        "reshape",
        "layout",
        lambda ins, a: tuple(a["shape"]),
        _reshape,
        arity=1,
        gradient=_reshape_rule,
        dtype=same_as_input,
    )
)
register(
    OpDef(
        "broadcast_to",
        "layout",
        lambda ins, a: tuple(a["shape"]),
        _broadcast_to,
        arity=1,
        gradient=_broadcast_to_rule,
        dtype=same_as_input,
    )
)
register(
    OpDef(
        "transpose",
        "layout",
        _transpose_shape,
        lambda args, a, d: np.transpose(args[0], a["perm"]).copy(),
        arity=1,
        gradient=_transpose_rule,
        dtype=same_as_input,
    )
)
register(OpDef("slice", "layout", _slice_shape, _slice, arity=1, gradient=_slice_rule, dtype=same_as_input))
register(OpDef("pad", "layout", _pad_shape, _pad, arity=1, gradient=_pad_rule, dtype=same_as_input))
register(
    OpDef(
        "concat",
        "layout",
        _concat_shape,
        lambda args, a, d: np.concatenate(args, axis=a["axis"]),
        gradient=_concat_rule,
        dtype=same_as_input,
    )
)
register(
    OpDef(
        "one_hot",
        "layout",
        lambda ins, a: (*ins[0], a["depth"]),
        _one_hot,
        arity=1,
        differentiable=False,
        dtype=any_to_f32,
    )
)
# out[i, ...] = x[int(idx[i]), ...]: training gathers its batches from data kept on the GPU
# (compiler/resident.py). Not differentiable: only data flows through it.
register(OpDef("take", "layout", _take_shape, _take, arity=2, differentiable=False, dtype=take_rule))
# out[..., i, ...] = i, the position along `axis` (as a float): arange, and the masks of tril
# and triu, with symbolic dims too. No inputs, so nothing to differentiate.
register(OpDef("iota", "layout", lambda ins, a: tuple(a["shape"]), _iota, arity=0, differentiable=False))
