"""Small ONNX ops written with existing functions: CastLike (Cast to the type of its second
input) and elementwise activations (Swish, Celu, ThresholdedRelu, Shrink, Asinh, Acosh,
Atanh)."""

from __future__ import annotations

from .onnx_model import fmt_num
from .onnx_ops import HANDLERS, _elementwise, handler


@handler("CastLike")
def _cast_like(c, node, ins, attrs):
    target = ins[1]
    to = c.types.get(node.input[1])
    if not to and target.const is not None:
        from onnx import helper

        to = helper.np_dtype_to_tensor_dtype(target.const.dtype)
    if not to:
        raise c.fail(f"the element type of '{node.input[1]}' is unknown")
    HANDLERS["Cast"](c, node, ins[:1], {"to": to})


def _activation(op: str, template: str, **defaults):
    """An elementwise op of one input whose float attributes fill `template`."""

    def fn(c, node, ins, attrs):
        values = {k: fmt_num(attrs.get(k, v)) for k, v in defaults.items()}
        _elementwise(c, node, ins[:1], lambda x: template.format(x=x, **values))

    HANDLERS[op] = fn


_activation("Swish", "({x} * sigmoid({alpha} * {x}))", alpha=1.0)
_activation("Celu", "(maximum({x}, 0.0) + minimum(0.0, {alpha} * (exp({x} / {alpha}) - 1.0)))", alpha=1.0)
_activation("ThresholdedRelu", "where(gt({x}, {alpha}), {x}, 0.0)", alpha=1.0)
_activation(
    "Shrink", "where(lt({x}, -{lambd}), {x} + {bias}, where(gt({x}, {lambd}), {x} - {bias}, 0.0))", lambd=0.5, bias=0.0
)
_activation("Asinh", "(sign({x}) * log(abs({x}) + sqrt(square({x}) + 1.0)))")  # no cancellation below 0
_activation("Acosh", "log({x} + sqrt(square({x}) - 1.0))")
_activation("Atanh", "(0.5 * log((1.0 + {x}) / (1.0 - {x})))")
