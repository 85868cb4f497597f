"""ONNX's If with a condition known at import: the taken branch's nodes are converted in
place (they read the outer graph's tensors by name), and the If's outputs are that branch's
outputs. A condition computed at run time is refused: the .dl has no branches."""

from __future__ import annotations

import numpy as np
from onnx import numpy_helper

from .onnx_ops import convert_node, handler
from .onnx_types import shape_of


@handler("If")
def _if(c, node, ins, attrs):
    cond = ins[0]
    if cond.const is None:
        raise c.fail("If's condition must be known at import (a constant): the .dl has no branches")
    if np.asarray(cond.const).size != 1:
        raise c.fail(f"If's condition must hold one element, got shape {list(cond.shape)}")
    branch = attrs["then_branch" if bool(np.asarray(cond.const).reshape(-1)[0]) else "else_branch"]
    if len(branch.output) != len(node.output):
        raise c.fail(f"the branch has {len(branch.output)} outputs, the If {len(node.output)}")
    _convert_graph(c, branch)
    for o, b in zip(node.output, branch.output):
        if o:
            c.values[o] = c.values[b.name]


def _convert_graph(c, graph) -> None:
    """The subgraph's initializers, shapes and nodes, into the converter."""
    for vi in [*graph.value_info, *graph.output]:
        s = shape_of(vi.type)
        if s is not None:
            c.shapes.setdefault(vi.name, s)
        c.types.setdefault(vi.name, vi.type.tensor_type.elem_type)
    for t in graph.initializer:
        c.set_const(t.name, numpy_helper.to_array(t), False)
    c.used.update(i for n in graph.node for i in n.input if i)
    c.used.update(o.name for o in graph.output)
    outer = c.node
    for n in graph.node:
        c.node = n
        convert_node(c, n)
    c.node = outer
