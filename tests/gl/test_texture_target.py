"""The texture target (fragment shaders over float textures, for GL without compute shaders).

The registry sweeps, the training and optimizer matches and the artifact tests run again in
a subprocess where Mesa is told to drop compute shaders (DESIGN.md's recipe, as macOS's GL
4.1 has none), so dlc must choose the texture target there. The rest runs here, on this
process's context, with the texture target asked for by name.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from gl_helpers import fragment_compile_log
from test_generate_cache import tiny_gpt

import dlc
from dlc.compiler.codegen.renderer import GLSLESTexture, GLSLTexture
from dlc.compiler.emit import programs
from dlc.runtime.errors import DlcError
from dlc.text import Vocab
from dlc.web import export_web

pytestmark = pytest.mark.gl

ROOT = pathlib.Path(__file__).resolve().parents[2]
NO_COMPUTE = {
    "MESA_GL_VERSION_OVERRIDE": "4.1",
    "MESA_GLSL_VERSION_OVERRIDE": "410",
    "MESA_EXTENSION_OVERRIDE": "-GL_ARB_compute_shader -GL_ARB_shader_storage_buffer_object "
    "-GL_ARB_shader_image_load_store -GL_ARB_shader_atomic_counters",
}
SUITES = [
    "tests/gl/test_registry_gl.py",
    "tests/gl/test_training_gl.py",
    "tests/gl/test_artifact_gl.py",
    "tests/gl/test_texture_matmul.py",
    "tests/gl/test_numerics_gl.py",
    "tests/gl/test_fusion_limits_gl.py",
]

CONV = """
input images: [B, 6, 6, 2]
input labels: [B]
param k: [3, 3, 2, 3] = he
param W: [12, 3] = glorot
h = avg_pool(tanh(conv2d(images, k, stride=1, padding="valid")), 2)
logits = reshape(h, [B, 12]) @ W
loss cost = softmax_cross_entropy(logits, one_hot(labels, 3))
top = argmax(logits)
"""


def _no_compute_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "DLC_TARGET"}
    return {**env, **NO_COMPUTE, **extra}


def test_mesa_env_removes_compute_and_dlc_chooses_texture(gl):
    code = (
        "from dlc.runtime.device import get_context\n"
        "from dlc.runtime.target import choose_target\n"
        "from dlc.runtime.gl import GL\n"
        "ctx = get_context()\n"
        "try:\n"
        "    ok = bool(GL.glCreateShader(GL.GL_COMPUTE_SHADER))\n"
        "except Exception:\n"
        "    ok = False\n"
        "print(ctx.has_compute, ok, *choose_target())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=_no_compute_env(), cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[:3] == ["False", "False", "texture"], done.stdout


@pytest.mark.skipif(os.environ.get("DLC_TARGET") == "texture", reason="already on it")
@pytest.mark.parametrize("suite", SUITES, ids=lambda s: pathlib.Path(s).stem)
def test_suite_passes_on_the_texture_target_without_compute(gl, suite):
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", suite],
        env=_no_compute_env(DLC_TARGET="texture"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    tail = done.stdout[-6000:]
    assert done.returncode == 0, tail + done.stderr[-2000:]
    assert "passed" in tail and "no OpenGL context" not in tail, tail


def test_every_shader_version_line_is_330_core_or_300_es():
    model = dlc.compile(CONV)
    for es, version in ((False, GLSLTexture.version), (True, GLSLESTexture.version)):
        progs = programs(model, train_loss="cost", optimizer=dlc.Adam(0.01), target="texture", options={"es": es})
        sources = [text for p in progs.values() for text in p.sources.values()]
        assert sources
        for text in sources:
            assert text.splitlines()[0] == version
            if es:
                assert "precision highp float;" in text


def test_es_shaders_compile_as_glsl_es_300(gl):
    # GLSL ES refuses implicit int -> float: Mesa's ES front end checks the text as WebGL2 would
    if "GL_ARB_ES3_compatibility" not in gl.extensions:
        pytest.skip("this GL compiles no GLSL ES 3.00")
    model = dlc.compile(CONV)
    progs = programs(model, train_loss="cost", optimizer=dlc.Adam(0.01), target="texture", options={"es": True})
    for p in progs.values():
        for file, text in p.sources.items():
            assert fragment_compile_log(text) == "", file


def test_the_web_export_s_kv_cache_programs_compile_as_glsl_es_300(gl, tmp_path):
    # dlc export --web writes the key/value cache's programs (decode step, window step,
    # transposed weights: attention_cached and the cache's update) for WebGL2
    if "GL_ARB_ES3_compatibility" not in gl.extensions:
        pytest.skip("this GL compiles no GLSL ES 3.00")
    model = tmp_path / "gpt.dl"
    model.write_text(tiny_gpt(16))
    vocab = tmp_path / "vocab.json"
    Vocab([chr(97 + i) for i in range(11)], block=16).save(vocab)
    out = export_web(model, tmp_path / "web", vocab=vocab)
    m = json.loads((out / "manifest.json").read_text())
    kv = m["web"]["kv_cache"]
    programs = [m["programs"][kv[key]] for key in ("step", "window", "constants")]
    files = [p["file"] for program in programs for k in program["kernels"] for p in k["passes"]]
    assert any("attention_cached" in (out / "shaders" / f).read_text() for f in files)
    for file in files:
        assert fragment_compile_log((out / "shaders" / file).read_text()) == "", file


def test_session_target_texture_matches_numpy_on_a_conv_net(gl):
    rng = np.random.default_rng(1)
    feeds = {"images": rng.normal(size=(5, 6, 6, 2)), "labels": rng.integers(0, 3, 5) * 1.0}
    tex = dlc.Session(dlc.compile(CONV), backend="gl", target="texture", seed=2)
    ref = dlc.Session(dlc.compile(CONV), backend="numpy", seed=2)
    assert tex.backend.target == "texture"
    for name in ("h", "logits", "cost", "top"):
        np.testing.assert_allclose(tex.eval(name, feeds), ref.eval(name, feeds), rtol=1e-4, atol=1e-5, err_msg=name)
    lt = tex.train(feeds, optimizer=dlc.Momentum(0.1), batch_size=3, steps=4)
    lr = ref.train(feeds, optimizer=dlc.Momentum(0.1), batch_size=3, steps=4)
    np.testing.assert_allclose(lt, lr, rtol=1e-4)
    for name, v in ref.params.items():
        np.testing.assert_allclose(tex.params[name], v, rtol=1e-4, atol=1e-5, err_msg=name)


def test_a_tensor_too_big_for_the_textures_is_refused_by_name(gl, monkeypatch):
    monkeypatch.setitem(gl.limits, "max_texture_size", 8)  # 64 floats a texture
    sess = dlc.Session(dlc.compile("input x: [B, 10]\nwide = exp(x)\n"), backend="gl", target="texture")
    np.testing.assert_allclose(sess.eval("wide", {"x": np.zeros((6, 10))}), np.ones((6, 10)))
    with pytest.raises(DlcError, match=r"'x' \[B, 10\] = \[7, 10\].*MAX_TEXTURE_SIZE is 8"):
        sess.eval("wide", {"x": np.zeros((7, 10))})


def test_unknown_target_and_numpy_target_are_refused(gl, monkeypatch):
    with pytest.raises(DlcError, match="unknown GL target 'vulkan'"):
        dlc.Session(dlc.compile("input x: [3]\ny = exp(x)\n"), backend="gl", target="vulkan")
    with pytest.raises(ValueError, match="for the gl backend"):
        dlc.Session(dlc.compile("input x: [3]\ny = exp(x)\n"), backend="numpy", target="texture")
    monkeypatch.setenv("DLC_TARGET", "webgpu")
    with pytest.raises(DlcError, match="DLC_TARGET"):
        dlc.Session(dlc.compile("input x: [3]\ny = exp(x)\n"), backend="gl")


def test_cli_eval_texture_matches_compute_and_info_names_the_target(gl, tmp_path):
    def cli(*args, env=None):
        done = subprocess.run(
            [sys.executable, "-m", "dlc", *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    model, data = str(ROOT / "samples/mlp_digits.dl"), str(ROOT / "samples/data/digits_test.npz")
    outs = {}
    for target in ("compute", "texture"):
        run = [sys.executable, "-m", "dlc", "eval", model, "--data", data, "--fetch", "probs,cost", "--target", target]
        done = subprocess.run(
            [*run, "--out", f"{target}.npz"], cwd=tmp_path, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr
        assert f"target {target}," in done.stderr.splitlines()[0]  # the run line names the target used
        outs[target] = dict(np.load(tmp_path / f"{target}.npz"))
    for name in ("probs", "cost"):
        np.testing.assert_allclose(outs["texture"][name], outs["compute"][name], rtol=1e-4, atol=1e-6)
    assert "target: compute (the context has compute shaders)" in cli("info")
    assert "target: texture (the context has no compute shaders)" in cli("info", env=_no_compute_env())
    cli("compile", model, "-o", "m.dlc", "--target", "texture")
    assert json.loads((tmp_path / "m.dlc" / "manifest.json").read_text())["target"] == "texture"
    done = subprocess.run(
        [sys.executable, "-m", "dlc", "eval", "m.dlc", "--data", data, "--fetch", "cost", "--target", "compute"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode != 0 and "compiled for the texture target" in done.stderr


def test_debug_mode_names_the_node_making_a_nan_on_the_texture_target(gl, monkeypatch):
    from dlc import debug

    monkeypatch.setattr(debug, "_enabled", True)
    sess = dlc.Session(dlc.compile("input x: [B]\ny = log(x) * 2\nz = sum(y)\n"), backend="gl", target="texture")
    assert sess.eval("z", {"x": np.array([1.0, 2.0])}) == pytest.approx(np.log(2) * 2)
    with pytest.raises(DlcError, match=r"NaN in the output of log at <model>:2:5"):
        sess.eval("z", {"x": np.array([1.0, -2.0])})


@pytest.mark.parametrize("op", ["sum", "max", "min"])
def test_long_reductions_run_as_two_pass_tree_reductions(gl, op):
    from dlc.compiler.codegen import texture

    model = dlc.compile(f"input x: [B, 3]\nr = {op}(x, axis=0)\nt = {op}(x * 2) + 1\n")
    progs = programs(model, target="texture")
    files = [f for f in progs["eval"].sources if f.endswith("_partials.frag")]
    assert len(files) == 2  # B is symbolic: both split
    rng = np.random.default_rng(3)
    x = rng.normal(size=(texture.SPLIT * 3 + 17, 3))
    x[5, 1] = np.nan if op != "sum" else x[5, 1]
    tex = dlc.Session(model, backend="gl", target="texture")
    ref = dlc.Session(model, backend="numpy")
    for name in ("r", "t"):
        np.testing.assert_allclose(
            tex.eval(name, {"x": x}), ref.eval(name, {"x": x}), rtol=1e-5, atol=1e-4, err_msg=name
        )
    small = x[:2]  # fewer rows than partials: empty partials must not change the result
    np.testing.assert_allclose(tex.eval("r", {"x": small}), ref.eval("r", {"x": small}), rtol=1e-5, atol=1e-5)
