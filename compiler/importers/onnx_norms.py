"""ONNX's normalizations beyond onnx_ops' folded BatchNormalization, LayerNormalization and
RMSNormalization: GroupNormalization, InstanceNormalization, MeanVarianceNormalization,
LpNormalization, LayerNormalization's Mean and InvStdDev outputs, a BatchNormalization whose
statistics are computed at run time, and a training graph's BatchNormalization (dlc's
`batch_norm`, its running statistics states).

All are written with the language's reductions over [N, C, ...] (ONNX's layout); a
per-channel scale or bias stays a param of its own ONNX shape ([C]: PyTorch's
`weight`/`bias`) and is reshaped to [C, 1, ...] in the .dl, so it trains under its name.
"""

from __future__ import annotations

import numpy as np

from .onnx_converter import fmt_list, fmt_num, fmt_shape
from .onnx_ops import HANDLERS, _norm_axis, _one_out, _out_shape, handler

_layer_norm_y = HANDLERS["LayerNormalization"]
_batch_norm_folded = HANDLERS["BatchNormalization"]


def per_channel(c, v, rank: int) -> str:
    """A [C] value as a .dl expression of shape [C, 1, ...] (broadcasting over [N, C, ...])."""
    if v.rank != 1:
        raise c.fail(f"'{v.onnx_name}' must be a [C] vector, got shape {fmt_shape(v.shape)}")
    if rank <= 2:
        return c.data(v)
    return f"reshape({c.data(v)}, {fmt_shape([v.shape[0], *([1] * (rank - 2))])})"


def _normalize(c, out: str, xs: str, axes, eps: float) -> tuple[str, str, str]:
    """(centered, mean, inverse std dev) of xs over axes (keepdims), as .dl names."""
    m = c.temp(out + "_mean", f"mean({xs}, axis={fmt_list(axes)}, keepdims=true)")
    d = c.temp(out + "_centered", f"{xs} - {m}")
    inv = c.temp(out + "_inv_std", f"rsqrt(mean(square({d}), axis={fmt_list(axes)}, keepdims=true) + {fmt_num(eps)})")
    return d, m, inv


@handler("InstanceNormalization")
def _instance_norm(c, node, ins, attrs):
    x, scale, bias = ins
    out = _one_out(c, node)
    if x.rank < 3:
        raise c.fail(f"InstanceNormalization needs [N, C, D1, ...], got {fmt_shape(x.shape)}")
    eps = attrs.get("epsilon", 1e-5)
    if x.nhwc:  # a conv's output, normalized as it is held: channels last, [C] broadcasts
        d, _, inv = _normalize(c, out, x.name, [1, 2], eps)
        c.emit(out, f"{d} * {inv} * {c.data(scale)} + {c.data(bias)}", _out_shape(c, out, x.shape), nhwc=True)
        return
    d, _, inv = _normalize(c, out, c.data(x), range(2, x.rank), eps)
    expr = f"{d} * {inv} * {per_channel(c, scale, x.rank)} + {per_channel(c, bias, x.rank)}"
    c.emit(out, expr, _out_shape(c, out, x.shape))


@handler("GroupNormalization")
def _group_norm(c, node, ins, attrs):
    """Normalized over each group's channels and positions: x as [N, G, C/G * D1 * ...]."""
    x, scale, bias = ins
    out = _one_out(c, node)
    groups = attrs["num_groups"]
    if x.rank < 3 or any(isinstance(d, str) for d in x.shape[1:]):
        raise c.fail(f"GroupNormalization needs [N, C, D1, ...] with C, D1, ... known, got {fmt_shape(x.shape)}")
    ch = x.shape[1]
    if groups < 1 or ch % groups:
        raise c.fail(f"num_groups {groups} does not divide the {ch} channels")
    rest = int(np.prod(x.shape[1:])) // groups
    grouped = c.temp(out + "_groups", f"reshape({c.data(x)}, {fmt_shape([x.shape[0], groups, rest])})")
    d, _, inv = _normalize(c, out, grouped, [2], attrs.get("epsilon", 1e-5))
    y = c.temp(out + "_normalized", f"reshape({d} * {inv}, {fmt_shape(x.shape)})")
    per = [
        per_channel(c, v, x.rank) if v.shape == (ch,) else _group_to_channels(c, v, groups, ch, x.rank)
        for v in (scale, bias)
    ]
    c.emit(out, f"{y} * {per[0]} + {per[1]}", _out_shape(c, out, x.shape))


def _group_to_channels(c, v, groups: int, ch: int, rank: int) -> str:
    """Opset 18's per-group [G] scale or bias as [C, 1, ...]: each group's value repeated."""
    if v.shape != (groups,):
        raise c.fail(f"'{v.onnx_name}' must be [{ch}] or [{groups}], got {fmt_shape(v.shape)}")
    each = f"broadcast_to(reshape({c.data(v)}, [{groups}, 1]), [{groups}, {ch // groups}])"
    return f"reshape({each}, {fmt_shape([ch, *([1] * (rank - 2))])})"


@handler("MeanVarianceNormalization")
def _mvn(c, node, ins, attrs):
    x = ins[0]
    out = _one_out(c, node)
    axes = sorted(_norm_axis(c, a, x.rank) for a in attrs.get("axes", [0, 2, 3]))
    xs = c.data(x)
    m = c.temp(out + "_mean", f"mean({xs}, axis={fmt_list(axes)}, keepdims=true)")
    var = f"mean(square({xs}), axis={fmt_list(axes)}, keepdims=true) - square({m})"  # ONNX's E[x^2] - E[x]^2
    c.emit(out, f"({xs} - {m}) / (sqrt({var}) + 1e-09)", _out_shape(c, out, x.shape))


@handler("LpNormalization")
def _lp_norm(c, node, ins, attrs):
    x = ins[0]
    out = _one_out(c, node)
    axis = _norm_axis(c, attrs.get("axis", -1), x.rank)
    p = attrs.get("p", 2)
    if p not in (1, 2):
        raise c.fail(f"LpNormalization with p={p} is not supported (1, 2)")
    xs = c.data(x)
    norm = (
        f"sum(abs({xs}), axis={axis}, keepdims=true)"
        if p == 1
        else f"sqrt(sum(square({xs}), axis={axis}, keepdims=true))"
    )
    n = c.temp(out + "_norm", norm)
    c.emit(out, f"where(eq({n}, 0.0), 0.0, {xs} / {n})", _out_shape(c, out, x.shape))


@handler("LayerNormalization")
def _layer_norm(c, node, ins, attrs):
    """Y as onnx_ops writes it; with Mean or InvStdDev in use, all three written out."""
    if not any(o and o in c.used for o in node.output[1:]):
        return _layer_norm_y(c, node, ins, attrs)
    x, scale = ins[:2]
    bias = ins[2] if len(ins) > 2 else None
    axis = _norm_axis(c, attrs.get("axis", -1), x.rank)
    base = node.output[0] or node.output[1]
    d, m, inv = _normalize(c, base, c.data(x), range(axis, x.rank), attrs.get("epsilon", 1e-5))
    stats = (*x.shape[:axis], *([1] * (x.rank - axis)))
    if node.output[0]:
        expr = f"{d} * {inv} * {c.data(scale)}" + (f" + {c.data(bias)}" if bias is not None else "")
        c.emit(node.output[0], expr, _out_shape(c, node.output[0], x.shape))
    for o, name in zip(node.output[1:], (m, inv)):
        if o:
            c.emit(o, name, _out_shape(c, o, stats))


@handler("BatchNormalization")
def _batch_norm(c, node, ins, attrs):
    """Constant statistics: folded (onnx_ops); computed at run time: written out; a
    training graph's (training_mode): dlc's `batch_norm`."""
    if attrs.get("training_mode", 0):
        return _batch_norm_training(c, node, ins, attrs)
    if all(v.const is not None for v in ins[1:5]):
        return _batch_norm_folded(c, node, ins, attrs)
    x = ins[0]
    out = _one_out(c, node)
    scale, shift, mean, var = (per_channel(c, v, x.rank) for v in ins[1:5])
    eps = fmt_num(attrs.get("epsilon", 1e-5))
    expr = f"({c.data(x)} - {mean}) * rsqrt({var} + {eps}) * {scale} + {shift}"
    c.emit(out, expr, _out_shape(c, out, x.shape))


def _batch_norm_training(c, node, ins, attrs):
    """`batch_norm` over the channels last (NHWC, or [N, C] as it is): dlc's training step
    normalizes by the batch's statistics and updates the running ones, states here; eval
    normalizes by the states. The states start from ONNX's running mean and var: the
    import's `states` (in the weights file `dlc import` writes; `Session.set_states`).
    ONNX's momentum weighs the old statistics, dlc's the batch's: dlc's is 1 - ONNX's."""
    x = ins[0]
    extra = [o for o in node.output[1:] if o and o in c.used]
    if extra:
        raise c.fail(
            f"output(s) {', '.join(extra)} of a training BatchNormalization are not supported: dlc's "
            "batch_norm keeps the running statistics as states (Session.states reads them)"
        )
    if x.rank not in (2, 4):
        raise c.fail(f"a training BatchNormalization needs [N, C] or [N, C, H, W] input, got {fmt_shape(x.shape)}")
    states = []
    for what, v in (("mean", ins[3]), ("var", ins[4])):
        if v.const is None or v.rank != 1 or not np.all(np.isfinite(v.const)):
            raise c.fail(f"a training BatchNormalization's running {what} must be a finite [C] constant")
        name = c.names.new(f"{node.output[0]}_running_{what}")
        c.decls.append(f"state {name}: [{v.shape[0]}] = {'0.0' if what == 'mean' else '1.0'}")
        c.states[name] = np.asarray(v.const, np.float32)
        states.append(name)
    momentum = fmt_num(round(1.0 - float(attrs.get("momentum", 0.9)), 7))  # the attribute is a float32
    eps = fmt_num(attrs.get("epsilon", 1e-5))
    xs = c.nhwc(x) if x.rank == 4 else c.data(x)
    expr = (
        f"batch_norm({xs}, {c.data(ins[1])}, {c.data(ins[2])}, mean={states[0]}, var={states[1]}, "
        f"momentum={momentum}, eps={eps})"
    )
    c.emit(node.output[0], expr, _out_shape(c, node.output[0], x.shape), nhwc=x.rank == 4)
