"""The compiled artifact: written by the compiler, run by the runtime alone."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import dlc
from dlc.compiler.emit import emit, write_artifact
from dlc.compiler.pipeline import Options, Work, format_stage, run_stages

pytestmark = pytest.mark.gl

# tests/gl/test_texture_target.py runs this file again with DLC_TARGET=texture and Mesa's
# compute shaders removed: the artifacts are then compiled for, and run on, the texture target.
TARGET = os.environ.get("DLC_TARGET", "").strip() or "compute"
VERSION = {"compute": "#version 430", "texture": "#version 330 core"}[TARGET]


def digits(n: int):
    d = np.load("samples/data/digits_train.npz")
    return {"pixels": d["pixels"][:n].astype(np.float32), "labels": d["labels"][:n].astype(np.float32)}


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    model = dlc.compile("samples/mlp_digits.dl")
    out = tmp_path_factory.mktemp("art") / "mlp.dlc"
    write_artifact(model, out, train_loss="cost", optimizer=dlc.Adam(0.01), batch_size=32, target=TARGET)
    return model, out


def test_folder_holds_manifest_shaders_and_params(artifact):
    model, out = artifact
    m = json.loads((out / "manifest.json").read_text())
    assert m["format"] == 1 and set(m["programs"]) == {"eval", "outputs", "train"}
    assert m["target"] == TARGET
    assert m["inputs"] == {"pixels": ["B", 64], "labels": ["B"]}
    assert m["params"]["W1"] == [64, 64] and m["tensors"]["probs"] == ["B", 10]
    assert m["train"]["optimizer"]["name"] == "adam" and m["train"]["loss"] == "cost"
    for prog in m["programs"].values():
        for k in prog["kernels"]:
            for p in k.get("passes", [k]):
                text = (out / p["file"]).read_text()
                assert text.startswith(VERSION) and f"// kernel {k['name']}" in text
            assert k["slots"] and k["ir"] and (k.get("grid") or k.get("passes"))
    with np.load(out / "params.npz") as z:
        assert set(z.files) == set(model.params)
    with np.load(out / "state.npz") as z:
        assert "W1$m" in z.files and "$t" in z.files


def test_the_outputs_program_serves_the_model_outputs(gl, artifact):
    # fetches within the model's outputs run the outputs program (no stored h or logits),
    # any other name the eval program; both match NumPy and each other
    model, out = artifact
    m = json.loads((out / "manifest.json").read_text())
    assert m["outputs"] == ["probs", "prediction", "accuracy"]
    assert len(m["programs"]["outputs"]["kernels"]) < len(m["programs"]["eval"]["kernels"])
    feeds = digits(37)
    runner = dlc.load(out)
    backend = runner._artifact
    assert backend.eval_plan(["probs", "accuracy"])[0] == "outputs"
    assert backend.eval_plan(["probs", "logits"])[0] == "eval" and backend.eval_plan(["cost"])[0] == "eval"
    sess = dlc.Session(model, backend="numpy", seed=0)
    want = sess.eval(["probs", "prediction", "accuracy", "logits"], feeds)
    fused = runner.eval(["probs", "prediction", "accuracy"], feeds)
    every = runner.eval(["probs", "prediction", "accuracy", "logits"], feeds)
    assert set(backend.runner._executors) == {"outputs", "eval"}
    for name in fused:
        np.testing.assert_allclose(fused[name], want[name], rtol=1e-4, atol=1e-6, err_msg=name)
        np.testing.assert_allclose(fused[name], every[name], rtol=1e-5, atol=1e-7, err_msg=name)
    np.testing.assert_allclose(every["logits"], want["logits"], rtol=1e-4, atol=1e-5)
    assert sorted(runner.predict({"pixels": feeds["pixels"]})) == ["prediction", "probs"]  # the outputs program's
    assert runner._reference is None  # the manifest's outputs: its model.dl not compiled for them
    runner.close()


def test_runner_matches_the_session(gl, artifact):
    model, out = artifact
    feeds = digits(70)
    runner = dlc.load(out)
    sess = dlc.Session(model, backend="numpy", seed=0)
    got = runner.eval(["probs", "cost", "accuracy"], feeds)
    want = sess.eval(["probs", "cost", "accuracy"], feeds)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-6)
    # only the kernels a fetch needs: no labels needed for the prediction
    pred = runner.eval("prediction", {"pixels": feeds["pixels"][:3]})
    assert pred.shape == (3,)
    assert runner.needed_inputs(["prediction"]) == {"pixels"}
    assert runner.needed_inputs(["cost"]) == {"pixels", "labels"}
    # training: the same steps as a numpy session with the same optimizer and seed
    lr = runner.train(feeds, batch_size=32, steps=5)
    ln = sess.train(feeds, optimizer=dlc.Adam(0.01), batch_size=32, steps=5)
    np.testing.assert_allclose(lr, ln, rtol=1e-4)
    for name, v in sess.params.items():
        np.testing.assert_allclose(runner.params[name], v, rtol=1e-4, atol=1e-5)
    runner.close()


def test_runner_save_load_and_wrong_optimizer(gl, artifact, tmp_path):
    _, out = artifact
    runner = dlc.load(out)
    w = tmp_path / "w.npz"
    runner.save(w)
    before = runner.params
    runner.train(digits(40), batch_size=20, steps=2)
    runner.load(w)
    for name, v in before.items():
        np.testing.assert_array_equal(runner.params[name], v)
    with pytest.raises(dlc.DlcError, match="compiled with the adam optimizer"):
        runner.train(digits(10), optimizer=dlc.SGD(0.1))
    with pytest.raises(KeyError, match="did you mean 'probs'"):
        runner.eval("prob", digits(2))
    runner.close()


def test_the_runtime_imports_neither_the_compiler_nor_lark(gl, artifact, tmp_path):
    _, out = artifact
    data = pathlib.Path("samples/data/digits_test.npz").resolve()
    code = textwrap.dedent(f"""
        import sys
        import numpy as np
        import dlc
        runner = dlc.load({str(out)!r})
        assert isinstance(runner, dlc.Session)
        d = np.load({str(data)!r})
        feeds = {{"pixels": d["pixels"][:50].astype(np.float32),
                  "labels": d["labels"][:50].astype(np.float32)}}
        print(float(runner.eval("accuracy", feeds)))
        runner.train(feeds, batch_size=25, steps=2)
        bad = [m for m in sys.modules if m == "lark" or m.startswith("lark.")
               or m.startswith("dlc.compiler")]
        assert not bad, bad
        print("ok")
    """)
    # run elsewhere, so that the checkout's dlc/ folder cannot stand in for the installed one
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("ok")


def test_rewriting_replaces_the_artifact(tmp_path):
    model = dlc.compile("input x: [3]\ny = exp(x)\n")
    out = tmp_path / "m.dlc"
    write_artifact(model, out)
    (out / "eval_k07_stale.glsl").write_text("left from an older compile")
    write_artifact(model, out)
    assert sorted(p.name for p in out.iterdir() if p.suffix == ".glsl") == ["eval_k00_exp.glsl"]
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError):
        write_artifact(model, tmp_path / "other")


@pytest.mark.parametrize(("stage", "pipeline_stage"), [("kernels", "fuse"), ("plan", "plan"), ("glsl", "codegen")])
def test_emit_stages_print_what_the_pipeline_stages_print(stage, pipeline_stage):
    """`emit` over compiled programs prints the pipeline's stage text (tests/golden holds it)."""
    model = dlc.compile("samples/mlp_digits.dl")
    text = emit(model, stage, train_loss="cost", optimizer=dlc.SGD(0.1))
    work = run_stages(Work(model.source, model.path), Options(train_loss="cost", optimizer=dlc.SGD(0.1)))
    assert "=== program eval" in text and "=== program train" in text
    assert text == format_stage(work, pipeline_stage)


def test_accepted_mutants_run_or_fail_cleanly(gl, artifact, tmp_path):
    """The GL half of the manifest fuzzer (tests/runtime/test_manifest_fuzz.py): tampered
    manifests that pass validation run to a result or a dlc error, never another exception;
    those that change only fields the runtime ignores give the pristine results."""
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "runtime"))
    from manifest_mutants import inert, json_mutant

    from dlc.runtime.artifact.manifest import ArtifactError, parse, validate

    _, out = artifact
    text = (out / "manifest.json").read_text()
    feeds = digits(8)
    pristine = dlc.load(out)
    want = pristine.eval(["probs", "cost"], feeds)
    pristine.close()
    rng = np.random.default_rng(80)
    ran = {"inert": 0, "other": 0}
    for i in range(400):
        raw, what, changed = json_mutant(text, rng)
        try:
            validate(parse(raw, "m"), "m")
        except ArtifactError:
            continue
        kind = "inert" if inert(changed) else "other"
        if ran[kind] >= 4:
            continue
        ran[kind] += 1
        folder = tmp_path / f"m{i}"
        shutil.copytree(out, folder)
        (folder / "manifest.json").write_bytes(raw)
        try:
            runner = dlc.load(folder)
            try:
                got = runner.eval(["probs", "cost"], feeds)
                runner.train(feeds, batch_size=8, steps=1)
            finally:
                runner.close()
        except dlc.DlcError:
            assert kind == "other", f"mutant {i} ({what}) of an ignored field was refused"
            continue
        except Exception as e:  # noqa: BLE001 - name the mutant that broke it
            pytest.fail(f"mutant {i} ({what}) raised {type(e).__name__}: {e}")
        if kind == "inert":
            for name in want:
                np.testing.assert_array_equal(got[name], want[name], err_msg=f"mutant {i}: {what}")
        if ran == {"inert": 4, "other": 4}:
            break
    assert ran == {"inert": 4, "other": 4}, ran


def test_a_broken_shader_names_the_artifact_the_kernel_and_the_file(gl, artifact, tmp_path):
    """A shader the driver refuses was changed after dlc compiled it: the artifact's fault,
    said as such (not as a bug in the code generator)."""
    from dlc.runtime.artifact.manifest import ArtifactError

    _, out = artifact
    folder = tmp_path / "broken.dlc"
    shutil.copytree(out, folder)
    shader = sorted(p for p in folder.iterdir() if p.name.startswith("eval_") and p.suffix in (".glsl", ".frag"))[0]
    version, rest = shader.read_text().split("\n", 1)
    shader.write_text(f"{version}\nthis is not GLSL;\n{rest}")
    runner = dlc.load(folder)
    try:
        with pytest.raises(ArtifactError) as e:
            runner.eval(["probs", "logits"], digits(2))  # logits: no output, so the eval program's
    finally:
        runner.close()
    msg = str(e.value)
    assert msg.startswith(f"{folder}: the shader of kernel '") and f"of the eval program ({shader.name}:2)" in msg, msg
    assert "the artifact is corrupt or was written by another version of dlc" in msg and "driver log:" in msg
    assert "code generator" not in msg and "internal" not in msg


def test_a_fetch_needs_only_the_dims_of_its_inputs(gl, tmp_path):
    """The eval program sizes every buffer; a dim only an unfed input binds is not needed."""
    model = dlc.compile("input x: [B, 3]\ninput y: [N]\na = sum(x)\nb = sum(y * y)\n")
    out = write_artifact(model, tmp_path / "two.dlc", target=TARGET)
    runner = dlc.load(out)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.arange(5, dtype=np.float32)
    assert runner.eval("a", {"x": x}) == x.sum()
    assert runner.eval("b", {"y": y}) == (y * y).sum()
    got = runner.eval(["a", "b"], {"x": x[:1], "y": y[:2]})
    assert got == {"a": x[:1].sum(), "b": (y[:2] ** 2).sum()}
    runner.close()


def test_an_absurd_buffer_size_is_a_dlc_error(gl, tmp_path):
    """A slot sized within the schema's bounds but beyond the GPU's memory: a dlc error naming
    the program (or, on a GPU with room for it, a run like any other), never PyOpenGL's."""
    # the row sums are a [B] temporary (x * w would be recomputed where read, never stored)
    model = dlc.compile("input x: [B, 2]\nparam w: [1] = 0.5\nloss cost = mean(square(sum(x, axis=1) * w))\n")
    out = write_artifact(model, tmp_path / "q.dlc", train_loss="cost", target=TARGET)
    m = json.loads((out / "manifest.json").read_text())
    temps = [s for s in m["programs"]["train"]["slots"] if s["kind"] == "temp" and len(s["sizes"][0]) > 1]
    temps[0]["sizes"][0][0] = 2**31 - 1  # times B: far beyond any GPU at B = 64
    (out / "manifest.json").write_text(json.dumps(m))
    runner = dlc.load(out)
    try:
        runner.train({"x": np.ones((64, 2), np.float32)}, batch_size=64, steps=1)
    except dlc.DlcError as e:
        if TARGET == "texture":  # refused before allocating: no texture holds it
            assert "texture holds (this context's MAX_TEXTURE_SIZE is" in str(e)
        else:
            assert f"{out}: the train program ran out of GPU memory allocating a buffer" in str(e)
    finally:
        runner.close()
