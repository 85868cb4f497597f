"""Attention over a key/value cache, for incremental decoding (compiler/decode.py).

A cache is [2, ..., S, D] (S: the longest context): the keys, then the values, of positions
[0, p + n) once the step has written its n new rows (p, the i32 `pos` [1], is the position
of the first):

  attention_cached(q, kv, pos; scale)    o = softmax(q k^T * scale) v, k = kv[0], v = kv[1],
                                         over the new queries q [..., n, D], query i (at
                                         position p + i) seeing keys j <= p + i only;
                                         `rows_first`: o with its last lead axis and n
                                         swapped, [..., n, H, D] (the heads of each row
                                         together, as a projection over them reads them)

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
    q, kv, pos = ins
    _check_pos(pos)
    if len(q) < 2 or len(kv) != len(q) + 1 or kv[0] != 2 or tuple(q[:-2]) != tuple(kv[1:-2]) or q[-1] != kv[-1]:
        raise ShapeError(f"attention_cached's q {format_shape(q)} must be [..., n, D] of a cache [2, ..., S, D], "
                         f"got {format_shape(kv)}")  # fmt: skip
    d = q[-1]
    if isinstance(d, str) or not 1 <= d <= MAX_HEAD:
        raise ShapeError(f"attention_cached's head size (q's last dim) must be a number from 1 to {MAX_HEAD}, got {d}")
    if attrs.get("rows_first"):
        if len(q) < 3:
            raise ShapeError(f"attention_cached's rows_first needs a lead axis to swap, got q {format_shape(q)}")
        return (*q[:-3], q[-2], q[-3], d)
    return tuple(q)


def _attention(args, attrs, dims):
    q, kv, pos = args
    n = q.shape[-2]
    p = int(np.asarray(pos).reshape(-1)[0])
    if p < 0 or p + n > kv.shape[-2]:
        raise DataError(f"attention_cached: rows [{p}, {p + n}) do not fit a cache of {kv.shape[-2]} rows")
    scale = q.dtype.type(attrs["scale"])
    k, v = kv[0, ..., : p + n, :], kv[1, ..., : p + n, :]
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * scale  # [..., n, p + n]
    seen = np.arange(p + n)[None, :] <= (p + np.arange(n))[:, None]
    s = np.where(seen, s, -np.inf)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    out = np.empty(q.shape, dtype=np.result_type(q, kv))
    for i in range(n):  # row i sums over its own keys only: a NaN in a masked value stays out
        keys = slice(0, p + i + 1)
        out[..., i, :] = np.matmul(e[..., i : i + 1, keys], v[..., keys, :])[..., 0, :]
    out /= e.sum(axis=-1, keepdims=True)
    return np.swapaxes(out, -3, -2) if attrs.get("rows_first") else out


register(
    OpDef(
        "attention_cached",
        "cached_attention",
        _attention_shape,
        _attention,
        arity=3,
        differentiable=False,
        dtype=integer_at(2),
        stored_inputs=(1,),  # the cache: every query row's group reads all of it
    )
)
