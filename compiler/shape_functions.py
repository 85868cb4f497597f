"""The language's functions for attention-shaped models, as expansions into primitives:
filled tensors (ones, zeros, full, arange), triangular masks (tril, triu), split and stack.

Every dim may be symbolic (a product such as `B*T` too): the filled tensors are a broadcast
scalar and `iota` (the position along an axis), so nothing is materialized at compile time.
`split` returns several tensors; the language binds them with `a, b, c = split(...)`.
"""

from __future__ import annotations

from .builder import GraphBuilder
from .functions import T, _fail, function
from .opdefs import Param
from .shapes import ShapeError, format_shape, norm_axis


def _dims(shape, what: str, loc) -> tuple:
    shape = tuple(shape)
    if any(isinstance(d, int) and d <= 0 for d in shape):
        _fail(f"{what} dims must be positive, got {list(shape)}", loc)
    return shape


def _filled(b: GraphBuilder, loc, shape, value: float) -> int:
    return b.add("broadcast_to", [b.const(float(value), (), loc)], loc, shape=shape)


@function("ones", Param("shape", "dims"), doc="a tensor of ones (dims may be symbolic)", group="shape")
def _ones(b, loc, shape):
    return _filled(b, loc, _dims(shape, "ones", loc), 1.0)


@function("zeros", Param("shape", "dims"), doc="a tensor of zeros (dims may be symbolic)", group="shape")
def _zeros(b, loc, shape):
    return _filled(b, loc, _dims(shape, "zeros", loc), 0.0)


@function(
    "full",
    Param("shape", "dims"),
    Param("value", "float"),
    doc="a tensor filled with value (dims may be symbolic)",
    group="shape",
)
def _full(b, loc, shape, value):
    return _filled(b, loc, _dims(shape, "full", loc), value)


@function(
    "arange",
    Param("n", "dim"),
    doc="[0, 1, ..., n - 1] as floats (n may be symbolic)",
    group="shape",
    differentiable=False,
)
def _arange(b, loc, n):
    return b.add("iota", [], loc, shape=_dims((n,), "arange", loc), axis=0)


def _triangle(lower: bool):
    def impl(b, loc, x, k):
        shape = b.shape(x)
        name = "tril" if lower else "triu"
        if len(shape) < 2:
            _fail(f"{name} takes a tensor of rank 2 or more, got {format_shape(shape)}", loc)
        square = tuple(shape[-2:])
        rows = b.add("iota", [], loc, shape=square, axis=0)
        cols = b.add("iota", [], loc, shape=square, axis=1)
        diagonal = b.add("add", [rows, b.const(float(k), (), loc)], loc)  # row + k
        keep = b.add("ge", [diagonal, cols] if lower else [cols, diagonal], loc)
        return b.add("where", [keep, x, b.const(0.0, (), loc)], loc)

    return impl


function(
    "tril",
    Param("x", T),
    Param("k", "int", 0),
    doc="x on and below diagonal k of its last two axes, else 0",
    group="shape",
)(_triangle(True))
function(
    "triu",
    Param("x", T),
    Param("k", "int", 0),
    doc="x on and above diagonal k of its last two axes, else 0",
    group="shape",
)(_triangle(False))


def _axis(axis: int, rank: int, loc) -> int:
    try:
        return norm_axis(int(axis), rank)
    except ShapeError as e:
        _fail(str(e), loc)


@function(
    "split",
    Param("x", T),
    Param("sizes", "dims"),
    Param("axis", "int", 0),
    doc="x cut along axis into parts of these sizes: `a, b = split(x, [2, 3], axis=-1)`",
    group="shape",
)
def _split(b, loc, x, sizes, axis):
    shape = b.shape(x)
    ax = _axis(axis, len(shape), loc)
    sizes = list(sizes)
    if not sizes:
        _fail("split needs at least one size", loc)
    whole = shape[ax]
    if isinstance(whole, str):
        if sizes != [whole]:
            _fail(f"split along symbolic dim {whole} (axis {ax}) takes it whole: sizes [{whole}]", loc)
    elif any(not isinstance(s, int) or s <= 0 for s in sizes) or sum(sizes) != whole:
        _fail(f"split sizes {sizes} must be positive ints adding up to axis {ax} of {format_shape(shape)}", loc)
    parts, offset = [], 0
    for s in sizes:
        begin = tuple(offset if k == ax else 0 for k in range(len(shape)))
        size = tuple(s if k == ax else d for k, d in enumerate(shape))
        parts.append(b.add("slice", [x], loc, begin=begin, size=size))
        offset += s if isinstance(s, int) else 0
    return tuple(parts)


@function(
    "stack",
    Param("tensors", "tensors"),
    Param("axis", "int", 0),
    doc="tensors of one shape joined along a new axis",
    group="shape",
)
def _stack(b, loc, xs, axis):
    if not xs:
        _fail("stack needs at least one tensor", loc)
    shapes = [tuple(b.shape(x)) for x in xs]
    if any(s != shapes[0] for s in shapes):
        _fail(f"stack takes tensors of one shape, got {' and '.join(map(format_shape, shapes))}", loc)
    ax = _axis(axis, len(shapes[0]) + 1, loc)
    new = (*shapes[0][:ax], 1, *shapes[0][ax:])
    parts = [b.add("reshape", [x], loc, shape=new) for x in xs]
    return parts[0] if len(parts) == 1 else b.add("concat", parts, loc, axis=ax)
