"""ONNX's NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (a training graph's loss).

Input [N, C, d1, ...] (classes on axis 1), integer targets [N, d1, ...]. Each element's
loss is -input[n, target, ...] times its class weight, picked with `one_hot` of the
target along the classes (moved last); a target equal to ignore_index has loss and weight 0.
reduction "mean" divides the sum by the sum of the weights taken (the count of the targets
not ignored without weights), as ONNX. SoftmaxCrossEntropyLoss is the same over
`log_softmax(scores)` along the classes; its optional second output is that log_softmax.
"""

from __future__ import annotations

from .onnx_converter import fmt_num, fmt_shape
from .onnx_ops import _out_shape, handler


def _text(v, default: str) -> str:
    return default if v is None else (v.decode() if isinstance(v, bytes) else v)


def _nll(c, node, out: str, logp: str, x_shape: tuple, target, weight, attrs) -> None:
    reduction = _text(attrs.get("reduction"), "mean")
    if reduction not in ("none", "sum", "mean"):
        raise c.fail(f"reduction '{reduction}' is not supported (none, sum, mean)")
    rank, classes = len(x_shape), x_shape[1]
    if isinstance(classes, str):
        raise c.fail(f"the number of classes must be known at import, got {classes}")
    if tuple(target.shape) != (x_shape[0], *x_shape[2:]):
        raise c.fail(f"target {fmt_shape(target.shape)} must be the input's {fmt_shape(x_shape)} without the classes")
    last = logp if rank == 2 else c.temp(out + "_classes_last", f"transpose({logp}, perm={[0, *range(2, rank), 1]})")
    t = c.data(target)
    ignore = attrs.get("ignore_index")
    if ignore is not None:
        valid = c.temp(out + "_kept", f"ne({t}, {fmt_num(ignore)})")
        t = c.temp(out + "_target", f"where({valid}, {t}, 0.0)")
    hot = c.temp(out + "_hot", f"one_hot(int({t}), {classes})")
    picked = c.temp(out + "_picked", f"sum({last} * {hot}, axis=-1)")
    w = f"sum({hot} * {c.data(weight)}, axis=-1)" if weight is not None else None
    if ignore is not None:
        w = f"{w} * {valid}" if w is not None else valid
    if w is not None:
        w = c.temp(out + "_weight", w)
        loss = c.temp(out + "_each", f"-({picked} * {w})")
    else:
        loss = c.temp(out + "_each", f"-{picked}")
    if reduction == "none":
        c.emit(out, loss, _out_shape(c, out, tuple(target.shape)))
    elif reduction == "sum":
        c.emit(out, f"sum({loss})", _out_shape(c, out, ()))
    else:
        total = f"sum({w})" if w is not None else None
        c.emit(out, f"sum({loss}) / {total}" if total else f"mean({loss})", _out_shape(c, out, ()))


@handler("NegativeLogLikelihoodLoss")
def _nll_loss(c, node, ins, attrs):
    x, target = ins[:2]
    weight = ins[2] if len(ins) > 2 else None
    _nll(c, node, node.output[0], c.data(x), tuple(x.shape), target, weight, attrs)


@handler("SoftmaxCrossEntropyLoss")
def _softmax_cross_entropy(c, node, ins, attrs):
    x, target = ins[:2]
    weight = ins[2] if len(ins) > 2 else None
    out = node.output[0]
    logp_name = node.output[1] if len(node.output) > 1 and node.output[1] else None
    expr = f"log_softmax({c.data(x)}, axis=1)"
    if logp_name:
        logp = c.emit(logp_name, expr, _out_shape(c, logp_name, tuple(x.shape))).name
    else:
        logp = c.temp(out + "_log_prob", expr)
    _nll(c, node, out, logp, tuple(x.shape), target, weight, attrs)
