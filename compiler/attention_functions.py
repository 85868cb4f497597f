"""The language's front end of the attention primitive (ops/attention.py): it checks the
operands (located errors) and fixes the scale, 1/sqrt(D) unless given."""

from __future__ import annotations

import math

from .functions import T, _fail, function
from .opdefs import Param
from .ops.attention import check_operands
from .shapes import ShapeError


@function(
    "attention",
    Param("q", T),
    Param("k", T),
    Param("v", T),
    Param("causal", "bool", False),
    Param("scale", "float", None),
    doc="softmax(q @ k^T * scale) @ v over [..., T, D] operands, causal: key j > query i masked; "
    "scale 1/sqrt(D) by default (a fused kernel: the T x T scores are never stored)",
    group="networks",
)
def attention(b, loc, q, k, v, causal, scale):
    try:
        check_operands(b.shape(q), b.shape(k), b.shape(v))
    except ShapeError as e:
        _fail(str(e), loc)
    scale = 1.0 / math.sqrt(b.shape(q)[-1]) if scale is None else float(scale)
    if not math.isfinite(scale):
        _fail(f"attention's scale must be finite, got {scale}", loc)
    return b.add("attention", [q, k, v], loc, causal=bool(causal), scale=scale)
