"""Shapes for attention heads and normalization on GL (compute and texture targets) against
PyTorch: a causal multi-head attention block under a symbolic batch (forward and backward),
matmul of any rank, dim products bound at run time (one compiled program runs any batch
size), and the new functions (tril, split, stack, the filled tensors, the norms)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from gl_helpers import fragment_compile_log
from test_heads import ATTENTION, attention_params, attention_torch, needs_torch, torch

import dlc
from dlc.compiler.emit import programs, write_artifact

pytestmark = pytest.mark.gl

TARGETS = ["compute", "texture"]


def close(got, want, tol=2e-4):
    want = want.detach().numpy() if hasattr(want, "detach") else want
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@needs_torch
@pytest.mark.parametrize("target", TARGETS)
def test_causal_attention_block_matches_torch_on_gl(backend, target):
    sess = dlc.Session(dlc.compile(ATTENTION), backend="gl", target=target)
    params = attention_params()
    sess.set_params(params)
    for batch in (2, 3):  # one program, two bindings of B
        x = np.random.default_rng(batch).normal(size=(batch, 5, 16)).astype(np.float32)
        out, loss, grads = attention_torch(x, params)
        close(sess.eval("out", {"x": x}), out)
        close(sess.eval("l", {"x": x}), loss)
        got = sess.gradients({"x": x})
        for name, want in grads.items():
            close(got[name], want, 5e-4)


SRC = """
input x: [B, T, 12]
input g: [12]
input b: [12]
input w: [B, 1, 6, 5]
q, k, v = split(x, [4, 4, 4], axis=-1)
s = stack([q, k, v], axis=1)
heads = reshape(transpose(reshape(x, [B, T, 3, 4]), [0, 2, 1, 3]), [-1, T, 4])
att = tril(reshape(heads, [B, 3, T, 4]) @ transpose(reshape(heads, [B, 3, T, 4]), [0, 1, 3, 2]), k=-1)
mixed = reshape(x, [B, 1, T*2, 6]) @ w
up = triu(x, k=2)
o = ones([B, T]) * 2 + zeros([B, T])
f = full([B*T], 1.5)
r = arange(B*T)
ln = layer_norm(x, g, b)
rn = rms_norm(x, g, eps=1e-5)
"""


@needs_torch
@pytest.mark.parametrize("target", TARGETS)
def test_new_functions_match_torch_on_gl(backend, target):
    model = dlc.compile(SRC)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 5, 12)).astype(np.float32)
    x[1, 4, 11] = np.nan  # NaN stays in its own row
    g, b = rng.normal(size=12).astype(np.float32), rng.normal(size=12).astype(np.float32)
    w = rng.normal(size=(2, 1, 6, 5)).astype(np.float32)
    feeds = {"x": x, "g": g, "b": b, "w": w}
    tx, tg, tb = (torch.tensor(a, dtype=torch.float64) for a in (x, g, b))
    q, k, v = tx.split(4, dim=-1)
    heads = tx.reshape(2, 5, 3, 4).transpose(1, 2)
    want = {
        "q": q,
        "v": v,
        "s": torch.stack([q, k, v], 1),
        "att": torch.tril(heads @ heads.transpose(-1, -2), -1),
        "mixed": tx.reshape(2, 1, 10, 6) @ torch.tensor(w, dtype=torch.float64),
        "up": torch.triu(tx, 2),
        "o": torch.full((2, 5), 2.0),
        "f": torch.full((10,), 1.5),
        "r": torch.arange(10.0),
        "ln": torch.nn.functional.layer_norm(tx, (12,), tg, tb),
        "rn": torch.nn.functional.rms_norm(tx, (12,), tg, eps=1e-5),
    }
    gl = dlc.Session(model, backend="gl", target=target)
    ref = dlc.Session(model, backend="numpy")
    for name, t in want.items():
        got = gl.eval(name, feeds)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(ref.eval(name, feeds)), err_msg=name)
        finite = ~np.isnan(t.numpy())
        assert got.shape == t.shape, name
        np.testing.assert_allclose(got[finite], t.numpy()[finite], rtol=2e-4, atol=2e-4, err_msg=name)


@pytest.mark.parametrize("target", TARGETS)
def test_one_artifact_runs_any_batch_with_dim_products(gl, tmp_path, target):
    # The manifest keeps products such as B*T; the runtime evaluates them from B and T.
    model = dlc.compile(ATTENTION)
    out = tmp_path / "att.dlc"
    write_artifact(model, out, train_loss="l", optimizer=dlc.SGD(0.1), batch_size=4, target=target)
    tensors = json.loads((out / "manifest.json").read_text())["tensors"]
    assert tensors["att"] == ["B", 4, "T", "T"]
    runner = dlc.load(out)
    runner.set_params(attention_params())
    ref = dlc.Session(model, backend="numpy")
    ref.set_params(attention_params())
    for batch, t in ((1, 5), (3, 4)):
        x = np.random.default_rng(batch).normal(size=(batch, t, 16)).astype(np.float32)
        close(runner.eval("out", {"x": x}), ref.eval("out", {"x": x}), 1e-4)


def test_norm_and_head_shaders_compile_as_glsl_es_300(gl):
    if "GL_ARB_ES3_compatibility" not in gl.extensions:
        pytest.skip("this GL compiles no GLSL ES 3.00")
    progs = programs(
        dlc.compile(ATTENTION), train_loss="l", optimizer=dlc.Adam(0.01), target="texture", options={"es": True}
    )
    for p in progs.values():
        for file, text in p.sources.items():
            assert fragment_compile_log(text) == "", file


@pytest.mark.parametrize("target", TARGETS)
def test_attention_block_trains_on_gl_as_on_numpy(backend, target):
    # the training step's programs: the norm kernels, the head reshapes under a batch of 4
    x = np.random.default_rng(0).normal(size=(6, 5, 16)).astype(np.float32)
    model = dlc.compile(ATTENTION)
    runs = {}
    for name, sess in (
        ("numpy", dlc.Session(model, backend="numpy")),
        ("gl", dlc.Session(model, backend="gl", target=target)),
    ):
        sess.set_params(attention_params())
        losses = sess.train({"x": x}, optimizer=dlc.Adam(0.01), batch_size=4, steps=4)
        runs[name] = (np.asarray(losses), sess.params)
    np.testing.assert_allclose(runs["gl"][0], runs["numpy"][0], rtol=1e-4)
    for p, want in runs["numpy"][1].items():
        np.testing.assert_allclose(runs["gl"][1][p], want, rtol=1e-4, atol=1e-5, err_msg=p)
