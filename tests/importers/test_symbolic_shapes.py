"""Shapes computed in the model over symbolic dims (sym_shapes.py): the shape subgraphs
exporters write fold at import into dim products, and the model runs at any batch size,
checked against onnx's reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest

import dlc
from dlc.compiler.importers import sym_shapes as sym


def _model(nodes, inputs, outputs, inits=(), opset=17):
    from onnx import helper

    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _check(model, feeds, batch="B"):
    from onnx.reference import ReferenceEvaluator

    imported = dlc.import_onnx(model, batch=batch)
    assert "unk__" not in imported.source
    sess = dlc.Session(imported.model, backend="numpy")
    sess.set_params(imported.weights)
    want = ReferenceEvaluator(model).run(None, feeds)
    for o, w in zip(model.graph.output, want):
        got = sess.eval(imported.outputs[o.name], {imported.inputs[k]: v for k, v in feeds.items()})
        np.testing.assert_allclose(got, w, rtol=1e-6, err_msg=o.name)
    return imported


def test_dim_products_multiply_divide_and_print():
    b, t = sym.Dim.parse("B"), sym.Dim.parse("T")
    assert str(sym.mul(sym.mul(b, t), 4)) == "4*B*T"
    assert sym.div(sym.mul(sym.mul(b, t), 4), sym.mul(t, 2)) == sym.mul(b, 2)
    assert sym.div(b, t) is None and sym.div(sym.mul(b, 3), 2) is None
    assert sym.Dim.parse("T*B") == sym.Dim.parse("B*T")
    obj = lambda *xs: np.array([*xs, None], dtype=object)[:-1]  # noqa: E731
    np.testing.assert_array_equal(sym.arith(None, "Div", obj(7, -7, b), obj(2, 2, 1)), obj(3, -3, b))  # toward 0
    np.testing.assert_array_equal(sym.arith(None, "Max", obj(b, 1), obj(1, b)), obj(b, b))


def test_multi_head_reshape_from_computed_shapes(onnx):
    # x [B, T, 8] -> [B, T, 2, 4] -> transpose -> [B*2, T, 4], the shapes from Shape/Gather/Div
    from onnx import helper, numpy_helper

    c = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)  # noqa: E731
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i0"], ["b"], axis=0),
        helper.make_node("Gather", ["s", "i1"], ["t"], axis=0),
        helper.make_node("Div", ["c8", "heads"], ["d"]),
        helper.make_node("Unsqueeze", ["b", "ax0"], ["b1"]),
        helper.make_node("Unsqueeze", ["t", "ax0"], ["t1"]),
        helper.make_node("Unsqueeze", ["d", "ax0"], ["d1"]),
        helper.make_node("Concat", ["b1", "t1", "heads1", "d1"], ["shape4"], axis=0),
        helper.make_node("Reshape", ["x", "shape4"], ["x4"]),
        helper.make_node("Transpose", ["x4"], ["xt"], perm=[0, 2, 1, 3]),
        helper.make_node("Mul", ["b1", "heads1"], ["bh"]),
        helper.make_node("Concat", ["bh", "minus1", "d1"], ["shape3"], axis=0),
        helper.make_node("Reshape", ["xt", "shape3"], ["y"]),
        # a row of ones the size of the batch: ConstantOfShape over a symbolic shape
        helper.make_node(
            "ConstantOfShape", ["b1"], ["ones"], value=numpy_helper.from_array(np.array([1.0], np.float32))
        ),
        helper.make_node("Range", ["zero", "t", "one"], ["pos"]),
    ]
    inits = [
        c("i0", 0), c("i1", 1), c("c8", 8), c("heads", 2), c("heads1", [2]), c("ax0", [0]), c("minus1", [-1]),
        c("zero", 0), c("one", 1),
    ]  # fmt: skip
    x = helper.make_tensor_value_info("x", 1, ["N", 3, 8])
    outs = [helper.make_tensor_value_info(n, t, [None] * r) for n, t, r in (("y", 1, 3), ("ones", 1, 1), ("pos", 7, 1))]
    m = _model(nodes, [x], outs, inits)
    imported = _check(m, {"x": np.random.default_rng(0).normal(size=(5, 3, 8)).astype(np.float32)})
    assert "[2*B, 3, 4]" in imported.source or "[2*B, -1, 4]" in imported.source
    assert imported.model.inputs["x"] == ("B", 3, 8)


def test_a_fixed_batch_reshape_with_allowzero_keeps_the_symbolic_batch(onnx):
    # torch.export writes Reshape(allowzero=1) to [1, 8] when exported at batch 1
    from onnx import helper, numpy_helper

    target = numpy_helper.from_array(np.array([1, 8], np.int64), "target")
    node = helper.make_node("Reshape", ["x", "target"], ["y"], allowzero=1)
    m = _model(
        [node],
        [helper.make_tensor_value_info("x", 1, [1, 2, 4])],
        [helper.make_tensor_value_info("y", 1, [1, 8])],
        [target],
    )
    imported = dlc.import_onnx(m, batch="B")
    sess = dlc.Session(imported.model, backend="numpy")
    x = np.arange(24, dtype=np.float32).reshape(3, 2, 4)
    np.testing.assert_array_equal(sess.eval(imported.outputs["y"], {"x": x}), x.reshape(3, 8))


def test_a_dim_that_cannot_be_computed_says_which_node(onnx):
    from onnx import helper, numpy_helper

    from dlc.compiler.importers.onnx_model import ImportError_

    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Add", ["s", "one"], ["s1"]),  # B + 1 is no dim product
        helper.make_node("ConstantOfShape", ["s1"], ["y"]),
    ]
    one = numpy_helper.from_array(np.array([1], np.int64), "one")
    m = _model(
        nodes, [helper.make_tensor_value_info("x", 1, ["N"])], [helper.make_tensor_value_info("y", 1, [None])], [one]
    )
    with pytest.raises(ImportError_, match=r"node 's1' \(Add.*Add of the dims B and 1"):
        dlc.import_onnx(m, batch="B")


def test_a_slice_to_its_own_symbolic_dim_takes_the_whole_axis(onnx):
    from onnx import helper, numpy_helper

    c = lambda name, v: numpy_helper.from_array(np.array(v, np.int64), name)  # noqa: E731
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], start=0, end=1),
        helper.make_node("Slice", ["x", "zeros", "s_and_3", "axes"], ["y"]),
        helper.make_node("Concat", ["s", "three"], ["s_and_3"], axis=0),
    ]
    nodes = [nodes[0], nodes[2], nodes[1]]
    x = helper.make_tensor_value_info("x", 1, ["N", 5])
    y = helper.make_tensor_value_info("y", 1, [None, None])
    m = _model(nodes, [x], [y], [c("zeros", [0, 1]), c("three", [3]), c("axes", [0, 1])])
    _check(m, {"x": np.random.default_rng(1).normal(size=(4, 5)).astype(np.float32)})


def test_a_sequence_length_the_exporter_baked_in_says_so(onnx):
    from onnx import helper, numpy_helper

    from dlc.compiler.importers.onnx_model import ImportError_

    target = numpy_helper.from_array(np.array([7, 4], np.int64), "target")  # B * T traced as 7
    x = helper.make_tensor_value_info("x", 1, ["N", "T", 4])
    z = helper.make_tensor_value_info("z", 1, [None, None])
    m = _model([helper.make_node("Reshape", ["x", "target"], ["z"])], [x], [z], [target])
    with pytest.raises(ImportError_, match=r"Reshape of \[B, T, 4\] .* to \[7, 4\].*import with that dim fixed"):
        dlc.import_onnx(m, batch="B")
