"""An imported model names every ONNX value, so its artifact's eval program (every named
tensor fetchable) stores each; the outputs program fetches the graph outputs alone, fused
across those names (a ReLU folded into its conv), and serves every fetch within them. A GL
Session's program is compiled for the fetches it is asked, so it fuses across them too."""

from __future__ import annotations

import json

import numpy as np
import pytest

import dlc
from dlc.compiler.emit import write_artifact

pytestmark = pytest.mark.gl


def _small_cnn(onnx):
    """conv-ReLU-pool twice, global average pool, Gemm, softmax on [1, 3, 16, 16]."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits, nodes, x = [], [], "image"
    for i, (cin, cout) in enumerate([(3, 8), (8, 16)]):
        w = (rng.standard_normal((cout, cin, 3, 3)) * np.sqrt(2 / (9 * cin))).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(rng.random(cout, np.float32), f"b{i}")]
        nodes.append(helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"]))
        nodes.append(helper.make_node("MaxPool", [f"r{i}"], [f"p{i}"], kernel_shape=[2, 2], strides=[2, 2]))
        x = f"p{i}"
    inits += [
        numpy_helper.from_array(rng.standard_normal((16, 10)).astype(np.float32), "fc"),
        numpy_helper.from_array(np.zeros(10, np.float32), "fcb"),
    ]
    nodes += [
        helper.make_node("GlobalAveragePool", [x], ["g"]),
        helper.make_node("Flatten", ["g"], ["flat"]),
        helper.make_node("Gemm", ["flat", "fc", "fcb"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probs"]),
    ]
    graph = helper.make_graph(
        nodes,
        "small_cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 10])],
        inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.mark.parametrize("target", ["compute", "texture"])
def test_an_imported_models_artifact_fetches_its_outputs_fused(onnx, gl, tmp_path, target):
    if target == "compute" and not gl.has_compute:
        pytest.skip("no compute shaders on this context")
    imported = dlc.import_onnx(_small_cnn(onnx))
    (out,) = imported.outputs.values()
    (image,) = imported.inputs.values()
    folder = write_artifact(imported.model, tmp_path / "cnn.dlc", target=target)
    m = json.loads((folder / "manifest.json").read_text())
    assert m["outputs"] == [out]
    fused, every = m["programs"]["outputs"]["kernels"], m["programs"]["eval"]["kernels"]
    assert sum(len(k["writes"]) for k in fused) < sum(len(k["writes"]) for k in every)
    assert not any(k["name"].endswith("_relu") and "conv" not in k["name"] for k in fused), [k["name"] for k in fused]
    x = {image: np.random.default_rng(1).random((1, 3, 16, 16), np.float32)}
    ref = dlc.Session(imported.model, backend="numpy")
    ref.set_params(imported.weights)
    want = ref.eval([out, "r0"], x)
    sess = dlc.load(folder)
    try:
        sess.set_params(imported.weights)
        assert sess.backend.eval_plan([out])[0] == "outputs" and sess.backend.eval_plan([out, "r0"])[0] == "eval"
        got = sess.eval(out, x)
        both = sess.eval([out, "r0"], x)
    finally:
        sess.close()
    np.testing.assert_allclose(got, want[out], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(both[out], got, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(both["r0"], want["r0"], rtol=1e-5, atol=1e-5)
    # a GL Session over the model compiles a program for the fetches asked: no more kernels
    # than the artifact's outputs program
    gl_sess = dlc.Session(imported.model, backend="gl", target=target)
    try:
        gl_sess.set_params(imported.weights)
        np.testing.assert_allclose(gl_sess.eval(out, x), want[out], rtol=1e-5, atol=1e-6)
        ((_, compiled, _),) = gl_sess.backend._programs.values()
        assert len(compiled.spec.kernels) == len(fused)
    finally:
        gl_sess.close()
