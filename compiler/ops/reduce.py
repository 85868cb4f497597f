"""Reductions over a set of axes (attrs: axes, a sorted tuple; keepdims)."""

from __future__ import annotations

import numpy as np

from ..opdefs import OpDef, register
from ..shapes import reduced
from .adjoint import kept


def _reduce_shape(ins, attrs):
    return reduced(ins[0], attrs["axes"], attrs["keepdims"])


def _reducer(fn):
    def ref(args, attrs, dims):
        x = args[0]
        return np.asarray(fn(x, axis=attrs["axes"], keepdims=attrs["keepdims"]), dtype=x.dtype)

    return ref


# -- gradient rules (emit, node, y, g; see ops/adjoint.py) --------------------------


def _sum_rule(e, n, y, g):
    x_shape = e.shape(n.inputs[0])
    gk = kept(e, g, x_shape, n.attr("axes"), n.attr("keepdims"))
    return (gk if e.shape(gk) == x_shape else e("broadcast_to", gk, shape=x_shape),)


def _extremum_rule(e, n, y, g):
    # The gradient goes to the elements equal to the extremum, shared among ties.
    x = n.inputs[0]
    x_shape = e.shape(x)
    axes, keep = n.attr("axes"), n.attr("keepdims")
    hit = e("eq", x, kept(e, y, x_shape, axes, keep))
    count = e("sum", hit, axes=axes, keepdims=True)
    return (e("mul", e("div", hit, count), kept(e, g, x_shape, axes, keep)),)


register(OpDef("sum", "reduce", _reduce_shape, _reducer(np.sum), arity=1, gradient=_sum_rule))
register(OpDef("max", "reduce", _reduce_shape, _reducer(np.max), arity=1, gradient=_extremum_rule))
register(OpDef("min", "reduce", _reduce_shape, _reducer(np.min), arity=1, gradient=_extremum_rule))


def _arg_shape(ins, attrs):
    return reduced(ins[0], (attrs["axis"],), False)


def _arg(fn):
    def ref(args, attrs, dims):
        x = args[0]
        return fn(x, axis=attrs["axis"]).astype(x.dtype)

    return ref


# Indices come out as floats (f32 is dlc's only element type).
register(OpDef("argmax", "reduce", _arg_shape, _arg(np.argmax), arity=1, differentiable=False))
register(OpDef("argmin", "reduce", _arg_shape, _arg(np.argmin), arity=1, differentiable=False))
