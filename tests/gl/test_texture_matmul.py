"""The texture target's packed matmul (compiler/codegen/texture_matmul.py) against NumPy:
transposes, batching and broadcasting, symbolic dims, sizes that are no multiple of 4, fused
epilogues, NaN and infinities, gradients in closed form, and its choice against the
per-output loop. tests/gl/test_texture_target.py runs the registry sweeps again without
compute shaders."""

from __future__ import annotations

import numpy as np
import pytest
from gl_helpers import fragment_compile_log, matmul_graph

import dlc
from dlc.compiler.codegen import texture_matmul
from dlc.compiler.codegen.texture import packable_params
from dlc.compiler.emit import programs
from dlc.runtime.errors import DlcError

pytestmark = pytest.mark.gl

M, K, N = 37, 13, 29  # K = 3 texels and a quarter: the last texel is padded


@pytest.fixture(scope="module")
def texture(gl):
    from dlc.backends.gl import GLBackend

    backend = GLBackend(target="texture")
    yield backend
    backend.close()


def _matmul(a, b, ta, tb):
    a = np.swapaxes(a, -1, -2) if ta else a
    b = np.swapaxes(b, -1, -2) if tb else b
    return np.matmul(a.astype(np.float64), b.astype(np.float64))


def _run(backend, a_shape, b_shape, ta, tb, feeds, dims=None, epilogue=False):
    graph, y = matmul_graph(a_shape, b_shape, ta, tb, epilogue)
    (got,) = backend.run(graph, [y], feeds, dims or {})
    return got


def _packed_files(source: str) -> list[str]:
    """The pack passes' shader files of `source`'s eval program on the texture target."""
    return [f for f in programs(dlc.compile(source), target="texture")["eval"].sources if "_pack" in f]


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize(
    "batch",
    [((), ()), ((2,), (2,)), ((), (3,)), ((3,), ()), ((1,), (3,)), ((3,), (1,))],
    ids=["2x2", "3x3", "2x3", "3x2", "broadcast-a", "broadcast-b"],
)
def test_packed_matmul_matches_numpy(texture, ta, tb, batch):
    rng = np.random.default_rng(0)
    a_shape = (*batch[0], *((K, M) if ta else (M, K)))
    b_shape = (*batch[1], *((N, K) if tb else (K, N)))
    a = rng.normal(size=a_shape).astype(np.float32)
    b = rng.normal(size=b_shape).astype(np.float32)
    got = _run(texture, a_shape, b_shape, ta, tb, {"a": a, "w": b})
    np.testing.assert_allclose(got, _matmul(a, b, ta, tb), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("k", [8, 9, 10, 11, 64, 301])
def test_every_padding_of_the_last_texel_and_a_fused_epilogue(texture, k):
    rng = np.random.default_rng(k)
    a = rng.normal(size=(M, k)).astype(np.float32)
    b = rng.normal(size=(k, N)).astype(np.float32)
    bias = rng.normal(size=N).astype(np.float32)
    got = _run(texture, (M, k), (k, N), False, False, {"a": a, "w": b, "bias": bias}, epilogue=True)
    want = np.maximum(_matmul(a, b, False, False) + bias, 0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_symbolic_rows_and_depth_resize_between_runs(texture):
    """B is both a row count (A's rows) and K (a weight gradient's x^T @ dy): the packed
    textures are sized when bound, grown and shrunk."""
    rng = np.random.default_rng(2)
    for batch in (5, 70, 1, 9):
        x = rng.normal(size=(batch, K)).astype(np.float32)
        w = rng.normal(size=(K, N)).astype(np.float32)
        got = _run(texture, ("B", K), (K, N), False, False, {"a": x, "w": w}, {"B": batch})
        np.testing.assert_allclose(got, _matmul(x, w, False, False), rtol=1e-5, atol=1e-5)
        dy = rng.normal(size=(batch, N)).astype(np.float32)
        got = _run(texture, ("B", K), ("B", N), True, False, {"a": x, "w": dy}, {"B": batch})
        np.testing.assert_allclose(got, _matmul(x, dy, True, False), rtol=1e-5, atol=1e-5)


def test_nan_and_infinities_propagate_as_numpy(texture):
    rng = np.random.default_rng(3)
    a = rng.normal(size=(M, K)).astype(np.float32)
    b = rng.normal(size=(K, N)).astype(np.float32)
    a[1, 12] = np.nan  # in the last, padded texel
    a[4, 0] = np.inf
    b[0, 7] = 0.0  # inf * 0: NaN at (4, 7), as NumPy
    b[5, 2] = -np.inf
    got = _run(texture, (M, K), (K, N), False, False, {"a": a, "w": b})
    with np.errstate(invalid="ignore"):
        want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    finite = np.isfinite(want)
    np.testing.assert_array_equal(got[~finite & ~np.isnan(want)], want[~finite & ~np.isnan(want)])
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-5, atol=1e-5)


GRAD = f"""
input x: [B, {K}]
input t: [B, 9]
param W: [{K}, 6] = glorot
param V: [6, 9] = glorot
h = x @ W
loss cost = sum((h @ V) * t)
"""


def test_gradients_match_the_closed_form(gl):
    rng = np.random.default_rng(4)
    feeds = {"x": rng.normal(size=(11, K)), "t": rng.normal(size=(11, 9))}
    sess = dlc.Session(dlc.compile(GRAD), backend="gl", target="texture", seed=5)
    W, V = (sess.params[n].astype(np.float64) for n in ("W", "V"))
    x, t = feeds["x"], feeds["t"]
    got = sess.gradients(feeds)
    np.testing.assert_allclose(got["W"], x.T @ (t @ V.T), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got["V"], (x @ W).T @ t, rtol=1e-4, atol=1e-4)
    # the weight gradients are x^T @ dy over K = B: the training step packs them
    progs = programs(dlc.compile(GRAD), train_loss="cost", optimizer=dlc.SGD(0.1), target="texture")
    assert len([f for f in progs["train"].sources if "_pack" in f]) >= 4


def test_small_products_keep_the_per_output_loop():
    assert len(_packed_files("input a: [5, 7]\ninput b: [7, 3]\nc = a @ b\n")) == 0  # K < 8
    assert len(_packed_files("input a: [4, 8]\ninput b: [8, 4]\nc = a @ b\n")) == 0  # 128 products
    # B symbolic: A and B packed, then the products, 4 outputs a fragment
    assert len(_packed_files("input a: [B, 8]\ninput b: [8, 4]\nc = a @ b\n")) == 3
    assert texture_matmul.MIN_DEPTH == 8


def test_a_kernel_without_three_spare_texture_units_keeps_the_per_output_loop(monkeypatch):
    source = "input a: [B, 64]\ninput b: [64, 32]\nc = a @ b\n"  # slots a, b, c: units 0-2
    monkeypatch.setattr(texture_matmul, "TEXTURE_UNITS", 5)
    assert _packed_files(source) == []
    monkeypatch.setattr(texture_matmul, "TEXTURE_UNITS", 6)
    assert len(_packed_files(source)) == 3


def test_packed_shaders_read_without_dividing_per_fetch():
    """The K loops (the products passes) fetch texels at (u, y + q): no division or modulo
    inside; a matmul by a matrix reads 2 rows of A and 2 of B per 4 k (the loop of a last row
    without a partner, and a conv's, one of A and 4 of B)."""
    conv = 'input x: [B, 8, 8, 4]\ninput k: [3, 3, 4, 4]\ny = conv2d(x, k, stride=1, padding="same")\n'
    for source, fetches in (("input a: [B, 64]\ninput b: [64, 32]\nc = a @ b\n", [4, 5]), (conv, [5])):
        files = programs(dlc.compile(source), target="texture")["eval"].sources
        (text,) = [t for t in files.values() if "for (int q" in t]
        loops = [part[: part.index("}")] for part in text.split("for (int q")[1:]]
        assert [loop.count("texture(") for loop in loops] == fetches
        assert all("/" not in loop and "%" not in loop for loop in loops)


def test_a_packed_operand_too_big_for_the_textures_is_refused_by_name(gl, monkeypatch):
    from dlc.runtime.textures import packed_layout

    assert packed_layout(70, 13, "x") == (70, 4)
    monkeypatch.setitem(gl.limits, "max_texture_size", 8)
    assert packed_layout(12, 13, "x") == (8, 8)  # two bands of 8 rows, 4 texels deep
    with pytest.raises(DlcError, match=r"packed 'a'.*3 bands of 4 texels.*MAX_TEXTURE_SIZE is 8"):
        packed_layout(17, 16, "packed 'a'")


MLP = f"""
input x: [B, {K}]
param W: [{K}, 20] = glorot
y = tanh(x @ W)
"""


def test_an_artifact_runs_its_packed_passes_and_a_bad_packed_unit_is_refused(gl, tmp_path):
    import json

    from dlc.compiler.emit import write_artifact

    model = dlc.compile(MLP)
    out = write_artifact(model, tmp_path / "m.dlc", target="texture", seed=3)
    manifest = json.loads((out / "manifest.json").read_text())
    (kernel,) = manifest["programs"]["eval"]["kernels"]
    units = [q["unit"] for q in kernel["packed"]]  # A, B and the products, rendered in that order
    assert len(units) == 3 and units == [p.get("into") for p in kernel["passes"][:3]]
    x = np.random.default_rng(6).normal(size=(7, K))
    runner = dlc.load(out, seed=3)
    W = dlc.Session(model, backend="numpy", seed=3).params["W"].astype(np.float64)
    np.testing.assert_allclose(runner.eval("y", {"x": x}), np.tanh(x @ W), rtol=1e-5, atol=1e-5)
    for bad in (kernel["packed"][0]["unit"] + 7, "3"):
        kernel["passes"][0]["into"] = bad
        (out / "manifest.json").write_text(json.dumps(manifest))
        with pytest.raises(DlcError, match=r"passes\[0\]\.into.*is not a packed unit"):
            dlc.load(out)
    kernel["passes"][0]["into"] = kernel["packed"][0]["unit"]
    kernel["packed"][0]["unit"] = 0  # a unit the kernel's slots use
    (out / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(DlcError, match=r"packed\[0\]\.unit.*out of range"):
        dlc.load(out)


def _conv_numpy(x, w, stride, pads, dil):
    """conv2d in float64 by its definition (NHWC, filter [KH, KW, C, CO]), padding given."""
    (pt, pb), (pl, pr) = pads
    x = np.pad(x.astype(np.float64), ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    kh, kw = w.shape[:2]
    oh = (x.shape[1] - dil * (kh - 1) - 1) // stride + 1
    ow = (x.shape[2] - dil * (kw - 1) - 1) // stride + 1
    out = np.zeros((x.shape[0], oh, ow, w.shape[3]))
    for di in range(kh):
        for dj in range(kw):
            y0, x0 = di * dil, dj * dil
            patch = x[:, y0 : y0 + stride * (oh - 1) + 1 : stride, x0 : x0 + stride * (ow - 1) + 1 : stride]
            out += patch @ w[di, dj].astype(np.float64)
    return out


@pytest.mark.parametrize(
    "padding,stride,dilation,pads",
    [("valid", 1, 1, ((0, 0), (0, 0))), ("same", 2, 1, ((1, 1), (0, 1))), ("same", 1, 2, ((2, 2), (2, 2)))],
    ids=["valid", "same-stride2", "same-dilated"],
)
def test_packed_conv2d_matches_numpy(gl, padding, stride, dilation, pads):
    src = f"""
input images: [B, 9, 8, 5]
input k: [3, 3, 5, 6]
input bias: [6]
h = relu(conv2d(images, k, stride={stride}, padding="{padding}", dilation={dilation}) + bias)
"""
    assert len(_packed_files(src)) == 3  # x, k (5 channels: a padded texel) and the products
    rng = np.random.default_rng(7)
    k = rng.normal(size=(3, 3, 5, 6)).astype(np.float32)
    bias = rng.normal(size=6).astype(np.float32)
    sess = dlc.Session(dlc.compile(src), backend="gl", target="texture")
    for batch in (3, 1):
        x = rng.normal(size=(batch, 9, 8, 5)).astype(np.float32)
        got = sess.eval("h", {"images": x, "k": k, "bias": bias})
        want = np.maximum(_conv_numpy(x, k, stride, pads, dilation) + bias, 0)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_grouped_convs_keep_the_per_output_loop():
    grouped = 'input x: [B, 8, 8, 4]\ninput k: [3, 3, 2, 4]\ny = conv2d(x, k, stride=1, padding="same", groups=2)\n'
    assert _packed_files(grouped) == []


@pytest.mark.parametrize("channels", [1, 2, 3])
def test_a_conv_over_few_channels_packs_its_filter_by_output_channel(gl, channels):
    """Fewer than 4 input channels: one texel of x per tap and one of w per channel (4 output
    channels, 6 here: a padded texel), against the float64 conv, with a fused epilogue, at
    stride 2, and with an infinity and a NaN in the image reaching only the outputs that read
    them."""
    src = f"""
input images: [B, 9, 8, {channels}]
input k: [3, 3, {channels}, 6]
input bias: [6]
h = relu(conv2d(images, k, stride=2, padding="same") + bias)
"""
    files = programs(dlc.compile(src), target="texture")["eval"].sources
    (products,) = [t for f, t in files.items() if "_pack" in f and "dlc_out4 = accf" in t]
    assert products.count("texture(") == 1 + channels
    rng = np.random.default_rng(11)
    k = rng.normal(size=(3, 3, channels, 6)).astype(np.float32)
    bias = rng.normal(size=6).astype(np.float32)
    sess = dlc.Session(dlc.compile(src), backend="gl", target="texture")
    for batch in (3, 1):
        x = rng.normal(size=(batch, 9, 8, channels)).astype(np.float32)
        if batch == 1:
            x[0, 2, 2, 0], x[0, 6, 5, channels - 1] = np.inf, np.nan
        got = sess.eval("h", {"images": x, "k": k, "bias": bias})
        with np.errstate(invalid="ignore"):
            want = np.maximum(_conv_numpy(x, k, 2, ((1, 1), (0, 1)), 1) + bias, 0)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
        finite = np.isfinite(want)
        np.testing.assert_allclose(got[finite], want[finite], rtol=1e-4, atol=1e-4)


CONV_GRAD = """
param img: [2, 7, 6, 3] = normal(0, 1)
param k: [3, 3, 3, 5] = normal(0, 1)
input t: [2, 4, 3, 5]
loss cost = sum(conv2d(img, k, stride=2, padding="same") * t)
"""


def test_conv_gradients_match_the_closed_form(gl):
    """d cost / d img (conv2d_grad_input, packed over the 5 output channels) and d cost / d k
    (the per-output loop), against the adjoint of the float64 conv."""
    progs = programs(dlc.compile(CONV_GRAD), train_loss="cost", optimizer=dlc.SGD(0.1), target="texture")
    assert any("conv2d_grad_input" in f and "_pack" in f for f in progs["train"].sources)
    rng = np.random.default_rng(8)
    t = rng.normal(size=(2, 4, 3, 5))
    sess = dlc.Session(dlc.compile(CONV_GRAD), backend="gl", target="texture", seed=9)
    img, k = (sess.params[n].astype(np.float64) for n in ("img", "k"))
    pads = ((1, 1), (0, 1))  # "same" at stride 2: 7 -> 4 rows, 6 -> 3 columns
    padded = np.pad(img, ((0, 0), *pads, (0, 0)))
    dpadded, dk = np.zeros_like(padded), np.zeros_like(k)
    for di in range(3):
        for dj in range(3):
            window = (slice(None), slice(di, di + 7, 2), slice(dj, dj + 5, 2))
            dpadded[window] += t @ k[di, dj].T
            dk[di, dj] = np.einsum("byxc,byxo->co", padded[window], t)
    got = sess.gradients({"t": t})
    np.testing.assert_allclose(got["img"], dpadded[:, 1:8, 0:6], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got["k"], dk, rtol=1e-4, atol=1e-4)


def _filter_gradient(x, t, kh, kw, stride, pads, dil):
    """d sum(conv2d(x, k) * t) / d k in float64: each tap's window of the padded x against t."""
    padded = np.pad(x.astype(np.float64), ((0, 0), *pads, (0, 0)))
    oh, ow = t.shape[1:3]
    dk = np.zeros((kh, kw, x.shape[3], t.shape[3]))
    for di in range(kh):
        for dj in range(kw):
            y0, x0 = di * dil, dj * dil
            window = padded[:, y0 : y0 + stride * (oh - 1) + 1 : stride, x0 : x0 + stride * (ow - 1) + 1 : stride]
            dk[di, dj] = np.einsum("byxc,byxo->co", window, t.astype(np.float64))
    return dk


@pytest.mark.parametrize(
    "padding,stride,dilation,pads,out",
    [
        ("valid", 1, 1, ((0, 0), (0, 0)), (7, 6)),
        ("same", 2, 1, ((1, 1), (0, 1)), (5, 4)),
        ("same", 1, 2, ((2, 2), (2, 2)), (9, 8)),
    ],
    ids=["valid", "same-stride2", "same-dilated"],
)
@pytest.mark.parametrize("channels", [(5, 6), (1, 16)], ids=["5-6", "1-16"])
def test_packed_filter_gradient_matches_numpy(gl, padding, stride, dilation, pads, out, channels):
    """conv2d_grad_filter packed (x 4 channels a texel, dy 4 output channels a texel, 4
    outputs a fragment) against the float64 adjoint: padding, stride, dilation, channel counts
    no multiple of 4 (one input channel: 3 padded components), two batch sizes, and
    infinities and NaN in one input channel reach only that channel's gradients."""
    c, co = channels
    src = f"""
param k: [3, 3, {c}, {co}] = normal(0, 1)
input img: [B, 9, 8, {c}]
input t: [B, {out[0]}, {out[1]}, {co}]
loss cost = sum(conv2d(img, k, stride={stride}, padding="{padding}", dilation={dilation}) * t)
"""
    progs = programs(dlc.compile(src), train_loss="cost", optimizer=dlc.SGD(0.1), target="texture")
    assert sum("conv2d_grad_filter" in f and "_pack" in f for f in progs["train"].sources) == 3
    sess = dlc.Session(dlc.compile(src), backend="gl", target="texture", seed=4)
    rng = np.random.default_rng(9)
    for batch in (3, 1):
        x = rng.normal(size=(batch, 9, 8, c)).astype(np.float32)
        t = rng.normal(size=(batch, *out, co)).astype(np.float32)
        got = sess.gradients({"img": x, "t": t})["k"]
        np.testing.assert_allclose(got, _filter_gradient(x, t, 3, 3, stride, pads, dilation), rtol=1e-4, atol=1e-4)
    x[0, 4, 4, 0], x[0, 5, 5, 0] = np.inf, np.nan  # channel 0 only: the others stay finite
    with np.errstate(invalid="ignore"):
        want = _filter_gradient(x, t, 3, 3, stride, pads, dilation)
    got = sess.gradients({"img": x, "t": t})["k"]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-4, atol=1e-4)


FILTER_GRAD = """
param k: [3, 3, 5, 6] = normal(0, 1)
input img: [B, 9, 8, 5]
input t: [B, 5, 4, 6]
loss cost = sum(conv2d(img, k, stride=2, padding="same") * t)
"""


WIDE = """
input x: [B, 37]
input t: [B, 130]
param W: [37, 130] = glorot
loss cost = sum((x @ W) * t)
"""  # 130 columns: WebGL2's 8 x 4 matmul with its 8 render targets


@pytest.mark.parametrize("source", [GRAD, CONV_GRAD, FILTER_GRAD, WIDE], ids=["matmul", "conv", "filter", "matmul-4x4"])
def test_packed_shaders_compile_as_glsl_es_300(gl, source):
    """WebGL2's GLSL ES 3.00 refuses implicit int -> float and needs precisions: Mesa's ES
    front end checks the pack and product passes as a browser would."""
    if "GL_ARB_ES3_compatibility" not in gl.extensions:
        pytest.skip("this GL compiles no GLSL ES 3.00")
    opt, es = dlc.SGD(0.1), {"es": True, "packed": True}
    progs = programs(dlc.compile(source), train_loss="cost", optimizer=opt, target="texture", options=es)
    files = {f: t for p in progs.values() for f, t in p.sources.items()}
    assert any("_pack" in f for f in files)
    if source is WIDE:
        assert any("into 8 render targets" in t for t in files.values())
        # and as dlc.js compiles it for a context of 4 draw buffers: 4 rows a draw
        four = {f"{f} (4 targets)": t.replace("\n", "\n#define DLC_FOUR_TARGETS\n", 1) for f, t in files.items()}
        files.update({f: t for f, t in four.items() if "#ifndef DLC_FOUR_TARGETS" in t})
    for file, text in files.items():
        log = fragment_compile_log(text)
        assert log == "", f"{file}: {log}"


PACKED_PARAM = """
input x: [B, 37]
input t: [B, 132]
param W: [37, 132] = glorot
param c: [132]
loss cost = sum((x @ W + c) * t)
"""  # W's SGD update is the 8 x 4 weight gradient's epilogue: W stored 4 values a texel


def test_params_stored_4_a_texel_compile_as_glsl_es_300(gl):
    """The `packed_params` option (dlc export: texture.packable_params): W's update renders 4
    values a fragment, every kernel reading W reads it with dlc_load4 or dlc_texel4; the
    shaders compile as GLSL ES 3.00. c (written by a sum's epilogue) and every param of a
    program without such an update stay one value a texel."""
    if "GL_ARB_ES3_compatibility" not in gl.extensions:
        pytest.skip("this GL compiles no GLSL ES 3.00")
    model, opt = dlc.compile(PACKED_PARAM), dlc.SGD(0.1)
    progs = programs(model, train_loss="cost", optimizer=opt, target="texture", options={"es": True})
    names = packable_params(progs["train"].plan)
    assert names == {"W"}
    es = {"es": True, "packed_params": names}
    progs = programs(model, train_loss="cost", optimizer=opt, target="texture", options=es)
    files = {f: t for p in progs.values() for f, t in p.sources.items()}
    assert any("into a param stored 4 values a texel" in t for t in files.values())
    assert any("dlc_load4(b" in t for t in files.values())
    for file, text in files.items():
        log = fragment_compile_log(text)
        assert log == "", f"{file}: {log}"


def test_the_packed_option_turns_the_packed_passes_off():
    """GLSL 3.30 and GLSL ES (WebGL2: dlc.js reads packed textures too) pack by default."""
    model = dlc.compile(GRAD)
    for options, want in (
        ({}, True),
        ({"es": True}, True),
        ({"packed": False}, False),
        ({"es": True, "packed": False}, False),
    ):
        sources = programs(model, target="texture", options=options)["eval"].sources
        assert any("_pack" in f for f in sources) == want, options


def test_packed_convs_step_across_bands_of_a_small_texture_limit(gl, monkeypatch):
    """With MAX_TEXTURE_SIZE 38 the packed x, dy and products textures hold their rows in
    several bands: the filter gradient's walk along a row of pixels wraps to the next band
    (stride 2 and 1), as does the few-channel conv's, against the float64 reference."""
    monkeypatch.setitem(gl.limits, "max_texture_size", 38)  # no multiple of a row of pixels
    src = """
param k: [3, 3, 5, 6] = normal(0, 1)
param k1: [3, 3, 1, 6] = normal(0, 1)
input img: [B, 9, 8, 5]
input one: [B, 9, 8, 1]
input t: [B, 5, 4, 6]
h = conv2d(img, k, stride=2, padding="same")
g = conv2d(one, k1, stride=1, padding="same")
loss cost = sum(h * t)
"""
    progs = programs(dlc.compile(src), train_loss="cost", optimizer=dlc.SGD(0.1), target="texture")
    assert sum("conv2d_grad_filter" in f and "_pack" in f for f in progs["train"].sources) == 3
    sess = dlc.Session(dlc.compile(src), backend="gl", target="texture", seed=4)
    rng = np.random.default_rng(10)
    x = rng.normal(size=(3, 9, 8, 5)).astype(np.float32)
    t = rng.normal(size=(3, 5, 4, 6)).astype(np.float32)
    got = sess.gradients({"img": x, "t": t})["k"]
    np.testing.assert_allclose(got, _filter_gradient(x, t, 3, 3, 2, ((1, 1), (0, 1)), 1), rtol=1e-4, atol=1e-4)
    k1 = sess.params["k1"]
    want = _conv_numpy(x[..., :1], k1, 1, ((1, 1), (1, 1)), 1)
    np.testing.assert_allclose(sess.eval("g", {"one": x[..., :1]}), want, rtol=1e-4, atol=1e-4)
