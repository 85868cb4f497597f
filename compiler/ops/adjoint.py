"""Helpers gradient rules share (entries write their rules over an `Emit`, gradients.py).

`e` is a gradients.Emit: `e(op, *inputs, **attrs)` appends a node, `e.const(v)` a scalar,
`e.shape(i)` is a node's shape.
"""

from __future__ import annotations

from ..ir import Shape
from ..shapes import reduced


def unbroadcast(e, g: int, shape: Shape) -> int:
    """Sum `g` (a broadcast result) back to `shape`: leading axes and axes where shape has 1."""
    shape = tuple(shape)
    gs = e.shape(g)
    if gs == shape:
        return g
    lead = len(gs) - len(shape)
    axes = tuple(range(lead)) + tuple(lead + k for k, d in enumerate(shape) if d == 1 and gs[lead + k] != 1)
    out = e("sum", g, axes=axes, keepdims=False) if axes else g
    if e.shape(out) != shape:
        out = e("reshape", out, shape=shape)
    return out


def kept(e, t: int, x_shape: Shape, axes: tuple[int, ...], keepdims: bool) -> int:
    """A reduction's output `t` reshaped to the keepdims shape, so it broadcasts against x."""
    want = reduced(x_shape, axes, True)
    if keepdims or e.shape(t) == want:
        return t
    return e("reshape", t, shape=want)


def shapes(e, n) -> list[Shape]:
    """The shapes of node n's inputs."""
    return [e.shape(i) for i in n.inputs]


def chain(fn):
    """A unary rule from the local derivative: `fn(e, x, y)` gives dy/dx, the rule g * dy/dx."""

    def rule(e, n, y, g):
        return (e("mul", g, fn(e, n.inputs[0], y, n)),)

    return rule
