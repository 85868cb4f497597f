"""NumPy basic indexing of device arrays, on the device: `a[0]`, `a[1:3]`, `a[:, 2]`,
`a[..., -1]`, `a[::2]`, `a[None]`.

An index becomes the language's layout ops, run as eager kernels: one `slice` for the
box the index covers, a `reshape` (with a zero pad by `concat` when needed) and a `slice`
per axis with a step, and a `reshape` that drops the integer-indexed axes and adds the
`None` ones. Nothing is read back. Negative steps and advanced indexing (arrays, lists,
booleans) are refused with a TypeError/IndexError that says so.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class _Axis:
    """What an index keeps of one axis: `count` elements from `start`, `step` apart;
    `drop` for an integer index (the axis goes away)."""

    start: int
    count: int
    step: int
    drop: bool


def parse_index(key: Any, shape: tuple[int, ...]) -> tuple[list[_Axis], list[int]]:
    """Per axis of `shape`, what `key` keeps; and the result's shape, with new axes."""
    items = list(key) if isinstance(key, tuple) else [key]
    ellipses = sum(1 for k in items if k is Ellipsis)
    if ellipses > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(1 for k in items if k is not None and k is not Ellipsis)
    if used > len(shape):
        raise IndexError(f"too many indices for an array of shape {list(shape)}: {len(shape)} axes, {used} indexed")
    if ellipses:
        at = next(k for k, item in enumerate(items) if item is Ellipsis)
        items[at : at + 1] = [slice(None)] * (len(shape) - used)
    else:
        items += [slice(None)] * (len(shape) - used)
    axes: list[_Axis] = []
    out: list[int] = []
    dim = 0
    for item in items:
        if item is None:
            out.append(1)
            continue
        d = shape[dim]
        if isinstance(item, slice):
            start, stop, step = item.indices(d)
            if step < 0:
                raise IndexError(
                    "negative steps are not supported on the device: read the array with .numpy() and index that"
                )
            count = len(range(start, stop, step))
            axes.append(_Axis(start, count, step, False))
            out.append(count)
        else:
            i = _integer(item)
            if not -d <= i < d:
                raise IndexError(f"index {i} is out of bounds for axis {dim} with size {d}")
            axes.append(_Axis(i % d, 1, 1, True))
        dim += 1
    return axes, out


def _integer(item: Any) -> int:
    if isinstance(item, (bool, np.bool_)):
        raise TypeError(
            "boolean indices are advanced indexing, which device arrays do not "
            "support: use ints, slices, '...' and None"
        )
    try:
        return operator.index(item)
    except TypeError:
        raise TypeError(
            f"device arrays take NumPy's basic indexing only (ints, slices, '...', None), not {type(item).__name__}"
        ) from None


def getitem(a: Any, key: Any, call: Any, zeros: Any) -> Any:
    """`a[key]` as a new device array (see the module's docstring), made with `call` (an
    eager call of a language function: `dlc.arrays.call`) and `zeros` (dlc.zeros)."""
    axes, out_shape = parse_index(key, a.shape)
    if any(ax.count == 0 for ax in axes):
        return zeros(out_shape, backend=a.backend)
    made: list[Any] = []  # intermediates, freed once the result exists

    def step(result: Any) -> Any:
        made.append(result)
        return result

    try:
        y = a
        box = [(ax.count - 1) * ax.step + 1 for ax in axes]
        if any(ax.start != 0 or n != d for ax, n, d in zip(axes, box, a.shape)):
            y = step(call("slice", (y, [ax.start for ax in axes], box), {}))
        for k, ax in enumerate(axes):
            if ax.step > 1 and ax.count > 1:
                y = step(_every(y, k, ax.count, ax.step, call, zeros))
        result = call("reshape", (y, out_shape), {})
    finally:
        for t in made:
            t.dispose()
    return result


def _every(y: Any, axis: int, count: int, step: int, call: Any, zeros: Any) -> Any:
    """Elements 0, step, 2*step, ... (`count` of them) of `y` along `axis`: pad the axis with
    zeros to count*step, split it into (count, step) and keep column 0."""
    shape = list(y.shape)
    pad = count * step - shape[axis]
    parts = []
    if pad:
        filler = zeros([*shape[:axis], pad, *shape[axis + 1 :]], backend=y.backend)
        parts.append(filler)
        y = call("concat", ([y, filler], axis), {})
        parts.append(y)
    split = call("reshape", (y, [*shape[:axis], count, step, *shape[axis + 1 :]]), {})
    parts.append(split)
    begin = [0] * (len(shape) + 1)
    size = [*shape[:axis], count, 1, *shape[axis + 1 :]]
    column = call("slice", (split, begin, size), {})
    parts.append(column)
    try:
        return call("reshape", (column, [*shape[:axis], count, *shape[axis + 1 :]]), {})
    finally:
        for t in parts:
            t.dispose()
