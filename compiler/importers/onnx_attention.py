"""ONNX's Attention (opset 23) and RotaryEmbedding (opset 23).

Attention: Q, K, V as [B, heads, T, D] (3-D inputs [B, T, heads * D] are split into heads
first). Where the language's fused `attention` computes exactly what ONNX asks (no mask,
no cache, no softcap, no extra output, one length and head size for Q, K and V; causal
or not) it is used; otherwise the scores are written out: `matmul` by K transposed times the
scale, softcap, the additive bias (a bool mask as 0 / -inf, a float mask as is, padded to
the key length with -inf; causal as a constant bias aligned to the bottom right when a past
cache precedes), `softmax`, and a row whose bias is all -inf gives 0 (as ONNX's reference),
then `matmul` by V. past_key/past_value are concatenated before K/V (present_key/value are
those). Grouped-query attention repeats each K/V head for its query heads.
"""

from __future__ import annotations

import numpy as np

from .onnx_converter import fmt_num, fmt_shape
from .onnx_ops import _out_shape, handler

MAX_FUSED_HEAD = 128  # compiler/ops/attention.py's widest head


def _heads(c, base: str, v, heads: int | None, what: str) -> tuple[str, tuple]:
    """A 3-D [B, T, heads * D] input as [B, heads, T, D]; a 4-D one as it is."""
    if v.rank == 4:
        return c.data(v), tuple(v.shape)
    if v.rank != 3 or not heads:
        raise c.fail(f"{what} must be 4-D [B, heads, T, D], or 3-D with q_num_heads and kv_num_heads given")
    b, t, hidden = v.shape
    if isinstance(hidden, str) or hidden % heads:
        raise c.fail(f"{what}'s hidden size {hidden} is not a multiple of {heads} heads")
    d = hidden // heads
    split = c.temp(f"{base}_heads", f"reshape({c.data(v)}, {fmt_shape([b, t, heads, d])})")
    return c.temp(f"{base}_bhtd", f"transpose({split}, perm=[0, 2, 1, 3])"), (b, heads, t, d)


def _repeat_heads(c, base: str, x: str, shape: tuple, times: int) -> tuple[str, tuple]:
    """[B, H, T, D] with each head repeated `times` times in place (h0, h0, h1, h1, ...)."""
    b, h, t, d = shape
    wide = f"broadcast_to(reshape({x}, {fmt_shape([b, h, 1, t, d])}), {fmt_shape([b, h, times, t, d])})"
    return c.temp(base, f"reshape({wide}, {fmt_shape([b, h * times, t, d])})"), (b, h * times, t, d)


@handler("Attention")
def _attention(c, node, ins, attrs):
    q, k, v = ins[:3]
    mask, past_k, past_v = (list(ins[3:6]) + [None] * 3)[:3]
    nonpad = ins[6] if len(ins) > 6 else None
    if (past_k is None) != (past_v is None):
        raise c.fail("past_key and past_value must be given together")
    if nonpad is not None and past_k is not None:
        raise c.fail("nonpad_kv_seqlen cannot be combined with past_key/past_value")
    base = next(o for o in node.output if o)
    hq, hkv = attrs.get("q_num_heads"), attrs.get("kv_num_heads")
    qs, q_shape = _heads(c, base + "_q", q, hq, "Q")
    ks, k_shape = _heads(c, base + "_k", k, hkv, "K")
    vs, v_shape = _heads(c, base + "_v", v, hkv, "V")
    past = 0
    if past_k is not None:
        past = past_k.shape[2]
        ks = c.temp(base + "_present_k", f"concat([{c.data(past_k)}, {ks}], axis=2)")
        vs = c.temp(base + "_present_v", f"concat([{c.data(past_v)}, {vs}], axis=2)")
        k_shape = (*k_shape[:2], _add(c, past, k_shape[2]), k_shape[3])
        v_shape = (*v_shape[:2], _add(c, past, v_shape[2]), v_shape[3])
    outs = list(node.output) + [""] * (4 - len(node.output))
    for o, name, shape in ((outs[1], ks, k_shape), (outs[2], vs, v_shape)):
        if o:
            c.emit(o, name, _out_shape(c, o, shape))
    b, heads, t_q, d = q_shape
    t_kv, dv = k_shape[2], v_shape[3]
    if heads != k_shape[1]:
        if heads % k_shape[1]:
            raise c.fail(f"{heads} query heads are not a multiple of {k_shape[1]} key/value heads")
        ks, k_shape = _repeat_heads(c, base + "_k_rep", ks, k_shape, heads // k_shape[1])
        vs, v_shape = _repeat_heads(c, base + "_v_rep", vs, v_shape, heads // v_shape[1])
    scale = attrs.get("scale")
    scale = float(scale) if scale is not None else 1.0 / float(np.sqrt(d))
    causal = bool(attrs.get("is_causal", 0))
    softcap = float(attrs.get("softcap", 0.0) or 0.0)
    mode = attrs.get("qk_matmul_output_mode", 0)
    window = attrs.get("left_window_size", -1) >= 0 or attrs.get("right_window_size", -1) >= 0
    fused = (
        mask is None
        and nonpad is None
        and not window
        and past == 0
        and not softcap
        and not outs[3]
        and q_shape == k_shape == v_shape
        and isinstance(d, int)
        and d <= MAX_FUSED_HEAD
    )
    if fused:
        y = c.temp(base + "_y", f"attention({qs}, {ks}, {vs}, causal={str(causal).lower()}, scale={fmt_num(scale)})")
    else:
        s = c.temp(base + "_scores", f"matmul({qs}, transpose({ks}, perm=[0, 1, 3, 2])) * {fmt_num(scale)}")
        if softcap > 0:
            s = c.temp(base + "_capped", f"{fmt_num(softcap)} * tanh({s} / {fmt_num(softcap)})")
        bias = _mask_bias(c, node, base, mask, t_kv)
        allowed = _allowed(c, base, attrs, (b, t_q, t_kv), past, nonpad)
        if allowed is not None:  # a where, not an added bias: a param may not hold -inf
            bias = c.temp(base + "_bias", f"where({allowed}, {bias or 0.0}, -inf)")
        with_bias = c.temp(base + "_biased", f"{s} + {bias}") if bias else s
        p = c.temp(base + "_probs", f"softmax({with_bias}, axis=-1)")
        if bias:  # a row with no key to attend: 0, not softmax's NaN (as ONNX's reference)
            dead = c.temp(base + "_masked_row", f"eq(max({bias}, axis=-1, keepdims=true), -inf)")
            p = c.temp(base + "_probs_kept", f"where({dead}, 0.0, {p})")
        y = c.temp(base + "_y", f"matmul({p}, {vs})")
        if outs[3]:
            if mode not in (0, 1, 2, 3):
                raise c.fail(f"qk_matmul_output_mode {mode} is not supported (0 to 3)")
            qk = {0: s, 1: s, 2: with_bias, 3: p}[mode]
            c.emit(outs[3], qk, _out_shape(c, outs[3], (b, heads, t_q, t_kv)))
    if outs[0]:
        if q.rank == 3:
            y = f"reshape(transpose({y}, perm=[0, 2, 1, 3]), {fmt_shape([b, t_q, _mul(c, heads, dv)])})"
            c.emit(outs[0], y, _out_shape(c, outs[0], (b, t_q, _mul(c, heads, dv))))
        else:
            c.emit(outs[0], y, _out_shape(c, outs[0], (b, heads, t_q, dv)))


def _add(c, a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    raise c.fail("Attention with a past cache needs the sequence lengths known at import")


def _mul(c, a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    raise c.fail("3-D Attention needs the head count and head size known at import")


def _mask_bias(c, node, base: str, mask, t_kv) -> str | None:
    """attn_mask as an additive bias of the scores ([..., Tq, Tkv]): a bool mask as 0 where
    true and -inf where false; padded to the key length with -inf. None without a mask."""
    if mask is None:
        return None
    m = c.data(mask)
    if c.types.get(node.input[3]) == 9:  # bool: true attends
        m = c.temp(base + "_mask_bias", f"where({m}, 0.0, -inf)")
    width = mask.shape[-1]
    if width != t_kv:
        fill = [*mask.shape[:-1], t_kv - width if isinstance(width, int) and isinstance(t_kv, int) else 0]
        if fill[-1] < 1 or any(isinstance(d, str) for d in fill):
            raise c.fail(f"attn_mask's last dim {width} must be at most the key length {t_kv}, both known")
        m = c.temp(base + "_mask_padded", f"concat([{m}, full({fmt_shape(fill)}, -inf)], axis=-1)")
    return m


def _allowed(c, base: str, attrs, dims, past: int, nonpad) -> str | None:
    """1 where query i may attend key j, else 0, as a .dl name ([Tq, Tkv], or [B, 1, Tq, Tkv]
    with nonpad_kv_seqlen); None where every key may be attended. ONNX aligns causal and
    sliding windows to the bottom right: query i sits at i + offset, the offset the past
    cache's length, or each batch's nonpad_kv_seqlen - Tq; keys at or past nonpad_kv_seqlen
    are padding."""
    b, t_q, t_kv = dims
    causal = bool(attrs.get("is_causal", 0))
    left, right = attrs.get("left_window_size", -1), attrs.get("right_window_size", -1)
    if not causal and left < 0 and right < 0 and nonpad is None:
        return None
    if isinstance(t_q, str) or isinstance(t_kv, str):
        raise c.fail("causal, windowed or padded Attention with a mask or cache needs the lengths known at import")
    if nonpad is None:  # known at import: a constant
        diff = np.arange(t_q)[:, None] + past - np.arange(t_kv)[None, :]  # query position - key position
        ok = np.ones((t_q, t_kv), bool)
        if causal:
            ok &= diff >= 0
        if left >= 0:
            ok &= diff <= left
        if right >= 0:
            ok &= -diff <= right
        if ok.all():
            return None
        return c.declare_const(base + "_allowed", ok.astype(np.float32), False)
    lengths = c.temp(base + "_nonpad", f"reshape({c.data(nonpad)}, {fmt_shape([b, 1, 1, 1])})")
    keys = f"reshape(arange({t_kv}), {fmt_shape([1, 1, 1, t_kv])})"
    queries = f"reshape(arange({t_q}), {fmt_shape([1, 1, t_q, 1])})"
    diff = c.temp(base + "_diff", f"{queries} + {lengths} - {fmt_num(t_q)} - {keys}")
    terms = [f"lt({keys}, {lengths})"]
    if causal:
        terms.append(f"ge({diff}, 0.0)")
    if left >= 0:
        terms.append(f"le({diff}, {fmt_num(left)})")
    if right >= 0:
        terms.append(f"le(-{diff}, {fmt_num(right)})")
    ok = terms[0]
    for t in terms[1:]:
        ok = f"logical_and({ok}, {t})"
    return c.temp(base + "_allowed", ok)


@handler("RotaryEmbedding")
def _rotary(c, node, ins, attrs):
    """x's first rotary_embedding_dim features of each head rotated by the cached angle of
    its position: (x1, x2) -> (cos x1 - sin x2, sin x1 + cos x2), the pairs being the two
    halves (or, interleaved, the even and odd features)."""
    x, cos, sin = ins[:3]
    pos = ins[3] if len(ins) > 3 else None
    out = node.output[0]
    heads = attrs.get("num_heads", 0)
    if x.rank == 4:
        b, h, t, d = x.shape
        xs = c.temp(out + "_bthd", f"transpose({c.data(x)}, perm=[0, 2, 1, 3])")
    elif x.rank == 3 and heads and isinstance(x.shape[2], int) and x.shape[2] % heads == 0:
        b, t, hidden = x.shape
        h, d = heads, hidden // heads
        xs = c.temp(out + "_bthd", f"reshape({c.data(x)}, {fmt_shape([b, t, h, d])})")
    else:
        raise c.fail(f"RotaryEmbedding needs [B, H, T, D], or [B, T, H * D] with num_heads, got {fmt_shape(x.shape)}")
    rd = attrs.get("rotary_embedding_dim", 0) or d
    if not isinstance(d, int) or rd % 2 or rd > d:
        raise c.fail(f"rotary_embedding_dim {rd} must be even and at most the head size {d}")
    half = rd // 2
    tables = []
    for name, cache in (("cos", cos), ("sin", sin)):
        if cache.shape[-1] != half:
            raise c.fail(f"{name}_cache's last dim {cache.shape[-1]} must be rotary_embedding_dim / 2 = {half}")
        if pos is not None:
            if pos.const is None:
                idx = c.index(pos)
            else:
                idx = f"int({c.declare_const(out + '_pos', pos.const.astype(np.float32), False)})"
            g = f"gather({c.data(cache)}, {idx}, axis=0)"
        else:
            g = c.data(cache)
        tables.append(c.temp(f"{out}_{name}", f"reshape({g}, {fmt_shape([b, t, 1, half])})"))
    rot = xs if rd == d else c.temp(out + "_rot", f"slice({xs}, [0, 0, 0, 0], [-1, -1, -1, {rd}])")
    if attrs.get("interleaved", 0):
        pairs = c.temp(out + "_pairs", f"reshape({rot}, {fmt_shape([b, t, h, half, 2])})")
        x1, x2 = (
            c.temp(f"{out}_x{k + 1}", f"reshape(slice({pairs}, [0, 0, 0, 0, {k}], [-1, -1, -1, -1, 1]), "
                   f"{fmt_shape([b, t, h, half])})")
            for k in (0, 1)
        )  # fmt: skip
    else:
        x1 = c.temp(out + "_x1", f"slice({rot}, [0, 0, 0, 0], [-1, -1, -1, {half}])")
        x2 = c.temp(out + "_x2", f"slice({rot}, [0, 0, 0, {half}], [-1, -1, -1, {half}])")
    cs, sn = tables
    real = c.temp(out + "_real", f"{cs} * {x1} - {sn} * {x2}")
    imag = c.temp(out + "_imag", f"{sn} * {x1} + {cs} * {x2}")
    if attrs.get("interleaved", 0):
        both = f"stack([{real}, {imag}], axis=4)"
        rotated = c.temp(out + "_rotated", f"reshape({both}, {fmt_shape([b, t, h, rd])})")
    else:
        rotated = c.temp(out + "_rotated", f"concat([{real}, {imag}], axis=-1)")
    if rd != d:
        rest = f"slice({xs}, [0, 0, 0, {rd}], [-1, -1, -1, {d - rd}])"
        rotated = c.temp(out + "_all", f"concat([{rotated}, {rest}], axis=-1)")
    if x.rank == 4:
        c.emit(out, f"transpose({rotated}, perm=[0, 2, 1, 3])", _out_shape(c, out, x.shape))
    else:
        c.emit(out, f"reshape({rotated}, {fmt_shape(x.shape)})", _out_shape(c, out, x.shape))
