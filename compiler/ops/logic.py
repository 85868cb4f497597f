"""Logical ops over floats: nonzero (NaN included) is true; the result is 0 or 1. Not
differentiable. One elementwise entry each (see elementwise.unary)."""

from __future__ import annotations

import numpy as np

from ..dtypes import any_to_f32
from ..opdefs import Oracle
from .elementwise import binary, unary

unary(
    "logical_not",
    lambda x, a: x == 0,
    "((a != 0.0 || dlc_isnan(a)) ? 0.0 : 1.0)",
    doc="1 where x is 0, else 0 (NaN is true)",
    oracle=Oracle(
        lambda x: np.logical_not(x).astype(float), lambda t, x: t.logical_not(x).to(x.dtype), domain=("bools",)
    ),
)

binary(
    "logical_and",
    lambda x, y: (x != 0) & (y != 0),
    "(((a != 0.0 || dlc_isnan(a)) && (b != 0.0 || dlc_isnan(b))) ? 1.0 : 0.0)",
    doc="1 where a and b are both nonzero, else 0 (NaN is true)",
    oracle=Oracle(
        lambda x, y: np.logical_and(x, y).astype(float),
        lambda t, x, y: t.logical_and(x, y).to(x.dtype),
        domain=("bools", "bools"),
    ),
    dtype=any_to_f32,
)

binary(
    "logical_or",
    lambda x, y: (x != 0) | (y != 0),
    "(((a != 0.0 || dlc_isnan(a)) || (b != 0.0 || dlc_isnan(b))) ? 1.0 : 0.0)",
    doc="1 where a or b is nonzero, else 0 (NaN is true)",
    oracle=Oracle(
        lambda x, y: np.logical_or(x, y).astype(float),
        lambda t, x, y: t.logical_or(x, y).to(x.dtype),
        domain=("bools", "bools"),
    ),
    dtype=any_to_f32,
)
