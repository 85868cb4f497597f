"""Normalization over rows: layer_norm and rms_norm, each one kernel forward and one backward.

A row is the trailing `axes` of x (flattened, C elements); gamma and beta have the shape of
those axes (or are scalars: the gradient rules pass a constant 1 and 0 to get the normalized
x alone). As PyTorch computes them (biased variance, eps inside the square root):

  layer_norm: xhat = (x - mean) * rstd, rstd = 1 / sqrt(mean((x - mean)^2) + eps);
              y = xhat * gamma + beta
  rms_norm:   xhat = x * rstd, rstd = 1 / sqrt(mean(x^2) + eps); y = xhat * gamma

Backward, with gh = g * gamma (g the upstream gradient), per row:
  layer_norm: dx = rstd * (gh - mean(gh) - xhat * mean(gh * xhat))
  rms_norm:   dx = rstd * (gh - xhat * mean(gh * xhat))
which `*_norm_grad` compute in one kernel; d gamma = sum over rows of g * xhat and d beta =
sum over rows of g are reductions.
"""

from __future__ import annotations

import math

import numpy as np

from ..opdefs import OpDef, register
from ..shapes import ShapeError, format_shape
from .adjoint import unbroadcast

# The longest row: a kernel loops over its row up to 4 times in one invocation, and drivers
# bound that (llvmpipe stops any invocation's loops after 65535 iterations, silently).
MAX_ROW = 8192


def row_axes(node_or_attrs) -> tuple[int, ...]:
    attr = node_or_attrs.attr if hasattr(node_or_attrs, "attr") else node_or_attrs.get
    return tuple(attr("axes"))


def _check(x, params: dict, attrs) -> None:
    axes = tuple(attrs["axes"])
    if not axes or axes != tuple(range(len(x) - len(axes), len(x))):
        raise ShapeError(f"a norm normalizes over trailing axes of {format_shape(x)}, got axes {list(axes)}")
    row = tuple(x[a] for a in axes)
    if any(isinstance(d, str) for d in row):
        raise ShapeError(f"a norm's normalized axes must be concrete, got {format_shape(row)}")
    if math.prod(row) > MAX_ROW:
        raise ShapeError(f"a norm's rows hold at most {MAX_ROW} elements, got {format_shape(row)} = {math.prod(row)}")
    for name, shape in params.items():
        if tuple(shape) not in ((), row):
            raise ShapeError(
                f"{name} must have the shape of the normalized axes {format_shape(row)}, got {format_shape(shape)}"
            )


def _forward_shape(names):
    def rule(ins, attrs):
        x, *rest = ins
        _check(x, dict(zip(names, rest)), attrs)
        return tuple(x)

    return rule


def _grad_shape(ins, attrs):
    x, gamma, g = ins
    _check(x, {"gamma": gamma}, attrs)
    if tuple(g) != tuple(x):
        raise ShapeError(f"a norm gradient's upstream {format_shape(g)} must have x's shape {format_shape(x)}")
    return tuple(x)


def _stats(x, axes, eps, center: bool):
    """(xhat, rstd) of each row, in x's precision."""
    mu = x.mean(axis=axes, keepdims=True) if center else 0.0
    d = x - mu
    rstd = 1.0 / np.sqrt((d * d).mean(axis=axes, keepdims=True) + x.dtype.type(eps))
    return d * rstd, rstd


def _ref(center: bool):
    def ref(args, attrs, dims):
        x, gamma, *beta = args
        xhat, _ = _stats(x, row_axes(attrs), attrs["eps"], center)
        y = xhat * gamma
        return y + beta[0] if beta else y

    return ref


def _grad_ref(center: bool):
    def ref(args, attrs, dims):
        x, gamma, g = args
        axes = row_axes(attrs)
        xhat, rstd = _stats(x, axes, attrs["eps"], center)
        gh = g * gamma
        inner = gh - xhat * (gh * xhat).mean(axis=axes, keepdims=True)
        if center:
            inner = inner - gh.mean(axis=axes, keepdims=True)
        return rstd * inner

    return ref


def _rule(center: bool):
    op = "layer_norm" if center else "rms_norm"

    def rule(e, n, y, g):
        x, gamma, *beta = n.inputs
        attrs = {"axes": n.attr("axes"), "eps": n.attr("eps")}
        dx = e(f"{op}_grad", x, gamma, g, **attrs)
        unit = [e.const(1.0)] + ([e.const(0.0)] if center else [])
        xhat = e(op, x, *unit, **attrs)
        dgamma = unbroadcast(e, e("mul", g, xhat), e.shape(gamma))
        return (dx, dgamma, *(unbroadcast(e, g, e.shape(b)) for b in beta))

    return rule


register(
    OpDef(
        "layer_norm",
        "norm",
        _forward_shape(("gamma", "beta")),
        _ref(True),
        arity=3,
        gradient=_rule(True),
    )
)
register(OpDef("rms_norm", "norm", _forward_shape(("gamma",)), _ref(False), arity=2, gradient=_rule(False)))
register(OpDef("layer_norm_grad", "norm", _grad_shape, _grad_ref(True), arity=3, differentiable=False))
register(OpDef("rms_norm_grad", "norm", _grad_shape, _grad_ref(False), arity=3, differentiable=False))
