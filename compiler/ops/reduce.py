"""Reductions over a set of axes (attrs: axes, a sorted tuple; keepdims)."""

from __future__ import annotations

import numpy as np

from ..registry import OpDef, register
from ..shapes import reduced


def _reduce_shape(ins, attrs):
    return reduced(ins[0], attrs["axes"], attrs["keepdims"])


def _reducer(fn):
    def ref(args, attrs, dims):
        x = args[0]
        return np.asarray(fn(x, axis=attrs["axes"], keepdims=attrs["keepdims"]), dtype=x.dtype)

    return ref


register(OpDef("sum", "reduce", _reduce_shape, _reducer(np.sum), arity=1))
register(OpDef("max", "reduce", _reduce_shape, _reducer(np.max), arity=1))
register(OpDef("min", "reduce", _reduce_shape, _reducer(np.min), arity=1))


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
