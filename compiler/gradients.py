"""The gradient table: one rule per differentiable registry op (tinygrad style).

A rule gets an `Emit` (appends IR at the forward node's source position), the
forward node, its own index `y` and the upstream gradient `g` (shape of the
node), and returns one gradient per input, each of that input's exact shape,
or None where an input gets no gradient. Ops the registry marks not
differentiable need no rule; a differentiable op without one is an error
naming the op (`rule_for`).

Gradients of broadcasting ops are summed back to the operand's shape
(`unbroadcast`). Ties (maximum, minimum, max/min reductions) share the
gradient equally, as PyTorch does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from dlc.runtime.errors import CompileError, Loc

from . import registry
from .builder import GraphBuilder
from .ir import Node, Shape
from .ops.elementwise import SELU_ALPHA, SELU_SCALE
from .shapes import reduced


@dataclass(frozen=True)
class Emit:
    """Appends nodes through the builder, all at one source position."""

    b: GraphBuilder
    loc: Loc | None

    def __call__(self, op: str, *inputs: int, **attrs) -> int:
        return self.b.add(op, inputs, self.loc, **attrs)

    def const(self, value: float) -> int:
        return self.b.const(float(value), (), self.loc)

    def shape(self, i: int) -> Shape:
        return self.b.shape(i)


Grads = Sequence[int | None]
Rule = Callable[[Emit, Node, int, int], Grads]
GRADIENTS: dict[str, Rule] = {}


def grad(*names: str):
    def deco(fn: Rule) -> Rule:
        for n in names:
            GRADIENTS[n] = fn
        return fn

    return deco


def rule_for(node: Node) -> Rule | None:
    """The rule for `node`'s op; None when the op is not differentiable."""
    if not registry.get(node.op).differentiable:
        return None
    rule = GRADIENTS.get(node.op)
    if rule is None:
        raise CompileError(f"no gradient rule for op '{node.op}': it cannot be differentiated", node.loc)
    return rule


# -- helpers ---------------------------------------------------------------------


def unbroadcast(e: Emit, g: int, shape: Shape) -> int:
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


def _kept(e: Emit, t: int, x_shape: Shape, axes: tuple[int, ...], keepdims: bool) -> int:
    """A reduction's output `t` reshaped to the keepdims shape, so it broadcasts against x."""
    want = reduced(x_shape, axes, True)
    if keepdims or e.shape(t) == want:
        return t
    return e("reshape", t, shape=want)


# -- elementwise, unary ------------------------------------------------------------


@grad("neg")
def _neg(e, n, y, g):
    return (e("neg", g),)


@grad("abs")
def _abs(e, n, y, g):
    return (e("mul", g, e("sign", n.inputs[0])),)


@grad("exp")
def _exp(e, n, y, g):
    return (e("mul", g, y),)


@grad("log")
def _log(e, n, y, g):
    return (e("div", g, n.inputs[0]),)


@grad("sqrt")
def _sqrt(e, n, y, g):
    # d sqrt(x) = 1 / (2 sqrt(x))
    return (e("div", g, e("mul", e.const(2.0), y)),)


@grad("rsqrt")
def _rsqrt(e, n, y, g):
    # d x^-1/2 = -1/2 x^-3/2 = -1/2 y^3
    return (e("mul", g, e("mul", e.const(-0.5), e("mul", y, e("square", y)))),)


@grad("square")
def _square(e, n, y, g):
    return (e("mul", g, e("mul", e.const(2.0), n.inputs[0])),)


@grad("reciprocal")
def _reciprocal(e, n, y, g):
    return (e("neg", e("mul", g, e("square", y))),)


@grad("relu")
def _relu(e, n, y, g):
    return (e("mul", g, e("step", n.inputs[0])),)


@grad("relu6")
def _relu6(e, n, y, g):
    x = n.inputs[0]
    inside = e("mul", e("gt", x, e.const(0.0)), e("lt", x, e.const(6.0)))
    return (e("mul", g, inside),)


@grad("leaky_relu")
def _leaky_relu(e, n, y, g):
    x = n.inputs[0]
    slope = e("where", e("ge", x, e.const(0.0)), e.const(1.0), e.const(n.attr("alpha")))
    return (e("mul", g, slope),)


@grad("elu")
def _elu(e, n, y, g):
    # below 0: y = alpha (exp(x) - 1), so dy/dx = alpha exp(x) = y + alpha
    x = n.inputs[0]
    slope = e("where", e("ge", x, e.const(0.0)), e.const(1.0), e("add", y, e.const(n.attr("alpha"))))
    return (e("mul", g, slope),)


@grad("selu")
def _selu(e, n, y, g):
    # below 0: y = scale alpha (exp(x) - 1), so dy/dx = y + scale alpha
    x = n.inputs[0]
    below = e("add", y, e.const(SELU_SCALE * SELU_ALPHA))
    slope = e("where", e("ge", x, e.const(0.0)), e.const(SELU_SCALE), below)
    return (e("mul", g, slope),)


@grad("softplus")
def _softplus(e, n, y, g):
    return (e("mul", g, e("sigmoid", n.inputs[0])),)


@grad("sigmoid")
def _sigmoid(e, n, y, g):
    return (e("mul", g, e("mul", y, e("sub", e.const(1.0), y))),)


@grad("tanh")
def _tanh(e, n, y, g):
    return (e("mul", g, e("sub", e.const(1.0), e("square", y))),)


@grad("sin")
def _sin(e, n, y, g):
    return (e("mul", g, e("cos", n.inputs[0])),)


@grad("cos")
def _cos(e, n, y, g):
    return (e("neg", e("mul", g, e("sin", n.inputs[0]))),)


# -- elementwise, binary and where ------------------------------------------------


def _shapes(e: Emit, n: Node) -> list[Shape]:
    return [e.shape(i) for i in n.inputs]


@grad("add")
def _add(e, n, y, g):
    sa, sb = _shapes(e, n)
    return unbroadcast(e, g, sa), unbroadcast(e, g, sb)


@grad("sub")
def _sub(e, n, y, g):
    sa, sb = _shapes(e, n)
    return unbroadcast(e, g, sa), unbroadcast(e, e("neg", g), sb)


@grad("mul")
def _mul(e, n, y, g):
    a, b = n.inputs
    sa, sb = _shapes(e, n)
    return unbroadcast(e, e("mul", g, b), sa), unbroadcast(e, e("mul", g, a), sb)


@grad("div")
def _div(e, n, y, g):
    # d(a/b)/db = -a/b^2 = -y/b
    a, b = n.inputs
    sa, sb = _shapes(e, n)
    ga = e("div", g, b)
    return unbroadcast(e, ga, sa), unbroadcast(e, e("neg", e("mul", ga, y)), sb)


@grad("pow")
def _pow(e, n, y, g):
    # d a^b/da = b a^(b-1); d a^b/db = a^b log(a), taken as 0 where a <= 0 (as TensorFlow does).
    a, b = n.inputs
    sa, sb = _shapes(e, n)
    ga = e("mul", g, e("mul", b, e("pow", a, e("sub", b, e.const(1.0)))))
    safe_a = e("where", e("gt", a, e.const(0.0)), a, e.const(1.0))
    gb = e("mul", g, e("mul", y, e("log", safe_a)))
    return unbroadcast(e, ga, sa), unbroadcast(e, gb, sb)


def _select(e: Emit, n: Node, g: int, first_wins: str) -> Grads:
    # `first_wins` is gt for maximum, lt for minimum; ties split the gradient in half.
    a, b = n.inputs
    sa, sb = _shapes(e, n)
    share = e("add", e(first_wins, a, b), e("mul", e.const(0.5), e("eq", a, b)))
    ga = e("mul", g, share)
    gb = e("mul", g, e("sub", e.const(1.0), share))
    return unbroadcast(e, ga, sa), unbroadcast(e, gb, sb)


@grad("maximum")
def _maximum(e, n, y, g):
    return _select(e, n, g, "gt")


@grad("minimum")
def _minimum(e, n, y, g):
    return _select(e, n, g, "lt")


@grad("where")
def _where(e, n, y, g):
    c, a, b = n.inputs
    _, sa, sb = _shapes(e, n)
    zero = e.const(0.0)
    return None, unbroadcast(e, e("where", c, g, zero), sa), unbroadcast(e, e("where", c, zero, g), sb)


# -- layout -------------------------------------------------------------------------


@grad("reshape")
def _reshape(e, n, y, g):
    return (e("reshape", g, shape=e.shape(n.inputs[0])),)


@grad("broadcast_to")
def _broadcast_to(e, n, y, g):
    return (unbroadcast(e, g, e.shape(n.inputs[0])),)


@grad("transpose")
def _transpose(e, n, y, g):
    perm = n.attr("perm")
    inverse = tuple(sorted(range(len(perm)), key=lambda k: perm[k]))
    return (e("transpose", g, perm=inverse),)


@grad("slice")
def _slice(e, n, y, g):
    x_shape = e.shape(n.inputs[0])
    begin, size = n.attr("begin"), n.attr("size")
    after = tuple(0 if isinstance(d, str) else d - b - s for d, b, s in zip(x_shape, begin, size))
    return (e("pad", g, before=tuple(begin), after=after),)


@grad("pad")
def _pad(e, n, y, g):
    return (e("slice", g, begin=tuple(n.attr("before")), size=e.shape(n.inputs[0])),)


@grad("concat")
def _concat(e, n, y, g):
    axis = n.attr("axis")
    rank = len(n.shape)
    out, offset = [], 0
    for x in n.inputs:
        shape = e.shape(x)
        begin = tuple(offset if k == axis else 0 for k in range(rank))
        out.append(e("slice", g, begin=begin, size=shape))
        offset += shape[axis]
    return out


# -- reductions ---------------------------------------------------------------------


@grad("sum")
def _sum(e, n, y, g):
    x_shape = e.shape(n.inputs[0])
    gk = _kept(e, g, x_shape, n.attr("axes"), n.attr("keepdims"))
    return (gk if e.shape(gk) == x_shape else e("broadcast_to", gk, shape=x_shape),)


@grad("max", "min")
def _extremum(e, n, y, g):
    # The gradient goes to the elements equal to the extremum, shared among ties.
    x = n.inputs[0]
    x_shape = e.shape(x)
    axes, keep = n.attr("axes"), n.attr("keepdims")
    hit = e("eq", x, _kept(e, y, x_shape, axes, keep))
    count = e("sum", hit, axes=axes, keepdims=True)
    return (e("mul", e("div", hit, count), _kept(e, g, x_shape, axes, keep)),)


# -- matmul -------------------------------------------------------------------------


@grad("matmul")
def _matmul(e, n, y, g):
    # C = op(A) op(B), op = transpose where ta/tb: d op(A) = G op(B)^T, d op(B) = op(A)^T G.
    # ta/tb read operands transposed, so no transpose node is needed; batch axes that
    # were broadcast are summed back by unbroadcast.
    a, b = n.inputs
    ta, tb = bool(n.attr("ta")), bool(n.attr("tb"))
    sa, sb = _shapes(e, n)
    if ta:
        da = e("matmul", b, g, ta=tb, tb=True)
    else:
        da = e("matmul", g, b, ta=False, tb=not tb)
    if tb:
        db = e("matmul", g, a, ta=True, tb=ta)
    else:
        db = e("matmul", a, g, ta=not ta, tb=False)
    return unbroadcast(e, da, sa), unbroadcast(e, db, sb)


# -- windows ------------------------------------------------------------------------
# conv2d is bilinear: y = C(x, w). conv2d_grad_input(dy, w) = C_x^T dy and
# conv2d_grad_filter(x, dy) = C_w^T dy are bilinear too, so the gradients of all
# three are the other two (and conv2d itself).


def _window(n: Node) -> dict:
    """The geometry attrs a window op's gradient ops share (those the node has)."""
    keys = ("stride", "padding", "dilation", "groups", "count_include_pad")
    return {k: v for k, v in n.attrs if k in keys}


@grad("conv2d")
def _conv2d(e, n, y, g):
    x, w = n.inputs
    gx = e("conv2d_grad_input", g, w, x_shape=e.shape(x), **_window(n))
    gw = e("conv2d_grad_filter", x, g, w_shape=e.shape(w), **_window(n))
    return gx, gw


@grad("conv2d_grad_input")
def _conv2d_grad_input(e, n, y, g):
    dy, w = n.inputs
    return (e("conv2d", g, w, **_window(n)), e("conv2d_grad_filter", g, dy, w_shape=e.shape(w), **_window(n)))


@grad("conv2d_grad_filter")
def _conv2d_grad_filter(e, n, y, g):
    x, dy = n.inputs
    return (e("conv2d_grad_input", dy, g, x_shape=e.shape(x), **_window(n)), e("conv2d", x, g, **_window(n)))


@grad("avg_pool")
def _avg_pool(e, n, y, g):
    x = n.inputs[0]
    return (e("avg_pool_grad", g, size=n.attr("size"), x_shape=e.shape(x), **_window(n)),)


@grad("avg_pool_grad")
def _avg_pool_grad(e, n, y, g):
    # avg_pool_grad is avg_pool's adjoint, so its adjoint is avg_pool.
    return (e("avg_pool", g, size=n.attr("size"), **_window(n)),)


@grad("max_pool")
def _max_pool(e, n, y, g):
    x = n.inputs[0]
    return (e("max_pool_grad", x, g, size=n.attr("size"), **_window(n)),)


@grad("max_pool_grad")
def _max_pool_grad(e, n, y, g):
    # max_pool_grad(x, dy) scatters dy to the first maximum of each window; its adjoint
    # gathers g from there. Windows are laid out as channels with a one-hot conv2d
    # (im2col), padding is masked out, and argmax picks the first maximum. In x it is
    # piecewise constant: no gradient.
    x = n.inputs[0]
    b, _, _, c = e.shape(x)
    kh, kw = n.attr("size")
    taps = kh * kw
    # eye[di, dj, ch, tap * C + ch] = 1 with tap = di * kw + dj: window taps as channels
    eye_values = np.zeros((kh, kw, c, taps * c))
    for di in range(kh):
        for dj in range(kw):
            for ch in range(c):
                eye_values[di, dj, ch, (di * kw + dj) * c + ch] = 1.0
    eye = e.b.const(tuple(eye_values.ravel()), eye_values.shape, e.loc)

    def windows(t: int) -> int:  # [B, oh, ow, C, taps]
        p = e("conv2d", t, eye, **_window(n))
        _, oh, ow, _ = e.shape(p)
        p = e("reshape", p, shape=(b, oh, ow, taps, c))
        return e("transpose", p, perm=(0, 1, 2, 4, 3))

    valid = windows(e("broadcast_to", e.const(1.0), shape=e.shape(x)))
    vx = e("where", valid, windows(x), e.const(-3.0e38))
    first = e("one_hot", e("argmax", vx, axis=4), depth=taps)
    picked = e("sum", e("mul", first, windows(g)), axes=(4,), keepdims=False)
    return None, picked


# -- special functions (compiler/ops/special.py) -------------------------------------


@grad("erf")
def _erf(e, n, y, g):
    # d erf(x) = 2 / sqrt(pi) * exp(-x^2)
    x = n.inputs[0]
    return (e("mul", g, e("mul", e.const(1.1283791670955126), e("exp", e("neg", e("square", x))))),)
