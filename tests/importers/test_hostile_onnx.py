"""Hostile ONNX files, built here with onnx.helper: each is refused with an error naming the
file and the node, initializer or value at fault, before anything large is computed, and
nothing is written. Folding within the limit still gives the right values."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest

import dlc

# the importer's modules import onnx: without it they skip (CI, DLC_REQUIRE_ONNX=1: fail), as conftest's
if importlib.util.find_spec("onnx") is None and not os.environ.get("DLC_REQUIRE_ONNX"):
    pytest.skip('onnx is not installed (pip install "dlc[onnx]")', allow_module_level=True)

from dlc.compiler.importers.fold_limit import DEFAULT_MAX_CONST_BYTES
from dlc.compiler.importers.onnx_checks import ImportError_

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _model(nodes, inputs, outputs, inits=(), opset=13):
    from onnx import helper

    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name, shape, elem=1):
    from onnx import helper

    return helper.make_tensor_value_info(name, elem, shape)


def _add_w(w):
    """y = x + w for x: [2, 3] and the initializer `w`."""
    from onnx import helper

    return _model([helper.make_node("Add", ["x", "w"], ["y"])], [_vi("x", [2, 3])], [_vi("y", [2, 3])], [w])


def _refused(onnx, tmp_path, model, *want, max_const_bytes=None) -> str:
    """Import `model` from a file: the error names the file and each of `want`, and no .dl or
    weights file is written."""
    path = tmp_path / "m.onnx"
    if isinstance(model, bytes):
        path.write_bytes(model)
    else:
        onnx.save(model, str(path))
    before = set(os.listdir(tmp_path))
    with pytest.raises(ImportError_) as e:
        dlc.import_onnx(str(path), max_const_bytes=max_const_bytes)
    msg = str(e.value)
    assert msg.startswith(f"{path}: "), msg
    for w in want:
        assert w in msg, msg
    assert set(os.listdir(tmp_path)) == before
    return msg


def _constant_of_shape(dims, out="c", shape_name="s"):
    from onnx import TensorProto, helper

    s = helper.make_tensor(shape_name, TensorProto.INT64, [len(dims)], dims)
    value = helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])
    return s, helper.make_node("ConstantOfShape", [shape_name], [out], value=value, name=f"make_{out}")


# -- bounded constant folding ------------------------------------------------------------


def test_a_huge_constant_of_shape_is_refused_before_it_is_computed(onnx, tmp_path, dlc_cli):
    from onnx import helper

    s, cos = _constant_of_shape([32768, 32768])
    m = _model(
        [cos, helper.make_node("Add", ["x", "c"], ["y"])], [_vi("x", [32768, 32768])], [_vi("y", [32768, 32768])], [s]
    )
    onnx.save(m, str(tmp_path / "cos.onnx"))
    assert os.path.getsize(tmp_path / "cos.onnx") < 200
    r = dlc_cli("import", tmp_path / "cos.onnx", "-o", tmp_path / "cos.dl", timeout=60)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"{tmp_path / 'cos.onnx'}: cannot import node 'make_c' (ConstantOfShape, opset 13)" in r.stderr
    assert f"'c' of {32768 * 32768 * 4} bytes, over the limit of {DEFAULT_MAX_CONST_BYTES} bytes" in r.stderr
    assert "--max-const-bytes" in r.stderr and "supported ONNX ops" not in r.stderr
    assert sorted(os.listdir(tmp_path)) == ["cos.onnx"]


def test_max_const_bytes_raises_the_limit_and_the_folded_values_are_right(onnx, tmp_path, dlc_cli):
    from onnx import helper

    s, cos = _constant_of_shape([10, 10])  # 400 bytes of float32 ones
    m = _model([cos, helper.make_node("Add", ["x", "c"], ["y"])], [_vi("x", [10, 10])], [_vi("y", [10, 10])], [s])
    _refused(onnx, tmp_path, m, "over the limit of 399 bytes a folded constant", max_const_bytes=399)
    imported = dlc.import_onnx(m, max_const_bytes=400)
    sess = dlc.Session(imported.model, backend="numpy")
    sess.set_params(imported.weights)
    x = np.random.default_rng(0).normal(size=(10, 10)).astype(np.float32)
    np.testing.assert_array_equal(sess.eval(imported.outputs["y"], {imported.inputs["x"]: x}), x + 1)
    onnx.save(m, str(tmp_path / "small.onnx"))
    r = dlc_cli("import", tmp_path / "small.onnx", "--max-const-bytes", "399")
    assert r.returncode == 1 and "over the limit of 399 bytes" in r.stderr, r.stderr
    r = dlc_cli("import", tmp_path / "small.onnx", "--max-const-bytes", "400", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    for bad in ("0", "-5", "lots"):
        r = dlc_cli("import", tmp_path / "small.onnx", "--max-const-bytes", bad)
        assert r.returncode == 2 and "--max-const-bytes" in r.stderr, r.stderr


def test_the_limit_holds_for_all_folded_constants_together(onnx, tmp_path):
    from onnx import helper

    s1, c1 = _constant_of_shape([10, 10], "c1", "s1")
    s2, c2 = _constant_of_shape([10, 10], "c2", "s2")
    nodes = [c1, c2, helper.make_node("Add", ["c1", "c2"], ["c3"]), helper.make_node("Add", ["x", "c3"], ["y"])]
    m = _model(nodes, [_vi("x", [10, 10])], [_vi("y", [10, 10])], [s1, s2])
    # c1 and c2 (400 bytes each) fit 1000 bytes; c3 would bring the total to 1200
    _refused(
        onnx, tmp_path, m, "node 'c3' (Add", "to 1200 bytes, over the limit of 1000 bytes in all", max_const_bytes=1000
    )
    imported = dlc.import_onnx(m, max_const_bytes=1200)
    sess = dlc.Session(imported.model, backend="numpy")
    sess.set_params(imported.weights)
    x = np.zeros((10, 10), np.float32)
    np.testing.assert_array_equal(sess.eval(imported.outputs["y"], {imported.inputs["x"]: x}), x + 2)


def test_a_shape_the_models_inference_cannot_give_is_sized_from_the_node_alone(onnx, tmp_path):
    from onnx import TensorProto, helper

    # Shape inference does not carry values through Abs, so the model's inferred shapes
    # leave ConstantOfShape's output unknown; the node alone, its input known, gives it.
    s = helper.make_tensor("s", TensorProto.INT64, [2], [-32768, 32768])
    value = helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])
    nodes = [
        helper.make_node("Abs", ["s"], ["dims"]),
        helper.make_node("ConstantOfShape", ["dims"], ["c"], value=value, name="big"),
        helper.make_node("ReduceSum", ["c"], ["total"], keepdims=0),
        helper.make_node("Add", ["x", "total"], ["y"]),
    ]
    m = _model(nodes, [_vi("x", [1])], [_vi("y", [1])], [s])
    _refused(onnx, tmp_path, m, "node 'big' (ConstantOfShape", f"'c' of {32768 * 32768 * 4} bytes")


# -- initializers against their data -------------------------------------------------------


def test_initializers_that_declare_more_elements_than_they_hold_are_refused(onnx, tmp_path):
    from onnx import TensorProto

    for dims, count in (([2**20, 2**20], 2**40), ([10**8], 10**8)):
        w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=dims, raw_data=b"\0" * 16)
        _refused(
            onnx,
            tmp_path,
            _add_w(w),
            f"initializer 'w' declares shape {dims} ({count} FLOAT elements), {4 * count} bytes, but holds 16 bytes",
        )
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2, 3], raw_data=b"\0" * 28)  # 4 bytes too many
    _refused(onnx, tmp_path, _add_w(w), "initializer 'w'", "24 bytes, but holds 28 bytes")
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2, 3], float_data=[1, 2, 3])
    _refused(
        onnx, tmp_path, _add_w(w), "initializer 'w' declares shape [2, 3] (6 FLOAT elements) but its float_data holds 3"
    )
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2, -3], float_data=[1, 2, 3])
    _refused(onnx, tmp_path, _add_w(w), "initializer 'w' has a negative dim in its shape [2, -3]")


def test_external_data_is_read_only_from_inside_the_models_folder_and_checked(onnx, tmp_path):
    from onnx import numpy_helper
    from onnx.external_data_helper import set_external_data

    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    m = _add_w(numpy_helper.from_array(w, "w"))
    good = tmp_path / "good"
    good.mkdir()
    onnx.save(m, str(good / "m.onnx"), save_as_external_data=True, location="m.data", size_threshold=0)
    imported = dlc.import_onnx(str(good / "m.onnx"))
    np.testing.assert_array_equal(imported.weights["w"], w)

    for location, offset, length, want in (
        ("../secret.data", 0, 24, "'../secret.data', which is not a file inside the model's folder"),
        ("/etc/hostname", 0, 24, "which is not a file inside the model's folder"),
        ("missing.data", 0, 24, "'missing.data', which does not exist"),
        ("m.data", 0, 12, "24 bytes, but its external data ('m.data', offset 0) has length 12"),
        ("m.data", 16, 24, "('m.data', offset 16) runs past the end of the file (24 bytes)"),
    ):
        (tmp_path / "secret.data").write_bytes(w.tobytes())
        (tmp_path / "m.data").write_bytes(w.tobytes())
        t = numpy_helper.from_array(w, "w")
        set_external_data(t, location, offset, length)
        t.ClearField("raw_data")
        _refused(onnx, tmp_path, _add_w(t), "initializer 'w'", want)
    with pytest.raises(ImportError_, match="keeps its data in an external file; import the model from its file"):
        dlc.import_onnx(_add_w(t))  # a ModelProto has no folder to read from


# -- files and graphs onnx's checker refuses ------------------------------------------------


def test_an_empty_file_is_refused(onnx, tmp_path):
    _refused(onnx, tmp_path, b"", "the file is empty, not an ONNX model")


def test_two_writers_of_one_name_are_refused_with_the_checkers_message(onnx, tmp_path):
    from onnx import helper

    x, y = _vi("x", [2, 3]), _vi("y", [2, 3])
    two = _model([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Sigmoid", ["x"], ["y"])], [x], [y])
    _refused(
        onnx, tmp_path, two, "onnx's checker refuses the model", "'y' has been used as output names multiple times"
    )
    itself = _model([helper.make_node("Relu", ["x"], ["x"])], [x], [x])
    _refused(
        onnx, tmp_path, itself, "onnx's checker refuses the model", "'x' has been used as output names multiple times"
    )


def test_a_negative_dim_is_refused_naming_the_value(onnx, tmp_path):
    from onnx import helper

    m = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [-2, 3])], [_vi("y", [-2, 3])])
    _refused(onnx, tmp_path, m, "graph input 'x' has a negative dim (-2) in its shape [-2, 3]")


@pytest.mark.parametrize("opset", [0, 99])
def test_an_opset_out_of_range_is_refused(onnx, tmp_path, opset):
    from onnx import helper

    m = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [2])], [_vi("y", [2])], opset=opset)
    top = onnx.defs.onnx_opset_version()
    _refused(onnx, tmp_path, m, f"imports opset {opset} of the default ONNX domain; dlc imports opsets 1 to {top}")


def test_without_the_onnx_package_the_import_says_how_to_install_it(onnx, tmp_path):
    from onnx import helper

    onnx.save(
        _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [2])], [_vi("y", [2])]), str(tmp_path / "m.onnx")
    )
    code = "import sys; sys.modules['onnx'] = None; from dlc.cli import main; sys.exit(main(sys.argv[1:]))"
    r = subprocess.run(
        [sys.executable, "-c", code, "import", str(tmp_path / "m.onnx")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert "importing ONNX models needs onnx, which is not installed: pip install 'dlc[onnx]'" in r.stderr
    assert "internal error" not in r.stderr


def test_onnx_names_over_the_limit_are_cut_to_fit_it(onnx):
    from onnx import helper

    from dlc.runtime.sizes import MAX_NAME

    long_in, long_out = "x" * 5001, "y/" * 300
    m = _model(
        [helper.make_node("Relu", [long_in], ["r"]), helper.make_node("Neg", ["r"], [long_out])],
        [_vi(long_in, [2])],
        [_vi(long_out, [2])],
    )
    imported = dlc.import_onnx(m)
    assert imported.inputs[long_in] == "x" * (MAX_NAME - 8)
    assert imported.outputs[long_out] == "y_" * ((MAX_NAME - 8) // 2)
    sess = dlc.Session(imported.model, backend="numpy")
    x = np.array([-1.5, 2.0], np.float32)
    np.testing.assert_array_equal(
        sess.eval(imported.outputs[long_out], {imported.inputs[long_in]: x}), -np.maximum(x, 0)
    )
