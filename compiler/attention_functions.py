"""The language's front end of the attention primitive (ops/attention.py): it checks the
operands (located errors), fixes the scale, 1/sqrt(D) unless given, and with `dropout=p`
builds what the compiler makes of `dropout(softmax(...), p) @ v` (attention_rewrite.py):
in training the attention that drops probabilities (a mask bit from the random ops' hash,
the draw's key the model's next), in eval the plain one."""

from __future__ import annotations

import math

import numpy as np

from .functions import T, _fail, function
from .opdefs import Param
from .ops.attention import check_operands
from .ops.random import next_key, rng_leaves
from .shapes import ShapeError


@function(
    "attention",
    Param("q", T),
    Param("k", T),
    Param("v", T),
    Param("causal", "bool", False),
    Param("scale", "float", None),
    Param("dropout", "float", 0.0),
    doc="softmax(q @ k^T * scale) @ v over [..., T, D] operands, causal: key j > query i masked; "
    "scale 1/sqrt(D) by default (a fused kernel: the T x T scores are never stored); dropout=p: "
    "in training, each probability dropped with probability p (the rest scaled by 1 / (1 - p)), as "
    "dropout(softmax(...), p) @ v",
    group="networks",
)
def attention(b, loc, q, k, v, causal, scale, dropout):
    try:
        check_operands(b.shape(q), b.shape(k), b.shape(v))
    except ShapeError as e:
        _fail(str(e), loc)
    scale = 1.0 / math.sqrt(b.shape(q)[-1]) if scale is None else float(scale)
    if not math.isfinite(scale):
        _fail(f"attention's scale must be finite, got {scale}", loc)
    if not 0.0 <= dropout <= 1.0:
        _fail(f"attention's dropout is a probability in [0, 1], got {dropout:g}", loc)
    plain = b.add("attention", [q, k, v], loc, causal=bool(causal), scale=scale)
    if dropout == 0.0:
        return plain
    # as attention_rewrite.fuse_attention builds it from the written-out form: the counters
    # [$seed, $step] one input, p the float32 threshold the dropout op compares against
    key = next_key(b)
    counters = b.add("concat", [b.add("reshape", [c], loc, shape=(1,)) for c in rng_leaves(b)], loc, axis=0)
    p = float(np.float32(dropout))
    dropped = b.add("attention", [q, k, v, counters], loc, causal=bool(causal), scale=scale, dropout=p, key=key)
    return b.add("training", [dropped, plain], loc)
