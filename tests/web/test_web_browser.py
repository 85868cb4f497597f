"""The web export in headless Chromium (WebGL2 on SwiftShader): eval of every sample and of a
conv model, training steps and the params match the NumPy reference; the digits page
classifies a digit drawn with the mouse. Skips without the browser (fails in CI)."""

from __future__ import annotations

import json
import pathlib
import sys

import numpy as np
import pytest
from web_helpers import JS_FEEDS, JS_OUT, feed

import dlc
from dlc.data import load_data
from dlc.eval_plan import model_outputs
from dlc.web import export_web

ELSEWHERE = {"char_gpt.dl"}  # at a small size, generating text: test_web_generate.py
SAMPLES = sorted(p.name for p in pathlib.Path("samples").glob("*.dl") if p.name not in ELSEWHERE)
DATA = {
    "quadratic.dl": "samples/data/quadratic.npz",
    "linear.dl": "samples/data/linear.csv",
    "mlp_digits.dl": "samples/data/digits_test.npz",
    "cnn_digits.dl": "samples/data/digits_test.npz",
    "mlp_dropout.dl": "samples/data/digits_test.npz",
    "resnet_bn.dl": "samples/data/digits_test.npz",
    "lstm.dl": "samples/data/sequences.npz",
}
ROWS = 19  # examples fed to eval: not a multiple of anything the shaders tile by


def reference(model_path: str, seed: int = 0) -> dlc.Session:
    return dlc.Session(dlc.compile(model_path), backend="numpy", seed=seed)


def exported(web_root, name: str, model_path: str, **kw) -> str:
    root, _ = web_root
    export_web(model_path, root / name, **kw)
    return name


def test_every_sample_has_data():
    assert set(SAMPLES) == set(DATA), "a new sample needs its data here"


@pytest.mark.parametrize("sample", SAMPLES)
def test_eval_matches_numpy(sample, web_root, open_export, tmp_path):
    path = f"samples/{sample}"
    sess = reference(path, seed=1)
    sess.save(tmp_path / "w.npz")  # params and model state (batch_norm's running statistics)
    page = open_export(exported(web_root, f"eval_{sample}", path, weights=tmp_path / "w.npz"))
    data = load_data(DATA[sample], sess.model.inputs).arrays
    data = {n: v[:ROWS] for n, v in data.items()}
    fetch = list(sess.model.tensors)
    want = sess.eval(fetch, data)
    got = page.call(
        f"{JS_FEEDS} const out = await m.eval(feeds, arg.fetch); return {JS_OUT};",
        {"feeds": feed(data), "fetch": fetch},
    )
    for name in fetch:
        assert got[name]["shape"] == list(np.shape(want[name])), name
        value = np.asarray(got[name]["data"], np.float32).reshape(np.shape(want[name]))
        np.testing.assert_allclose(value, want[name], rtol=2e-4, atol=2e-5, err_msg=name)
    assert not page.errors


@pytest.mark.parametrize("sample", ["mlp_digits.dl", "cnn_digits.dl", "resnet_bn.dl", "lstm.dl"])
def test_the_outputs_come_from_the_outputs_program(sample, web_root, open_export, tmp_path):
    # the model's outputs alone run the outputs program (fused across the names between them)
    # and match NumPy; any other name then runs eval's, fetched and compiled on that first use,
    # and both give the same outputs
    path = f"samples/{sample}"
    sess = reference(path, seed=4)
    sess.save(tmp_path / "w.npz")
    root, _ = web_root
    name = exported(web_root, f"outputs_{sample}", path, weights=tmp_path / "w.npz")
    manifest = json.loads((root / name / "manifest.json").read_text())
    outputs = manifest["outputs"]
    assert outputs == model_outputs(sess.model.graph)
    assert len(manifest["programs"]["outputs"]["kernels"]) < len(manifest["programs"]["eval"]["kernels"])
    page = open_export(name)
    data = load_data(DATA[sample], sess.model.inputs).arrays
    data = {n: v[:ROWS] for n, v in data.items()}
    every = list(sess.model.tensors)
    want = sess.eval(every, data)
    got = page.call(
        f"{JS_FEEDS} const out = await m.eval(feeds, arg.outputs); const first = [...m.executors.keys()];"
        f" const one = {JS_OUT}; const all = await m.eval(feeds, arg.every);"
        " return {first, one, all: Object.fromEntries(Object.entries(all).map(([n, v]) => [n, Array.from(v.data)])),"
        " programs: [...m.executors.keys()]};",
        {"feeds": feed(data), "outputs": outputs, "every": every},
    )
    assert got["first"] == ["outputs"] and got["programs"] == ["outputs", "eval"]
    for n in outputs:
        value = np.asarray(got["one"][n]["data"], np.float32).reshape(np.shape(want[n]))
        np.testing.assert_allclose(value, want[n], rtol=2e-4, atol=2e-5, err_msg=n)
        np.testing.assert_allclose(value.ravel(), got["all"][n], rtol=1e-5, atol=1e-6, err_msg=n)
    for n in every:
        np.testing.assert_allclose(np.ravel(got["all"][n]), np.ravel(want[n]), rtol=2e-4, atol=2e-5, err_msg=n)
    assert not page.errors


CONSTS = """input x: [N, 2]
const k: [2] = [1, 2]
const m: [2, 2] = [[1, -1], [0.5, 2]]
const s = 3
param w: [2] = ones
y = (x * k * s + w) @ m
total = sum(y)
"""


def test_eval_with_constants_matches_numpy(web_root, open_export, tmp_path):
    path = tmp_path / "consts.dl"
    path.write_text(CONSTS)
    sess = reference(str(path))
    page = open_export(exported(web_root, "consts", path))
    x = {"x": np.arange(10, dtype=np.float32).reshape(5, 2) - 4}
    want = sess.eval(["y", "total"], x)
    got = page.call(f"{JS_FEEDS} const out = await m.eval(feeds, ['y', 'total']); return {JS_OUT};", {"feeds": feed(x)})
    for name in ("y", "total"):
        value = np.reshape(got[name]["data"], np.shape(want[name]))
        np.testing.assert_allclose(value, want[name], rtol=1e-5, atol=1e-5, err_msg=name)


def test_eval_binds_symbolic_dims_from_each_call(web_root, open_export):
    sess = reference("samples/mlp_digits.dl")
    page = open_export(exported(web_root, "dims", "samples/mlp_digits.dl"))
    data = load_data(DATA["mlp_digits.dl"], sess.model.inputs).arrays
    for rows in (1, 40, 3):  # grows, then shrinks into the larger textures
        x = {"pixels": data["pixels"][:rows]}
        got = page.call(f"{JS_FEEDS} const out = await m.eval(feeds, ['probs']); return {JS_OUT};", {"feeds": feed(x)})
        assert got["probs"]["shape"] == [rows, 10]
        np.testing.assert_allclose(
            np.reshape(got["probs"]["data"], (rows, 10)), sess.eval("probs", x), rtol=2e-4, atol=2e-6
        )


def _digits_training(optimizer, seed, label, rows, web_root, open_export, tmp_path):
    """(NumPy session, the page of its export with the same weights, the first `rows` digits,
    the same optimizer for the NumPy side)."""
    path = "samples/mlp_digits.dl"
    sess = reference(path, seed=seed)
    np.savez(tmp_path / "w.npz", **sess.params)
    lr = 0.05 if optimizer == "sgd" else 0.01
    name = exported(web_root, f"{label}_{optimizer}", path, weights=tmp_path / "w.npz", optimizer=optimizer, lr=lr)
    data = load_data("samples/data/digits_train.npz", sess.model.inputs).arrays
    data = {n: v[:rows] for n, v in data.items()}
    return sess, open_export(name), data, dlc.SGD(lr) if optimizer == "sgd" else dlc.Adam(lr)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_ten_training_steps_match_numpy(optimizer, web_root, open_export, tmp_path):
    # 100 rows: 32, 32, 32, 4 (the last batch of an epoch is smaller)
    sess, page, data, opt = _digits_training(optimizer, 2, "train", 100, web_root, open_export, tmp_path)
    want = sess.train(data, optimizer=opt, batch_size=32, steps=10, shuffle=False)
    got = page.call(
        f"{JS_FEEDS} const losses = await m.train(feeds, {{steps: 10, batchSize: 32}});"
        " const params = await m.params();"
        " const after = await m.eval(feeds, ['cost']);"  # eval sees the trained params
        f" const out = params; return {{losses, params: {JS_OUT}, cost: after.cost.data[0]}};",
        {"feeds": feed(data)},
    )
    np.testing.assert_allclose(got["losses"], want, rtol=1e-4, atol=1e-5)
    assert got["losses"][-1] < got["losses"][0]
    np.testing.assert_allclose(got["cost"], sess.eval("cost", data), rtol=1e-4)
    for n, v in sess.params.items():
        assert got["params"][n]["shape"] == list(v.shape)
        np.testing.assert_allclose(np.reshape(got["params"][n]["data"], v.shape), v, rtol=1e-4, atol=1e-5, err_msg=n)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_a_diverged_call_puts_back_params_and_state_and_training_goes_on(optimizer, web_root, open_export, tmp_path):
    """train() keeps what its steps replace or overwrite (no copy of every leaf up front): after
    a diverged call of several steps every param is back bit for bit and the optimizer's state
    too (the next steps match NumPy's from the state before the diverged call)."""
    sess, page, data, opt = _digits_training(optimizer, 4, "restore", 64, web_root, open_export, tmp_path)
    want = sess.train(data, optimizer=opt, batch_size=32, steps=4, shuffle=False)
    got = page.call(
        f"{JS_FEEDS} const first = await m.train(feeds, {{steps: 2, batchSize: 32}});"
        " let out = await m.params(); const before = " + JS_OUT + ";"
        " let error = null;"
        " try { await m.train(feeds, {steps: 3, batchSize: 32, lr: 1e38}); } catch (e) { error = e.message; }"
        " out = await m.params(); const restored = " + JS_OUT + ";"
        " const next = await m.train(feeds, {steps: 2, batchSize: 32});"
        " out = await m.params();"
        f" return {{first, error, before, restored, next, params: {JS_OUT}}};",
        {"feeds": feed(data)},
    )
    assert got["error"] and "diverged" in got["error"]
    assert got["restored"] == got["before"]  # bit for bit
    np.testing.assert_allclose(got["first"] + got["next"], want, rtol=1e-4, atol=1e-5)
    for n, v in sess.params.items():
        np.testing.assert_allclose(np.reshape(got["params"][n]["data"], v.shape), v, rtol=1e-4, atol=1e-5, err_msg=n)
    assert not page.errors


@pytest.mark.parametrize("sample", ["mlp_dropout.dl", "resnet_bn.dl"])
def test_training_with_dropout_and_batch_norm_matches_numpy(sample, web_root, open_export, tmp_path):
    # dlc.js draws the same dropout masks (WebGL2's uint arithmetic) and updates the running
    # statistics and the step counter on the GPU as the reference does
    path = f"samples/{sample}"
    sess = reference(path, seed=3)
    sess.save(tmp_path / "w.npz")
    name = exported(web_root, f"train_{sample}", path, weights=tmp_path / "w.npz", optimizer="adam", lr=0.01, seed=3)
    page = open_export(name)
    data = load_data("samples/data/digits_train.npz", sess.model.inputs).arrays
    data = {n: v[:40] for n, v in data.items()}
    want = sess.train(data, optimizer=dlc.Adam(0.01), batch_size=16, steps=4, shuffle=False)
    got = page.call(
        f"{JS_FEEDS} const losses = await m.train(feeds, {{steps: 4, batchSize: 16}});"
        " const after = await m.eval(feeds, ['cost']);"
        " return {losses, cost: after.cost.data[0]};",
        {"feeds": feed(data)},
    )
    np.testing.assert_allclose(got["losses"], want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got["cost"], sess.eval("cost", data), rtol=1e-4)


def test_bad_feeds_and_names_are_clear_errors(web_root, open_export):
    page = open_export(exported(web_root, "errors", "samples/mlp_digits.dl"))

    def error(body: str) -> str:
        return page.call(f"try {{ {body}; return 'no error'; }} catch (e) {{ return e.name + ': ' + e.message; }}")

    one = "{data: new Float32Array(64), shape: [1, 64]}"
    assert "DlcError: input 'pixels' is missing" == error("await m.eval({}, ['probs'])")
    assert "no tensor named 'prob'" in error(f"await m.eval({{pixels: {one}}}, ['prob'])")
    assert "no input 'pixel'" in error(f"await m.eval({{pixel: {one}}}, ['probs'])")
    # names that are keys of every JavaScript object are no names of the model
    assert "DlcError: no tensor named 'constructor'" in error(f"await m.eval({{pixels: {one}}}, ['constructor'])")
    assert "DlcError: the model has no input 'toString'" in error(f"await m.eval({{toString: {one}}}, ['probs'])")
    assert "declared [B, 64] but fed shape [1, 63]" in error(
        "await m.eval({pixels: {data: new Float32Array(63), shape: [1, 63]}}, ['probs'])"
    )
    assert "holds 128 values, its data has 64" in error(
        "await m.eval({pixels: {data: new Float32Array(64), shape: [2, 64]}}, ['probs'])"
    )
    assert "dim B is 1 in input 'pixels' but 2 in input 'labels'" in error(
        f"await m.eval({{pixels: {one}, labels: {{data: new Float32Array(2), shape: [2]}}}}, ['cost'])"
    )
    assert "input 'labels' is missing" in error(f"await m.train({{pixels: {one}}}, {{steps: 1}})")
    ink = "{data: new Float32Array(64).fill(16), shape: [1, 64]}"
    assert "diverged" in error(
        f"await m.train({{pixels: {ink}, labels: {{data: new Float32Array([1]), shape: [1]}}}}, {{steps: 3, lr: 1e38}})"
    )
    # the params are back as they were before the diverged call
    assert page.call("const p = await m.params(); return p.W1.data.every(Number.isFinite);")
    assert "disposed" in error("m.dispose(); await m.eval({}, ['probs'])")
    missing = error("const { load } = await import('./dlc.js'); await load('../no_such_export/')")
    assert missing.startswith("DlcError: cannot load ") and "no_such_export/manifest.json: HTTP 404" in missing


def strokes(points: list[tuple[float, float]], steps: int = 12) -> list[tuple[float, float]]:
    """A polyline through `points` (fractions of the pad), `steps` points per segment."""
    out = [points[0]]
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        out += [(x0 + (x1 - x0) * t, y0 + (y1 - y0) * t) for t in np.linspace(0, 1, steps)[1:]]
    return out


DRAWN = {  # digits as a person draws them, in fractions of the pad
    0: [(0.5 + 0.22 * np.sin(t), 0.5 - 0.36 * np.cos(t)) for t in np.linspace(0, 2 * np.pi, 40)],
    1: strokes([(0.35, 0.38), (0.56, 0.15), (0.56, 0.85)]),
    7: strokes([(0.3, 0.18), (0.7, 0.18), (0.45, 0.85)]),
}


@pytest.fixture(scope="module")
def digits_weights(tmp_path_factory):
    """The digits MLP trained with the NumPy reference (a session of its own)."""
    sess = reference("samples/mlp_digits.dl")
    train = load_data("samples/data/digits_train.npz", sess.model.inputs).arrays
    sess.train(train, optimizer=dlc.Adam(0.01), batch_size=32, epochs=15)
    path = tmp_path_factory.mktemp("digits") / "w.npz"
    np.savez(path, **sess.params)
    return path, sess


@pytest.mark.parametrize("digit", sorted(DRAWN))
def test_the_digits_page_classifies_a_drawn_digit(digit, digits_weights, web_root, open_export, tmp_path):
    weights, sess = digits_weights
    root, _ = web_root
    if not (root / "digits").exists():
        exported(web_root, "digits", "samples/mlp_digits.dl", weights=weights)
    page = open_export("digits")
    pad = page.page.locator("#pad").bounding_box()
    mouse = page.page.mouse
    for i, (fx, fy) in enumerate(DRAWN[digit]):
        x, y = pad["x"] + fx * pad["width"], pad["y"] + fy * pad["height"]
        if i == 0:
            mouse.move(x, y)
            mouse.down()
        else:
            mouse.move(x, y, steps=2)
    mouse.up()
    page.page.wait_for_function("window.dlcPage.last !== null", timeout=60_000)
    last = page.page.evaluate("window.dlcPage.classify()")  # the whole drawing, after the last stroke
    shot = tmp_path / f"digits_page_{digit}.png"
    page.page.screenshot(path=str(shot))
    print(f"screenshot: {shot}")
    features = np.asarray(last["features"], np.float32).reshape(1, 64)
    # the layout of the training data: whole counts 0..16 per 4x4 block, strokes that fill
    # blocks, the digit filling all 8 rows
    assert features.min() == 0 and 12 <= features.max() <= 16 and (features == np.round(features)).all()
    assert (features.reshape(8, 8) > 0).any(axis=1).all()
    np.testing.assert_allclose(last["probs"], sess.eval("probs", {"pixels": features})[0], rtol=2e-4, atol=2e-6)
    assert last["prediction"] == digit
    assert page.page.locator("#prediction").inner_text() == str(digit)
    assert page.page.locator(".bar").count() == 10
    page.page.locator("#clear").click()
    assert page.page.locator("#prediction").inner_text() == "?"


def test_the_generic_page_evaluates_on_zeros(web_root, open_export):
    page = open_export(exported(web_root, "generic", "samples/quadratic.dl"))
    assert page.page.locator("#names").inner_text().count("param") == 3
    page.page.locator("#run").click()
    page.page.wait_for_function("document.getElementById('output').textContent.includes('cost')")
    sess = reference("samples/quadratic.dl")
    text = page.page.locator("#output").inner_text()
    c = sess.params["c"].item()  # at x = 0: y = c
    assert text.splitlines()[0].startswith("y [1]: ") and abs(float(text.splitlines()[0].split()[-1]) - c) < 1e-3


def test_load_without_float_render_targets_says_so(browser, web_root):
    root, base = web_root
    if not (root / "digits_plain").exists():
        exported(web_root, "digits_plain", "samples/mlp_digits.dl")
    page = browser.new_page()
    try:
        page.add_init_script(
            "const get = WebGL2RenderingContext.prototype.getExtension;"
            "WebGL2RenderingContext.prototype.getExtension = function (name) {"
            " return name === 'EXT_color_buffer_float' ? null : get.call(this, name); };"
        )
        page.goto(f"{base}digits_plain/index.html")
        page.wait_for_function("window.dlcPage && window.dlcPage.error", timeout=60_000)
        assert "lacks EXT_color_buffer_float" in page.evaluate("window.dlcPage.error")
        assert "lacks EXT_color_buffer_float" in page.locator("#error").inner_text()
    finally:
        page.close()


def test_training_refuses_inputs_without_the_batch_dim_as_python_does(web_root, open_export, tmp_path):
    path = tmp_path / "scaled.dl"
    path.write_text(
        "input x: [B, 2]\ninput y: [B]\ninput scale: [2]\nparam w: [2] = ones\n"
        "pred = (x * scale) @ w\nloss cost = mean_squared(pred, y)\n"
    )
    page = open_export(exported(web_root, "scaled", path))
    x = {"x": np.ones((4, 2), np.float32), "y": np.zeros(4, np.float32), "scale": np.array([2, 3], np.float32)}
    with pytest.raises(dlc.DlcError, match="must share a leading symbolic dim") as python:
        reference(str(path)).train(x, batch_size=2, steps=1, shuffle=False)
    got = page.call(
        f"{JS_FEEDS} try {{ await m.train(feeds, {{steps: 1, batchSize: 2}}); return 'no error'; }}"
        " catch (e) { return e.message; }",
        {"feeds": feed(x)},
    )
    assert got == str(python.value)


NUMERICS = """input x: [6]
input r: [3, 300]
input q: [3, 1500]
s = sin(x)
c = cos(x)
t = tan(x)
l = log(abs(x))
mr = mean(r, axis=1)
mq = mean(q, axis=1)
"""


def test_numerics_in_the_browser_match_numpy(web_root, open_export, tmp_path):
    """sin/cos/tan of huge arguments, log of subnormals and means over rows holding +-3e38
    (one loop and the two-pass reduction) in WebGL2, as on GL (tests/gl/test_numerics_gl.py)."""
    path = tmp_path / "numerics.dl"
    path.write_text(NUMERICS)
    sess = reference(str(path))
    page = open_export(exported(web_root, "numerics", path))
    x = np.array([3e38, 1e8, 1e30, -12345.678, 1.4e-45, 1e-38], np.float32)

    def rows(n: int) -> np.ndarray:
        k = np.arange(n)
        alternating = np.where(k % 2 == 0, 3e38, -3e38)  # exact sum 0
        halves = np.where(k < n // 2, 3e38, -3e38)  # 0
        over = np.where(k < 3, 3e38, 1.0)  # 9e38 + n - 3: past float32's range
        return np.stack([alternating, halves, over]).astype(np.float32)

    feeds = {"x": x, "r": rows(300), "q": rows(1500)}
    names = ["s", "c", "t", "l", "mr", "mq"]
    with np.errstate(all="ignore"):
        want = sess.eval(names, feeds)
    got = page.call(
        f"{JS_FEEDS} const out = await m.eval(feeds, arg.names); return {JS_OUT};",
        {"feeds": feed(feeds), "names": names},
    )
    value = {n: np.asarray(got[n]["data"], np.float32) for n in names}
    for n in ("s", "c", "t", "l"):
        np.testing.assert_allclose(value[n], want[n], rtol=2e-6, err_msg=n)
    for n, length in (("mr", 300), ("mq", 1500)):
        bound = length * 2.0**-23 * 3e38  # float32's error bound on the sum, over n
        assert np.isfinite(value[n][:2]).all() and (np.abs(value[n][:2]) <= bound).all(), (n, value[n])
        assert value[n][2] == np.inf, (n, value[n])
    assert not page.errors


IDS = """
input t: i32[B, 3]
input y: i32[B, 3]
param wte: [7, 5]
param w: [5, 7]
back = reshape(t, [3, B])
h = gather(wte, t)
loss cost = softmax_cross_entropy(h @ w, y)
"""


def test_i32_inputs_go_in_by_their_bits_and_come_back_as_int32(web_root, open_export, tmp_path):
    # dlc.js feeds an i32 input as the float32 view of its int32 bits (ids that are NaN or
    # subnormal bit patterns included) and reads an i32 tensor back as an Int32Array.
    path = tmp_path / "ids.dl"
    path.write_text(IDS)
    sess = reference(str(path))
    page = open_export(exported(web_root, "ids", path))
    big = [[2**31 - 1, -1, 1], [0, 7, -(2**31)]]
    call = (
        "const feeds = Object.fromEntries(Object.entries(arg.feeds)"
        ".map(([n, f]) => [n, {data: f.data, shape: f.shape}]));"
        " const out = await m.eval(feeds, arg.fetch);"
        " return Object.fromEntries(Object.entries(out).map(([n, v]) => [n, {data: Array.from(v.data),"
        " shape: v.shape, ints: v.data instanceof Int32Array}]));"
    )
    got = page.call(call, {"feeds": {"t": {"data": sum(big, []), "shape": [2, 3]}}, "fetch": ["back"]})
    assert got["back"]["ints"]
    assert got["back"]["data"] == np.reshape(big, -1).tolist()
    t = np.array([[1, 2, 6], [0, 3, 3], [5, 4, 1]])
    feeds = {
        "t": {"data": t.ravel().tolist(), "shape": [3, 3]},
        "y": {"data": (t % 7).ravel().tolist(), "shape": [3, 3]},
    }
    got = page.call(call, {"feeds": feeds, "fetch": ["h", "cost"]})
    want = sess.eval(["h", "cost"], {"t": t, "y": t % 7})
    np.testing.assert_allclose(np.reshape(got["h"]["data"], (3, 3, 5)), want["h"], rtol=1e-6)
    np.testing.assert_allclose(got["cost"]["data"][0], want["cost"], rtol=1e-5)
    bad = {"t": {"data": [1.5, 0, 0], "shape": [1, 3]}}
    with pytest.raises(Exception, match="input 't' holds 1.5 at index 0: an i32 input takes int32 values"):
        page.call(call, {"feeds": bad, "fetch": ["back"]})


def test_attention_block_with_dim_products_and_norm_kernels_matches_numpy(web_root, open_export, tmp_path):
    # heads as rank-4 tensors, products such as 4*B in the shapes, the layer_norm kernel: dlc.js
    # evaluates the products from each call's B and T
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "compiler"))
    from test_heads import ATTENTION, attention_params

    path = tmp_path / "attention.dl"
    path.write_text(ATTENTION)
    sess = reference(str(path))
    sess.set_params(attention_params())
    weights = tmp_path / "attention.weights.npz"
    sess.save(weights)
    page = open_export(exported(web_root, "attention", path, weights=weights))
    for batch, t in ((2, 5), (1, 3)):
        x = {"x": np.random.default_rng(batch).normal(size=(batch, t, 16)).astype(np.float32)}
        got = page.call(f"{JS_FEEDS} const out = await m.eval(feeds, ['out']); return {JS_OUT};", {"feeds": feed(x)})
        assert got["out"]["shape"] == [batch, t, 16]
        np.testing.assert_allclose(
            np.reshape(got["out"]["data"], (batch, t, 16)), sess.eval("out", x), rtol=2e-4, atol=2e-4
        )


def test_fused_attention_runs_in_the_browser(web_root, open_export, tmp_path):
    # the block above with its mask filled with -inf: the compiler fuses it into `attention`,
    # which the texture target (dlc.js's) computes a fragment an output
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "compiler"))
    from test_heads import ATTENTION, attention_params

    path = tmp_path / "fused.dl"
    path.write_text(ATTENTION.replace("-1e9", "-inf"))
    sess = reference(str(path))
    assert any(n.op == "attention" for n in sess.model.graph.nodes)
    sess.set_params(attention_params())
    weights = tmp_path / "fused.weights.npz"
    sess.save(weights)
    page = open_export(exported(web_root, "fused", path, weights=weights))
    for batch, t in ((2, 5), (1, 3)):
        x = {"x": np.random.default_rng(batch).normal(size=(batch, t, 16)).astype(np.float32)}
        got = page.call(f"{JS_FEEDS} const out = await m.eval(feeds, ['out']); return {JS_OUT};", {"feeds": feed(x)})
        np.testing.assert_allclose(
            np.reshape(got["out"]["data"], (batch, t, 16)), sess.eval("out", x), rtol=2e-4, atol=2e-4
        )
