"""The gradient's and the loss's names: what a training step's caller needs without autodiff's
machinery (the op registry, the gradient rules), so that a warm start, reading its step from
the compile cache, imports none of it."""

from __future__ import annotations

from dlc.runtime.errors import CompileError, did_you_mean

from .ir import Graph, format_shape


def grad_name(leaf: str) -> str:
    return f"grad${leaf}"


def backward_start(g: Graph) -> int | None:
    """The loss node of a gradient graph (one that names a `grad$` of a param), else None: autodiff
    appends the backward after the forward, so a node past the loss is the backward's."""
    if not g.losses or not any(grad_name(p) in g.names for p in g.params):
        return None
    return g.names[g.losses[0]]


def resolve_loss(g: Graph, loss: str | None) -> str:
    """The loss to differentiate: `loss`, or the model's first `loss` statement."""
    if loss is None:
        if not g.losses:
            raise CompileError("the model has no loss to differentiate: add a statement `loss NAME = EXPR`")
        return g.losses[0]
    if loss not in g.names:
        hint = did_you_mean(loss, list(g.losses) or list(g.names))
        raise CompileError(f"no tensor named '{loss}' in the model{hint}")
    shape = g.shape(loss)
    if shape != ():
        raise CompileError(f"'{loss}' cannot be a loss: it must be a scalar, but its shape is {format_shape(shape)}")
    return loss
