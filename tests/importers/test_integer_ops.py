"""Integer and bool tensors through the importer (ids, masks, index arithmetic) and the ops
written over them (GatherND, GatherElements, TopK, ScatterND, CumSum, OneHot, Mod, Trilu, integer
Div), on numpy and GL, against onnx's reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest

import dlc


def _model():
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    c = lambda name, v, dt=np.int64: numpy_helper.from_array(np.array(v, dt), name)  # noqa: E731
    nodes = [
        # a mask from ids, as BERT's attention mask: (ids != 0), cast, cumulative positions
        helper.make_node("Equal", ["ids", "zero"], ["pad"]),
        helper.make_node("Not", ["pad"], ["keep"]),
        helper.make_node("Cast", ["keep"], ["keep_i"], to=T.INT64),
        helper.make_node("CumSum", ["keep_i", "axis1"], ["positions"]),
        helper.make_node("Div", ["positions", "two"], ["half"]),
        helper.make_node("Mod", ["ids", "three"], ["mod3"]),
        helper.make_node("OneHot", ["mod3", "depth3", "onoff"], ["hot"]),
        helper.make_node("Cast", ["keep"], ["keep_f"], to=T.FLOAT),
        helper.make_node("Mul", ["x", "keep_f"], ["masked"]),
        helper.make_node("Trilu", ["table"], ["lower"], upper=0),
        helper.make_node("GatherND", ["lower", "pairs"], ["picked"]),
        helper.make_node("GatherElements", ["x", "cols"], ["along"], axis=1),
        helper.make_node("TopK", ["x", "k2"], ["top", "top_i"], axis=1),
        helper.make_node("ScatterND", ["x", "rows", "new_rows"], ["scattered"]),
        helper.make_node("Where", ["keep", "x", "minus"], ["filled"]),
    ]
    inits = [
        c("zero", 0), c("axis1", 1), c("two", 2), c("three", 3), c("depth3", 3), c("onoff", [0.0, 1.0], np.float32),
        c("k2", [2]), c("rows", [[1]]), c("minus", -1.0, np.float32),
        c("new_rows", np.arange(5, dtype=np.float32).reshape(1, 5) - 9, np.float32),
    ]  # fmt: skip
    inputs = [
        helper.make_tensor_value_info("ids", T.INT64, [3, 5]),
        helper.make_tensor_value_info("x", T.FLOAT, [3, 5]),
        helper.make_tensor_value_info("table", T.FLOAT, [4, 4]),
        helper.make_tensor_value_info("pairs", T.INT64, [3, 2]),
        helper.make_tensor_value_info("cols", T.INT64, [3, 2]),
    ]
    outs = {
        "positions": (T.INT64, [3, 5]), "half": (T.INT64, [3, 5]), "hot": (T.FLOAT, [3, 5, 3]),
        "masked": (T.FLOAT, [3, 5]), "lower": (T.FLOAT, [4, 4]), "picked": (T.FLOAT, [3]),
        "along": (T.FLOAT, [3, 2]), "top": (T.FLOAT, [3, 2]), "top_i": (T.INT64, [3, 2]),
        "scattered": (T.FLOAT, [3, 5]), "filled": (T.FLOAT, [3, 5]),
    }  # fmt: skip
    outputs = [helper.make_tensor_value_info(n, t, s) for n, (t, s) in outs.items()]
    graph = helper.make_graph(nodes, "ints", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("backend", ["numpy", pytest.param("gl", marks=pytest.mark.gl)])
def test_integer_ops_match_the_reference_evaluator(backend, onnx, request):
    from onnx.reference import ReferenceEvaluator

    if backend == "gl":
        request.getfixturevalue("gl")
    model = _model()
    rng = np.random.default_rng(0)
    feeds = {
        "ids": np.array([[4, 0, 7, 1, 0], [2, 2, 0, 0, 0], [9, 5, 3, 8, 6]]),
        "x": rng.normal(size=(3, 5)).astype(np.float32),
        "table": rng.normal(size=(4, 4)).astype(np.float32),
        "pairs": np.array([[3, 0], [1, -1], [0, 0]]),  # -1: from the end
        "cols": np.array([[4, 0], [-2, 1], [2, 2]]),
    }
    imported = dlc.import_onnx(model)
    assert "input ids: i32[3, 5]" in imported.source
    sess = dlc.Session(imported.model, backend=backend)
    sess.set_params(imported.weights)
    want = ReferenceEvaluator(model).run(None, feeds)
    for o, w in zip(model.graph.output, want):
        got = sess.eval(imported.outputs[o.name], {imported.inputs[k]: v for k, v in feeds.items()})
        np.testing.assert_allclose(got, w, rtol=1e-6, atol=1e-7, err_msg=o.name)
