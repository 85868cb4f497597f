"""Symbolic dims and their products: the small dim algebra compiler and runtime share.

A dim is an int, a symbol (`B`), or a product of symbols and an int written in one canonical
text form: the int first (left out when 1), then the symbols sorted, joined by `*` (`B*T`,
`4*B`, `2*B*T`). Two products are equal exactly when their texts are, so shapes compare
structurally; only the symbols are bound at run time (one uniform each), and a product's value
is computed from them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

Dim = int | str


def factors(d: Dim) -> tuple[int, tuple[str, ...]]:
    """(the int factor, the sorted symbols) of a dim: `2*B*T` -> (2, ("B", "T"))."""
    if isinstance(d, int):
        return d, ()
    known, syms = 1, []
    for part in d.split("*"):
        if part.isdigit():
            known *= int(part)
        else:
            syms.append(part)
    return known, tuple(sorted(syms))


def product(*ds: Dim) -> Dim:
    """The canonical dim of a product of dims (an int when no symbol is left)."""
    known, syms = 1, []
    for d in ds:
        k, s = factors(d)
        known *= k
        syms.extend(s)
    if not syms or known == 0:
        return known
    head = [str(known)] if known != 1 else []
    return "*".join([*head, *sorted(syms)])


def symbols(d: Dim) -> tuple[str, ...]:
    """The symbols a dim is made of (with repeats), sorted."""
    return factors(d)[1]


def shape_symbols(shapes: Iterable[Iterable[Dim]]) -> set[str]:
    """Every symbol the dims of these shapes are made of."""
    return {s for shape in shapes for d in shape for s in symbols(d)}


def value(d: Dim, dims: Mapping[str, int]) -> int:
    """A dim's value with its symbols bound by `dims`."""
    if isinstance(d, int):
        return d
    known, syms = factors(d)
    return known * math.prod(int(dims[s]) for s in syms)


def eval_size(size: Sequence, dims: Mapping[str, int]) -> int:
    """A size written as (int, dim names...), as plans and specs hold it: their product under `dims`."""
    out = int(size[0])
    for d in size[1:]:
        out *= int(dims[d])
    return out


def bind(shape: Iterable[Dim], dims: Mapping[str, int]) -> tuple[int, ...]:
    """A shape with its symbols bound by `dims`."""
    return tuple(value(d, dims) for d in shape)


def is_symbol(d: Dim) -> bool:
    """A plain symbol (`B`), not an int or a product."""
    return isinstance(d, str) and "*" not in d
