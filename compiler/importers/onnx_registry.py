"""The table of ONNX op handlers: each handler module registers its ops here with
`@handler("Op")`; onnx_ops.convert_node looks them up. Below every handler module and the
Converter (whose errors list the supported ops), so that none of them imports another
to reach it."""

from __future__ import annotations

from collections.abc import Callable

# (converter, node, input Values, attributes) -> None; it emits the node's outputs
Handler = Callable[[object, object, list, dict], None]
HANDLERS: dict[str, Handler] = {}
FOLDED_ONLY = ("Constant", "Size", "Shape")  # constants at import


def handler(*ops: str):
    def deco(fn):
        for op in ops:
            HANDLERS[op] = fn
        return fn

    return deco


def supported_ops() -> list[str]:
    return sorted({*HANDLERS, *FOLDED_ONLY})
