"""Special functions: erf (gelu is built on it).

GLSL has no erf: below |x| < 0.5 its Taylor series to x^13 (relative error < 1e-8, so tiny
inputs keep their precision), elsewhere Abramowitz & Stegun 7.1.26 (absolute error
< 1.5e-7).
"""

from __future__ import annotations

import math

import numpy as np

from ..opdefs import Oracle
from .adjoint import chain
from .elementwise import unary

erf_np = np.vectorize(math.erf, otypes=[np.float64])

_T = "(1.0 / (1.0 + 0.3275911 * abs(a)))"
_AS = (
    f"(sign(a) * (1.0 - (((((1.061405429 * {_T} - 1.453152027) * {_T} + 1.421413741) * {_T}"
    f" - 0.284496736) * {_T} + 0.254829592) * {_T}) * exp(-a * a)))"
)
_SERIES = (
    "(1.1283791670955126 * a * (1.0 - a * a * (0.3333333333 - a * a * (0.1 - a * a * "
    "(0.0238095238 - a * a * (0.0046296296 - a * a * (0.0007575758 - a * a * "
    "0.0001068376)))))))"
)

unary(
    "erf",
    lambda x, a: erf_np(x),
    "dlc_erf(a)",
    doc="the error function",
    # d erf(x) = 2 / sqrt(pi) * exp(-x^2)
    grad=chain(lambda e, x, y, n: e("mul", e.const(1.1283791670955126), e("exp", e("neg", e("square", x))))),
    helpers=(
        "\n// erf: a Taylor series below |x| < 0.5, Abramowitz & Stegun 7.1.26 above; x == 0 keeps -0 on NVIDIA.\n"
        f"float dlc_erf(float a) {{ return a == 0.0 ? a : abs(a) < 0.5 ? {_SERIES} : {_AS}; }}\n"
    ),
    oracle=Oracle(erf_np, lambda t, x: t.erf(x), domain=("wide",)),
)
