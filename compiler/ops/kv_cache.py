"""Attention over a key/value cache, for incremental decoding (compiler/decode.py).

The caches are [..., S, D] (S: the longest context) and hold the keys and values of
positions [0, p + n) once the step has written its n new rows (p, the i32 `pos` [1], is the
position of the first):

  attention_cached(q, kc, vc, pos; scale)    o = softmax(q kc^T * scale) vc over the new
                                             queries q [..., n, D], query i (at position
                                             p + i) seeing keys j <= p + i only

Rows past p + n are never read, so a cache may hold what an earlier sequence left there.
Causal attention of a whole sequence is attention_cached at p = 0 over a cache just written
with its keys and values: the same numbers (the masked terms are left out, not added as 0).
On GL it is a kernel of its own (codegen/kernels_kv_cache.py). It is no language function
and not differentiable: only the decode pass makes it.
"""

from __future__ import annotations

import numpy as np

from dlc.runtime.errors import DataError

from ..dtypes import integer_at
from ..opdefs import OpDef, register
from ..shapes import ShapeError, format_shape
from .attention import MAX_HEAD


def _check_pos(pos) -> None:
    if tuple(pos) != (1,):
        raise ShapeError(f"a cache's position is one i32 number, shape [1], got {format_shape(pos)}")


def _attention_shape(ins, attrs):
    q, kc, vc, pos = ins
    _check_pos(pos)
    if tuple(kc) != tuple(vc):
        raise ShapeError(f"attention_cached's key cache {format_shape(kc)} and value cache {format_shape(vc)} differ")
    if len(q) < 2 or len(kc) != len(q) or tuple(q[:-2]) != tuple(kc[:-2]) or q[-1] != kc[-1]:
        raise ShapeError(f"attention_cached's q {format_shape(q)} must be [..., n, D] of the caches {format_shape(kc)}")
    d = q[-1]
    if isinstance(d, str) or not 1 <= d <= MAX_HEAD or isinstance(kc[-2], str):
        raise ShapeError(f"attention_cached needs a head size of 1 to {MAX_HEAD} and a cache of known length")
    return tuple(q)


def _attention(args, attrs, dims):
    q, kc, vc, pos = args
    n = q.shape[-2]
    p = int(np.asarray(pos).reshape(-1)[0])
    if p < 0 or p + n > kc.shape[-2]:
        raise DataError(f"attention_cached: rows [{p}, {p + n}) do not fit a cache of {kc.shape[-2]} rows")
    scale = q.dtype.type(attrs["scale"])
    k, v = kc[..., : p + n, :], vc[..., : p + n, :]
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * scale  # [..., n, p + n]
    seen = np.arange(p + n)[None, :] <= (p + np.arange(n))[:, None]
    s = np.where(seen, s, -np.inf)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    out = np.empty(q.shape, dtype=np.result_type(q, vc))
    for i in range(n):  # row i sums over its own keys only: a NaN in a masked value stays out
        keys = slice(0, p + i + 1)
        out[..., i, :] = np.matmul(e[..., i : i + 1, keys], v[..., keys, :])[..., 0, :]
    return out / e.sum(axis=-1, keepdims=True)


register(
    OpDef(
        "attention_cached",
        "cached_attention",
        _attention_shape,
        _attention,
        arity=4,
        differentiable=False,
        dtype=integer_at(3),
    )
)
