"""Scaled dot-product attention as fused primitives (FlashAttention's split of the work).

q, k and v have one shape [..., T, D] (batch and head dims leading, T may be symbolic, D
concrete); s = q @ k^T * scale over each leading index, causal: key j > query i masked out.

  attention(q, k, v)           o = softmax(s) @ v                          [..., T, D]
  attention_lse(q, k)          lse = log(sum(exp(s), -1))  (row statistics) [..., T]
  attention_packed(q, k, v)    each row of o, then its lse                  [..., T, D + 1]
  attention_grad(q, k, v, g, lse, delta; wrt)                               [..., T, D]
      with p = exp(s - lse), dp = g @ v^T, ds = p * (dp - delta), delta = sum(g * o, -1):
      wrt q: ds @ k * scale;   wrt k: ds^T @ q * scale;   wrt v: p^T @ g
      wrt kv: each row's dk, then its dv                                    [..., T, 2D]

`attention_packed` is what a training step runs where it needs both the output and the row
statistics (compiler/attention_rewrite.py: `pack_attention`, after autodiff): one kernel
for both. `attention_grad` wrt kv is the k and v gradients of one q, k, v in one kernel
(`pack_kv_grads`, after autodiff): both loop over the same query tiles and recompute the
same p. The gradient recomputes p from the saved row statistics (FlashAttention-2's
backward), so no op here makes a T x T tensor (codegen/kernels_attention.py: tiled kernels
with an online softmax on the compute target; a fragment per output element looping over
the other rows on the texture target). Causal: the masked terms are left out, not added as 0.

Dropout on the probabilities (attrs `dropout` p and `key`; one more input, the counters
[$seed, $step] as one tensor, so that a gradient kernel binds 8 buffers, GL's minimum):
attention and attention_packed compute o = sum_j p_ij w_ij v_j with w = m / (1 - p), m_ij
the keep bit the unfused `dropout` (ops/random.py) draws for element (b..., i, j) of a
[..., T, T] tensor, at its flat index, under the op's key; the row statistics (l, lse) sum
the unmasked exp. attention_grad (FlashAttention-2 with dropout) takes dp = w * (g @ v^T)
and dv = (p * w)^T @ g; delta = sum(g * o, -1) still holds. The kernels recompute w from
the hash: no T x T mask is stored. compiler/attention_rewrite.py makes these nodes from
`dropout(softmax(...), p) @ v`, as a `training` node's train input.
"""

from __future__ import annotations

import numpy as np

from ..opdefs import OpDef, Oracle, register
from ..shapes import ShapeError, format_shape
from .random import random_bits, uniform_from_bits

# The widest head: a kernel invocation keeps a query row and its output row in registers and
# a work group's K/V tiles in shared memory (codegen/kernels_attention.py).
MAX_HEAD = 128


# The widest head whose k and v gradients are one attention_grad wrt kv node: the compute
# target's register-tiled kernel takes it (codegen/kernels_attention_tiled.py); past it the
# row kernel would hold k, v, dk and dv rows an invocation, which spills (H200: one such
# kernel took 1.01 ms where the two took 0.44 + 0.35).
KV_PACKED_MAX = 64


def packs_kv(d) -> bool:
    """Whether a head of d packs its k and v gradients into one node (KV_PACKED_MAX)."""
    return isinstance(d, int) and d % 4 == 0 and d <= KV_PACKED_MAX


def check_operands(q, k, v=None) -> None:
    """q, k (and v) of one shape [..., T, D]: D concrete, at most MAX_HEAD."""
    if len(q) < 2:
        raise ShapeError(f"attention's operands are [..., T, D], got q {format_shape(q)}")
    for name, s in (("k", k), ("v", v)):
        if s is not None and tuple(s) != tuple(q):
            raise ShapeError(f"attention's {name} {format_shape(s)} must have q's shape {format_shape(q)}")
    d = q[-1]
    if isinstance(d, str) or not 1 <= d <= MAX_HEAD:
        raise ShapeError(f"attention's head size (q's last dim) must be a number from 1 to {MAX_HEAD}, got {d}")


def keep_scale(p: float) -> float:
    """The factor a kept probability is scaled by: 1 / (1 - p) (0 when all are dropped)."""
    return 0.0 if p >= 1.0 else 1.0 / (1.0 - p)


def dropout_attrs(attrs) -> dict:
    """The dropout attrs of a node's `attrs` (a mapping or a Node's pairs): {} when it drops nothing."""
    attrs = dict(attrs)
    return {"dropout": attrs["dropout"], "key": attrs["key"]} if "dropout" in attrs else {}


def _operands(ins, attrs, arity: int) -> list:
    """The first `arity` input shapes, after checking the dropout input (the counters
    [$seed, $step]) is there exactly when the attrs ask for dropout."""
    want = arity + (1 if "dropout" in attrs else 0)
    if len(ins) != want:
        raise ShapeError(f"attention takes {want} inputs with these attrs, got {len(ins)}")
    if "dropout" in attrs:
        if tuple(ins[arity]) != (2,):
            raise ShapeError(f"attention's dropout counters are [$seed, $step], [2], got {format_shape(ins[arity])}")
        if not 0.0 <= attrs["dropout"] <= 1.0:
            raise ShapeError(f"attention's dropout is a probability in [0, 1], got {attrs['dropout']}")
    return list(ins[:arity])


def _shape(ins, attrs):
    check_operands(*_operands(ins, attrs, 3))
    return tuple(ins[0])


def _lse_shape(ins, attrs):
    check_operands(*ins)
    return tuple(ins[0][:-1])


def _packed_shape(ins, attrs):
    check_operands(*_operands(ins, attrs, 3))
    q = ins[0]
    return (*q[:-1], q[-1] + 1)


def _grad_shape(ins, attrs):
    q, k, v, g, lse, delta = _operands(ins, attrs, 6)
    check_operands(q, k, v)
    if tuple(g) != tuple(q):
        raise ShapeError(f"attention_grad's upstream {format_shape(g)} must have q's shape {format_shape(q)}")
    for name, s in (("lse", lse), ("delta", delta)):
        if tuple(s) != tuple(q[:-1]):
            raise ShapeError(f"attention_grad's {name} {format_shape(s)} must be {format_shape(q[:-1])}")
    if attrs["wrt"] not in ("q", "k", "v", "kv"):
        raise ShapeError(f"attention_grad's wrt is q, k, v or kv, got {attrs['wrt']!r}")
    return (*q[:-1], 2 * q[-1]) if attrs["wrt"] == "kv" else tuple(q)


def scores(q, k, attrs):
    """s = q @ k^T * scale, masked with -inf above the diagonal when causal."""
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * q.dtype.type(attrs["scale"])
    if attrs["causal"]:
        t = q.shape[-2]
        s = np.where(np.tril(np.ones((t, t), dtype=bool)), s, -np.inf)
    return s


def dropout_weights(q, extra, attrs):
    """w_ij = m_ij / (1 - p) for each probability, [..., T, T] (None without dropout): the
    uniform the unfused dropout draws for element (b..., i, j) of a [..., T, T] tensor (its
    flat index) kept when >= p, as ops/random.py's `dropout` (p compared as float32)."""
    if "dropout" not in attrs:
        return None
    seed, step = (float(c) for c in np.asarray(extra[0]).reshape(2))
    shape = (*q.shape[:-1], q.shape[-2])
    u = uniform_from_bits(random_bits(seed, step, attrs["key"], int(np.prod(shape)))).reshape(shape)
    return np.where(u >= attrs["dropout"], keep_scale(attrs["dropout"]), 0.0).astype(q.dtype)


def _lse(s):
    m = s.max(axis=-1, keepdims=True)
    return (m + np.log(np.exp(s - m).sum(axis=-1, keepdims=True)))[..., 0]


def _product(a, b, causal: bool, transposed: bool = False):
    """a @ b (a^T @ b when `transposed`) for a [..., T, T] that is 0 above the diagonal when
    causal: the masked terms are left out, not multiplied by 0, so a NaN or inf of b at a
    masked position does not reach the result (as the kernels, which never visit them)."""
    at = np.swapaxes(a, -1, -2) if transposed else a
    if not causal or np.isfinite(b).all():
        return np.matmul(at, b)
    out = np.empty((*at.shape[:-1], b.shape[-1]), dtype=np.result_type(a, b))
    for i in range(at.shape[-2]):  # row i sums over b's rows <= i (a^T: >= i)
        part = slice(i, None) if transposed else slice(0, i + 1)
        out[..., i, :] = np.matmul(at[..., i : i + 1, part], b[..., part, :])[..., 0, :]
    return out


def _ref(args, attrs, dims):
    q, k, v = args[:3]
    s = scores(q, k, attrs)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    w = dropout_weights(q, args[3:], attrs)
    return _product(p if w is None else p * w, v, attrs["causal"]) / p.sum(axis=-1, keepdims=True)


def _packed_ref(args, attrs, dims):
    q, k = args[:2]
    return np.concatenate([_ref(args, attrs, dims), _lse(scores(q, k, attrs))[..., None]], axis=-1)


def _lse_ref(args, attrs, dims):
    q, k = args
    return _lse(scores(q, k, attrs))


def _grad_ref(args, attrs, dims):
    q, k, v, g, lse, delta = args[:6]
    s = scores(q, k, attrs)
    p = np.exp(s - lse[..., None])
    causal = attrs["causal"]
    scale = q.dtype.type(attrs["scale"])
    wrt = attrs["wrt"]
    if wrt == "kv":  # each row's dk, then its dv
        parts = [_grad_ref(args, {**attrs, "wrt": x}, dims) for x in ("k", "v")]
        return np.concatenate(parts, axis=-1)
    w = dropout_weights(q, args[6:], attrs)
    if wrt == "v":  # dv = (p * w)^T @ g
        return _product(p if w is None else p * w, g, causal, transposed=True)
    dp = np.matmul(g, np.swapaxes(v, -1, -2))
    if w is not None:  # the gradient reaching p through the mask
        dp = dp * w
    ds = p * (dp - delta[..., None])
    if causal:  # masked: no term at all (p is 0, dp may be NaN)
        ds = np.where(np.tril(np.ones(s.shape[-2:], dtype=bool)), ds, q.dtype.type(0))
    if wrt == "q":
        return _product(ds, k, causal) * scale
    return _product(ds, q, causal, transposed=True) * scale


def _rule(e, n, y, g):
    q, k, v, *extra = n.inputs  # extra: dropout's counters (no gradient)
    attrs = {"causal": n.attr("causal"), "scale": n.attr("scale")}
    lse = e("attention_lse", q, k, **attrs)  # the row statistics: dropout does not change them
    rank = len(e.shape(q))
    delta = e("sum", e("mul", g, y), axes=(rank - 1,), keepdims=False)
    drop = dropout_attrs(n.attrs)
    grads = (e("attention_grad", q, k, v, g, lse, delta, *extra, wrt=w, **attrs, **drop) for w in ("q", "k", "v"))
    return (*grads, *(None for _ in extra))


def _torch(t, q, k, v, causal=False, scale=None):
    return t.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)


register(
    OpDef(
        "attention",
        "attention",
        _shape,
        _ref,
        arity=None,  # q, k, v (and [$seed, $step] with dropout)
        gradient=_rule,
        oracle=Oracle(torch=_torch, attrs=({"causal": False, "scale": 0.5}, {"causal": True, "scale": 0.5})),
    )
)
register(OpDef("attention_lse", "attention", _lse_shape, _lse_ref, arity=2, differentiable=False))
register(OpDef("attention_packed", "attention", _packed_shape, _packed_ref, differentiable=False))
register(OpDef("attention_grad", "attention", _grad_shape, _grad_ref, differentiable=False))
