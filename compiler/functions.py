"""The built-in functions of the language, as builders of primitive IR.

Each function has a signature (parameters with a kind and a default) and an
implementation over a GraphBuilder. Composites (mean, softmax, the costs, ...)
expand here into registry primitives. The .dl front end and dlc.Graph both
call these, so a model gives the same IR whichever way it is written.

Parameter kinds: tensor, tensors (a list of tensors), int, float, bool, str,
axis (int, list of ints, or None), ints (int or list), dims (list of ints,
symbolic names and one -1), padding (a string or a list of ints).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dlc.runtime.errors import CompileError, Loc

from .builder import GraphBuilder
from .ir import Shape
from .shapes import ShapeError, format_shape, norm_axes, norm_axis, reduced, split_size

REQUIRED = object()


@dataclass(frozen=True)
class Param:
    name: str
    kind: str
    default: Any = REQUIRED


@dataclass(frozen=True)
class Function:
    name: str
    params: tuple[Param, ...]
    impl: Callable[..., int]
    differentiable: bool = True


FUNCTIONS: dict[str, Function] = {}

T = "tensor"


def function(name: str, *params: Param, differentiable: bool = True):
    def deco(fn):
        FUNCTIONS[name] = Function(name, params, fn, differentiable)
        return fn

    return deco


def _fail(msg: str, loc: Loc | None):
    raise CompileError(msg, loc)


# -- elementwise -----------------------------------------------------------------

_UNARY = [
    "neg",
    "abs",
    "sign",
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "square",
    "reciprocal",
    "relu",
    "relu6",
    "selu",
    "softplus",
    "sigmoid",
    "tanh",
    "sin",
    "cos",
    "step",
]
_BINARY = ["add", "sub", "mul", "div", "pow", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge"]
_NOT_DIFF = {"sign", "step", "eq", "ne", "lt", "le", "gt", "ge"}


def _unary(op):
    return lambda b, loc, x: b.add(op, [x], loc)


def _binary(op):
    return lambda b, loc, a, c: b.add(op, [a, c], loc)


for _op in _UNARY:
    function(_op, Param("x", T), differentiable=_op not in _NOT_DIFF)(_unary(_op))
for _op in _BINARY:
    function(_op, Param("a", T), Param("b", T), differentiable=_op not in _NOT_DIFF)(_binary(_op))


@function("erf", Param("x", T))
def _erf_fn(b, loc, x):
    return b.add("erf", [x], loc)


@function("gelu", Param("x", T), Param("approximate", "str", "none"))
def gelu(b, loc, x, approximate):
    # "none": x * (1 + erf(x / sqrt 2)) / 2; "tanh": x * (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) / 2
    if approximate == "none":
        inner = b.add("erf", [b.add("mul", [x, b.const(0.7071067811865476, (), loc)], loc)], loc)
    elif approximate == "tanh":
        cube = b.add("mul", [b.add("mul", [x, x], loc), x], loc)
        arg = b.add("add", [x, b.add("mul", [cube, b.const(0.044715, (), loc)], loc)], loc)
        inner = b.add("tanh", [b.add("mul", [arg, b.const(0.7978845608028654, (), loc)], loc)], loc)
    else:
        _fail(f'gelu approximate must be "none" or "tanh", got "{approximate}"', loc)
    half = b.add("mul", [x, b.const(0.5, (), loc)], loc)
    return b.add("mul", [half, b.add("add", [inner, b.const(1.0, (), loc)], loc)], loc)


@function("leaky_relu", Param("x", T), Param("alpha", "float", 0.2))
def _leaky_relu(b, loc, x, alpha):
    return b.add("leaky_relu", [x], loc, alpha=float(alpha))


@function("elu", Param("x", T), Param("alpha", "float", 1.0))
def _elu(b, loc, x, alpha):
    return b.add("elu", [x], loc, alpha=float(alpha))


@function("clip", Param("x", T), Param("low", T), Param("high", T))
def _clip(b, loc, x, low, high):
    return b.add("minimum", [b.add("maximum", [x, low], loc), high], loc)


@function("where", Param("cond", T), Param("a", T), Param("b", T))
def _where(b, loc, cond, x, y):
    return b.add("where", [cond, x, y], loc)


# -- linear algebra --------------------------------------------------------------


@function("matmul", Param("a", T), Param("b", T))
def matmul(b: GraphBuilder, loc, x, y):
    sa, sb = b.shape(x), b.shape(y)
    if not sa or not sb or len(sa) > 3 or len(sb) > 3:
        _fail(f"matmul takes operands of rank 1, 2 or 3, got {format_shape(sa)} and {format_shape(sb)}", loc)
    ka, kb = sa[-1], (sb[0] if len(sb) == 1 else sb[-2])
    if ka != kb:
        _fail(f"matmul shapes {format_shape(sa)} and {format_shape(sb)} do not fit: {ka} != {kb}", loc)
    x2 = b.add("reshape", [x], loc, shape=(1, *sa)) if len(sa) == 1 else x
    y2 = b.add("reshape", [y], loc, shape=(*sb, 1)) if len(sb) == 1 else y
    out = b.add("matmul", [x2, y2], loc, ta=False, tb=False)
    if len(sa) == 1 or len(sb) == 1:
        shape = b.shape(out)
        keep = [
            d
            for k, d in enumerate(shape)
            if not ((len(sa) == 1 and k == len(shape) - 2) or (len(sb) == 1 and k == len(shape) - 1))
        ]
        out = b.add("reshape", [out], loc, shape=tuple(keep))
    return out


@function("transpose", Param("x", T), Param("perm", "ints", None))
def _transpose(b, loc, x, perm):
    rank = len(b.shape(x))
    perm = tuple(reversed(range(rank))) if perm is None else tuple(perm)
    if sorted(perm) != list(range(rank)):
        _fail(f"transpose perm {list(perm)} is not a permutation of the {rank} axes", loc)
    return b.add("transpose", [x], loc, perm=perm)


# -- reductions ------------------------------------------------------------------


def _axes(b, loc, x, axis):
    try:
        return norm_axes(axis, len(b.shape(x)))
    except ShapeError as e:
        _fail(str(e), loc)


def _reduction(op):
    def impl(b, loc, x, axis, keepdims):
        return b.add(op, [x], loc, axes=_axes(b, loc, x, axis), keepdims=bool(keepdims))

    return impl


for _op in ("sum", "max", "min"):
    function(_op, Param("x", T), Param("axis", "axis", None), Param("keepdims", "bool", False))(_reduction(_op))


def count(b: GraphBuilder, loc, shape: Shape) -> int:
    """The element count of `shape`: a constant, or a dim_size for symbolic dims."""
    known, sym = split_size(shape)
    if not sym:
        return b.const(float(known), (), loc)
    return b.add("dim_size", [], loc, dims=tuple(shape))


@function("mean", Param("x", T), Param("axis", "axis", None), Param("keepdims", "bool", False))
def mean(b, loc, x, axis, keepdims):
    axes = _axes(b, loc, x, axis)
    total = b.add("sum", [x], loc, axes=axes, keepdims=bool(keepdims))
    n = count(b, loc, tuple(b.shape(x)[a] for a in axes))
    return b.add("div", [total, n], loc)


def _arg(op):
    def impl(b, loc, x, axis):
        try:
            ax = norm_axis(int(axis), len(b.shape(x)))
        except ShapeError as e:
            _fail(str(e), loc)
        return b.add(op, [x], loc, axis=ax)

    return impl


for _op in ("argmax", "argmin"):
    function(_op, Param("x", T), Param("axis", "int", -1), differentiable=False)(_arg(_op))


def _keepdims_max(b, loc, x, axes):
    return b.add("stop_gradient", [b.add("max", [x], loc, axes=axes, keepdims=True)], loc)


@function("logsumexp", Param("x", T), Param("axis", "axis", -1), Param("keepdims", "bool", False))
def logsumexp(b, loc, x, axis, keepdims):
    axes = _axes(b, loc, x, axis)
    m = _keepdims_max(b, loc, x, axes)
    e = b.add("exp", [b.add("sub", [x, m], loc)], loc)
    s = b.add("sum", [e], loc, axes=axes, keepdims=True)
    out = b.add("add", [b.add("log", [s], loc), m], loc)
    if not keepdims:
        out = b.add("reshape", [out], loc, shape=reduced(b.shape(x), axes, False))
    return out


@function("softmax", Param("x", T), Param("axis", "int", -1))
def softmax(b, loc, x, axis):
    axes = _axes(b, loc, x, axis)
    e = b.add("exp", [b.add("sub", [x, _keepdims_max(b, loc, x, axes)], loc)], loc)
    return b.add("div", [e, b.add("sum", [e], loc, axes=axes, keepdims=True)], loc)


@function("log_softmax", Param("x", T), Param("axis", "int", -1))
def log_softmax(b, loc, x, axis):
    # (x - m) - log(sum(exp(x - m))): exact at large logits, where x - (m + log(...)) rounds
    # m + log(...) to float32 first (row [10000, 10001, 10002, 10003]: -0.44043, not -0.44019).
    axes = _axes(b, loc, x, axis)
    shifted = b.add("sub", [x, _keepdims_max(b, loc, x, axes)], loc)
    s = b.add("sum", [b.add("exp", [shifted], loc)], loc, axes=axes, keepdims=True)
    return b.add("sub", [shifted, b.add("log", [s], loc)], loc)


# -- shape -----------------------------------------------------------------------


@function("reshape", Param("x", T), Param("shape", "dims"))
def reshape(b, loc, x, shape):
    old = b.shape(x)
    new = list(shape)
    if sum(1 for d in new if d == -1) > 1:
        _fail("reshape takes at most one -1", loc)
    if any(isinstance(d, int) and d != -1 and d <= 0 for d in new):
        _fail(f"reshape dims must be positive (or one -1), got {new}", loc)
    known_old, sym_old = split_size(old)
    rest = [d for d in new if d != -1]
    known_new, sym_new = split_size(tuple(rest))
    if -1 in new:
        left = list(sym_old)
        for s in sym_new:
            if s not in left:
                _fail(
                    f"cannot reshape {format_shape(old)} to {format_shape(tuple(new))}: "
                    f"symbolic dim {s} does not appear in the input",
                    loc,
                )
            left.remove(s)
        if len(left) == 1 and known_old == known_new:
            new[new.index(-1)] = left[0]  # the -1 stands for the one symbolic dim left over
        elif left or known_old % known_new:
            _fail(f"cannot reshape {format_shape(old)} to {format_shape(tuple(new))}: the -1 cannot be resolved", loc)
        else:
            new[new.index(-1)] = known_old // known_new
    elif (known_old, sym_old) != (known_new, sym_new):
        _fail(
            f"cannot reshape {format_shape(old)} ({_count(old)} elements) to "
            f"{format_shape(tuple(new))} ({_count(tuple(new))} elements)",
            loc,
        )
    return b.add("reshape", [x], loc, shape=tuple(new))


def _count(shape):
    known, sym = split_size(shape)
    return "*".join([*sym, str(known)]) if sym else str(known)


@function("concat", Param("tensors", "tensors"), Param("axis", "int", 0))
def concat(b, loc, xs, axis):
    if not xs:
        _fail("concat needs at least one tensor", loc)
    shapes = [b.shape(x) for x in xs]
    rank = len(shapes[0])
    try:
        ax = norm_axis(int(axis), rank)
    except ShapeError as e:
        _fail(str(e), loc)
    for s in shapes:
        if len(s) != rank or any(d != e for k, (d, e) in enumerate(zip(s, shapes[0])) if k != ax):
            _fail(f"concat shapes {' and '.join(map(format_shape, shapes))} do not fit along axis {ax}", loc)
        if isinstance(s[ax], str):
            _fail(f"concat along symbolic dim {s[ax]} is not supported", loc)
    return b.add("concat", list(xs), loc, axis=ax)


@function("slice", Param("x", T), Param("begin", "ints"), Param("size", "dims"))
def slice_(b, loc, x, begin, size):
    """x[begin[k] : begin[k] + size[k]] along every axis k; a size of -1 runs to the end of
    its axis, and a symbolic axis is taken whole: size -1 or its own name (`[B, 32]`)."""
    shape = b.shape(x)
    begin, size = list(begin), list(size)
    if len(begin) != len(shape) or len(size) != len(shape):
        _fail(
            f"slice of {format_shape(shape)} needs {len(shape)} begin and size values, "
            f"got {len(begin)} and {len(size)}",
            loc,
        )
    out = []
    for k, (d, start, n) in enumerate(zip(shape, begin, size)):
        if isinstance(d, str):
            if start != 0 or n not in (-1, d):
                _fail(
                    f"slice along symbolic dim {d} (axis {k}) must take all of it: begin 0 "
                    f"and size {d} or -1, got begin {start} and size {n}",
                    loc,
                )
            out.append(d)
            continue
        if isinstance(n, str):
            _fail(f"slice size {n} for axis {k} of {format_shape(shape)}: that axis is {d} long, not symbolic", loc)
        n = d - start if n == -1 else n
        if start < 0 or n <= 0 or start + n > d:
            _fail(f"slice begin {start} size {n} is out of bounds for axis {k} of {format_shape(shape)}", loc)
        out.append(n)
    return b.add("slice", [x], loc, begin=tuple(begin), size=tuple(out))


@function("pad", Param("x", T), Param("before", "ints"), Param("after", "ints"))
def pad(b, loc, x, before, after):
    # Zeros around x: `before[k]` in front of axis k and `after[k]` behind it.
    shape = b.shape(x)
    before, after = (
        [before] if isinstance(before, int) else list(before),
        [after] if isinstance(after, int) else list(after),
    )
    if len(before) != len(shape) or len(after) != len(shape):
        _fail(
            f"pad of {format_shape(shape)} needs {len(shape)} before and after values, "
            f"got {len(before)} and {len(after)}",
            loc,
        )
    for k, (d, lo, hi) in enumerate(zip(shape, before, after)):
        if lo < 0 or hi < 0:
            _fail(f"pad amounts must be >= 0, got {lo} and {hi} for axis {k}", loc)
        if isinstance(d, str) and (lo or hi):
            _fail(f"pad along symbolic dim {d} is not supported", loc)
    return b.add("pad", [x], loc, before=tuple(before), after=tuple(after))


@function("broadcast_to", Param("x", T), Param("shape", "dims"))
def broadcast_to(b, loc, x, shape):
    # NumPy's broadcast_to: x's dims line up with the trailing dims of shape.
    old, new = b.shape(x), tuple(shape)
    if len(new) < len(old) or any(o not in (1, n) for o, n in zip(old[::-1], new[::-1])):
        _fail(f"cannot broadcast {format_shape(old)} to {format_shape(new)}", loc)
    if any(isinstance(d, int) and d <= 0 for d in new):
        _fail(f"broadcast_to dims must be positive, got {list(new)}", loc)
    return b.add("broadcast_to", [x], loc, shape=new)


@function("one_hot", Param("indices", T), Param("depth", "int"), differentiable=False)
def _one_hot(b, loc, x, depth):
    if int(depth) <= 0:
        _fail(f"one_hot depth must be positive, got {depth}", loc)
    return b.add("one_hot", [x], loc, depth=int(depth))


# -- networks --------------------------------------------------------------------


def _pair(v, what, loc):
    v = (v, v) if isinstance(v, int) else tuple(v)
    if len(v) != 2 or any(not isinstance(k, int) or k <= 0 for k in v):
        _fail(f"{what} must be a positive int or two of them, got {v}", loc)
    return v


def _padding(p, loc):
    """ "same", "valid", or explicit [top, bottom, left, right] zero padding."""
    if isinstance(p, str):
        if p not in ("same", "valid"):
            _fail(f'padding must be "same", "valid" or [top, bottom, left, right], got "{p}"', loc)
        return p
    pads = (p,) if isinstance(p, int) else tuple(p)
    if len(pads) != 4 or any(not isinstance(k, int) or k < 0 for k in pads):
        _fail(
            f'padding must be "same", "valid" or four non-negative ints [top, bottom, left, right], got {list(pads)}',
            loc,
        )
    return pads


@function(
    "conv2d",
    Param("x", T),
    Param("w", T),
    Param("stride", "ints", 1),
    Param("padding", "padding", "same"),
    Param("dilation", "ints", 1),
    Param("groups", "int", 1),
)
def conv2d(b, loc, x, w, stride, padding, dilation, groups):
    if not isinstance(groups, int) or groups <= 0:
        _fail(f"conv2d groups must be a positive int, got {groups}", loc)
    attrs = {"stride": _pair(stride, "stride", loc), "padding": _padding(padding, loc)}
    dilation = _pair(dilation, "dilation", loc)
    if dilation != (1, 1):
        attrs["dilation"] = dilation
    if groups != 1:
        attrs["groups"] = int(groups)
    return b.add("conv2d", [x, w], loc, **attrs)


def _pool(op):
    def impl(b, loc, x, size, stride, padding, *rest):
        size = _pair(size, "size", loc)
        stride = size if stride is None else _pair(stride, "stride", loc)
        attrs = {"size": size, "stride": stride, "padding": _padding(padding, loc)}
        if rest and rest[0]:
            attrs["count_include_pad"] = True
        return b.add(op, [x], loc, **attrs)

    return impl


function(
    "max_pool",
    Param("x", T),
    Param("size", "ints"),
    Param("stride", "ints", None),
    Param("padding", "padding", "valid"),
)(_pool("max_pool"))
function(
    "avg_pool",
    Param("x", T),
    Param("size", "ints"),
    Param("stride", "ints", None),
    Param("padding", "padding", "valid"),
    Param("count_include_pad", "bool", False),
)(_pool("avg_pool"))


def _global_pool(op):
    def impl(b, loc, x):
        shape = b.shape(x)
        if len(shape) != 4:
            _fail(f"global_{op}_pool takes x [B, H, W, C], got {format_shape(shape)}", loc)
        return (mean if op == "avg" else _reduction("max"))(b, loc, x, (1, 2), False)

    return impl


function("global_avg_pool", Param("x", T))(_global_pool("avg"))
function("global_max_pool", Param("x", T))(_global_pool("max"))


# -- costs -----------------------------------------------------------------------


@function("mean_squared", Param("pred", T), Param("target", T))
def mean_squared(b, loc, pred, target):
    diff = b.add("sub", [pred, target], loc)
    return mean(b, loc, b.add("square", [diff], loc), None, False)


@function("softmax_cross_entropy", Param("logits", T), Param("labels", T))
def softmax_cross_entropy(b, loc, logits, labels):
    if b.shape(logits) != b.shape(labels):
        _fail(
            f"softmax_cross_entropy logits {format_shape(b.shape(logits))} and labels "
            f"{format_shape(b.shape(labels))} must have the same shape",
            loc,
        )
    per = b.add(
        "sum",
        [b.add("mul", [labels, log_softmax(b, loc, logits, -1)], loc)],
        loc,
        axes=(len(b.shape(logits)) - 1,),
        keepdims=False,
    )
    return b.add("neg", [mean(b, loc, per, None, False)], loc)


@function("sigmoid_cross_entropy", Param("logits", T), Param("labels", T))
def sigmoid_cross_entropy(b, loc, x, z):
    # max(x, 0) - x*z + log(1 + exp(-|x|)): stable for large |x|.
    pos = b.add("relu", [x], loc)
    xz = b.add("mul", [x, z], loc)
    tail = b.add("softplus", [b.add("neg", [b.add("abs", [x], loc)], loc)], loc)
    return mean(b, loc, b.add("add", [b.add("sub", [pos, xz], loc), tail], loc), None, False)


# The language's operators, as functions.
OPERATORS = {
    "+": "add",
    "-": "sub",
    "*": "mul",
    "/": "div",
    "@": "matmul",
    "^": "pow",
    "==": "eq",
    "!=": "ne",
    "<": "lt",
    "<=": "le",
    ">": "gt",
    ">=": "ge",
}
