"""The built-in functions of the language, as builders of primitive IR.

Each function is a registry entry with a signature (parameters with a kind and a
default) and an implementation over a GraphBuilder: a primitive's entry adds its node
(elementwise ops, compiler/ops/), or its front end here checks the arguments first;
composites (mean, softmax, the costs, ...) are registered here as expansions into
primitives. `FUNCTIONS`, the table the .dl front end and dlc.Graph call, is derived from
the registry, so a model gives the same IR whichever way it is written.

Parameter kinds: tensor, tensors (a list of tensors), int, float, bool, str,
axis (int, list of ints, or None), ints (int or list), dims (list of ints,
symbolic names and one -1), padding (a string or a list of ints).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from dlc.runtime.dims import product as dim_product
from dlc.runtime.errors import CompileError, Loc

from . import (
    opdefs,
    ops,  # noqa: F401  (the primitives first: a function named after one is its front end)
)
from .builder import GraphBuilder, count
from .ir import Shape
from .opdefs import REQUIRED, Param  # noqa: F401  (the language's parameters, re-exported)
from .shapes import ShapeError, broadcast, format_shape, norm_axes, norm_axis, reduced, split_size


@dataclass(frozen=True)
class Function:
    name: str
    params: tuple[Param, ...]
    impl: Callable[..., int]
    differentiable: bool = True
    doc: str = ""


T = "tensor"


def function(name: str, *params: Param, doc: str, group: str, differentiable: bool = True):
    """Registers a language function: the front end of the primitive of that name (it checks
    and normalizes the arguments), else a composite expanding into primitives."""

    def deco(fn):
        if name in opdefs.REGISTRY:
            opdefs.update(name, params=params, build=fn, doc=doc, group=group)
        else:
            opdefs.register_composite(opdefs.Composite(name, params, fn, doc, group, differentiable))
        return fn

    return deco


def _default_build(op: opdefs.OpDef):
    """A primitive's function without a front end: tensors are its inputs, the rest attrs."""
    convert = {"float": float, "int": int, "bool": bool, "str": str}

    def impl(b, loc, *args):
        inputs = [v for p, v in zip(op.params, args) if p.kind == T]
        attrs = {p.name: convert.get(p.kind, lambda v: v)(v) for p, v in zip(op.params, args) if p.kind != T}
        return b.add(op.name, inputs, loc, **attrs)

    return impl


def _fail(msg: str, loc: Loc | None):
    raise CompileError(msg, loc)


# -- elementwise -----------------------------------------------------------------
# Elementwise primitives are functions through their own entries (compiler/ops/); these are
# the composites.


@function("clip", Param("x", T), Param("low", T), Param("high", T), doc="min(max(x, low), high)", group="elementwise")
def _clip(b, loc, x, low, high):
    return b.add("minimum", [b.add("maximum", [x, low], loc), high], loc)


# -- linear algebra --------------------------------------------------------------


@function(
    "matmul",
    Param("a", T),
    Param("b", T),
    doc="matrix product: any rank, NumPy semantics (leading batch dims broadcast)",
    group="linear algebra",
)
def matmul(b: GraphBuilder, loc, x, y):
    sa, sb = b.shape(x), b.shape(y)
    if not sa or not sb:
        _fail(f"matmul takes operands of rank 1 or more, got {format_shape(sa)} and {format_shape(sb)}", loc)
    ka, kb = sa[-1], (sb[0] if len(sb) == 1 else sb[-2])
    if ka != kb:
        _fail(f"matmul shapes {format_shape(sa)} and {format_shape(sb)} do not fit: {ka} != {kb}", loc)
    x2 = b.add("reshape", [x], loc, shape=(1, *sa)) if len(sa) == 1 else x
    y2 = b.add("reshape", [y], loc, shape=(*sb, 1)) if len(sb) == 1 else y
    try:
        batch = broadcast(b.shape(x2)[:-2], b.shape(y2)[:-2])
    except ShapeError as e:
        _fail(f"matmul batch dims of {format_shape(sa)} and {format_shape(sb)} do not broadcast: {e}", loc)
    (*bb, k, n) = b.shape(y2)
    if len(batch) > 1 and all(d == 1 for d in bb):
        # one matrix for every batch: a's batches are rows of one product ([batch*M, K], a view)
        (*_, m, _) = b.shape(x2)
        rows = b.add("reshape", [x2], loc, shape=(dim_product(*batch, m), k))
        flat = b.add("matmul", [rows, _reshape(b, loc, y2, (k, n))], loc, ta=False, tb=False)
        out = b.add("reshape", [flat], loc, shape=(*batch, m, n))
    else:
        out = b.add("matmul", [x2, y2], loc, ta=False, tb=False)  # batch dims broadcast in the kernel
    if len(sa) == 1 or len(sb) == 1:
        shape = b.shape(out)
        keep = [
            d
            for k, d in enumerate(shape)
            if not ((len(sa) == 1 and k == len(shape) - 2) or (len(sb) == 1 and k == len(shape) - 1))
        ]
        out = b.add("reshape", [out], loc, shape=tuple(keep))
    return out


def _reshape(b: GraphBuilder, loc, x: int, shape: Shape) -> int:
    return x if tuple(b.shape(x)) == tuple(shape) else b.add("reshape", [x], loc, shape=tuple(shape))


@function(
    "transpose",
    Param("x", T),
    Param("perm", "ints", None),
    doc="x with its axes permuted (default: reversed)",
    group="linear algebra",
)
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


for _op, _doc in (("sum", "sum"), ("max", "largest element"), ("min", "smallest element")):
    function(
        _op,
        Param("x", T),
        Param("axis", "axis", None),
        Param("keepdims", "bool", False),
        doc=f"{_doc} over axis (all axes by default)",
        group="reductions",
    )(_reduction(_op))


@function(
    "mean",
    Param("x", T),
    Param("axis", "axis", None),
    Param("keepdims", "bool", False),
    doc="mean over axis (all axes by default)",
    group="reductions",
)
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
    function(
        _op,
        Param("x", T),
        Param("axis", "int", -1),
        doc=f"index of the first {_op[3:]}imum along axis, as a float",
        group="reductions",
        differentiable=False,
    )(_arg(_op))


def _keepdims_max(b, loc, x, axes):
    return b.add("stop_gradient", [b.add("max", [x], loc, axes=axes, keepdims=True)], loc)


@function(
    "logsumexp",
    Param("x", T),
    Param("axis", "axis", -1),
    Param("keepdims", "bool", False),
    doc="log(sum(exp(x))) over axis, stable",
    group="reductions",
)
def logsumexp(b, loc, x, axis, keepdims):
    axes = _axes(b, loc, x, axis)
    m = _keepdims_max(b, loc, x, axes)
    e = b.add("exp", [b.add("sub", [x, m], loc)], loc)
    s = b.add("sum", [e], loc, axes=axes, keepdims=True)
    out = b.add("add", [b.add("log", [s], loc), m], loc)
    if not keepdims:
        out = b.add("reshape", [out], loc, shape=reduced(b.shape(x), axes, False))
    return out


@function("softmax", Param("x", T), Param("axis", "int", -1), doc="exp(x) / sum(exp(x)) along axis", group="networks")
def softmax(b, loc, x, axis):
    axes = _axes(b, loc, x, axis)
    e = b.add("exp", [b.add("sub", [x, _keepdims_max(b, loc, x, axes)], loc)], loc)
    return b.add("div", [e, b.add("sum", [e], loc, axes=axes, keepdims=True)], loc)


@function(
    "log_softmax",
    Param("x", T),
    Param("axis", "int", -1),
    doc="log(softmax(x)), exact at large logits",
    group="networks",
)
def log_softmax(b, loc, x, axis):
    # (x - m) - log(sum(exp(x - m))): exact at large logits, where x - (m + log(...)) rounds
    # m + log(...) to float32 first (row [10000, 10001, 10002, 10003]: -0.44043, not -0.44019).
    axes = _axes(b, loc, x, axis)
    shifted = b.add("sub", [x, _keepdims_max(b, loc, x, axes)], loc)
    s = b.add("sum", [b.add("exp", [shifted], loc)], loc, axes=axes, keepdims=True)
    return b.add("sub", [shifted, b.add("log", [s], loc)], loc)


# -- shape -----------------------------------------------------------------------


@function("reshape", Param("x", T), Param("shape", "dims"), doc="x with new dims (at most one -1)", group="shape")
def reshape(b, loc, x, shape):
    old = b.shape(x)
    new = [dim_product(d) if isinstance(d, str) else d for d in shape]  # products in canonical form
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
        if known_old % known_new:
            _fail(f"cannot reshape {format_shape(old)} to {format_shape(tuple(new))}: the -1 cannot be resolved", loc)
        # the -1 stands for what is left over: an int, a symbol, or a product (`4*B`)
        new[new.index(-1)] = dim_product(known_old // known_new, *left)
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


@function(
    "concat", Param("tensors", "tensors"), Param("axis", "int", 0), doc="tensors joined along axis", group="shape"
)
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
    # A tree of concats of at most CONCAT_FANIN tensors each: fusion may then store inner ones
    # in kernels of their own, so no kernel reads more tensors than the device binds.
    xs = list(xs)
    while len(xs) > CONCAT_FANIN:
        xs = [
            b.add("concat", xs[i : i + CONCAT_FANIN], loc, axis=ax) if len(xs[i : i + CONCAT_FANIN]) > 1 else xs[i]
            for i in range(0, len(xs), CONCAT_FANIN)
        ]
    return b.add("concat", xs, loc, axis=ax)


CONCAT_FANIN = 4


@function(
    "slice",
    Param("x", T),
    Param("begin", "ints"),
    Param("size", "dims"),
    doc="x[begin : begin + size] per axis (size -1: to the end; a symbolic axis whole)",
    group="shape",
)
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


@function(
    "pad",
    Param("x", T),
    Param("before", "ints"),
    Param("after", "ints"),
    doc="zeros before and after each axis",
    group="shape",
)
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


@function(
    "broadcast_to", Param("x", T), Param("shape", "dims"), doc="x broadcast to shape (NumPy's rule)", group="shape"
)
def broadcast_to(b, loc, x, shape):
    # NumPy's broadcast_to: x's dims line up with the trailing dims of shape.
    old, new = b.shape(x), tuple(shape)
    if len(new) < len(old) or any(o not in (1, n) for o, n in zip(old[::-1], new[::-1])):
        _fail(f"cannot broadcast {format_shape(old)} to {format_shape(new)}", loc)
    if any(isinstance(d, int) and d <= 0 for d in new):
        _fail(f"broadcast_to dims must be positive, got {list(new)}", loc)
    return b.add("broadcast_to", [x], loc, shape=new)


@function(
    "one_hot",
    Param("indices", T),
    Param("depth", "int"),
    doc="1 at each index along a new last axis of depth, else 0",
    group="shape",
    differentiable=False,
)
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
    doc="2-D convolution, NHWC, filter [kh, kw, C_in/groups, C_out] (depthwise when groups = C_in)",
    group="networks",
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
    doc="maximum over each window (NHWC)",
    group="networks",
)(_pool("max_pool"))
function(
    "avg_pool",
    Param("x", T),
    Param("size", "ints"),
    Param("stride", "ints", None),
    Param("padding", "padding", "valid"),
    Param("count_include_pad", "bool", False),
    doc="average over each window (NHWC)",
    group="networks",
)(_pool("avg_pool"))


def _global_pool(op):
    def impl(b, loc, x):
        shape = b.shape(x)
        if len(shape) != 4:
            _fail(f"global_{op}_pool takes x [B, H, W, C], got {format_shape(shape)}", loc)
        return (mean if op == "avg" else _reduction("max"))(b, loc, x, (1, 2), False)

    return impl


function("global_avg_pool", Param("x", T), doc="[B, H, W, C] to [B, C] by the mean", group="networks")(
    _global_pool("avg")
)
function("global_max_pool", Param("x", T), doc="[B, H, W, C] to [B, C] by the maximum", group="networks")(
    _global_pool("max")
)


# -- costs -----------------------------------------------------------------------


@function("mean_squared", Param("pred", T), Param("target", T), doc="mean((pred - target)^2)", group="costs")
def mean_squared(b, loc, pred, target):
    diff = b.add("sub", [pred, target], loc)
    return mean(b, loc, b.add("square", [diff], loc), None, False)


@function(
    "softmax_cross_entropy",
    Param("logits", T),
    Param("labels", T),
    doc="mean over rows of -sum(labels * log_softmax(logits)); labels one-hot floats or i32 class ids",
    group="costs",
)
def softmax_cross_entropy(b, loc, logits, labels):
    if b.dtype(labels) == "i32":
        return _class_id_cross_entropy(b, loc, logits, labels)
    if b.shape(logits) != b.shape(labels):
        _fail(
            f"softmax_cross_entropy logits {format_shape(b.shape(logits))} and labels "
            f"{format_shape(b.shape(labels))} must have the same shape (or labels are i32 class ids "
            "of the logits' shape without the last axis)",
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


def _class_id_cross_entropy(b, loc, logits, labels):
    """mean(logsumexp(logits) - the logit at each class id), over every axis but the last:
    F.cross_entropy with class ids (the one-hot tensor is never built)."""
    rank = len(b.shape(logits))
    if rank == 0 or tuple(b.shape(logits)[:-1]) != tuple(b.shape(labels)):
        _fail(
            f"softmax_cross_entropy with i32 class ids {format_shape(b.shape(labels))} needs logits of "
            f"that shape plus a class axis, got {format_shape(b.shape(logits))}",
            loc,
        )
    per = b.add("sub", [logsumexp(b, loc, logits, rank - 1, False), b.add("pick", [logits, labels], loc)], loc)
    return mean(b, loc, per, None, False)


@function(
    "sigmoid_cross_entropy",
    Param("logits", T),
    Param("labels", T),
    doc="mean of the logistic loss of logits against labels in [0, 1], stable",
    group="costs",
)
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
