"""Rounding, log1p/expm1, trigonometric and hyperbolic functions, mod: one elementwise entry
each (see elementwise.unary). GLSL leaves NaN, infinities and out-of-domain arguments of its
builtins undefined, so the expressions test for them first, as NumPy answers."""

from __future__ import annotations

import numpy as np

from ..opdefs import Oracle
from . import trig_glsl
from .adjoint import chain, shapes, unbroadcast
from .elementwise import binary, unary


def _keep_sign(expr: str) -> str:
    # floor, ceil and round never change the sign, and a zero result keeps the input's:
    # ceil(-0.5) = -0, round(-0.4) = -0 (a driver may compute ceil(x) as x + fract(-x)).
    sign = "(floatBitsToUint(a) & 0x80000000u)"
    return f"(dlc_isnan(a) ? a : uintBitsToFloat((floatBitsToUint({expr}) & 0x7FFFFFFFu) | {sign}))"


unary(
    "floor",
    lambda x, a: np.floor(x),
    _keep_sign("floor(a)"),
    doc="the largest integer <= x",
    oracle=Oracle(np.floor, lambda t, x: t.floor(x), domain=("wide",)),
)

unary(
    "ceil",
    lambda x, a: np.ceil(x),
    _keep_sign("ceil(a)"),
    doc="the smallest integer >= x",
    oracle=Oracle(np.ceil, lambda t, x: t.ceil(x), domain=("wide",)),
)

unary(
    "round",
    lambda x, a: np.round(x),
    _keep_sign("roundEven(a)"),
    doc="the nearest integer, halves to even (as NumPy and PyTorch)",
    oracle=Oracle(np.round, lambda t, x: t.round(x), domain=("wide",)),
)

unary(
    "log1p",
    lambda x, a: np.log1p(x),
    "dlc_log1p(a)",
    doc="log(1 + x), exact for small x",
    grad=lambda e, n, y, g: (e("div", g, e("add", e.const(1.0), n.inputs[0])),),
    helpers="""
// log(1 + x): its series below |x| < 0.02, where 1 + x would round x away.
float dlc_log1p(float x) {
    if (dlc_isnan(x) || x == DLC_INF) return x;
    if (x < -1.0) return DLC_NAN;
    if (x == -1.0) return -DLC_INF;
    if (x == 0.0) return x;  // keeps -0 (NVIDIA's optimizer drops the sign through the series)
    if (abs(x) < 0.02) return x * (1.0 - x * (0.5 - x * (0.33333333 - x * (0.25 - x * 0.2))));
    return log(1.0 + x);
}
""",
    oracle=Oracle(np.log1p, lambda t, x: t.log1p(x), domain=("above_minus_one",)),
)

unary(
    "expm1",
    lambda x, a: np.expm1(x),
    "dlc_expm1(a)",
    doc="e^x - 1, exact for small x",
    grad=chain(lambda e, x, y, n: e("add", y, e.const(1.0))),
    helpers="""
// e^x - 1: its series below |x| < 0.02, where exp(x) - 1 cancels.
float dlc_expm1(float x) {
    if (dlc_isnan(x)) return x;
    if (x == 0.0) return x;  // keeps -0 (NVIDIA's optimizer drops the sign through the series)
    if (abs(x) < 0.02) return x * (1.0 + x * (0.5 + x * (0.16666667 + x * (0.041666668 + x * 0.008333334))));
    return exp(x) - 1.0;
}
""",
    oracle=Oracle(np.expm1, lambda t, x: t.expm1(x), domain=("wide",)),
)

unary(
    "tan",
    lambda x, a: np.tan(x),
    "dlc_tan(a)",
    doc="tangent",
    grad=chain(lambda e, x, y, n: e("add", e.const(1.0), e("square", y))),
    helpers=trig_glsl.TAN,  # after sin's helpers (elementwise.py registers first)
    oracle=Oracle(np.tan, lambda t, x: t.tan(x), domain=("unit",)),
)

unary(
    "asin",
    lambda x, a: np.arcsin(x),
    "dlc_asin(a)",
    doc="arcsine (NaN outside [-1, 1])",
    # Mesa's asin is off by 2e-4 near 0.5: Cephes' asinf (relative error 2.5e-7) instead.
    helpers="""
// arcsine by Cephes' asinf: a polynomial in x^2 up to |x| = 0.5, above it in (1 - |x|) / 2.
float dlc_asin(float x) {
    float a = abs(x);
    if (dlc_isnan(x) || a == 0.0) return x;
    if (a > 1.0) return DLC_NAN;
    bool big = a > 0.5;
    float z = big ? 0.5 * (1.0 - a) : a * a;
    float s = big ? sqrt(z) : a;
    float p = ((((4.2163199048e-2 * z + 2.4181311049e-2) * z + 4.5470025998e-2) * z + 7.4953002686e-2) * z
               + 1.6666752422e-1) * z * s + s;
    if (big) p = 1.5707963267948966 - 2.0 * p;
    return x < 0.0 ? -p : p;
}
""",
    grad=chain(lambda e, x, y, n: e("rsqrt", e("sub", e.const(1.0), e("square", x)))),
    oracle=Oracle(np.arcsin, lambda t, x: t.asin(x), domain=("unit",)),
)

unary(
    "acos",
    lambda x, a: np.arccos(x),
    "dlc_acos(a)",
    doc="arccosine (NaN outside [-1, 1])",
    helpers="""
// arccosine from dlc_asin as Cephes' acosf: 2 asin(sqrt((1 - |x|) / 2)) beyond |x| = 0.5.
float dlc_acos(float x) {
    if (dlc_isnan(x)) return x;
    if (abs(x) > 1.0) return DLC_NAN;
    if (x < -0.5) return 3.141592653589793 - 2.0 * dlc_asin(sqrt(0.5 * (1.0 + x)));
    if (x > 0.5) return 2.0 * dlc_asin(sqrt(0.5 * (1.0 - x)));
    return 1.5707963267948966 - dlc_asin(x);
}
""",
    grad=chain(lambda e, x, y, n: e("neg", e("rsqrt", e("sub", e.const(1.0), e("square", x))))),
    oracle=Oracle(np.arccos, lambda t, x: t.acos(x), domain=("unit",)),
)

unary(
    "atan",
    lambda x, a: np.arctan(x),
    "dlc_atan(a)",
    doc="arctangent",
    helpers="""
// arctangent by Cephes' atanf (relative error 2e-7; drivers' atan are approximations): the
// argument is reduced to |x| <= tan(pi/8) by atan(x) = pi/2 - atan(1/x), pi/4 + atan((x-1)/(x+1)).
float dlc_atan(float x) {
    float a = abs(x);
    if (dlc_isnan(x) || a == 0.0) return x;
    float y = 0.0;
    if (a > 2.414213562373095) {
        y = 1.5707963267948966;
        a = -1.0 / a;  // -0 at infinity: y stays pi/2
    } else if (a > 0.4142135623730950) {
        y = 0.7853981633974483;
        a = (a - 1.0) / (a + 1.0);
    }
    float z = a * a;
    y += (((8.05374449538e-2 * z - 1.38776856032e-1) * z + 1.99777106478e-1) * z - 3.33329491539e-1) * z * a + a;
    return x < 0.0 ? -y : y;
}
""",
    grad=chain(lambda e, x, y, n: e("reciprocal", e("add", e.const(1.0), e("square", x)))),
    oracle=Oracle(np.arctan, lambda t, x: t.atan(x), domain=("wide",)),
)

unary(
    "sinh",
    lambda x, a: np.sinh(x),
    "dlc_sinh(a)",
    doc="hyperbolic sine",
    grad=chain(lambda e, x, y, n: e("cosh", x)),
    helpers="""
// sinh: its series below |x| < 0.5 (e^x - e^-x cancels there), else e^|x|/2 - e^-|x|/2 with
// e^|x|/2 taken as exp(|x| - log 2), finite as far as sinh is.
float dlc_sinh(float x) {
    float a = abs(x);
    if (x == 0.0) return x;  // keeps -0 (NVIDIA's optimizer drops the sign through the series)
    if (a < 0.5) {
        float x2 = x * x;
        return x * (1.0 + x2 * (0.16666667 + x2 * (0.008333334 + x2 * 0.0001984127)));
    }
    if (dlc_isnan(x)) return x;
    float h = exp(a - 0.6931472);
    return sign(x) * (h - 0.25 / h);
}
""",
    oracle=Oracle(np.sinh, lambda t, x: t.sinh(x), domain=("wide",)),
)

unary(
    "cosh",
    lambda x, a: np.cosh(x),
    "dlc_cosh(a)",
    doc="hyperbolic cosine",
    grad=chain(lambda e, x, y, n: e("sinh", x)),
    helpers="""
// cosh: its series below |x| < 0.5, else e^|x|/2 + e^-|x|/2 as dlc_sinh takes it.
float dlc_cosh(float x) {
    float a = abs(x);
    if (a < 0.5) {
        float x2 = x * x;
        return 1.0 + x2 * (0.5 + x2 * (0.041666668 + x2 * (0.0013888889 + x2 * 0.0000248016)));
    }
    if (dlc_isnan(x)) return x;
    float h = exp(a - 0.6931472);
    return h + 0.25 / h;
}
""",
    oracle=Oracle(np.cosh, lambda t, x: t.cosh(x), domain=("wide",)),
)


def _mod_grad(e, n, y, g):
    # a - b floor(a / b): d/da = 1, d/db = -floor(a / b) (PyTorch's remainder)
    a, b = n.inputs
    sa, sb = shapes(e, n)
    gb = e("neg", e("mul", g, e("floor", e("div", a, b))))
    return unbroadcast(e, g, sa), unbroadcast(e, gb, sb)


binary(
    "mod",
    np.mod,
    "dlc_mod(a, b)",
    doc="a - b floor(a / b): NumPy's mod and PyTorch's remainder (the sign of b)",
    grad=_mod_grad,
    helpers="""
// fmod(r, ay) for finite r >= 0 and normal ay > 0, exactly: long division, subtracting ay
// scaled by a power of two (an exact subtraction) once per bit of the quotient.
float dlc_fmod_abs(float r, float ay) {
    for (int k = 0; k < 300 && r >= ay; ++k) {
        uint shift = (floatBitsToUint(r) >> 23) - (floatBitsToUint(ay) >> 23);
        float t = uintBitsToFloat(floatBitsToUint(ay) + (shift << 23));  // ay * 2^shift
        if (t > r) t = uintBitsToFloat(floatBitsToUint(t) - 0x00800000u);  // halved
        r -= t;
    }
    return r;
}

// C's fmod(x, y) for finite x and nonzero finite y, exactly. A subnormal y (where the GPU
// keeps them; its exponent bits do not scale it): x mod (y 2^64), normal, then that times
// 2^64 mod y 2^64, times 2^-64.
float dlc_fmod(float x, float y) {
    float r = abs(x), ay = abs(y);
    uint yb = floatBitsToUint(ay);
    if (yb < 0x00800000u) {
        float big = float(yb) * 2.5849394142282115e-26;  // y 2^64 = yb 2^-85
        r = dlc_fmod_abs(dlc_fmod_abs(r, big) * 1.8446744073709552e+19, big) * 5.421010862427522e-20;
    } else {
        r = dlc_fmod_abs(r, ay);
    }
    return x < 0.0 ? -r : r;
}

// np.mod (Python's %): fmod, moved into the sign of b; a zero takes b's sign.
float dlc_mod(float a, float b) {
    if (dlc_unordered(a, b) || b == 0.0 || abs(a) == DLC_INF) return DLC_NAN;
    float m = abs(b) == DLC_INF ? a : dlc_fmod(a, b);
    if (m == 0.0) return b < 0.0 ? uintBitsToFloat(0x80000000u) : 0.0;
    return (m < 0.0) != (b < 0.0) ? m + b : m;
}
""",
    oracle=Oracle(np.mod, lambda t, x, y: t.remainder(x, y), domain=("normal", "away")),
)
