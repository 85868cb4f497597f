"""Dropout on the attention probabilities inside the fused attention, on GL (llvmpipe in CI:
small sizes): the training step's forward and q, k, v gradients (the forward packed with its
row statistics, the three gradient kernels recomputing the mask) on both targets against
the NumPy reference, causal and not; the fused form drops what the written-out form drops
on GL too; the texture shaders compile as GLSL ES 3.00; a Session trains alike on GL and
NumPy (a new mask each step), samples/char_gpt.dl with its dropout too, and so does a compiled
artifact run by the runtime alone; NaN and inf as NumPy. (NumPy oracles:
tests/compiler/test_attention_dropout.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from gl_helpers import fragment_compile_log

import dlc
from dlc.compiler import lang
from dlc.compiler.autodiff import differentiate
from dlc.compiler.modes import training_form
from dlc.compiler.reference import evaluate
from dlc.compiler.simplify import simplify

pytestmark = pytest.mark.gl

MODEL = """
input q: [B, 2, T, {D}]
input k: [B, 2, T, {D}]
input v: [B, 2, T, {D}]
input r: [B, 2, T, {D}]
y = dropout(softmax({scores}), 0.25) @ v
loss l = sum(y * r)
"""
SELF_ATTENTION = (  # one head of 8, written out with nanoGPT's dropout on the probabilities
    "input x: [B, T, 8]\ninput y: [B, T, 8]\nparam w: [8, 24] = normal(0, 0.5)\n"
    "q, k, v = split(reshape(x @ w, [B, T, 3, 8]), [1, 1, 1], axis=2)\n"
    "qh = transpose(q, [0, 2, 1, 3])\nkh = transpose(k, [0, 2, 1, 3])\nvh = transpose(v, [0, 2, 1, 3])\n"
    "s = where(tril(ones([T, T])), qh @ transpose(kh, [0, 1, 3, 2]) / sqrt(8), -inf)\n"
    "h = dropout(softmax(s), 0.5) @ vh\n"
    "out = reshape(transpose(h, [0, 2, 1, 3]), [B, T, 8])\nloss cost = mean_squared(out, y)\n"
)
CAUSAL = "where(tril(ones([T, T])), q @ transpose(k, [0, 1, 3, 2]) * 0.4, -inf)"
FULL = "q @ transpose(k, [0, 1, 3, 2]) * 0.4"


def model(d: int, causal: bool, written_out: bool = False) -> dlc.Model:
    src = MODEL.format(D=d, scores=CAUSAL if causal else FULL)
    if not written_out:
        return dlc.compile(src)
    saved = lang.fuse_attention
    lang.fuse_attention = lambda g: g
    try:
        return dlc.compile(src + "# written out\n")  # another text: not the cached fused graph
    finally:
        lang.fuse_attention = saved


def feeds(t: int, d: int, step: float) -> dict:
    rng = np.random.default_rng(int(step))
    out = {n: rng.normal(size=(2, 2, t, d)).astype(np.float32) for n in "qkvr"}
    return out | {"$seed": np.array(4321.0, np.float32), "$step": np.array(step, np.float32)}


def backend_with(target: str, f: dict, options: dict | None = None):
    from dlc.backends.gl import GLBackend

    backend = GLBackend(options, target=target)
    for name in ("$seed", "$step"):  # the states the draw reads
        backend.set_leaf(name, f[name])
    return backend


def close(got, want, what):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * max(1.0, float(np.abs(want).max())), err_msg=what)


@pytest.mark.parametrize(
    "target, t, d, causal",
    [
        ("compute", 70, 8, True),  # 2 query blocks of 64, several key tiles, the last part-full
        ("compute", 37, 5, False),  # rows as floats, not vec4 words
        ("texture", 13, 4, True),
        ("texture", 9, 3, False),
    ],
)
def test_training_step_matches_the_reference(gl, target, t, d, causal):
    g, grads = differentiate(training_form(model(d, causal).graph), "l", ["q", "k", "v"])
    g = simplify(g)
    assert any(n.op == "attention_packed" and n.attr("dropout") for n in g.nodes)
    roots = [g.names["y"], *(g.names[f"grad${n}"] for n in "qkv")]
    dims = {"B": 2, "T": t}
    for step in (3.0, 4.0):  # a new mask
        f = feeds(t, d, step)
        got = backend_with(target, f).run(g, roots, {n: f[n] for n in "qkvr"}, dims)
        want = evaluate(g, roots, f, dims)
        for name, a, r in zip(["y", "dq", "dk", "dv"], got, roots):
            close(a, want[r], f"{name} at step {step}")


@pytest.mark.parametrize(
    "t, d, causal, tile, rows", [(70, 8, True, 256, 64), (37, 5, False, 64, None), (21, 16, True, 256, 32)]
)
def test_unrolled_kernels_match_the_reference(gl, t, d, causal, tile, rows):
    """The codegen options attention_unroll (tile rows and row words written out),
    attention_tile (the streamed tiles' floats) and attention_rows (a group's own rows: 64
    unless forced) give the same forward and gradients, the gradients in the row layout
    (attention_tiled off)."""
    g, grads = differentiate(training_form(model(d, causal).graph), "l", ["q", "k", "v"])
    g = simplify(g)
    roots = [g.names["y"], *(g.names[f"grad${n}"] for n in "qkv")]
    dims = {"B": 2, "T": t}
    f = feeds(t, d, 5.0)
    options = {"attention_unroll": True, "attention_tile": tile, "attention_rows": rows, "attention_tiled": False}
    backend = backend_with("compute", f, options)
    got = backend.run(g, roots, {n: f[n] for n in "qkvr"}, dims)
    want = evaluate(g, roots, f, dims)
    for name, a, r in zip(["y", "dq", "dk", "dv"], got, roots):
        close(a, want[r], name)
    (_, compiled, _), *_ = backend._programs.values()
    attention = [k.source for k in compiled.kernels if "attention" in k.name]
    assert attention and all("const int jj = 0;" in src for src in attention)
    assert all(f"a work group per {rows or 64} " in src for src in attention)


def gradient_kernels(t: int, d: int, causal: bool, tiled, step: float) -> dict[str, str]:
    """q, k and v's gradients on the compute target under the codegen option attention_tiled
    `tiled`, checked against the reference with the dropout mask of `step`; the sources of
    the two gradient kernels, by wrt ("q", "kv": simplify packs dk and dv)."""
    g, _ = differentiate(training_form(model(d, causal).graph), "l", ["q", "k", "v"])
    g = simplify(g)
    assert sorted(n.attr("wrt") for n in g.nodes if n.op == "attention_grad") == ["kv", "q"]
    roots = [g.names[f"grad${n}"] for n in "qkv"]
    dims = {"B": 2, "T": t}
    f = feeds(t, d, step)
    want = evaluate(g, roots, f, dims)
    backend = backend_with("compute", f, {"attention_tiled": tiled})
    got = backend.run(g, roots, {n: f[n] for n in "qkvr"}, dims)
    for name, a, r in zip(["dq", "dk", "dv"], got, roots):
        close(a, want[r], f"{name}, attention_tiled {tiled}")
    (_, compiled, _), *_ = backend._programs.values()
    sources = [k.source for k in compiled.kernels if "attention_grad" in k.name]
    by_wrt = {"kv" if " wrt kv " in src else "q": src for src in sources}
    assert len(sources) == 2 and sorted(by_wrt) == ["kv", "q"]
    return by_wrt


@pytest.mark.parametrize(
    "t, d, causal",
    [
        (70, 8, True),  # 3 blocks of 32, the last part-full: the causal diagonal and rows past T
        (33, 32, True),  # a head of 8 words: every invocation of step 2 holds outputs
        (64, 16, False),  # whole tiles only
        (45, 12, False),  # words not a power of two, a part-full tile without a diagonal
        (1, 4, True),  # one row
    ],
)
def test_tiled_gradients_match_the_row_layout(gl, t, d, causal):
    """The register-tiled gradient kernels (kernels_attention_tiled.py: dk and dv in one, dq
    in another) give the reference's gradients with the dropout mask, as the row layout does."""
    for tiled in (True, False):
        every = {"wrt": ["q", "k", "v", "kv"]}  # dq too (by default it keeps the row layout)
        grads = gradient_kernels(t, d, causal, every if tiled else False, 7.0)
        assert all(("register tiles" in src) == tiled for src in grads.values())


@pytest.mark.parametrize(
    "tiling, d",
    [
        ({"own": 16, "stream": 32, "block": 4}, 8),  # blocks of 4 x 4, the diagonal across two streamed tiles
        ({"own": 64, "stream": 16, "block": 1, "prefetch": False}, 8),  # a diagonal across four tiles
        ({"own": 32, "stream": 64, "block": 8, "prefetch": False}, 8),
        ({"own": 32, "stream": 32, "block": 8}, 32),  # 32 invocations: two items of step 2 each
        ({"own": 32, "stream": 32, "block": 4, "prefetch": False}, 20),  # 40 items over 64 invocations
        ({"own": 32, "stream": 16, "block": 4, "prefetch": False}, 28),  # 56 items over 32: the last ragged
        ({"own": 32, "stream": 16, "block": 4}, 28),  # prefetch: 112 words over 32, the last ragged
        ({"own": 32, "stream": 32, "block": 2, "wrt": ["kv"]}, 16),  # dq in the row layout
        ({"own": 32, "stream": 32, "block": 2, "wrt": ["q", "kv"]}, 16),  # dq tiled too
    ],
)
@pytest.mark.parametrize("t, causal", [(70, True), (45, False)])
def test_tilings_match_the_reference(gl, tiling, d, t, causal):
    """Other tilings (the codegen option attention_tiled) give the reference's gradients."""
    grads = gradient_kernels(t, d, causal, tiling, 8.0)
    for wrt, src in grads.items():
        assert (f"x {tiling['block']} register tiles" in src) == (wrt in tiling.get("wrt", ["kv"])), wrt


@pytest.mark.parametrize("target", ["compute", "texture"])
def test_fused_drops_what_the_written_out_form_drops(gl, target):
    t, d = 11, 4
    f = feeds(t, d, 6.0)
    dims = {"B": 2, "T": t}
    ys = []
    for written_out in (False, True):
        g = training_form(model(d, True, written_out).graph)
        assert any(n.op == "attention" for n in g.nodes) != written_out
        (y,) = backend_with(target, f).run(g, [g.names["y"]], {n: f[n] for n in "qkv"}, dims)
        ys.append(y)
    close(ys[0], ys[1], "fused against written out")
    g = model(d, True).graph  # as written: eval, no dropout
    (no_drop,) = backend_with(target, f).run(g, [g.names["y"]], {n: f[n] for n in "qkv"}, dims)
    assert not np.allclose(no_drop, ys[0], atol=1e-3)


def test_texture_shaders_compile_as_glsl_es_300(gl):
    from dlc.compiler.emit import programs

    if "GL_ARB_ES3_compatibility" not in gl.extensions:
        pytest.skip("this GL compiles no GLSL ES 3.00")
    src = "param w: [4] = normal(0, 1)\n" + MODEL.format(D=4, scores=CAUSAL)
    for n in "qkv":  # each a function of the param: the three gradients' shaders
        src = src.replace(f"input {n}: [B, 2, T, 4]\n", f"input {n}0: [B, 2, T, 4]\n{n} = {n}0 * w\n")
    options = {"es": True}
    compiled = programs(dlc.compile(src), target="texture", options=options, train_loss="l", optimizer=dlc.SGD(0.1))
    sources = [s for p in compiled.values() for s in p.sources.values()]
    assert sum("attention_grad" in s and "dlc_random_uniform" in s for s in sources) == 2  # wrt q; wrt k and v
    for source in sources:
        log = fragment_compile_log(source)
        assert log == "", log


@pytest.mark.parametrize("target", ["compute", "texture"])
def test_session_trains_like_numpy(gl, target):
    """SGD steps of a model with attention dropout: the GL losses are NumPy's (the device's
    $step advances, so each step draws another mask)."""
    m = dlc.compile(SELF_ATTENTION)
    assert any(n.attr("dropout") for n in m.graph.nodes if n.op == "attention")
    rng = np.random.default_rng(0)
    data = {n: rng.normal(size=(2, 12, 8)).astype(np.float32) for n in ("x", "y")}
    gl_sess = dlc.Session(m, backend="gl", target=target, seed=5)
    np_sess = dlc.Session(m, backend="numpy", seed=5)
    lg = gl_sess.train(data, optimizer=dlc.SGD(0.5), batch_size=2, steps=3)
    ln = np_sess.train(data, optimizer=dlc.SGD(0.5), batch_size=2, steps=3)
    np.testing.assert_allclose(lg, ln, rtol=1e-4)
    kept = dlc.Session(dlc.compile(SELF_ATTENTION.replace("0.5) @ vh", "0.0) @ vh")), backend="numpy", seed=5)
    assert abs(kept.train(data, optimizer=dlc.SGD(0.5), batch_size=2, steps=1)[0] - ln[0]) > 1e-3  # it drops


def test_char_gpt_with_its_dropout_trains_alike_on_gl_and_numpy(gl):
    """samples/char_gpt.dl at a tiny size, dropout 0.2 kept (attention's fused): AdamW steps
    give NumPy's losses on GL (the same masks drawn on both)."""
    from dlc.text import TextData

    root = Path(__file__).resolve().parents[2]
    text = (root / "samples" / "char_gpt.dl").read_text()
    for name, value in {"BLOCK": 16, "L": 2, "H": 2, "D": 8, "C": 16}.items():
        text, n = re.subn(rf"^const {name} = [0-9.]+", f"const {name} = {value}", text, flags=re.M)
        assert n == 1, name
    m = dlc.compile(text)
    assert sum(n.attr("dropout") is not None for n in m.graph.nodes if n.op == "attention") == 2
    data = TextData(root / "samples" / "data" / "shakespeare.txt", block=16)
    losses = []
    for backend in ("gl", "numpy"):
        sess = dlc.Session(m, backend=backend, seed=0)
        losses.append(sess.train(data, optimizer=dlc.AdamW(3e-3), batch_size=3, steps=4))
    np.testing.assert_allclose(losses[0], losses[1], rtol=2e-4)


@pytest.mark.parametrize("target", ["compute", "texture"])
def test_artifact_trains_like_the_reference(gl, tmp_path, target):
    """A compiled artifact (for no device in particular: GL's minimum limits) run by the
    runtime alone: its SGD steps with attention dropout give the NumPy session's losses."""
    from dlc.compiler.emit import write_artifact

    m = dlc.compile(SELF_ATTENTION)
    out = tmp_path / "att.dlc"
    write_artifact(m, out, train_loss="cost", optimizer=dlc.SGD(0.5), target=target)
    rng = np.random.default_rng(1)
    data = {n: rng.normal(size=(2, 12, 8)).astype(np.float32) for n in ("x", "y")}
    runner = dlc.load(out)
    sess = dlc.Session(m, backend="numpy", seed=0)
    sess.set_params(runner.params)
    lr = runner.train(data, batch_size=2, steps=3)
    ln = sess.train(data, optimizer=dlc.SGD(0.5), batch_size=2, steps=3)
    np.testing.assert_allclose(lr, ln, rtol=1e-4)
    runner.close()


@pytest.mark.parametrize("target", ["compute", "texture"])
@pytest.mark.parametrize("causal", [False, True])
def test_nan_and_inf_as_numpy(gl, target, causal):
    """An inf in v reaches a row as inf or NaN (0 * inf where its probability is dropped), a
    NaN in k its rows' every output; causal rows before them see neither: as in NumPy."""
    t, d = 9, 4
    g = training_form(model(d, causal).graph)
    f = feeds(t, d, 2.0)
    f["v"][0, 0, 5, 1] = np.inf
    f["k"][1, 1, 3, 2] = np.nan
    y = g.names["y"]
    (got,) = backend_with(target, f).run(g, [y], {n: f[n] for n in "qkv"}, {"B": 2, "T": t})
    with np.errstate(invalid="ignore"):  # 0 * inf
        want = evaluate(g, [y], f, {"B": 2, "T": t})[y]
    assert np.isnan(want).any() and np.isinf(want).any() and np.isfinite(want).any()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    close(got, want, "specials")


@pytest.mark.parametrize("target", ["compute", "texture"])
def test_attentions_dropout_argument_on_gl(gl, target):
    """`attention(q, k, v, causal=true, dropout=p)`: its training step on GL as in NumPy."""
    src = MODEL.format(D=4, scores=CAUSAL).replace(
        f"y = dropout(softmax({CAUSAL}), 0.25) @ v", "y = attention(q, k, v, causal=true, scale=0.4, dropout=0.25)"
    )
    g, _ = differentiate(training_form(dlc.compile(src).graph), "l", ["q", "k", "v"])
    g = simplify(g)
    roots = [g.names["y"], *(g.names[f"grad${n}"] for n in "qkv")]
    dims = {"B": 2, "T": 11}
    f = feeds(11, 4, 3.0)
    got = backend_with(target, f).run(g, roots, {n: f[n] for n in "qkvr"}, dims)
    want = evaluate(g, roots, f, dims)
    for name, a, r in zip(["y", "dq", "dk", "dv"], got, roots):
        close(a, want[r], name)
