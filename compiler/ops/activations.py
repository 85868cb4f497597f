"""Activation functions: one elementwise entry each (see elementwise.unary)."""

from __future__ import annotations

import numpy as np

from dlc.runtime.errors import CompileError

from ..registry import Oracle, Param
from .adjoint import chain
from .elementwise import unary
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
    "(0.5 * a * (1.0 + dlc_erf(a * 0.7071067811865476)))",
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
    params=(Param("x", "tensor"), Param("approximate", "str", "none")),
    oracle=Oracle(
        _gelu_np,
        lambda t, x, approximate="none": t.nn.functional.gelu(x, approximate=approximate),
        domain=("wide",),
        calls=({}, {"approximate": "tanh"}),
    ),
)
