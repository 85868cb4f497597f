"""ONNX's Dropout of a training graph (training_mode true): dlc's `dropout`.

dlc's training step draws its own masks (its counter-based generator, not ONNX's seed) and
scales the kept elements by 1 / (1 - ratio) as ONNX does; everything else (eval, gradients
of the eval form) runs the identity, as an inference graph's Dropout is. The mask output
cannot be read: it exists only inside a training step.
"""

from __future__ import annotations

from .onnx_converter import fmt_num
from .onnx_ops import HANDLERS, _out_shape, handler

_dropout_inference = HANDLERS["Dropout"]


@handler("Dropout")
def _dropout(c, node, ins, attrs):
    mode = ins[2] if len(ins) > 2 else None
    if mode is None or (mode.const is not None and not bool(mode.const)):
        return _dropout_inference(c, node, ins, attrs)
    if mode.const is None:
        raise c.fail("Dropout's training_mode must be known at import (a constant)")
    if len(node.output) > 1 and node.output[1] in c.used:
        raise c.fail("Dropout's mask output is not supported (dlc draws the mask inside its training step)")
    ratio = ins[1] if len(ins) > 1 else None
    if ratio is not None and ratio.const is None:
        raise c.fail("Dropout's ratio must be known at import (a constant)")
    p = float(ratio.const) if ratio is not None else 0.5
    if not 0.0 <= p < 1.0:
        raise c.fail(f"Dropout's ratio {p} must be in [0, 1)")
    x = ins[0]
    out = node.output[0]
    c.emit(out, f"dropout({c.data(x)}, {fmt_num(p)})" if p else c.data(x), _out_shape(c, out, x.shape))
