"""Elementwise ops: NumPy broadcasting, one GLSL expression each.

GLSL expressions name their operands a, b, c; `{alpha}` and the like are
filled from the node's attrs. Helpers named dlc_* live in the codegen preamble.
"""

from __future__ import annotations

import numpy as np

from ..registry import OpDef, register
from ..shapes import broadcast

SELU_ALPHA = 1.6732632423543772
SELU_SCALE = 1.0507009873554805


def _same(ins, attrs):
    return ins[0]


def _bcast(ins, attrs):
    return broadcast(*ins)


def _softplus(x):
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


def _sigmoid(x):
    # Stable for large |x|: never exp of a large positive number.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _elu(x, alpha):
    return np.where(x >= 0, x, alpha * np.expm1(np.minimum(x, 0)))


UNARY = {
    # name: (reference, GLSL, differentiable)
    "neg": (lambda x, a: -x, "(-a)", True),
    "abs": (lambda x, a: np.abs(x), "abs(a)", True),
    "sign": (lambda x, a: np.sign(x), "(dlc_isnan(a) ? a : sign(a))", False),
    "exp": (lambda x, a: np.exp(x), "dlc_exp(a)", True),
    "log": (lambda x, a: np.log(x), "log(a)", True),
    "sqrt": (lambda x, a: np.sqrt(x), "sqrt(a)", True),
    "rsqrt": (lambda x, a: 1 / np.sqrt(x), "inversesqrt(a)", True),
    "square": (lambda x, a: x * x, "(a * a)", True),
    "reciprocal": (lambda x, a: 1 / x, "(1.0 / a)", True),
    "relu": (lambda x, a: np.maximum(x, 0), "dlc_max(a, 0.0)", True),
    "relu6": (lambda x, a: np.clip(x, 0, 6), "dlc_relu6(a)", True),
    "leaky_relu": (
        lambda x, a: np.where(x >= 0, x, a["alpha"] * x),
        "((a >= 0.0 || dlc_isnan(a)) ? a : {alpha} * a)",
        True,
    ),
    "elu": (lambda x, a: _elu(x, a["alpha"]), "((a >= 0.0 || dlc_isnan(a)) ? a : {alpha} * (exp(a) - 1.0))", True),
    "selu": (
        lambda x, a: SELU_SCALE * _elu(x, SELU_ALPHA),
        f"({SELU_SCALE!r} * ((a >= 0.0 || dlc_isnan(a)) ? a : {SELU_ALPHA!r} * (exp(a) - 1.0)))",
        True,
    ),
    "softplus": (lambda x, a: _softplus(x), "(dlc_max(a, 0.0) + log(1.0 + exp(-abs(a))))", True),
    "sigmoid": (lambda x, a: _sigmoid(x), "dlc_sigmoid(a)", True),
    "tanh": (lambda x, a: np.tanh(x), "tanh(clamp(a, -15.0, 15.0))", True),
    "sin": (lambda x, a: np.sin(x), "sin(a)", True),
    "cos": (lambda x, a: np.cos(x), "cos(a)", True),
    "step": (lambda x, a: np.heaviside(x, 0), "(dlc_isnan(a) ? a : a > 0.0 ? 1.0 : 0.0)", False),
    # Identity whose gradient is zero: logsumexp subtracts its max through it.
    "stop_gradient": (lambda x, a: x, "a", False),
}


def _pow(x, y):
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.power(x, y)


BINARY = {
    "add": (lambda x, y: x + y, "(a + b)", True),
    "sub": (lambda x, y: x - y, "(a - b)", True),
    "mul": (lambda x, y: x * y, "(a * b)", True),
    "div": (lambda x, y: x / y, "(a / b)", True),
    "pow": (_pow, "dlc_pow(a, b)", True),
    "maximum": (np.maximum, "dlc_max(a, b)", True),
    "minimum": (np.minimum, "dlc_min(a, b)", True),
    "eq": (lambda x, y: x == y, "((a == b && !dlc_unordered(a, b)) ? 1.0 : 0.0)", False),
    "ne": (lambda x, y: x != y, "((a != b || dlc_unordered(a, b)) ? 1.0 : 0.0)", False),
    "lt": (lambda x, y: x < y, "((a < b && !dlc_unordered(a, b)) ? 1.0 : 0.0)", False),
    "le": (lambda x, y: x <= y, "((a <= b && !dlc_unordered(a, b)) ? 1.0 : 0.0)", False),
    "gt": (lambda x, y: x > y, "((a > b && !dlc_unordered(a, b)) ? 1.0 : 0.0)", False),
    "ge": (lambda x, y: x >= y, "((a >= b && !dlc_unordered(a, b)) ? 1.0 : 0.0)", False),
}


def _unary_ref(fn):
    def ref(args, attrs, dims):
        with np.errstate(all="ignore"):
            return np.asarray(fn(args[0], attrs), dtype=args[0].dtype)

    return ref


def _binary_ref(fn):
    def ref(args, attrs, dims):
        dtype = np.result_type(args[0], args[1])
        with np.errstate(all="ignore"):
            return np.asarray(fn(args[0], args[1]), dtype=dtype)

    return ref


for _name, (_fn, _glsl, _diff) in UNARY.items():
    register(OpDef(_name, "elementwise", _same, _unary_ref(_fn), arity=1, differentiable=_diff, glsl=_glsl))

for _name, (_fn, _glsl, _diff) in BINARY.items():
    register(OpDef(_name, "elementwise", _bcast, _binary_ref(_fn), arity=2, differentiable=_diff, glsl=_glsl))


def _where(args, attrs, dims):
    c, x, y = args
    return np.where(c != 0, x, y).astype(np.result_type(x, y))


register(OpDef("where", "elementwise", _bcast, _where, arity=3, glsl="((a != 0.0 || dlc_isnan(a)) ? b : c)"))
