"""Training vs eval: `training(train, eval)` is `eval` in the eval program and `train` in the
training step (compiler/modes.py's `training_form` rewrites each such node to its first
input before differentiating). dropout and batch_norm build both forms through it."""

from __future__ import annotations

import numpy as np

from ..opdefs import OpDef, Oracle, register
from ..shapes import broadcast
from .adjoint import unbroadcast


def _eval_grad(e, n, y, g):
    # The eval form passes its gradient to the eval input (Session.gradients differentiates it).
    return None, unbroadcast(e, g, e.shape(n.inputs[1]))


register(
    OpDef(
        "training",
        "elementwise",
        lambda ins, attrs: broadcast(*ins),
        lambda args, attrs, dims: np.broadcast_to(args[1], np.broadcast_shapes(args[0].shape, args[1].shape)).copy(),
        arity=2,
        lowering={"glsl": "b"},
        gradient=_eval_grad,
        doc="train in the training step, eval elsewhere",
        oracle=Oracle(
            numpy=lambda a, b: np.broadcast_to(b, np.broadcast_shapes(np.shape(a), np.shape(b))),
            torch=lambda t, a, b: b.expand(t.broadcast_shapes(a.shape, b.shape)) + 0 * a,
        ),
    )
)
