"""Fused attention on GL (llvmpipe in CI: small sizes) against PyTorch's
scaled_dot_product_attention: a training graph's value and gradients on both targets, over
several query blocks and key tiles; gradients bit-identical from run to run (no atomics);
the texture shaders compile as GLSL ES 3.00 (WebGL2, dlc.js). The registry sweep
(test_registry_gl.py) covers each primitive against the NumPy reference."""

from __future__ import annotations

import numpy as np
import pytest
from gl_helpers import fragment_compile_log

import dlc

pytestmark = pytest.mark.gl
torch = pytest.importorskip("torch")

MODEL = """
param q: [2, 2, {T}, {D}] = normal(0, 1)
param k: [2, 2, {T}, {D}] = normal(0, 1)
param v: [2, 2, {T}, {D}] = normal(0, 1)
input r: [2, 2, {T}, {D}]
y = attention(q, k, v, causal={causal})
loss l = sum(y * r)
"""


def _torch_reference(params, r, causal):
    t = {n: torch.tensor(params[n], dtype=torch.float64, requires_grad=True) for n in "qkv"}
    y = torch.nn.functional.scaled_dot_product_attention(t["q"], t["k"], t["v"], is_causal=causal)
    (y * torch.tensor(r, dtype=torch.float64)).sum().backward()
    return y.detach().numpy(), {n: t[n].grad.numpy() for n in "qkv"}


@pytest.mark.parametrize(
    "target, t, d, causal",
    [
        ("compute", 150, 16, True),  # 3 query blocks of 64, 10 key tiles, the last part-full
        ("compute", 100, 12, False),
        ("texture", 40, 8, True),
    ],
)
def test_training_graph_matches_pytorch(gl, target, t, d, causal):
    src = MODEL.format(T=t, D=d, causal=str(causal).lower())
    sess = dlc.Session(dlc.compile(src), backend="gl", target=target, seed=0)
    r = np.random.default_rng(0).normal(size=(2, 2, t, d)).astype(np.float32)
    want_y, want = _torch_reference(sess.params, r, causal)
    np.testing.assert_allclose(sess.eval("y"), want_y, rtol=1e-4, atol=1e-5)
    grads = sess.gradients({"r": r})
    for n in "qkv":
        np.testing.assert_allclose(grads[n], want[n], rtol=1e-4, atol=1e-5 * np.abs(want[n]).max(), err_msg=n)
    again = sess.gradients({"r": r})
    for n in "qkv":  # each output summed by one invocation in a fixed order
        np.testing.assert_array_equal(again[n], grads[n])


def test_texture_shaders_compile_as_glsl_es_300(gl):
    from dlc.compiler.emit import programs

    if "GL_ARB_ES3_compatibility" not in gl.extensions:
        pytest.skip("this GL compiles no GLSL ES 3.00")
    src = MODEL.format(T="T", D=4, causal="true").replace("param", "input").replace(" = normal(0, 1)", "")
    src += "param w: [4] = normal(0, 1)\nloss l2 = sum(attention(q * w, k, v) * r)\n"
    model = dlc.compile(src)
    compiled = programs(model, target="texture", options={"es": True}, train_loss="l2", optimizer=dlc.SGD(0.1))
    sources = [s for p in compiled.values() for s in p.sources.values()]
    assert any("attention_grad" in s for s in sources)
    for source in sources:
        log = fragment_compile_log(source)
        assert log == "", log


@pytest.mark.parametrize("target", ["compute", "texture"])
def test_artifact_trains_like_the_reference(gl, tmp_path, target):
    """A compiled artifact (manifest, shaders: tiled kernels with symbolic T) run by the
    runtime alone: its forward and SGD steps as the NumPy session's."""
    from dlc.compiler.emit import write_artifact

    src = (
        "input x: [B, T, 8]\ninput y: [B, T, 8]\nparam w: [8, 24] = normal(0, 0.5)\n"
        "q, k, v = split(reshape(x @ w, [B, T, 3, 8]), [1, 1, 1], axis=2)\n"
        "qh = transpose(q, [0, 2, 1, 3])\nkh = transpose(k, [0, 2, 1, 3])\nvh = transpose(v, [0, 2, 1, 3])\n"
        "h = attention(qh, kh, vh, causal=true)\n"
        "out = reshape(transpose(h, [0, 2, 1, 3]), [B, T, 8])\nloss cost = mean_squared(out, y)\n"
    )
    model = dlc.compile(src)
    out = tmp_path / "att.dlc"
    write_artifact(model, out, train_loss="cost", optimizer=dlc.SGD(0.5), target=target)
    rng = np.random.default_rng(0)
    feeds = {"x": rng.normal(size=(3, 70, 8)).astype(np.float32), "y": rng.normal(size=(3, 70, 8)).astype(np.float32)}
    runner = dlc.load(out)
    sess = dlc.Session(model, backend="numpy", seed=0)
    sess.set_params(runner.params)
    np.testing.assert_allclose(runner.eval("out", feeds), sess.eval("out", feeds), rtol=1e-4, atol=1e-5)
    lr = runner.train(feeds, batch_size=3, steps=3)
    ln = sess.train(feeds, optimizer=dlc.SGD(0.5), batch_size=3, steps=3)
    np.testing.assert_allclose(lr, ln, rtol=1e-4)
    runner.close()
