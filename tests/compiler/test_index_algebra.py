"""The target-neutral index algebra (compiler/codegen/index.py) against NumPy's own indexing.

Each emitted int expression is evaluated in Python (GLSL's `/` on non-negative ints is floor
division, `&&` is `and`, `clamp` is min/max) for every element of small tensors, symbolic dims
bound through `dim`, and compared with what NumPy's unravel/ravel, broadcasting, transpose,
slicing, padding and concatenation say that element is.
"""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

from dlc.compiler.codegen import index

SIZES = {"B": 3, "T": 5}  # symbolic dims and the values they are bound to here


def dim(d: int | str) -> str:
    return str(d) if isinstance(d, int) else f"dim_{d}"


def evaluate(expr: str, **env: int) -> int:
    """An int expression of the algebra, evaluated with GLSL's meaning (non-negative operands)."""
    py = expr.replace("&&", " and ").replace("/", "//")
    py = re.sub(r"\bclamp\(", "_clamp(", py)
    names = {f"dim_{k}": v for k, v in SIZES.items()}
    return int(eval(py, {"_clamp": lambda x, lo, hi: min(max(x, lo), hi)}, {**names, **env}))  # noqa: S307


def concrete(shape) -> tuple[int, ...]:
    return tuple(SIZES[d] if isinstance(d, str) else d for d in shape)


SHAPES = [(), (1,), (7,), (3, 4), ("B", 4), (1, 5, 1), (2, 1, 3), ("B", "T", 2), (2, 3, 1, 4), (1, 1, 6)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_coordinates_from_the_flat_index_are_numpys_unravel(shape):
    real = concrete(shape)
    exprs = index.coord_exprs("f", shape, dim)
    assert len(exprs) == len(shape)
    for f in range(int(np.prod(real))):
        got = tuple(evaluate(e, f=f) for e in exprs)
        assert got == tuple(int(c) for c in np.unravel_index(f, real)), (shape, f, exprs)


POW2_SHAPES = [(4, 8), (2, 1, 16), ("B", 4, 2), (3, 4, 6), (8, "T", 4), (1024, 2)]


@pytest.mark.parametrize("shape", SHAPES + POW2_SHAPES, ids=str)
def test_coordinates_with_shifts_are_numpys_unravel(shape):
    """WebGL2's form (GLSLESTexture.shifts): literal powers of two as shifts and masks."""
    real = concrete(shape)
    exprs = index.coord_exprs("f", shape, dim, shifts=True)
    for f in range(int(np.prod(real))):
        got = tuple(evaluate(e, f=f) for e in exprs)
        assert got == tuple(int(c) for c in np.unravel_index(f, real)), (shape, f, exprs)
    if all(isinstance(d, int) and d & (d - 1) == 0 for d in shape):  # no division is left
        assert not any("/" in e or "%" in e for e in exprs), exprs


def test_shifts_leave_other_divisors_alone():
    assert index.div("f", "1024", shifts=True) == "(f >> 10)"
    assert index.mod("f", "1024", shifts=True) == "(f & 1023)"
    assert index.div("f", "1024") == "f / 1024"
    for d in ("6", "1", "dim_B", "(dim_B * 4)"):
        assert index.div("f", d, shifts=True) == f"f / {d}" and index.mod("f", d, shifts=True) == f"f % {d}"


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_flat_index_from_coordinates_is_numpys_ravel(shape):
    real = concrete(shape)
    names = [f"c{k}" for k in range(len(shape))]
    expr = index.flat_of(names, shape, dim)
    for coords in itertools.product(*(range(n) for n in real)):
        want = int(np.ravel_multi_index(coords, real)) if real else 0
        assert evaluate(expr, **dict(zip(names, coords))) == want


@pytest.mark.parametrize(
    "out, shape",
    [((3, 4), (4,)), ((3, 4), (3, 1)), (("B", 2, 3), (2, 1)), (("B", 2, 3), ("B", 1, 3)), ((2, 3, 4), (1, 1, 1))],
    ids=str,
)
def test_broadcast_reads_the_element_numpy_broadcasting_reads(out, shape):
    real_out, real_in = concrete(out), concrete(shape)
    src = np.arange(int(np.prod(real_in))).reshape(real_in)
    seen = np.broadcast_to(src, real_out)
    names = [f"c{k}" for k in range(len(out))]
    at = index.broadcast_coords(names, out, shape)
    flat = index.flat_of(at, shape, dim)
    for coords in itertools.product(*(range(n) for n in real_out)):
        assert evaluate(flat, **dict(zip(names, coords))) == seen[coords]


@pytest.mark.parametrize("shape, perm", [((2, 3), (1, 0)), ((2, 3, 4), (2, 0, 1)), (("B", 1, 4), (1, 2, 0))], ids=str)
def test_transpose_map_is_numpys_transpose(shape, perm):
    real = concrete(shape)
    src = np.arange(int(np.prod(real))).reshape(real)
    out = np.transpose(src, perm)
    out_shape = tuple(shape[p] for p in perm)
    names = [f"c{k}" for k in range(len(shape))]
    flat = index.flat_of(index.transpose_coords(names, perm), shape, dim)
    for coords in itertools.product(*(range(n) for n in out.shape)):
        assert evaluate(flat, **dict(zip(names, coords))) == out[coords], out_shape


def test_slice_map_is_numpys_slicing():
    shape, begin, size = (4, "B", 6), (1, 0, 2), (2, 3, 3)
    src = np.arange(int(np.prod(concrete(shape)))).reshape(concrete(shape))
    out = src[1:3, 0:3, 2:5]
    names = ["c0", "c1", "c2"]
    flat = index.flat_of(index.slice_coords(names, begin), shape, dim)
    for coords in itertools.product(*(range(n) for n in size)):
        assert evaluate(flat, **dict(zip(names, coords))) == out[coords]


def test_pad_map_is_numpys_zero_padding():
    shape, before, after = (2, "B", 3), (0, 1, 2), (0, 2, 1)
    real = concrete(shape)
    src = np.arange(1, int(np.prod(real)) + 1).reshape(real)  # no zeros: a zero means padding
    out = np.pad(src, list(zip(before, after)))
    names = ["c0", "c1", "c2"]
    at, inside = index.pad_coords(names, before, after, shape, dim)
    flat = index.flat_of(at, shape, dim)
    for coords in itertools.product(*(range(n) for n in out.shape)):
        env = dict(zip(names, coords))
        read = evaluate(flat, **env)
        assert 0 <= read < src.size  # a padded position still reads inside the tensor
        is_inside = all(evaluate(c, **env) for c in inside)
        assert (src.flat[read] if is_inside else 0) == out[coords]


def test_concat_map_is_numpys_concatenate():
    shapes, axis = [(2, 1, 3), (2, 4, 3), (2, 2, 3)], 1
    parts = [np.arange(int(np.prod(s))).reshape(s) + 100 * k for k, s in enumerate(shapes)]
    out = np.concatenate(parts, axis=axis)
    names = ["c0", "c1", "c2"]
    where = index.concat_parts(names, axis, [s[axis] for s in shapes])
    branches = index.concat_branches("c1", [end for end, _ in where])
    assert branches[0].startswith("if (") and branches[-1] == "else"
    conditions = [re.fullmatch(r"(?:else )?if \((.*)\)", b).group(1) for b in branches[:-1]]
    for coords in itertools.product(*(range(n) for n in out.shape)):
        env = dict(zip(names, coords))
        # the first branch whose condition holds (GLSL's if / else if / else)
        k = next((i for i, cond in enumerate(conditions) if evaluate(cond, **env)), len(conditions))
        read = evaluate(index.flat_of(where[k][1], shapes[k], dim), **env)
        assert parts[k].flat[read] == out[coords]


def test_products_and_sums_fold_literals():
    assert index.mul("1", "dim0", "1") == "dim0"
    assert index.mul("2", "3", "x") == "(6 * x)"
    assert index.mul("0", "x") == "0"
    assert index.add("0", "x") == "x" and index.add("x", "-3") == "(x - 3)"
    assert index.numel_known(("B", 2)) is None and index.numel_known((2, 3)) == 6


RESHAPES = [
    (("B", "T", 6, 4), ("B", "T", 24)),  # a split of heads: no division at all
    (("B", "T", 24), ("B", "T", 6, 4)),  # a merge: divisions by the group's literals only
    ((2, 3, 4), (4, 6)),  # one group over every axis
    ((4, 6), (2, 3, 4)),
    ((6, 4), (4, 6)),
    ((1, "B", 1, 12), ("B", 3, 4)),  # size-1 axes on either side
    (("B", 12), ("B", 3, 1, 4)),
    ((2, 6, "T"), (3, 4, "T")),
]


@pytest.mark.parametrize("out,shape", RESHAPES)
def test_reshape_map_is_numpys_reshape(out, shape):
    names = [f"c{k}" for k in range(len(out))]
    src = index.reshape_coords(names, out, shape, dim)
    assert src is not None
    flat = index.flat_of(src, shape, dim)  # Horner multiplies the mapped coordinates: they must be atoms
    x = np.arange(int(np.prod(concrete(shape)))).reshape(concrete(shape))
    y = x.reshape(concrete(out))
    for at in itertools.product(*(range(n) for n in concrete(out))):
        env = dict(zip(names, at))
        assert x[tuple(evaluate(c, **env) for c in src)] == y[at]
        assert evaluate(flat, **env) == y[at]


@pytest.mark.parametrize("out,shape", [(("B", 12), (12, "B")), (("T", "B"), ("B", "T")), ((2, "T"), ("T", 2))])
def test_reshape_map_declines_where_symbolic_axes_do_not_line_up(out, shape):
    assert index.reshape_coords([f"c{k}" for k in range(len(out))], out, shape, dim) is None


def test_atoms_are_safe_operands():
    assert index.atom("a") == "a" and index.atom("12") == "12" and index.atom("(a + b)") == "(a + b)"
    assert index.atom("a / 4") == "(a / 4)" and index.atom("(a) + (b)") == "((a) + (b)" + ")"
    assert evaluate(f"6 * {index.atom('a / 4')}", a=9) == 12
