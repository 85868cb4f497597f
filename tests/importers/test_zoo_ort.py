"""onnxruntime as the oracle of the zoo (zoo.py): every model, exported by both of
torch.onnx.export's exporters with a dynamic batch, goes through `dlc import --batch B` as
written (no onnxruntime folding first) and matches onnxruntime (and PyTorch) at another batch
size on numpy, and at a small batch on GL; the emitted .dl holds no `unk__N` dim."""

from __future__ import annotations

import re

import numpy as np
import pytest
import zoo  # tests/importers/zoo.py (pytest puts this folder on the path)

import dlc

# the TorchScript exporter warns that it is legacy and that traces hold Python values
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning", "ignore::Warning")

EXPORTERS = {"torchscript": False, "dynamo": True}


def _onnxruntime(ort, path, feeds: dict) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(["out"], {k: v.numpy() for k, v in feeds.items()})[0]


def _cli_import(dlc_cli, path, folder) -> tuple[str, dict]:
    """`dlc import PATH --batch B`: the .dl text and the ONNX -> .dl names it prints."""
    out = folder / (path.stem + ".dl")
    r = dlc_cli("import", path, "-o", out, "--batch", "B", cwd=folder)
    assert r.returncode == 0, r.stderr
    names = dict(re.findall(r"^  (?:input|output) (\S+) -> (\S+):", r.stdout, re.M))
    return out, names


@pytest.mark.parametrize("exporter", sorted(EXPORTERS))
@pytest.mark.parametrize("name", sorted(zoo.MODELS))
def test_dlc_import_with_a_symbolic_batch_matches_onnxruntime(
    name, exporter, exported, torch, onnxruntime, tmp_path, dlc_cli
):
    path, module, example = exported(name, EXPORTERS[exporter])
    dl_path, names = _cli_import(dlc_cli, path, tmp_path)
    text = dl_path.read_text()
    assert "unk__" not in text
    for k in example:
        assert re.search(rf"^input {re.escape(names[k])}: (i32)?\[B[,\]]", text, re.M), k
    sess = dlc.Session(dlc.compile(dl_path), backend="numpy")
    sess.load(tmp_path / (path.stem + ".weights.npz"))  # the saved weights, keyed by their ONNX names
    feeds = zoo.feeds(torch, example, 3, seed=11)
    got = sess.eval(names["out"], {names[k]: v.numpy() for k, v in feeds.items()})
    np.testing.assert_allclose(got, _onnxruntime(onnxruntime, path, feeds), rtol=1e-4, atol=1e-4)
    with torch.no_grad():
        np.testing.assert_allclose(got, module(*feeds.values()).numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.gl
@pytest.mark.parametrize("name", sorted(zoo.MODELS))
def test_matches_onnxruntime_on_gl(name, exported, torch, onnxruntime, gl):
    path, _, example = exported(name, False)
    imported = dlc.import_onnx(path, batch="B")
    sess = dlc.Session(imported.model, backend="gl")
    sess.set_params(imported.weights)
    feeds = zoo.feeds(torch, example, 2, seed=12)
    got = sess.eval(imported.outputs["out"], {imported.inputs[k]: v.numpy() for k, v in feeds.items()})
    np.testing.assert_allclose(got, _onnxruntime(onnxruntime, path, feeds), rtol=1e-4, atol=1e-4)
