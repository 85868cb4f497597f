"""The light model zoo shipped in the onnx wheel (onnx/backend/test/data/light/): every
model imports and matches its expected output, with onnx's own input (arange / size) and
tolerance (rtol 1e-3 (densenet 2e-3), atol 1e-7) plus an absolute slack of 1e-6 for
float32 sums summed in another order."""

from __future__ import annotations

import os

import numpy as np
import pytest

import dlc

MODELS = {
    "bvlc_alexnet": 1e-3,
    "densenet121": 2e-3,
    "inception_v1": 1e-3,
    "inception_v2": 1e-3,
    "resnet50": 1e-3,
    "shufflenet": 1e-3,
    "squeezenet": 1e-3,
    "vgg19": 1e-3,
    "zfnet512": 1e-3,
}
SLACK = 1e-6
# Their weights are ConstantOfShape nodes, folded at import: vgg19's come to 548 MiB, over
# the default bound on folded constants (64 MiB).
FOLD_BYTES = 2**30


def _case(onnx, name):
    from onnx import numpy_helper

    folder = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    expected = numpy_helper.to_array(onnx.load_tensor(os.path.join(folder, f"light_{name}_output_0.pb")))
    return os.path.join(folder, f"light_{name}.onnx"), expected


def _input(shape):
    # What onnx's backend test runner feeds these models (generate_dummy_data, random=False).
    n = int(np.prod(shape))
    return (np.arange(n).reshape(shape) / n).astype(np.float32)


def _run(imported, backend):
    (name,) = imported.inputs.values()
    (out,) = imported.outputs.values()
    sess = dlc.Session(imported.model, backend=backend)
    sess.set_params(imported.weights)
    return sess.eval(out, {name: _input(imported.model.inputs[name])})


@pytest.mark.parametrize("name", sorted(MODELS))
def test_light_model_matches_on_numpy(onnx, name):
    path, expected = _case(onnx, name)
    got = _run(dlc.import_onnx(path, max_const_bytes=FOLD_BYTES), "numpy")
    np.testing.assert_allclose(got, expected, rtol=MODELS[name], atol=1e-7 + SLACK)


@pytest.mark.gl
def test_squeezenet_matches_on_gl(onnx, gl):
    path, expected = _case(onnx, "squeezenet")
    got = _run(dlc.import_onnx(path, max_const_bytes=FOLD_BYTES), "gl")
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-7 + SLACK)


def test_resnet50_with_a_symbolic_batch(onnx, tmp_path, dlc_cli):
    # The "done when": import with --batch, then dlc eval on a batch of two.
    path, expected = _case(onnx, "resnet50")
    r = dlc_cli("import", path, "-o", tmp_path / "r50.dl", "--batch", "N", "--max-const-bytes", str(FOLD_BYTES))
    assert r.returncode == 0, r.stderr
    assert "input gpu_0/data_0 -> gpu_0_data_0: [N, 3, 224, 224]" in r.stdout
    x = _input((1, 3, 224, 224))
    np.savez(tmp_path / "input.npz", gpu_0_data_0=np.concatenate([x, x]))
    r = dlc_cli(
        "eval",
        tmp_path / "r50.dl",
        "--weights",
        tmp_path / "r50.weights.npz",
        "--data",
        tmp_path / "input.npz",
        "--fetch",
        "gpu_0_softmax_1",
        "--backend",
        "numpy",
        "--out",
        tmp_path / "out.npz",
    )
    assert r.returncode == 0, r.stderr
    got = np.load(tmp_path / "out.npz")["gpu_0_softmax_1"]
    assert got.shape == (2, 1000)
    np.testing.assert_allclose(got, np.concatenate([expected, expected]), rtol=1e-3, atol=1e-7 + SLACK)
