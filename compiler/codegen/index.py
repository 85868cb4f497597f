"""Target-neutral index algebra: int expressions for positions in row-major tensors.

Every GLSL target (compute shaders over buffers, fragment shaders over textures) addresses a
tensor the same way: by its flat row-major index or by its coordinates. This module builds
those int expressions as text; it knows nothing of buffers, textures or how a kernel finds its
own element (the renderer does). Sizes come in through `dim`, which maps a dim (an int or a
symbolic name) to its expression, so the caller decides how symbolic dims are read.

Layout ops are index maps: each takes the coordinates of an output element and gives the
coordinates (or flat index) of the input element it reads.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..ir import Shape

DimFn = Callable[[int | str], str]  # a dim -> its int expression (`dim0` for a symbolic one)


def mul(*factors: str) -> str:
    """A product of int expressions, dropping ones and folding literal ints."""
    known = 1
    rest = []
    for f in factors:
        if f.lstrip("-").isdigit():
            known *= int(f)
        else:
            rest.append(f)
    if known == 0:
        return "0"
    parts = ([str(known)] if known != 1 or not rest else []) + rest
    return parts[0] if len(parts) == 1 else "(" + " * ".join(parts) + ")"


def add(a: str, b: str) -> str:
    """a + b, dropping zeros and writing a negative literal as a subtraction."""
    if a == "0":
        return b
    if b == "0":
        return a
    if b.lstrip("-").isdigit() and int(b) < 0:
        return f"({a} - {-int(b)})"
    return f"({a} + {b})"


def atom(expr: str) -> str:
    """`expr` safe as an operand of * / %: in parentheses unless a name, a literal or already
    wrapped whole (Horner's rule multiplies coordinates; `a / 64 * 6` is not `6 * (a / 64)`)."""
    if expr.isidentifier() or expr.isdigit():
        return expr
    if expr.startswith("(") and expr.endswith(")"):
        depth = 0
        for k, ch in enumerate(expr):
            depth += {"(": 1, ")": -1}.get(ch, 0)
            if depth == 0 and k < len(expr) - 1:
                break
        else:
            return expr
    return f"({expr})"


def numel_known(shape: Shape) -> int | None:
    """The element count of `shape`, or None when a dim is symbolic."""
    return None if any(isinstance(d, str) for d in shape) else math.prod(shape)


@dataclass(frozen=True)
class Ix:
    """An index into a tensor: its flat (row-major) position and/or its coordinates."""

    flat: str | None = None
    multi: tuple[str, ...] | None = None

    def key(self) -> tuple:
        return ("f", self.flat) if self.flat is not None else ("m", self.multi)


def numel(shape: Sequence[int | str], dim: DimFn) -> str:
    return mul(*(dim(d) for d in shape))


def pow2(expr: str) -> int | None:
    """log2 of `expr` when it is a literal power of two above 1."""
    if not expr.isdigit():
        return None
    n = int(expr)
    return n.bit_length() - 1 if n > 1 and n & (n - 1) == 0 else None


def div(a: str, b: str, shifts: bool = False) -> str:
    """a / b of a non-negative a; `shifts`: by a literal power of two as a shift."""
    k = pow2(b) if shifts else None
    return f"{a} / {b}" if k is None else f"({a} >> {k})"


def mod(a: str, b: str, shifts: bool = False) -> str:
    """a % b of a non-negative a; `shifts`: by a literal power of two as a mask."""
    k = pow2(b) if shifts else None
    return f"{a} % {b}" if k is None else f"({a} & {int(b) - 1})"


def coord_exprs(flat: str, shape: Shape, dim: DimFn, shifts: bool = False) -> list[str]:
    """The coordinate along each axis of element `flat` of a tensor of `shape`: "0" on axes of
    size 1, otherwise `flat / stride % size` (no modulo on the outermost axis that varies).
    `shifts`: divisions and modulos by literal powers of two as shifts and masks (flat >= 0)."""
    out: list[str] = []
    for k, d in enumerate(shape):
        if d == 1:
            out.append("0")
            continue
        stride = numel(shape[k + 1 :], dim)
        q = flat if stride == "1" else div(flat, stride, shifts)
        if k == 0 or all(e == 1 for e in shape[:k]):
            out.append(q)
        elif stride != "1" and not (shifts and pow2(stride)):  # (a shift comes in parentheses)
            out.append(mod(f"({q})", dim(d), shifts))
        else:
            out.append(mod(q, dim(d), shifts))
    return out


def flat_of(coords: Sequence[str], shape: Shape, dim: DimFn) -> str:
    """The flat row-major position of `coords` in a tensor of `shape` (Horner's rule)."""
    acc = "0"
    for c, d in zip(coords, shape):
        if d == 1:
            continue
        acc = add(mul(acc, dim(d)) if acc != "0" else "0", c)
    return acc


def broadcast_coords(coords: Sequence[str], out: Shape, shape: Shape) -> tuple[str, ...]:
    """The coordinates in an operand of `shape` broadcast (NumPy rules) to `out`: leading axes
    dropped, size-1 axes read at 0."""
    skip = len(out) - len(shape)
    return tuple("0" if d == 1 else coords[skip + k] for k, d in enumerate(shape))


# -- layout maps: output coordinates -> input coordinates ------------------------------------


def transpose_coords(coords: Sequence[str], perm: Sequence[int]) -> tuple[str, ...]:
    """transpose(x, perm): output axis k is input axis perm[k]."""
    src = [""] * len(coords)
    for k, p in enumerate(perm):
        src[p] = coords[k]
    return tuple(src)


def reshape_coords(
    coords: Sequence[str], out: Shape, shape: Shape, dim: DimFn, shifts: bool = False
) -> tuple[str, ...] | None:
    """reshape of a tensor of `shape` to `out`: the input coordinates of output `coords`, found
    group by group of axes whose sizes multiply to the same (a split [B, T, 384] -> [B, T, 6,
    64] reads `h * 64 + d`, a merge divides by the group's own literal sizes only), or None
    where the axes do not group so (a symbolic dim that is not the same name on both sides):
    then the caller goes through the flat index. Without it every element of a fused
    reshape-transpose chain re-derived its coordinates from a flat index, dividing by symbolic
    sizes."""
    o = [(k, d) for k, d in enumerate(out) if d != 1]
    i = [(k, d) for k, d in enumerate(shape) if d != 1]
    src = ["0"] * len(shape)
    a = b = 0
    while a < len(o) and b < len(i):
        (ka, da), (kb, db) = o[a], i[b]
        if isinstance(da, str) or isinstance(db, str):
            if da != db:
                return None
            src[kb] = coords[ka]
            a, b = a + 1, b + 1
            continue
        group_o, group_i, po, pi = [o[a]], [i[b]], da, db
        a, b = a + 1, b + 1
        while po != pi:
            side, at = (o, a) if po < pi else (i, b)
            if at == len(side) or isinstance(side[at][1], str):
                return None
            if po < pi:
                group_o.append(o[a])
                po, a = po * o[a][1], a + 1
            else:
                group_i.append(i[b])
                pi, b = pi * i[b][1], b + 1
        flat = atom(flat_of([coords[k] for k, _ in group_o], [d for _, d in group_o], dim))
        if len(group_i) == 1:
            src[group_i[0][0]] = flat
        else:
            for (k, _), c in zip(group_i, coord_exprs(flat, [d for _, d in group_i], dim, shifts)):
                src[k] = atom(c)
    if a != len(o) or b != len(i):
        return None
    return tuple(src)


def slice_coords(coords: Sequence[str], begin: Sequence[int]) -> tuple[str, ...]:
    return tuple(add(c, str(b)) for c, b in zip(coords, begin))


def pad_coords(
    coords: Sequence[str], before: Sequence[int], after: Sequence[int], shape: Shape, dim: DimFn
) -> tuple[tuple[str, ...], list[str]]:
    """pad(x, before, after): the input coordinates (clamped, so a padded position still reads
    inside the tensor) and the conditions that together say the position is not padding."""
    src, inside = [], []
    for c, lo, hi, d in zip(coords, before, after, shape):
        if lo == 0 and hi == 0:
            src.append(c)
            continue
        src.append(f"clamp({add(c, str(-lo))}, 0, {dim(d)} - 1)")
        inside.append(f"{c} >= {lo} && {c} < {add(str(lo), dim(d))}")
    return tuple(src), inside


def concat_parts(coords: Sequence[str], axis: int, sizes: Sequence[int]) -> list[tuple[int, tuple[str, ...]]]:
    """concat along `axis` of inputs with these sizes there: per input, the end of its range on
    the axis and the (clamped) coordinates it is read at."""
    parts, offset = [], 0
    for size in sizes:
        local = f"clamp({add(coords[axis], str(-offset))}, 0, {size - 1})"
        parts.append((offset + size, (*coords[:axis], local, *coords[axis + 1 :])))
        offset += size
    return parts


def concat_branches(coord: str, ends: Sequence[int]) -> list[str]:
    """The headers of the chain of branches that picks a concat's part by `coord` (each
    part's end on the axis): `if (c < e0)`, `else if (c < e1)`, ..., `else`; each part's
    input is read only in its own branch."""
    return [f"{'else ' if k else ''}if ({coord} < {end})" for k, end in enumerate(ends[:-1])] + ["else"]
