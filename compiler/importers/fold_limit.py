"""The bound on constant folding: a few bytes of ONNX (ConstantOfShape of [32768, 32768])
can ask for gigabytes. Each folded node's outputs are sized from their shapes BEFORE they
are computed; one output, and all folded outputs of an import together, may hold at most
`max_bytes` (README, "Importing ONNX models"; `dlc import --max-const-bytes N`)."""

from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper, shape_inference

from .onnx_types import shape_of

DEFAULT_MAX_CONST_BYTES = 64 * 2**20
SMALL_INPUT = 4096  # constant inputs up to this many elements are given to shape inference


class FoldBudget:
    """Bytes folded so far in one import, against the limit."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_CONST_BYTES) -> None:
        if max_bytes <= 0:
            raise ValueError(f"max_const_bytes must be positive, got {max_bytes}")
        self.max_bytes = int(max_bytes)
        self.used = 0

    def charge(self, c, node, ins) -> None:
        """Refuse (c.fail) folding `node` when its outputs would pass the limit; else count them."""
        sizes = output_bytes(c, node, ins)
        hint = "; dlc import --max-const-bytes N (import_onnx(max_const_bytes=N)) raises the limit"
        for name, n in sizes.items():
            if n is None:
                raise c.fail(
                    f"the size of folding this constant node (output '{name}') is not known before computing it",
                    list_ops=False,
                )
            if n > self.max_bytes:
                raise c.fail(
                    f"folding this constant node would make '{name}' of {n} bytes, over the limit of "
                    f"{self.max_bytes} bytes a folded constant{hint}",
                    list_ops=False,
                )
        total = self.used + sum(sizes.values())
        if total > self.max_bytes:
            raise c.fail(
                f"folding this constant node would bring the folded constants to {total} bytes, over "
                f"the limit of {self.max_bytes} bytes in all{hint}",
                list_ops=False,
            )
        self.used = total


def output_bytes(c, node, ins) -> dict[str, int | None]:
    """Each output's bytes from its shape: the model's inferred shapes, else onnx's shape
    inference of the node alone with its small constant inputs as data. None when unknown."""
    outs = [o for o in node.output if o]
    known = {o: _bytes(c.shapes.get(o), c.types.get(o, 0)) for o in outs}
    if all(n is not None for n in known.values()):
        return known
    shapes, types = _infer_node(c, node, ins)
    return {o: known[o] if known[o] is not None else _bytes(shapes.get(o), types.get(o, 0)) for o in outs}


def _bytes(shape, elem_type: int) -> int | None:
    if shape is None or any(not isinstance(d, int) or d < 0 for d in shape):
        return None
    return int(np.prod(shape, dtype=object)) * _itemsize(elem_type) if shape else _itemsize(elem_type)


def _itemsize(elem_type: int) -> int:
    try:
        return helper.tensor_dtype_to_np_dtype(elem_type).itemsize
    except (KeyError, ValueError, TypeError):
        return 8  # unknown: the widest common type


def _infer_node(c, node, ins) -> tuple[dict, dict]:
    inputs, inits = [], []
    for name, v in zip(node.input, ins):
        if v is None:
            continue
        dtype = helper.np_dtype_to_tensor_dtype(v.const.dtype)
        if v.const.size <= SMALL_INPUT:
            inits.append(numpy_helper.from_array(np.asarray(v.const), name))
        inputs.append(helper.make_tensor_value_info(name, dtype, v.const.shape))
    outs = [helper.make_tensor_value_info(o, 0, None) for o in node.output if o]
    graph = helper.make_graph([node], "fold", inputs, outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", c.opset)])
    try:
        inferred = shape_inference.infer_shapes(model, data_prop=True).graph
    except Exception:  # onnx's inference raises many types; unknown sizes are refused above
        return {}, {}
    vis = [*inferred.value_info, *inferred.output]
    return {v.name: shape_of(v.type) for v in vis}, {v.name: v.type.tensor_type.elem_type for v in vis}
