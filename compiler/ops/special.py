"""Special functions the ONNX importer needs: erf (Gelu is built from it).

GLSL has no erf: below |x| < 0.5 its Taylor series to x^13 (relative error < 1e-8, so tiny
inputs keep their precision), elsewhere Abramowitz & Stegun 7.1.26 (absolute error
< 1.5e-7), written as one expression over `a` like every elementwise op.
"""

from __future__ import annotations

import math

import numpy as np

from ..registry import OpDef, register

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _ref(args, attrs, dims):
    x = args[0]
    return np.asarray(_erf(x), dtype=x.dtype)


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
GLSL = f"(a == 0.0 ? a : abs(a) < 0.5 ? {_SERIES} : {_AS})"  # a == 0: keeps -0 on NVIDIA

register(OpDef("erf", "elementwise", lambda ins, a: ins[0], _ref, arity=1, glsl=GLSL))
