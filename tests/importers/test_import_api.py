"""dlc.import_onnx and `dlc import` on small hand-built graphs: names, constants, opsets,
the batch dim, and the errors (node, op type, opset, what, the supported list)."""

from __future__ import annotations

import numpy as np
import pytest

import dlc


def _model(onnx, nodes, inputs, outputs, inits=(), opset=13):
    from onnx import helper

    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _vi(onnx, name, shape, elem=1):
    from onnx import helper

    return helper.make_tensor_value_info(name, elem, shape)


def _run(imported, **feeds):
    sess = dlc.Session(imported.model, backend="numpy")
    sess.set_params(imported.weights)
    return {o: sess.eval(d, {imported.inputs[k]: v for k, v in feeds.items()}) for o, d in imported.outputs.items()}


def test_names_are_kept_or_escaped_and_mapped(onnx):
    from onnx import helper

    m = _model(
        onnx,
        [helper.make_node("Relu", ["input"], ["1/out"]), helper.make_node("Neg", ["1/out"], ["y"])],
        [_vi(onnx, "input", [2, 3])],
        [_vi(onnx, "1/out", [2, 3]), _vi(onnx, "y", [2, 3])],
    )
    imp = dlc.import_onnx(m)
    assert imp.inputs == {"input": "t_input"}
    assert imp.outputs == {"1/out": "t_1_out", "y": "y"}
    assert "t_1_out = relu(t_input)" in imp.source
    x = np.random.default_rng(0).normal(size=(2, 3)).astype(np.float32)
    out = _run(imp, input=x)
    np.testing.assert_array_equal(out["y"], -np.maximum(x, 0))


def test_large_constants_become_params_small_ones_are_inlined(onnx):
    from onnx import helper, numpy_helper

    big = np.arange(40, dtype=np.float32).reshape(4, 10)
    small = np.array([1.5, -2.0], np.float32)
    m = _model(
        onnx,
        [
            helper.make_node("Constant", [], ["big"], value=numpy_helper.from_array(big)),
            helper.make_node("MatMul", ["x", "big"], ["h"]),
            helper.make_node("Constant", [], ["small"], value=numpy_helper.from_array(small)),
            helper.make_node("Slice", ["h", "st", "en"], ["hs"]),
            helper.make_node("Mul", ["hs", "small"], ["y"]),
        ],
        [_vi(onnx, "x", [3, 4])],
        [_vi(onnx, "y", [3, 2])],
        [
            numpy_helper.from_array(np.array([0, 0], np.int64), "st"),
            numpy_helper.from_array(np.array([3, 2], np.int64), "en"),
        ],
    )
    imp = dlc.import_onnx(m)
    assert "param big: [4, 10]" in imp.source and "const small: [2] = [1.5, -2.0]" in imp.source
    np.testing.assert_array_equal(imp.weights["big"], big)
    x = np.random.default_rng(1).normal(size=(3, 4)).astype(np.float32)
    np.testing.assert_allclose(_run(imp, x=x)["y"], (x @ big)[:, :2] * small, rtol=1e-6)


@pytest.mark.parametrize("opset", [11, 13])
def test_softmax_axis_semantics_of_old_and_new_opsets(onnx, opset):
    from onnx import helper

    m = _model(
        onnx,
        [helper.make_node("Softmax", ["x"], ["y"], axis=1)],
        [_vi(onnx, "x", [2, 3, 4])],
        [_vi(onnx, "y", [2, 3, 4])],
        opset=opset,
    )
    x = np.random.default_rng(2).normal(size=(2, 3, 4)).astype(np.float32)
    if opset < 13:  # the input seen as [2, 12]
        e = np.exp(x.reshape(2, 12) - x.reshape(2, 12).max(1, keepdims=True))
        want = (e / e.sum(1, keepdims=True)).reshape(2, 3, 4)
    else:
        e = np.exp(x - x.max(1, keepdims=True))
        want = e / e.sum(1, keepdims=True)
    np.testing.assert_allclose(_run(dlc.import_onnx(m), x=x)["y"], want, rtol=1e-5)


def test_symbolic_batch(onnx):
    from onnx import helper, numpy_helper

    w = np.random.default_rng(3).normal(size=(5, 4)).astype(np.float32)
    m = _model(
        onnx,
        [helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)],
        [_vi(onnx, "x", [1, 4])],
        [_vi(onnx, "y", [1, 5])],
        [numpy_helper.from_array(w, "w")],
    )
    imp = dlc.import_onnx(m, batch="B")
    assert imp.model.inputs["x"] == ("B", 4)
    np.testing.assert_array_equal(imp.weights["w"], w.T)  # stored as [K, N]
    x = np.random.default_rng(4).normal(size=(7, 4)).astype(np.float32)
    np.testing.assert_allclose(_run(imp, x=x)["y"], x @ w.T, rtol=1e-5)
    assert dlc.import_onnx(m, batch=3).model.inputs["x"] == (3, 4)


def _error(onnx, m):
    from dlc.compiler.importers.onnx_model import ImportError_

    with pytest.raises(ImportError_) as e:
        dlc.import_onnx(m)
    return str(e.value)


def test_an_unsupported_op_names_node_op_opset_and_the_supported_list(onnx):
    from onnx import helper

    m = _model(
        onnx, [helper.make_node("Det", ["x"], ["y"], name="hm")], [_vi(onnx, "x", [2, 3, 3])], [_vi(onnx, "y", [2])]
    )
    msg = _error(onnx, m)
    assert msg.startswith("cannot import node 'hm' (Det, opset 13): op Det is not supported")
    assert "supported ONNX ops: Abs, Acos, " in msg and ", Add, " in msg and "Conv" in msg


def test_an_unsupported_attribute_says_what(onnx):
    from onnx import helper

    m = _model(
        onnx,
        [helper.make_node("Gelu", ["x"], ["y"], approximate="sigmoid")],
        [_vi(onnx, "x", [2, 3])],
        [_vi(onnx, "y", [2, 3])],
        opset=20,
    )
    assert "Gelu approximate='sigmoid' is not supported (none, tanh)" in _error(onnx, m)


def test_integer_and_bool_inputs_are_i32_and_compute_exactly(onnx):
    from onnx import helper

    nodes = [
        helper.make_node("Add", ["x", "x"], ["s"]),
        helper.make_node("Not", ["m"], ["nm"]),
        helper.make_node("Cast", ["nm"], ["nmi"], to=7),
        helper.make_node("Mul", ["s", "nmi"], ["y"]),
        helper.make_node("Div", ["x", "two"], ["q"]),  # integer division truncates toward zero
    ]
    two = onnx.numpy_helper.from_array(np.array(2, np.int64), "two")
    outs = [_vi(onnx, "y", [3], 7), _vi(onnx, "q", [3], 7)]
    m = _model(onnx, nodes, [_vi(onnx, "x", [3], 7), _vi(onnx, "m", [3], 9)], outs, [two])
    imp = dlc.import_onnx(m)
    assert "input x: i32[3]" in imp.source and "input m: i32[3]" in imp.source
    x, mask = np.array([5, -7, 1 << 20]), np.array([True, False, False])
    got = _run(imp, x=x, m=mask)
    np.testing.assert_array_equal(got["y"], np.where(mask, 0, 2 * x))
    np.testing.assert_array_equal(got["q"], [2, -3, 1 << 19])


def test_an_input_of_another_element_type_says_so(onnx):
    from onnx import helper

    m = _model(onnx, [helper.make_node("Identity", ["x"], ["y"])], [_vi(onnx, "x", [2], 8)], [_vi(onnx, "y", [2], 8)])
    msg = _error(onnx, m)
    assert "graph input 'x' has element type STRING" in msg and "i32" in msg


def test_cli_errors_exit_1_without_a_traceback(onnx, tmp_path, dlc_cli):
    from onnx import helper

    m = _model(
        onnx, [helper.make_node("Det", ["x"], ["y"], name="hm")], [_vi(onnx, "x", [2, 3, 3])], [_vi(onnx, "y", [2])]
    )
    onnx.save(m, str(tmp_path / "bad.onnx"))
    (tmp_path / "junk.onnx").write_bytes(b"\xff\x00 not a model")
    for path, want in (
        (tmp_path / "bad.onnx", f"error: {tmp_path / 'bad.onnx'}: cannot import node 'hm' (Det, opset 13)"),
        (tmp_path / "junk.onnx", "not a readable ONNX model"),
        (tmp_path / "missing.onnx", "no such file"),
    ):
        r = dlc_cli("import", path)
        assert r.returncode == 1 and want in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = dlc_cli("import", tmp_path / "bad.onnx", "--batch", "-1")
    assert r.returncode == 2 and "--batch" in r.stderr


@pytest.mark.parametrize("start, end, step", [(1, 7, 2), (0, 8, 3), (6, 0, -2), (-1, -9, -1)])
def test_slice_steps(onnx, start, end, step):
    from onnx import helper, numpy_helper

    x = np.random.default_rng(5).normal(size=(3, 8)).astype(np.float32)
    want = x[:, start:end:step]
    consts = [
        numpy_helper.from_array(np.array(v, np.int64), n)
        for n, v in (("st", [start]), ("en", [end]), ("ax", [1]), ("sp", [step]))
    ]
    m = _model(
        onnx,
        [helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y"])],
        [_vi(onnx, "x", [3, 8])],
        [_vi(onnx, "y", list(want.shape))],
        consts,
    )
    imp = dlc.import_onnx(m, batch="B")
    np.testing.assert_array_equal(_run(imp, x=x)["y"], want)


@pytest.mark.parametrize(
    "mode, value", [("constant", 0.0), ("constant", -1.5), ("edge", 0.0), ("reflect", 0.0), ("wrap", 0.0)]
)
def test_pad_modes(onnx, mode, value):
    from onnx import helper, numpy_helper

    x = np.random.default_rng(6).normal(size=(2, 3, 4)).astype(np.float32)
    pads = [0, 2, 1, 0, 1, 3]  # before for axes 0-2, then after
    width = list(zip(pads[:3], pads[3:]))
    want = (
        np.pad(x, width, mode=mode, constant_values=value)
        if mode == "constant"
        else np.pad(x, width, mode={"edge": "edge", "reflect": "reflect", "wrap": "wrap"}[mode])
    )
    consts = [
        numpy_helper.from_array(np.array(pads, np.int64), "pads"),
        numpy_helper.from_array(np.array(value, np.float32), "value"),
    ]
    m = _model(
        onnx,
        [helper.make_node("Pad", ["x", "pads", "value"], ["y"], mode=mode)],
        [_vi(onnx, "x", [2, 3, 4])],
        [_vi(onnx, "y", list(want.shape))],
        consts,
    )
    np.testing.assert_array_equal(_run(dlc.import_onnx(m), x=x)["y"], want)


def _linear(onnx):
    """y = x @ fc.weight^T + fc.bias, as torch exports nn.Linear (names with dots)."""
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(5)
    w, b = rng.normal(size=(3, 4)).astype(np.float32), rng.normal(size=3).astype(np.float32)
    return _model(
        onnx,
        [helper.make_node("Gemm", ["x", "fc.weight", "fc.bias"], ["y"], transB=1)],
        [_vi(onnx, "x", [1, 4])],
        [_vi(onnx, "y", [1, 3])],
        [numpy_helper.from_array(w, "fc.weight"), numpy_helper.from_array(b, "fc.bias")],
    )


def test_freeze_and_trainable_import_frozen_params_that_do_not_train(onnx):
    m = _linear(onnx)
    imp = dlc.import_onnx(m, batch="B", freeze=["fc.weight"])  # the ONNX name
    assert "frozen param fc.weight: [4, 3]" in imp.source and "\nparam fc.bias: [3]" in imp.source
    assert dlc.import_onnx(m, batch="B", freeze=["*.bias"]).source.count("frozen param") == 1  # a glob
    imp = dlc.import_onnx(m, batch="B", trainable=["fc.bias"])  # all but fc.bias frozen
    assert "frozen param fc.weight" in imp.source and "frozen param fc.bias" not in imp.source
    src = imp.source + "input t: [B, 3]\nloss cost = mean_squared(y, t)\n"
    s = dlc.Session(dlc.compile(src), backend="numpy")
    s.set_params(imp.weights)
    rng = np.random.default_rng(6)
    feeds = {"x": rng.normal(size=(8, 4)).astype(np.float32), "t": rng.normal(size=(8, 3)).astype(np.float32)}
    s.train(feeds, optimizer=dlc.Adam(0.1), steps=2, batch_size=8)
    assert np.array_equal(s.params["fc.weight"], imp.weights["fc.weight"])
    assert not np.array_equal(s.params["fc.bias"], imp.weights["fc.bias"])


def test_a_freeze_pattern_matching_no_param_is_refused(onnx):
    from dlc.compiler.importers.onnx_model import ImportError_

    with pytest.raises(ImportError_, match="the pattern 'conv\\*' matches no param"):
        dlc.import_onnx(_linear(onnx), freeze=["conv*"])


def test_cli_import_freeze(onnx, tmp_path, dlc_cli):
    onnx.save(_linear(onnx), str(tmp_path / "lin.onnx"))
    args = ["--batch", "B", "--freeze", "fc.w*", "--freeze", "fc.bias"]
    r = dlc_cli("import", tmp_path / "lin.onnx", *args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "lin.dl").read_text().count("frozen param") == 2  # in the working folder
    r = dlc_cli("import", tmp_path / "lin.onnx", "--trainable", "nothing*")
    assert r.returncode == 1 and "the pattern 'nothing*' matches no param" in r.stderr
