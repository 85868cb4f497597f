"""Activation functions: one elementwise entry each (see elementwise.unary)."""

from __future__ import annotations

import numpy as np

from dlc.runtime.errors import CompileError

from ..opdefs import Oracle, Param
from .adjoint import chain
from .elementwise import _sigmoid, _softplus, unary
from .special import erf_np

SQRT_HALF = 0.7071067811865476
INV_SQRT_2PI = 0.3989422804014327


def _gelu_build(b, loc, x, approximate):
    # "none": the gelu primitive, x * (1 + erf(x / sqrt 2)) / 2; "tanh" expands into primitives:
    # x * (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) / 2.
    if approximate == "none":
        return b.add("gelu", [x], loc)
    if approximate != "tanh":
        raise CompileError(f'gelu approximate must be "none" or "tanh", got "{approximate}"', loc)
    cube = b.add("mul", [b.add("mul", [x, x], loc), x], loc)
    arg = b.add("add", [x, b.add("mul", [cube, b.const(0.044715, (), loc)], loc)], loc)
    inner = b.add("tanh", [b.add("mul", [arg, b.const(0.7978845608028654, (), loc)], loc)], loc)
    half = b.add("mul", [x, b.const(0.5, (), loc)], loc)
    return b.add("mul", [half, b.add("add", [inner, b.const(1.0, (), loc)], loc)], loc)


def _gelu_np(x, approximate="none"):
    if approximate == "tanh":
        return x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3))) / 2
    return x * (1 + erf_np(x * SQRT_HALF)) / 2


unary(
    "gelu",
    lambda x, a: 0.5 * x * (1 + erf_np(x * SQRT_HALF)),
    "dlc_gelu(a)",
    doc='x * Phi(x) (exact); approximate="tanh": its tanh form',
    # Phi(x) + x phi(x)
    grad=chain(
        lambda e, x, y, n: e(
            "add",
            e("mul", e.const(0.5), e("add", e.const(1.0), e("erf", e("mul", x, e.const(SQRT_HALF))))),
            e("mul", x, e("mul", e.const(INV_SQRT_2PI), e("exp", e("mul", e.const(-0.5), e("square", x))))),
        )
    ),
    build=_gelu_build,
    helpers="""
// x Phi(x). Below 0, 1 + erf(x / sqrt 2) cancels: it is erfc(|x| / sqrt 2) there, by Numerical
// Recipes' erfcc (relative error < 1.2e-7), so the tail keeps its digits.
float dlc_gelu(float x) {
    if (x == 0.0) return x;  // keeps -0: NVIDIA fuses 0.5x (1 + erf) into an fma that loses it
    if (x >= 0.0 || dlc_isnan(x)) return 0.5 * x * (1.0 + dlc_erf(x * 0.7071067811865476));
    float z = -x * 0.7071067811865476;
    float t = 1.0 / (1.0 + 0.5 * z);
    float erfc = t * exp(-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418
                 + t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587
                 + t * (-0.82215223 + t * 0.17087277)))))))));
    return 0.5 * x * erfc;
}
""",
    params=(Param("x", "tensor"), Param("approximate", "str", "none")),
    oracle=Oracle(
        _gelu_np,
        lambda t, x, approximate="none": t.nn.functional.gelu(x, approximate=approximate),
        domain=("wide",),
        calls=({}, {"approximate": "tanh"}),
    ),
)

unary(
    "silu",
    lambda x, a: x * _sigmoid(x),
    "(a * dlc_sigmoid(a))",
    doc="x * sigmoid(x) (swish)",
    # s (1 + x (1 - s)), s = sigmoid(x)
    grad=chain(
        lambda e, x, y, n: (lambda s: e("mul", s, e("add", e.const(1.0), e("mul", x, e("sub", e.const(1.0), s)))))(
            e("sigmoid", x)
        )
    ),
    oracle=Oracle(lambda x: x / (1 + np.exp(-x)), lambda t, x: t.nn.functional.silu(x), domain=("wide",)),
)

unary(
    "softsign",
    lambda x, a: x / (1 + np.abs(x)),
    "(a / (1.0 + abs(a)))",
    doc="x / (1 + |x|)",
    grad=chain(lambda e, x, y, n: e("square", e("reciprocal", e("add", e.const(1.0), e("abs", x))))),
    oracle=Oracle(lambda x: x / (1 + np.abs(x)), lambda t, x: t.nn.functional.softsign(x), domain=("wide",)),
)

unary(
    "hard_sigmoid",
    lambda x, a: np.clip(x + 3, 0, 6) / 6,
    "(dlc_relu6(a + 3.0) / 6.0)",
    doc="min(max(x + 3, 0), 6) / 6 (PyTorch's hardsigmoid)",
    grad=chain(
        lambda e, x, y, n: e("div", e("mul", e("gt", x, e.const(-3.0)), e("lt", x, e.const(3.0))), e.const(6.0))
    ),
    # PyTorch's hardsigmoid by its definition: its own backward multiplies by a float32 1/6
    oracle=Oracle(
        lambda x: np.minimum(np.maximum(x + 3, 0), 6) / 6,
        lambda t, x: t.nn.functional.relu6(x + 3) / 6,
        domain=("hard",),
    ),
)

unary(
    "hard_swish",
    lambda x, a: x * np.clip(x + 3, 0, 6) / 6,
    "(a * dlc_relu6(a + 3.0) / 6.0)",
    doc="x * hard_sigmoid(x) (PyTorch's hardswish)",
    # 0 below -3, x / 3 + 1/2 up to 3, 1 above (PyTorch's)
    grad=chain(
        lambda e, x, y, n: e(
            "where",
            e("gt", x, e.const(3.0)),
            e.const(1.0),
            e("mul", e("gt", x, e.const(-3.0)), e("add", e("div", x, e.const(3.0)), e.const(0.5))),
        )
    ),
    oracle=Oracle(
        lambda x: x * np.minimum(np.maximum(x + 3, 0), 6) / 6,
        lambda t, x: t.nn.functional.hardswish(x),
        domain=("hard",),
    ),
)

unary(
    "mish",
    lambda x, a: x * np.tanh(_softplus(x)),
    "dlc_mish(a)",
    doc="x * tanh(softplus(x))",
    helpers="""
// x tanh(softplus(x)) without cancellation: tanh(log(1 + u)) = u (u + 2) / (u (u + 2) + 2) with
// u = e^x, written in e^-|x| so that nothing overflows.
float dlc_mish(float x) {
    float e = exp(-abs(x));
    float t = x >= 0.0 ? (1.0 + 2.0 * e) / (1.0 + 2.0 * e + 2.0 * e * e) : e * (e + 2.0) / (e * (e + 2.0) + 2.0);
    return x * t;
}
""",
    # t + x (1 - t^2) sigmoid(x), t = tanh(softplus(x))
    grad=chain(
        lambda e, x, y, n: (
            lambda t: e("add", t, e("mul", x, e("mul", e("sub", e.const(1.0), e("square", t)), e("sigmoid", x))))
        )(e("tanh", e("softplus", x)))
    ),
    oracle=Oracle(lambda x: x * np.tanh(np.logaddexp(x, 0.0)), lambda t, x: t.nn.functional.mish(x), domain=("wide",)),
)
