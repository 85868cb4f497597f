"""Elementwise ops: NumPy broadcasting, one GLSL expression each, one entry each.

GLSL expressions name their operands a, b, c; `{alpha}` and the like are filled from the
node's attrs. Helpers named dlc_* live in the codegen preamble or in an entry's `helpers`.
Gradient rules (`grad=`) get (emit, node, y, g), see ops/adjoint.py.
"""

from __future__ import annotations

import numpy as np

from ..dtypes import INT_LOWERING, any_to_f32, floats_except
from ..registry import OpDef, Oracle, Param, register
from ..shapes import broadcast
from . import trig_glsl
from .adjoint import chain, shapes, unbroadcast

SELU_ALPHA = 1.6732632423543772
SELU_SCALE = 1.0507009873554805
T = "tensor"


def _same(ins, attrs):
    return ins[0]


def _bcast(ins, attrs):
    return broadcast(*ins)


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


def unary(name, ref, glsl, *, doc, grad=None, attrs=(), oracle=None, helpers="", language=True, params=None, **kw):
    """One unary elementwise entry. `ref(x, attrs)` is the NumPy reference; `attrs` the float
    parameters after x, as (name, default); no `grad`: not differentiable; `language=False`:
    not a function of the language; `params`, `build`: a signature and front end of its own."""
    if params is None and language:
        params = (Param("x", T), *(Param(a, "float", d) for a, d in attrs))
    return register(
        OpDef(
            name,
            "elementwise",
            _same,
            _unary_ref(ref),
            arity=1,
            differentiable=grad is not None,
            lowering={"glsl": glsl} if isinstance(glsl, str) else glsl,
            gradient=grad,
            params=params,
            doc=doc,
            group="elementwise",
            oracle=oracle,
            helpers=helpers,
            **kw,
        )
    )


def binary(name, ref, glsl, *, doc, grad=None, oracle=None, helpers="", int_glsl=None, **kw):
    """One binary (broadcasting) elementwise entry; no `grad`: not differentiable; `int_glsl`:
    its expression over two i32 operands as GLSL ints (exact where floats would round)."""
    return register(
        OpDef(
            name,
            "elementwise",
            _bcast,
            _binary_ref(ref),
            arity=2,
            differentiable=grad is not None,
            lowering={"glsl": glsl, **({INT_LOWERING: int_glsl} if int_glsl else {})},
            gradient=grad,
            params=(Param("a", T), Param("b", T)),
            doc=doc,
            group="elementwise",
            oracle=oracle,
            helpers=helpers,
            **kw,
        )
    )


def _softplus(x):
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


def _sigmoid(x):
    # Stable for large |x|: never exp of a large positive number.
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _elu(x, alpha):
    return np.where(x >= 0, x, alpha * np.expm1(np.minimum(x, 0)))


def _where_ge0(e, x, above, below):
    return e("where", e("ge", x, e.const(0.0)), above, below)


# -- unary ------------------------------------------------------------------------------------

unary(
    "neg",
    lambda x, a: -x,
    "(-a)",
    doc="-x",
    grad=lambda e, n, y, g: (e("neg", g),),
    oracle=Oracle(np.negative, lambda t, x: -x),
)
unary(
    "abs",
    lambda x, a: np.abs(x),
    "abs(a)",
    doc="|x|",
    grad=chain(lambda e, x, y, n: e("sign", x)),
    oracle=Oracle(np.abs, lambda t, x: t.abs(x), domain=("away",)),
)
unary(
    "sign",
    lambda x, a: np.sign(x),
    "(dlc_isnan(a) ? a : sign(a))",
    doc="-1, 0 or 1 (NaN stays NaN)",
    oracle=Oracle(np.sign, lambda t, x: t.sign(x)),
)
unary(
    "exp",
    lambda x, a: np.exp(x),
    "dlc_exp(a)",
    doc="e^x",
    grad=chain(lambda e, x, y, n: y),
    oracle=Oracle(np.exp, lambda t, x: t.exp(x), domain=("wide",)),
)
unary(
    "log",
    lambda x, a: np.log(x),
    "dlc_log(a)",
    doc="natural logarithm",
    grad=lambda e, n, y, g: (e("div", g, n.inputs[0]),),
    helpers="""
// log x, and of a subnormal x (llvmpipe's log reads it as 2^-127, a flushing GPU as 0) from its
// bits: log(mantissa) - 149 log 2, the same on every device.
float dlc_log(float x) {
    uint b = floatBitsToUint(x);
    if ((b & 0x7F800000u) != 0u || (b & 0x7FFFFFu) == 0u) return log(x);
    return b >= 0x80000000u ? DLC_NAN : log(float(b)) - 103.27892990343184;
}
""",
    oracle=Oracle(np.log, lambda t, x: t.log(x), domain=("positive",)),
)
unary(
    "sqrt",
    lambda x, a: np.sqrt(x),
    "sqrt(a)",
    doc="square root",
    # d sqrt(x) = 1 / (2 sqrt(x))
    grad=lambda e, n, y, g: (e("div", g, e("mul", e.const(2.0), y)),),
    oracle=Oracle(np.sqrt, lambda t, x: t.sqrt(x), domain=("positive",)),
)
unary(
    "rsqrt",
    lambda x, a: 1 / np.sqrt(x),
    "inversesqrt(a)",
    doc="1 / sqrt(x)",
    # d x^-1/2 = -1/2 x^-3/2 = -1/2 y^3
    grad=chain(lambda e, x, y, n: e("mul", e.const(-0.5), e("mul", y, e("square", y)))),
    oracle=Oracle(lambda x: 1 / np.sqrt(x), lambda t, x: t.rsqrt(x), domain=("positive",)),
)
unary(
    "square",
    lambda x, a: x * x,
    "(a * a)",
    doc="x * x",
    grad=chain(lambda e, x, y, n: e("mul", e.const(2.0), x)),
    oracle=Oracle(np.square, lambda t, x: t.square(x), domain=("wide",)),
)
unary(
    "reciprocal",
    lambda x, a: 1 / x,
    "(1.0 / a)",
    doc="1 / x",
    grad=lambda e, n, y, g: (e("neg", e("mul", g, e("square", y))),),
    oracle=Oracle(lambda x: 1 / x, lambda t, x: t.reciprocal(x), domain=("away",)),
)
unary(
    "relu",
    lambda x, a: np.maximum(x, 0),
    "dlc_max(a, 0.0)",
    doc="max(x, 0)",
    grad=chain(lambda e, x, y, n: e("step", x)),
    oracle=Oracle(lambda x: np.maximum(x, 0), lambda t, x: t.relu(x), domain=("away",)),
)
unary(
    "relu6",
    lambda x, a: np.clip(x, 0, 6),
    "dlc_relu6(a)",
    doc="min(max(x, 0), 6)",
    grad=chain(lambda e, x, y, n: e("mul", e("gt", x, e.const(0.0)), e("lt", x, e.const(6.0)))),
    # np.clip's: -0 stays -0 (NaN fails both tests and stays too)
    oracle=Oracle(
        lambda x: np.where(x < 0, 0.0, np.where(x > 6, 6.0, x)),
        lambda t, x: t.nn.functional.relu6(x),
        domain=("relu6",),
    ),
)
unary(
    "leaky_relu",
    lambda x, a: np.where(x >= 0, x, a["alpha"] * x),
    "((a >= 0.0 || dlc_isnan(a)) ? a : {alpha} * a)",
    doc="x, or alpha * x below 0",
    attrs=(("alpha", 0.2),),
    grad=chain(lambda e, x, y, n: _where_ge0(e, x, e.const(1.0), e.const(n.attr("alpha")))),
    oracle=Oracle(
        lambda x, alpha: np.where(x >= 0, x, alpha * x),
        lambda t, x, alpha: t.nn.functional.leaky_relu(x, alpha),
        domain=("away",),
        attrs=({"alpha": 0.2}, {"alpha": 0.05}),
    ),
)
unary(
    "elu",
    lambda x, a: _elu(x, a["alpha"]),
    "((a >= 0.0 || dlc_isnan(a)) ? a : {alpha} * dlc_expm1(a))",  # expm1: exact for tiny x
    doc="x, or alpha * (e^x - 1) below 0",
    attrs=(("alpha", 1.0),),
    # below 0: y = alpha (exp(x) - 1), so dy/dx = alpha exp(x) = y + alpha
    grad=chain(lambda e, x, y, n: _where_ge0(e, x, e.const(1.0), e("add", y, e.const(n.attr("alpha"))))),
    oracle=Oracle(
        lambda x, alpha: np.where(x >= 0, x, alpha * np.expm1(np.minimum(x, 0))),
        lambda t, x, alpha: t.nn.functional.elu(x, alpha),
        domain=("away",),
        attrs=({"alpha": 1.0}, {"alpha": 0.5}),
    ),
)
unary(
    "selu",
    lambda x, a: SELU_SCALE * _elu(x, SELU_ALPHA),
    f"({SELU_SCALE!r} * ((a >= 0.0 || dlc_isnan(a)) ? a : {SELU_ALPHA!r} * dlc_expm1(a)))",
    doc="scale * elu(x, alpha) with the self-normalizing constants",
    # below 0: y = scale alpha (exp(x) - 1), so dy/dx = y + scale alpha
    grad=chain(lambda e, x, y, n: _where_ge0(e, x, e.const(SELU_SCALE), e("add", y, e.const(SELU_SCALE * SELU_ALPHA)))),
    oracle=Oracle(
        lambda x: SELU_SCALE * np.where(x >= 0, x, SELU_ALPHA * np.expm1(np.minimum(x, 0))),
        lambda t, x: t.nn.functional.selu(x),
        domain=("away",),
    ),
)
unary(
    "softplus",
    lambda x, a: _softplus(x),
    "(dlc_max(a, 0.0) + log(1.0 + exp(-abs(a))))",
    doc="log(1 + e^x), stable for large |x|",
    grad=chain(lambda e, x, y, n: e("sigmoid", x)),
    oracle=Oracle(lambda x: np.logaddexp(x, 0.0), lambda t, x: t.nn.functional.softplus(x), domain=("wide",)),
)
unary(
    "sigmoid",
    lambda x, a: _sigmoid(x),
    "dlc_sigmoid(a)",
    doc="1 / (1 + e^-x)",
    grad=chain(lambda e, x, y, n: e("mul", y, e("sub", e.const(1.0), y))),
    oracle=Oracle(lambda x: 1 / (1 + np.exp(-x)), lambda t, x: t.sigmoid(x), domain=("wide",)),
)
unary(
    "tanh",
    lambda x, a: np.tanh(x),
    "dlc_tanh(a)",  # codegen's preamble: the builtin tanh is slow on NVIDIA; dlc_tanh is one exp
    doc="hyperbolic tangent",
    grad=chain(lambda e, x, y, n: e("sub", e.const(1.0), e("square", y))),
    oracle=Oracle(np.tanh, lambda t, x: t.tanh(x), domain=("wide",)),
)
unary(
    "sin",
    lambda x, a: np.sin(x),
    "dlc_sin(a)",
    doc="sine",
    grad=chain(lambda e, x, y, n: e("cos", x)),
    helpers=trig_glsl.HELPERS,  # exact range reduction (drivers' sin(3e38) is -1)
    oracle=Oracle(np.sin, lambda t, x: t.sin(x), domain=("wide",)),
)
unary(
    "cos",
    lambda x, a: np.cos(x),
    "dlc_cos(a)",
    doc="cosine",
    grad=chain(lambda e, x, y, n: e("neg", e("sin", x))),
    helpers=trig_glsl.COS,
    oracle=Oracle(np.cos, lambda t, x: t.cos(x), domain=("wide",)),
)
unary(
    "step",
    lambda x, a: np.heaviside(x, 0),
    "(dlc_isnan(a) ? a : a > 0.0 ? 1.0 : 0.0)",
    doc="1 where x > 0, else 0",
    oracle=Oracle(lambda x: np.heaviside(x, 0.0), lambda t, x: t.heaviside(x, t.zeros_like(x))),
)
# Identity whose gradient is zero: logsumexp subtracts its max through it.
unary("stop_gradient", lambda x, a: x, "a", doc="x, passing no gradient", language=False)


# -- binary -----------------------------------------------------------------------------------


def _pow(x, y):
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.power(x, y)


def _add(e, n, y, g):
    sa, sb = shapes(e, n)
    return unbroadcast(e, g, sa), unbroadcast(e, g, sb)


def _sub(e, n, y, g):
    sa, sb = shapes(e, n)
    return unbroadcast(e, g, sa), unbroadcast(e, e("neg", g), sb)


def _mul(e, n, y, g):
    a, b = n.inputs
    sa, sb = shapes(e, n)
    return unbroadcast(e, e("mul", g, b), sa), unbroadcast(e, e("mul", g, a), sb)


def _div(e, n, y, g):
    # d(a/b)/db = -a/b^2 = -y/b
    a, b = n.inputs
    sa, sb = shapes(e, n)
    ga = e("div", g, b)
    return unbroadcast(e, ga, sa), unbroadcast(e, e("neg", e("mul", ga, y)), sb)


def _pow_grad(e, n, y, g):
    # d a^b/da = b a^(b-1); d a^b/db = a^b log(a), taken as 0 where a <= 0 (as TensorFlow does).
    a, b = n.inputs
    sa, sb = shapes(e, n)
    ga = e("mul", g, e("mul", b, e("pow", a, e("sub", b, e.const(1.0)))))
    safe_a = e("where", e("gt", a, e.const(0.0)), a, e.const(1.0))
    gb = e("mul", g, e("mul", y, e("log", safe_a)))
    return unbroadcast(e, ga, sa), unbroadcast(e, gb, sb)


def _select(first_wins: str):
    # `first_wins` is gt for maximum, lt for minimum; ties split the gradient in half (PyTorch).
    def rule(e, n, y, g):
        a, b = n.inputs
        sa, sb = shapes(e, n)
        share = e("add", e(first_wins, a, b), e("mul", e.const(0.5), e("eq", a, b)))
        ga = e("mul", g, share)
        gb = e("mul", g, e("sub", e.const(1.0), share))
        return unbroadcast(e, ga, sa), unbroadcast(e, gb, sb)

    return rule


binary("add", lambda x, y: x + y, "(a + b)", doc="a + b", grad=_add, oracle=Oracle(np.add, lambda t, x, y: x + y))
binary(
    "sub",
    lambda x, y: x - y,
    "(a - b)",
    doc="a - b",
    grad=_sub,
    oracle=Oracle(np.subtract, lambda t, x, y: x - y),
)
binary(
    "mul",
    lambda x, y: x * y,
    "(a * b)",
    doc="a * b",
    grad=_mul,
    oracle=Oracle(np.multiply, lambda t, x, y: x * y),
)
binary(
    "div",
    lambda x, y: x / y,
    "dlc_div(a, b)",
    doc="a / b",
    grad=_div,
    helpers="""
// a / b. NVIDIA divides as a * (1 / b), and 1 / b is subnormal, so flushed to 0, for 2^126 < |b|
// < inf: inf / 3.4e38 came out NaN and 3e38 / 3.4e38 zero. There a / 4 is divided by b / 4, b / 4
// taken from its bits (a visible * 0.25 on both sides the driver's optimizer cancels).
float dlc_div(float a, float b) {
    uint m = floatBitsToUint(b) & 0x7FFFFFFFu;
    if (m > 0x7E800000u && m < 0x7F800000u) return (a * 0.25) / uintBitsToFloat(floatBitsToUint(b) - 0x01000000u);
    return a / b;
}
""",
    oracle=Oracle(np.divide, lambda t, x, y: x / y, domain=("normal", "away")),
)
binary(
    "pow",
    _pow,
    "dlc_pow(a, b)",
    doc="a^b as C99's powf",
    grad=_pow_grad,
    oracle=Oracle(np.power, lambda t, x, y: t.pow(x, y), domain=("positive", "normal")),
)
binary(
    "maximum",
    np.maximum,
    "dlc_max(a, b)",
    doc="the larger of a and b (NaN wins)",
    grad=_select("gt"),
    oracle=Oracle(np.maximum, lambda t, x, y: t.maximum(x, y)),
)
binary(
    "minimum",
    np.minimum,
    "dlc_min(a, b)",
    doc="the smaller of a and b (NaN wins)",
    grad=_select("lt"),
    oracle=Oracle(np.minimum, lambda t, x, y: t.minimum(x, y)),
)


def _compare(name, fn, glsl, torch_name):
    op = glsl.split()[1]
    binary(
        name,
        fn,
        glsl,
        doc=f"1 where a {glsl.split()[1]} b, else 0 (NaN compares unequal)",
        oracle=Oracle(
            lambda x, y: fn(x, y).astype(float),
            lambda t, x, y: getattr(t, torch_name)(x, y).to(x.dtype),
            domain=("ints", "ints"),
        ),
        dtype=any_to_f32,  # an i32 operand against an f32 one is compared as f32 (exact below 2^24)
        int_glsl=f"((a {op} b) ? 1.0 : 0.0)",  # two i32 operands: exactly
    )


_compare("eq", lambda x, y: x == y, "((a == b && !dlc_unordered(a, b)) ? 1.0 : 0.0)", "eq")
_compare("ne", lambda x, y: x != y, "((a != b || dlc_unordered(a, b)) ? 1.0 : 0.0)", "ne")
_compare("lt", lambda x, y: x < y, "((a < b && !dlc_unordered(a, b)) ? 1.0 : 0.0)", "lt")
_compare("le", lambda x, y: x <= y, "((a <= b && !dlc_unordered(a, b)) ? 1.0 : 0.0)", "le")
_compare("gt", lambda x, y: x > y, "((a > b && !dlc_unordered(a, b)) ? 1.0 : 0.0)", "gt")
_compare("ge", lambda x, y: x >= y, "((a >= b && !dlc_unordered(a, b)) ? 1.0 : 0.0)", "ge")


# -- where ------------------------------------------------------------------------------------


def _where(args, attrs, dims):
    c, x, y = args
    return np.where(c != 0, x, y).astype(np.result_type(x, y))


def _where_grad(e, n, y, g):
    c, a, b = n.inputs
    _, sa, sb = shapes(e, n)
    zero = e.const(0.0)
    return None, unbroadcast(e, e("where", c, g, zero), sa), unbroadcast(e, e("where", c, zero, g), sb)


register(
    OpDef(
        "where",
        "elementwise",
        _bcast,
        _where,
        arity=3,
        lowering={"glsl": "((a != 0.0 || dlc_isnan(a)) ? b : c)"},
        gradient=_where_grad,
        dtype=floats_except(0),  # the condition may be i32
        params=(Param("cond", T), Param("a", T), Param("b", T)),
        doc="a where cond is nonzero (NaN counts), else b",
        group="elementwise",
        oracle=Oracle(
            lambda c, x, y: np.where(c != 0, x, y),
            lambda t, c, x, y: t.where(c != 0, x, y),
            domain=("bools", "normal", "normal"),
        ),
    )
)
