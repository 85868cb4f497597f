"""Matrix products. matmul takes operands of rank 2 or more, their leading (batch) dims
broadcast as NumPy does; ta/tb read an operand with its last two axes swapped, so gradients
need no transposes."""

from __future__ import annotations

import numpy as np

from ..opdefs import OpDef, register
from ..shapes import ShapeError, broadcast, format_shape
from .adjoint import shapes, unbroadcast


def matmul_shape(ins, attrs):
    a, b = ins
    if len(a) < 2 or len(b) < 2:
        raise ShapeError(f"matmul takes operands of rank 2 or more, got {format_shape(a)} and {format_shape(b)}")
    m, ka = (a[-1], a[-2]) if attrs.get("ta") else (a[-2], a[-1])
    kb, n = (b[-1], b[-2]) if attrs.get("tb") else (b[-2], b[-1])
    if ka != kb:
        raise ShapeError(f"matmul shapes {format_shape(a)} and {format_shape(b)} do not fit: {ka} != {kb}")
    batch = broadcast(a[:-2], b[:-2])
    return (*batch, m, n)


def _matmul(args, attrs, dims):
    a, b = args
    if attrs.get("ta"):
        a = np.swapaxes(a, -1, -2)
    if attrs.get("tb"):
        b = np.swapaxes(b, -1, -2)
    return np.matmul(a, b)


# -- gradient rules (emit, node, y, g; see ops/adjoint.py) --------------------------


def _matmul_rule(e, n, y, g):
    # C = op(A) op(B), op = transpose where ta/tb: d op(A) = G op(B)^T, d op(B) = op(A)^T G.
    # ta/tb read operands transposed, so no transpose node is needed; batch axes that
    # were broadcast are summed back by unbroadcast.
    a, b = n.inputs
    ta, tb = bool(n.attr("ta")), bool(n.attr("tb"))
    sa, sb = shapes(e, n)
    if ta:
        da = e("matmul", b, g, ta=tb, tb=True)
    else:
        da = e("matmul", g, b, ta=False, tb=not tb)
    if tb:
        db = e("matmul", g, a, ta=True, tb=ta)
    else:
        db = e("matmul", a, g, ta=not ta, tb=False)
    return unbroadcast(e, da, sa), unbroadcast(e, db, sb)


register(OpDef("matmul", "matmul", matmul_shape, _matmul, arity=2, gradient=_matmul_rule))
