"""The texture target's packed passes in WebGL2 against the NumPy reference: the 8 x 4 matmul
products pass rendering 4 layers of an array texture at once (WebGL2 only), a conv over one input channel and
the packed filter gradient (compiler/codegen/texture_matmul.py), eval and training steps, at
sizes that are no multiple of the 4 rows, 4 columns and 4 k a fragment or texel takes; and
the packs of params that dlc.js keeps between evals are packed again once training changed
the params."""

from __future__ import annotations

import json

import numpy as np
from test_web_browser import exported, reference
from web_helpers import JS_FEEDS, JS_OUT, feed

import dlc

MODEL = """
input a: [B, 6, 13]
input img: [B, 9, 8, 1]
input img5: [B, 9, 8, 5]
param w: [13, 130] = normal(0, 1)
param c: [130]
param k: [3, 3, 1, 6] = normal(0, 1)
param k5: [3, 3, 5, 6] = normal(0, 1)
y = tanh(a @ w + c)
h = relu(conv2d(img, k, stride=2, padding="same"))
h5 = relu(conv2d(img5, k5, stride=2, padding="same"))
loss cost = mean(y * y) + mean(h) + mean(h5)
"""


def test_packed_passes_match_numpy_in_eval_and_training(web_root, open_export, tmp_path):
    path = tmp_path / "packed.dl"
    path.write_text(MODEL)
    sess = reference(str(path), seed=3)
    np.savez(tmp_path / "w.npz", **sess.params)
    name = exported(web_root, "packed", path, weights=tmp_path / "w.npz", optimizer="sgd", lr=0.1)
    shaders = "\n".join(f.read_text() for f in (web_root[0] / name).rglob("*") if f.suffix in (".json", ".frag"))
    assert "into 8 render targets" in shaders  # the 8 x 4 products pass is in the export
    assert "+= dot(pa0_t, pb0_t);" in shaders  # its sums (and the conv's) one float an output
    assert "conv2d gradient for the filter" in shaders and "4 outputs a fragment over the packed" in shaders
    page = open_export(name)
    rng = np.random.default_rng(5)
    data = {
        "a": rng.normal(size=(3, 6, 13)),
        "img": rng.normal(size=(3, 9, 8, 1)),
        "img5": rng.normal(size=(3, 9, 8, 5)),
    }
    data = {n: v.astype(np.float32) for n, v in data.items()}
    want = sess.eval(["y", "h", "h5"], data)
    want_losses = sess.train(data, optimizer=dlc.SGD(0.1), batch_size=3, steps=3, shuffle=False)
    trained = sess.eval(["y", "h", "h5"], data)
    got = page.call(
        f"{JS_FEEDS} const before = await m.eval(feeds, ['y', 'h', 'h5']);"
        " const losses = await m.train(feeds, {steps: 3, batchSize: 3});"
        " const after = await m.eval(feeds, ['y', 'h', 'h5']);"
        f" const out = await m.params(); return {{y: Array.from(before.y.data), h: Array.from(before.h.data),"
        " h5: Array.from(before.h5.data), h52: Array.from(after.h5.data),"
        f" y2: Array.from(after.y.data), h2: Array.from(after.h.data), losses, params: {JS_OUT}}};",
        {"feeds": feed(data)},
    )
    np.testing.assert_allclose(np.reshape(got["y"], (3, 6, 130)), want["y"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.reshape(got["h"], (3, 5, 4, 6)), want["h"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.reshape(got["h5"], (3, 5, 4, 6)), want["h5"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.reshape(got["h52"], (3, 5, 4, 6)), trained["h5"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got["losses"], want_losses, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.reshape(got["y2"], (3, 6, 130)), trained["y"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.reshape(got["h2"], (3, 5, 4, 6)), trained["h"], rtol=1e-4, atol=1e-5)
    for n, v in sess.params.items():
        np.testing.assert_allclose(np.reshape(got["params"][n]["data"], v.shape), v, rtol=1e-4, atol=1e-5, err_msg=n)
    assert not page.errors


BANDS = """
input x: [N, 9]
param w: [9, 130] = normal(0, 1)
y = x @ w
"""


def test_the_4x4_matmul_over_two_bands_of_rows_matches_numpy(web_root, open_export, tmp_path):
    """More rows than MAX_TEXTURE_SIZE: the packed and products textures hold them in two
    bands (a band's rows down its columns), which the 8 x 4 pass and its unpack step across."""
    path = tmp_path / "bands.dl"
    path.write_text(BANDS)
    sess = reference(str(path), seed=4)
    np.savez(tmp_path / "w.npz", **sess.params)
    page = open_export(exported(web_root, "bands", path, weights=tmp_path / "w.npz"))
    limit = page.page.evaluate("document.createElement('canvas').getContext('webgl2').getParameter(0x0D33)")
    x = np.random.default_rng(6).normal(size=(limit + 7, 9)).astype(np.float32)
    got = page.call(
        f"{JS_FEEDS} const out = await m.eval(feeds, ['y']); return Array.from(out.y.data);", {"feeds": feed({"x": x})}
    )
    np.testing.assert_allclose(np.reshape(got, (limit + 7, 130)), sess.eval("y", {"x": x}), rtol=1e-4, atol=1e-4)
    assert not page.errors


STORED = """
input x: [B, 20]
input labels: [B]
param W1: [20, 132] = normal(0, 0.3)
param b1: [132]
param W2: [132, 10] = normal(0, 0.3)
h = relu(x @ W1 + b1)
logits = h @ W2
loss cost = softmax_cross_entropy(logits, one_hot(labels, 10))
"""


def test_params_stored_4_a_texel_train_eval_and_restore_as_numpy(web_root, open_export, tmp_path):
    """W1's SGD update is the 8 x 4 weight gradient's epilogue, so the export stores W1 4 values
    a texel (`web.packed`): its update renders 4 values a fragment, every other kernel reads it
    so. Eval, three steps (the last batch of 2), params() and a diverged call's restore (bit for
    bit) as NumPy's; W2 (10 columns) stays one value a texel. A context drawing 4 targets at
    once (`drawBuffers: 4`) runs the 8-row products passes as two draws of 4 rows: the same
    numbers bit for bit."""
    path = tmp_path / "stored.dl"
    path.write_text(STORED)
    sess = reference(str(path), seed=7)
    np.savez(tmp_path / "w.npz", **sess.params)
    name = exported(web_root, "stored", path, weights=tmp_path / "w.npz", optimizer="sgd", lr=0.1)
    manifest = json.loads((web_root[0] / name / "manifest.json").read_text())
    assert manifest["web"]["packed"] == ["W1"]
    shaders = "\n".join(f.read_text() for f in (web_root[0] / name / "shaders").iterdir())
    assert "into a param stored 4 values a texel" in shaders and "dlc_load4(b" in shaders
    rng = np.random.default_rng(8)
    data = {"x": rng.normal(size=(14, 20)).astype(np.float32), "labels": rng.integers(0, 10, 14).astype(np.float32)}
    want = sess.eval(["logits"], data)["logits"]
    losses = sess.train(data, optimizer=dlc.SGD(0.1), batch_size=6, steps=3, shuffle=False)
    trained = sess.eval(["logits"], data)["logits"]
    page = open_export(name)
    got = page.call(
        f"{JS_FEEDS} const before = Array.from((await m.eval(feeds, ['logits'])).logits.data);"
        " const losses = await m.train(feeds, {steps: 3, batchSize: 6});"
        " const after = Array.from((await m.eval(feeds, ['logits'])).logits.data);"
        f" let out = await m.params(); const params = {JS_OUT};"
        " let error = null;"
        " try { await m.train(feeds, {steps: 2, batchSize: 6, lr: 1e38}); } catch (e) { error = e.message; }"
        f" out = await m.params(); const restored = {JS_OUT};"
        # the same where a draw writes 4 targets: the 8-row products passes in two draws each
        " const { load } = await import('./dlc.js'); const m4 = await load('./', {drawBuffers: 4});"
        " const four = {before: Array.from((await m4.eval(feeds, ['logits'])).logits.data)};"
        " four.losses = await m4.train(feeds, {steps: 3, batchSize: 6});"
        " out = await m4.params(); four.params = " + JS_OUT + "; m4.dispose();"
        " return {before, losses, after, params, error, restored, four};",
        {"feeds": feed(data)},
    )
    assert got["four"] == {"before": got["before"], "losses": got["losses"], "params": got["params"]}  # bit for bit
    np.testing.assert_allclose(np.reshape(got["before"], (14, 10)), want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got["losses"], losses, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.reshape(got["after"], (14, 10)), trained, rtol=1e-4, atol=1e-5)
    for n, v in sess.params.items():
        assert got["params"][n]["shape"] == list(v.shape)
        np.testing.assert_allclose(np.reshape(got["params"][n]["data"], v.shape), v, rtol=1e-4, atol=1e-5, err_msg=n)
    assert got["error"] and "diverged" in got["error"]
    assert got["restored"] == got["params"]  # bit for bit
    assert not page.errors
