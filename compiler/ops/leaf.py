"""Leaves: values that come from outside the graph's arithmetic."""

from __future__ import annotations

import numpy as np

from ..opdefs import OpDef, register
from ..shapes import bind


def _leaf_shape(ins, attrs):
    return tuple(attrs["shape"])


def _fed(args, attrs, dims):
    raise AssertionError("leaves are supplied by the interpreter, not computed")


def _const(args, attrs, dims):
    return np.asarray(attrs["value"], dtype=np.float64).reshape(attrs["shape"])


def _dim_size(args, attrs, dims):
    return np.asarray(float(np.prod(bind(attrs["dims"], dims))))


register(OpDef("input", "leaf", _leaf_shape, _fed, arity=0, differentiable=False))
register(OpDef("param", "leaf", _leaf_shape, _fed, arity=0, differentiable=False))
register(OpDef("state", "leaf", _leaf_shape, _fed, arity=0, differentiable=False))
register(OpDef("const", "leaf", _leaf_shape, _const, arity=0, differentiable=False))
# The element count of a (possibly symbolic) shape, as a float scalar: `mean`
# divides by it, so the count follows the batch size bound at run time.
register(
    OpDef(
        "dim_size",
        "elementwise",
        lambda ins, a: (),
        _dim_size,
        arity=0,
        differentiable=False,
        lowering={"glsl": "{size}"},
    )
)
