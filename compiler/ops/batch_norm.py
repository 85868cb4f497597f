"""batch_norm: normalization with running statistics held in model state (PyTorch's
BatchNorm in train() and eval(), channels last).

Training step: normalize by the batch's mean and biased variance over every axis but the
last, and update the running statistics, mean <- (1 - momentum) mean + momentum batch_mean,
var <- (1 - momentum) var + momentum unbiased_batch_var. Eval: normalize by the running ones.
"""

from __future__ import annotations

from dlc.runtime.errors import CompileError

from ..builder import count
from ..opdefs import Composite, Param, register_composite


def _state_name(b, i: int, what: str, channels, loc) -> str:
    node = b.nodes[i]
    if node.op != "state":
        raise CompileError(f"batch_norm's {what} must be a state (declare `state NAME: [{channels}] = ...`)", loc)
    if tuple(node.shape) != (channels,):
        raise CompileError(f"batch_norm's {what} '{node.attr('name')}' is {list(node.shape)}, not [{channels}]", loc)
    return node.attr("name")


def _batch_norm(b, loc, x, gamma, beta, mean, var, momentum, eps):
    shape = b.shape(x)
    if len(shape) < 2:
        raise CompileError(f"batch_norm's x is [batch, ..., channels], got a tensor of rank {len(shape)}", loc)
    if not 0.0 <= momentum <= 1.0:
        raise CompileError(f"batch_norm's momentum is in [0, 1], got {momentum:g}", loc)
    if eps < 0:
        raise CompileError(f"batch_norm's eps must be >= 0, got {eps:g}", loc)
    channels = shape[-1]
    mean_name = _state_name(b, mean, "mean", channels, loc)
    var_name = _state_name(b, var, "var", channels, loc)
    axes = tuple(range(len(shape) - 1))

    def add(op, *inputs, **attrs):
        return b.add(op, inputs, loc, **attrs)

    n = count(b, loc, tuple(shape[a] for a in axes))
    e = b.const(float(eps), ())

    def normalized(centered, variance):
        return add("add", add("mul", add("mul", centered, add("rsqrt", add("add", variance, e))), gamma), beta)

    batch_mean = add("div", add("sum", x, axes=axes, keepdims=False), n)
    centered = add("sub", x, batch_mean)
    batch_var = add("div", add("sum", add("square", centered), axes=axes, keepdims=False), n)
    train = normalized(centered, batch_var)
    out = add("training", train, normalized(add("sub", x, mean), var))
    keep, m = b.const(1.0 - momentum, ()), b.const(float(momentum), ())
    unbiased = add("mul", batch_var, add("div", n, add("sub", n, b.const(1.0, ()))))
    b.update(mean_name, add("add", add("mul", keep, mean), add("mul", m, batch_mean)), loc)
    b.update(var_name, add("add", add("mul", keep, var), add("mul", m, unbiased)), loc)
    return out


register_composite(
    Composite(
        "batch_norm",
        (
            Param("x", "tensor"),
            Param("gamma", "tensor"),
            Param("beta", "tensor"),
            Param("mean", "tensor"),
            Param("var", "tensor"),
            Param("momentum", "float", 0.1),
            Param("eps", "float", 1e-5),
        ),
        _batch_norm,
        doc="(x - mean) / sqrt(var + eps) * gamma + beta over the last axis: batch statistics "
        "in training (updating the states mean, var), the running ones in eval",
        group="networks",
    )
)
