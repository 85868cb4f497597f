"""What the handler modules beyond onnx_ops refuse: each error names the node, its op type
and opset, and what is not supported (README "Importing ONNX models")."""

from __future__ import annotations

import numpy as np
import pytest

import dlc


def _vi(name, shape, elem=1):
    from onnx import helper

    return helper.make_tensor_value_info(name, elem, shape)


def _model(node, inputs, output_shape, inits=(), opset=21):
    from onnx import helper, numpy_helper

    graph = helper.make_graph(
        [node],
        "g",
        inputs,
        [_vi(node.output[0], output_shape)],
        [numpy_helper.from_array(np.asarray(a), k) for k, a in inits],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _cases():
    from onnx import helper

    x4 = _vi("x", [1, 6, 4, 4])
    return {
        "resize scales at run time": (
            _model(helper.make_node("Resize", ["x", "", "s"], ["y"], name="r"), [x4, _vi("s", [4])], [1, 6, 8, 8]),
            r"node 'r' \(Resize, opset 21\): Resize's scales must be known at import",
        ),
        "resize of a symbolic dim": (
            _model(
                helper.make_node("Resize", ["x", "", "s"], ["y"], name="r"),
                [_vi("x", ["B", 6])],
                ["B", 12],
                [("s", np.array([2, 2], np.float32))],
            ),
            r"node 'r' \(Resize.*resizing the symbolic dim B is not supported",
        ),
        "group norm groups": (
            _model(
                helper.make_node("GroupNormalization", ["x", "g", "b"], ["y"], num_groups=4, name="gn"),
                [x4],
                [1, 6, 4, 4],
                [("g", np.ones(6, np.float32)), ("b", np.zeros(6, np.float32))],
            ),
            r"node 'gn' \(GroupNormalization.*num_groups 4 does not divide the 6 channels",
        ),
        "lp norm p": (
            _model(helper.make_node("LpNormalization", ["x"], ["y"], p=3, name="lp"), [x4], [1, 6, 4, 4]),
            r"node 'lp' \(LpNormalization.*p=3 is not supported \(1, 2\)",
        ),
        "training batch norm running mean": (
            _model(
                helper.make_node(
                    "BatchNormalization", ["x", "g", "b", "m", "v"], ["y", "rm", "rv"], training_mode=1, name="bn"
                ),
                [x4, _vi("m", [6])],
                [1, 6, 4, 4],
                [("g", np.ones(6, np.float32)), ("b", np.zeros(6, np.float32)), ("v", np.ones(6, np.float32))],
                opset=15,
            ),
            r"node 'bn' \(BatchNormalization.*running mean must be a finite \[C\] constant",
        ),
    }


@pytest.mark.parametrize(
    "case",
    [
        "resize scales at run time",
        "resize of a symbolic dim",
        "group norm groups",
        "lp norm p",
        "training batch norm running mean",
    ],
)
def test_refusals_name_the_node_and_what(case, onnx):
    from dlc.compiler.importers.onnx_model import ImportError_

    model, pattern = _cases()[case]
    with pytest.raises(ImportError_, match=pattern):
        dlc.import_onnx(model)
