"""Constants stay constant, and params keep their ONNX names (README, "Importing ONNX
models"): each rule on a graph of its own, built with onnx.helper, checked against NumPy."""

from __future__ import annotations

import numpy as np
import pytest

import dlc
from dlc.runtime.errors import DataError


def _model(onnx, nodes, inits, x_shape, out_shape):
    h = onnx.helper
    g = h.make_graph(
        nodes,
        "g",
        [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x_shape)],
        [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, out_shape)],
        [onnx.numpy_helper.from_array(np.asarray(a), k) for k, a in inits.items()],
    )
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


def _decl(src: str, name: str) -> str:
    """The declaration line of `name` in the imported .dl."""
    lines = [ln for ln in src.splitlines() if ln.split(":")[0].split("=")[0].split()[-1:] == [name]]
    assert len(lines) == 1, (name, src)
    return lines[0]


def _eval(imported, x):
    sess = dlc.Session(imported.model, backend="numpy")
    sess.set_params(imported.weights)
    return sess.eval(imported.outputs["y"], {imported.inputs["x"]: x})


def test_initializers_read_as_shapes_exponents_scales_masks_and_indices_are_constants(onnx):
    h = onnx.helper
    rng = np.random.default_rng(0)
    w = rng.normal(size=(4, 5)).astype(np.float32)  # the one trainable param
    mask = np.tril(np.ones((5, 5), bool))  # 25 elements: large, yet never trained
    inits = {
        "w": w,
        "shape": np.array([0, 5], np.int64),
        "exponent": np.array([2.0, 3.0, 2.0, 3.0, 2.0], np.float32),
        "scale": np.array(0.5, np.float32),
        "mask": mask,
        "fill": np.array(-1.0, np.float32),
        "rows": np.array([4, 0, 1, 3, 2], np.int64),
    }
    nodes = [
        h.make_node("MatMul", ["x", "w"], ["a"]),
        h.make_node("Reshape", ["a", "shape"], ["b"]),
        h.make_node("Pow", ["b", "exponent"], ["c"]),
        h.make_node("Mul", ["c", "scale"], ["d"]),
        h.make_node("Gather", ["d", "rows"], ["e"], axis=1),
        h.make_node("Where", ["mask", "e", "fill"], ["y"]),
    ]
    imported = dlc.import_onnx(_model(onnx, nodes, inits, [5, 4], [5, 5]))
    src = imported.source
    assert _decl(src, "w").startswith("param w: [4, 5]")
    for name in ("shape", "exponent", "scale", "fill", "rows"):  # consts, or inlined where they are read
        assert name not in imported.weights and f"param {name}:" not in src
    assert _decl(src, "scale") == "const scale = 0.5"  # a scalar stays a scalar
    assert _decl(src, "mask").startswith("frozen param mask: [5, 5]") and imported.weights["mask"].shape == (5, 5)
    x = rng.normal(size=(5, 4)).astype(np.float32)
    d = ((x @ w) ** inits["exponent"]) * 0.5
    want = np.where(mask, d[:, inits["rows"]], -1.0)
    np.testing.assert_allclose(_eval(imported, x), want, rtol=1e-5)


def test_a_subgraph_folded_at_import_does_not_bake_the_batch_into_a_param(onnx):
    # ConstantOfShape(Shape(x)) is [2, 20] at the export's batch: 40 elements, which would be
    # a param of that shape; with a symbolic batch it is `full` of the run's shape instead
    h = onnx.helper
    nodes = [
        h.make_node("Shape", ["x"], ["s"]),
        h.make_node("ConstantOfShape", ["s"], ["ones"], value=h.make_tensor("v", onnx.TensorProto.FLOAT, [1], [2.0])),
        h.make_node("Mul", ["x", "ones"], ["y"]),
    ]
    imported = dlc.import_onnx(_model(onnx, nodes, {}, [2, 20], [2, 20]), batch="B")
    assert not imported.weights and "full([B, 20], 2.0)" in imported.source
    x = np.arange(60, dtype=np.float32).reshape(3, 20)
    np.testing.assert_array_equal(_eval(imported, x), 2 * x)


@pytest.fixture
def sequential(onnx, torch, tmp_path):
    """nn.Sequential exported: its params are `0.weight`, `0.bias`, `2.weight`, `2.bias`."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2)).eval()
    path = tmp_path / "seq.onnx"
    torch.onnx.export(
        net,
        (torch.randn(2, 3),),
        str(path),
        dynamo=False,
        input_names=["x"],
        output_names=["y"],
        dynamic_axes={"x": {0: "B"}, "y": {0: "B"}},
    )
    return path, net


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_params_keep_their_onnx_names_in_the_weights_file_and_the_patterns(sequential, torch, tmp_path, dlc_cli):
    path, net = sequential
    r = dlc_cli("import", path, "-o", tmp_path / "seq.dl", "--batch", "B", "--freeze", "0.*", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    src = (tmp_path / "seq.dl").read_text()
    # the .dl names are valid (`t_` before a first segment that starts with a digit) ...
    assert "frozen param t_0.weight: [3, 4]" in src and "param t_2.weight: [4, 2]" in src
    # ... the weights file keeps the state_dict's keys, and loads back through the same rule
    with np.load(tmp_path / "seq.weights.npz") as z:
        assert set(z.files) == set(net.state_dict())
        np.testing.assert_array_equal(z["2.bias"], net.state_dict()["2.bias"].numpy())
    sess = dlc.Session(dlc.compile(tmp_path / "seq.dl"), backend="numpy")
    sess.load(tmp_path / "seq.weights.npz")
    x = np.random.default_rng(1).normal(size=(5, 3)).astype(np.float32)
    with torch.no_grad():
        want = net(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(sess.eval("y", {"x": x}), want, rtol=1e-5, atol=1e-6)
    # `--trainable` matches the ONNX names too; the saved params load into an imported model
    imported = dlc.import_onnx(path, batch="B", trainable=["2.weight"])
    assert {ln.split()[1].rstrip(":") for ln in imported.source.splitlines() if ln.startswith("param ")} == {
        "t_2.weight"
    }
    assert set(imported.weights) == set(net.state_dict())
    sess.save(tmp_path / "again.npz")  # Session.save writes the .dl names; they load as well
    sess.load(tmp_path / "again.npz")
    # `dlc export --web --weights` reads them through the same rule
    from dlc.web import export_web

    web = export_web(tmp_path / "seq.dl", tmp_path / "web", weights=tmp_path / "seq.weights.npz")
    assert (web / "weights.bin").stat().st_size == 4 * sum(v.numel() for v in net.state_dict().values())


def test_a_weights_file_naming_one_param_twice_is_refused(sequential):
    imported = dlc.import_onnx(sequential[0], batch="B")
    sess = dlc.Session(imported.model, backend="numpy")
    values = {**imported.weights, "t_0.bias": imported.weights["0.bias"]}
    with pytest.raises(DataError, match="'t_0.bias' and another array both hold the param 't_0.bias'"):
        sess.set_params(values)
