"""The gradient table: one rule per differentiable registry op (tinygrad style).

Rules live in the registry entries (`OpDef.gradient`): elementwise entries carry their own;
the rules of layout, reduce, matmul and window ops are written here, beside their siblings,
and set on their entries by `@grad`. `GRADIENTS` is the table derived from the registry.

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
from .ops.adjoint import kept as _kept
from .ops.adjoint import shapes as _shapes
from .ops.adjoint import unbroadcast


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


def grad(*names: str):
    """Sets the gradient rule of the entries `names` (rules of the layout, reduce, matmul and
    window ops are written here beside their siblings; elementwise entries carry their own)."""

    def deco(fn: Rule) -> Rule:
        for n in names:
            registry.update(n, gradient=fn)
        return fn

    return deco


def rule_for(node: Node) -> Rule | None:
    """The rule for `node`'s op; None when the op is not differentiable."""
    if not registry.get(node.op).differentiable:
        return None
    rule = GRADIENTS.get(node.op)  # the derived table (tests take a rule out of it)
    if rule is None:
        raise CompileError(f"no gradient rule for op '{node.op}': it cannot be differentiated", node.loc)
    return rule


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


# The gradient table, derived: every rule, the entries' own and those above.
GRADIENTS: dict[str, Rule] = {n: op.gradient for n, op in registry.REGISTRY.items() if op.gradient is not None}
