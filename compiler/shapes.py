"""Shape arithmetic shared by the shape rules: broadcasting, axes, symbolic dims."""

from __future__ import annotations

import math

from dlc.runtime import dims as dim_algebra

from .ir import Dim, Shape, format_shape


class ShapeError(Exception):
    """Raised by a shape rule; the builder adds the source position."""


def broadcast(*shapes: Shape) -> Shape:
    """NumPy broadcasting; a symbolic dim only meets itself or 1."""
    rank = max(len(s) for s in shapes)
    out: list[Dim] = []
    for k in range(rank):
        dims = {s[len(s) - rank + k] for s in shapes if len(s) - rank + k >= 0}
        dims.discard(1)
        if len(dims) > 1:
            shown = " and ".join(format_shape(s) for s in shapes)
            raise ShapeError(f"shapes {shown} do not broadcast: {' != '.join(map(str, sorted(dims, key=str)))}")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def norm_axis(axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise ShapeError(f"axis {axis} is out of range for rank {rank}")
    return axis % rank


def norm_axes(axis: int | tuple[int, ...] | None, rank: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(rank))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    out = tuple(sorted(norm_axis(a, rank) for a in axes))
    if len(set(out)) != len(out):
        raise ShapeError(f"axis {axis} repeats an axis")
    return out


def reduced(shape: Shape, axes: tuple[int, ...], keepdims: bool) -> Shape:
    if keepdims:
        return tuple(1 if k in axes else d for k, d in enumerate(shape))
    return tuple(d for k, d in enumerate(shape) if k not in axes)


def split_size(shape: Shape) -> tuple[int, tuple[str, ...]]:
    """The concrete product and the sorted symbolic factors of a shape's size (a product dim
    such as `B*T` gives its factors)."""
    parts = [dim_algebra.factors(d) for d in shape]
    return math.prod(k for k, _ in parts), tuple(sorted(s for _, syms in parts for s in syms))


def bind(shape: Shape, dims: dict[str, int]) -> tuple[int, ...]:
    return dim_algebra.bind(shape, dims)


def size(shape: Shape, dims: dict[str, int] | None = None) -> int:
    return math.prod(bind(shape, dims or {}))


def symbols(shape: Shape) -> set[str]:
    """The symbols the dims of `shape` are made of."""
    return dim_algebra.shape_symbols([shape])
