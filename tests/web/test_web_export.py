"""`dlc export --web` without a browser: the folder's files, the weights' offsets, the GLSL ES
shaders, artifacts as input, and the errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

import dlc
from dlc.cli import main
from dlc.errors import DlcError
from dlc.web import export_web

DIGITS = "samples/mlp_digits.dl"


def leaves(out) -> dict[str, np.ndarray]:
    """The arrays weights.bin holds, read by the manifest's offsets."""
    data = json.loads((out / "manifest.json").read_text())
    blob = (out / "weights.bin").read_bytes()
    assert len(blob) == data["web"]["weights"]["bytes"]
    got = {}
    for name, leaf in data["web"]["weights"]["leaves"].items():
        flat = np.frombuffer(blob, "<f4", leaf["count"], leaf["offset"])
        got[name] = flat.reshape(leaf["shape"])
    return got


def test_export_writes_the_folder_with_weights_at_their_offsets(tmp_path):
    sess = dlc.Session(dlc.compile(DIGITS), backend="numpy", seed=3)
    weights = {n: v + 0.5 for n, v in sess.params.items()}  # not the initializers' values
    np.savez(tmp_path / "w.npz", **weights)
    out = export_web(DIGITS, tmp_path / "out", weights=tmp_path / "w.npz")
    names = {p.name for p in out.iterdir()}
    assert {"index.html", "dlc.js", "manifest.json", "weights.bin", "shaders", "model.dl"} <= names
    data = json.loads((out / "manifest.json").read_text())
    assert data["target"] == "texture" and data["web"]["page"] == "digits"
    assert data["train"]["optimizer"]["name"] == "sgd" and set(data["programs"]) == {"eval", "train"}
    got = leaves(out)
    assert set(got) == set(weights)  # sgd keeps no state
    for n, v in weights.items():
        np.testing.assert_array_equal(got[n], v.astype(np.float32))
    files = {p["file"] for prog in data["programs"].values() for k in prog["kernels"] for p in k["passes"]}
    assert files == {p.name for p in (out / "shaders").iterdir()}
    for f in files:
        assert (out / "shaders" / f).read_text().startswith("#version 300 es\nprecision highp float;")
    assert "export async function load" in (out / "dlc.js").read_text()


def test_export_with_adam_packs_its_state(tmp_path):
    out = export_web(DIGITS, tmp_path / "out", optimizer="adam", lr=0.005)
    data = json.loads((out / "manifest.json").read_text())
    assert data["train"]["optimizer"]["name"] == "adam" and data["train"]["optimizer"]["lr"] == 0.005
    got = leaves(out)
    assert {"$t", "W1$m", "W1$v"} <= set(got)
    assert got["W1$m"].shape == (64, 64) and not got["W1$m"].any()


def test_export_of_an_artifact_keeps_its_params_and_training_setup(tmp_path):
    art = tmp_path / "art"
    assert main(["compile", DIGITS, "--train", "--optimizer", "momentum", "-o", str(art)]) == 0
    params = dict(np.load(art / "params.npz"))
    state = {n: v + 0.25 for n, v in np.load(art / "state.npz").items()}  # as if trained a while
    np.savez(art / "state.npz", **state)
    out = export_web(art, tmp_path / "out", lr=0.125)
    data = json.loads((out / "manifest.json").read_text())
    assert data["train"]["optimizer"] == {"name": "momentum", "lr": 0.125, "momentum": 0.9}
    got = leaves(out)
    assert set(got) == set(params) | set(state) == {"W1", "b1", "W2", "b2", "W1$v", "b1$v", "W2$v", "b2$v"}
    for n, v in {**params, **state}.items():
        np.testing.assert_array_equal(got[n], v)
    # another optimizer starts its own state from its initializers
    got = leaves(export_web(art, tmp_path / "out2", optimizer="adam"))
    assert "W1$v" in got and not got["W1$v"].any() and "W1$m" in got


def test_a_model_without_a_loss_exports_eval_only(tmp_path):
    model = tmp_path / "m.dl"
    model.write_text("input x: [N, 3]\nparam w: [3] = ones\ny = x * w\n")
    out = export_web(model, tmp_path / "out")
    data = json.loads((out / "manifest.json").read_text())
    assert data["train"] is None and set(data["programs"]) == {"eval"} and data["web"]["page"] == "generic"
    with pytest.raises(DlcError, match="no loss to train"):
        export_web(model, tmp_path / "out2", optimizer="adam")


def test_export_errors_name_what_is_wrong(tmp_path):
    with pytest.raises(DlcError, match="not a dlc artifact"):
        export_web(tmp_path, tmp_path / "out")
    with pytest.raises(DlcError, match="no loss 'nope'"):
        export_web(DIGITS, tmp_path / "out", loss="nope")
    good = dlc.Session(dlc.compile(DIGITS), backend="numpy").params
    np.savez(tmp_path / "bad.npz", **{**good, "W1": np.zeros((3, 3), np.float32)})
    with pytest.raises(DlcError, match="W1"):
        export_web(DIGITS, tmp_path / "out", weights=tmp_path / "bad.npz")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "keep.txt").write_text("mine")
    with pytest.raises(DlcError, match="not a dlc web export"):
        export_web(DIGITS, tmp_path / "other")
    assert (tmp_path / "other" / "keep.txt").read_text() == "mine"
    with pytest.raises(DlcError, match="is a file"):
        export_web(DIGITS, tmp_path / "other" / "keep.txt")


def test_cli_export(tmp_path, capsys):
    assert main(["export", "samples/quadratic.dl", "--web", str(tmp_path / "q"), "--optimizer", "adam"]) == 0
    assert "wrote" in capsys.readouterr().out
    assert json.loads((tmp_path / "q" / "manifest.json").read_text())["train"]["optimizer"]["name"] == "adam"
    assert main(["export", "samples/quadratic.dl", "--web", str(tmp_path / "q"), "--loss", "nope"]) == 1
    assert "no loss 'nope'" in capsys.readouterr().err
