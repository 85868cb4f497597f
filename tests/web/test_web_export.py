"""`dlc export --web` without a browser: the folder's files, the weights' offsets, the GLSL ES
shaders, artifacts as input, and the errors."""

from __future__ import annotations

import io
import json
import pathlib
import re
import zipfile

import numpy as np
import pytest

import dlc
from dlc.cli import main
from dlc.runtime.errors import DlcError
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
    assert data["train"]["optimizer"]["name"] == "sgd" and set(data["programs"]) == {"eval", "outputs", "train"}
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
    for bad in ("nan", "inf", "-1"):  # the manifest is JSON, and its lr a rate
        with pytest.raises(SystemExit):
            main(["export", "samples/quadratic.dl", "--web", str(tmp_path / "q2"), "--lr", bad])
        assert "expected a positive number" in capsys.readouterr().err
        with pytest.raises(DlcError, match="lr must be a positive number"):
            export_web("samples/quadratic.dl", tmp_path / "q2", lr=float(bad))
    assert not (tmp_path / "q2").exists()


def _npz_with_header(arrays: dict, key: str, shape: tuple) -> bytes:
    """An .npz of `arrays` whose member `key` has only an .npy header claiming `shape`."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": shape})
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for k, v in arrays.items():
            member = io.BytesIO()
            np.lib.format.write_array(member, v)
            zf.writestr(f"{k}.npy", header.getvalue() if k == key else member.getvalue())
    return buf.getvalue()


def test_export_reads_an_artifact_as_dlc_eval_does(tmp_path, capsys):
    art = tmp_path / "art"
    assert main(["compile", DIGITS, "--train", "--optimizer", "momentum", "-o", str(art)]) == 0
    with np.load(art / "state.npz") as z:
        state = {k: z[k] for k in z.files}
    with np.load(art / "params.npz") as z:
        params = {k: z[k] for k in z.files}
    out = tmp_path / "out"
    cases = [  # (file, bytes, what the refusal says)
        ("state.npz", _npz_bytes({**state, "b1$v": np.array([None] * 64, object)}), "array 'b1$v'"),
        ("state.npz", _npz_with_header(state, "W1$v", (10**12,)), "array 'W1$v' claims shape [1000000000000]"),
        ("state.npz", _npz_bytes({**state, "b2$v": np.full(10, np.nan, np.float32)}), "'b2$v' holds NaN"),
        ("params.npz", _npz_bytes({k: v for k, v in params.items() if k != "b2"}), "has no array 'b2'"),
    ]
    for file, data, says in cases:
        good = (art / file).read_bytes()
        (art / file).write_bytes(data)
        capsys.readouterr()
        assert main(["export", str(art), "--web", str(out)]) == 1, says
        err = capsys.readouterr().err
        assert "internal error" not in err and f"'{file}'" in err and says in err, err
        assert main(["eval", str(art), "--fetch", "probs", "--data", "samples/data/digits_test.npz"]) == 1
        assert says in capsys.readouterr().err  # dlc eval refuses it for the same reason
        assert not out.exists()
        (art / file).write_bytes(good)
    (art / "model.dl").unlink()
    (art / "model.dl").symlink_to(pathlib.Path(DIGITS).resolve())  # a link leaving the folder
    with pytest.raises(DlcError, match="'model.dl' is a link that leaves the artifact folder"):
        export_web(art, out)


def _npz_bytes(arrays: dict) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def test_no_path_of_this_machine_in_an_export_or_artifact(tmp_path):
    model = (tmp_path / "m.dl").resolve()
    model.write_text(pathlib.Path(DIGITS).read_text())
    art = tmp_path / "art"
    assert main(["compile", str(model), "--train", "-o", str(art)]) == 0
    for folder, name in (
        (art, "m.dl"),
        (export_web(model, tmp_path / "w1"), "m.dl"),
        (export_web(art, tmp_path / "w2"), "model.dl"),
    ):
        for file in folder.rglob("*"):  # the manifest, and the shaders' comments
            if file.is_file() and file.suffix != ".npz":
                text = file.read_bytes().decode("utf-8", "replace")
                assert str(tmp_path) not in text and str(pathlib.Path.cwd()) not in text, file
        data = json.loads((folder / "manifest.json").read_text())
        locs = [loc for p in data["programs"].values() for k in p["kernels"] for loc in k["locs"] if loc]
        assert locs and {loc[0] for loc in locs} == {name}, folder


def test_the_readme_lists_the_files_an_export_writes(tmp_path):
    readme = pathlib.Path("README.md").read_text()
    section = readme.split("\n## The model in a browser\n")[1].split("\n## ")[0]
    listed = set(re.findall(r"^\| `([^`]+)` \|", section, re.M))
    out = export_web(DIGITS, tmp_path / "out")
    written = {p.name for p in out.iterdir() if p.is_file()}
    written |= {f"{p.name}/*{q.suffix}" for p in out.iterdir() if p.is_dir() for q in p.iterdir()}
    written.add("vocab.json")  # a language model's (tests/web/test_web_generate.py)
    assert listed == written


def test_the_page_and_runtime_put_no_manifest_string_into_markup():
    for name in ("dlc.js", "index.html"):
        text = (pathlib.Path("dlc/web/static") / name).read_text()
        # HTML sinks: a manifest's names go into the page as text (textContent), never parsed
        assert not re.search(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|srcdoc|DOMParser", text), name
