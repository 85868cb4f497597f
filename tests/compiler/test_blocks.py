"""defs, for loops, dotted names, frozen params and `inf` in the .dl language.

A model written with def + for must be the model written out flat: the same IR node for
node, so the same values and gradients (the NumPy reference, against float64 finite
differences for the gradients).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from blocks_models import BLOCKS, FLAT, PARAMS, feeds

import dlc
from dlc.compiler.lang import compile_source


def test_def_and_for_give_the_flat_models_ir():
    blocks, flat = compile_source(BLOCKS), compile_source(FLAT)
    assert blocks.params == flat.params == PARAMS
    assert blocks.nodes == flat.nodes
    assert blocks.names["cost"] == flat.names["cost"]
    assert blocks.names["h"] == flat.names["h3"]  # a name bound again in a loop: its last value
    assert blocks.names["h.1.x"] == flat.names["h3"]  # a def's locals: named under the call's path


def test_def_and_for_values_and_gradients_match_the_flat_model_and_finite_differences():
    f = feeds()
    a = dlc.Session(dlc.compile(BLOCKS), backend="numpy", seed=3)
    b = dlc.Session(dlc.compile(FLAT), backend="numpy", seed=3)
    for p in PARAMS:  # the same seed and names: the same initial values
        assert np.array_equal(a.params[p], b.params[p])
    assert a.eval("cost", f) == b.eval("cost", f)
    ga, gb = a.gradients(f), b.gradients(f)
    for p in PARAMS:
        assert np.array_equal(ga[p], gb[p])
    # the gradient against float64 central differences of the same model, written in NumPy
    params = {p: a.params[p].astype(np.float64) for p in PARAMS}

    def cost(ps):
        h = f["x"].astype(np.float64)
        for i in range(2):
            t = h * ps[f"h.{i}.ln.scale"]
            h = h + np.tanh(t @ ps[f"h.{i}.mlp.fc.weight"] + ps[f"h.{i}.mlp.fc.bias"])
        return np.mean((h - f["y"]) ** 2)

    assert abs(cost(params) - a.eval("cost", f)) < 1e-5
    for p in PARAMS:
        num = np.zeros_like(params[p])
        for idx in np.ndindex(num.shape):
            up = {k: v.copy() for k, v in params.items()}
            down = {k: v.copy() for k, v in params.items()}
            up[p][idx] += 1e-6
            down[p][idx] -= 1e-6
            num[idx] = (cost(up) - cost(down)) / 2e-6
        np.testing.assert_allclose(ga[p], num, rtol=1e-4, atol=1e-5)


def test_nested_defs_name_their_params_by_path():
    src = """
input x: [B, 8]
def linear(x, n_in, n_out) {
    param weight: [n_out, n_in]
    param bias: [n_out]
    return x @ transpose(weight) + bias
}
def attn(x, C) {
    q = linear(x, C, C) as c_attn
    return linear(q, C, C) as c_proj
}
def block(x, C) {
    x = x + attn(x, C) as attn
    return x + linear(x, C, C)
}
h = x
for layer in range(3) {
    h = block(h, 8) as transformer.h.{layer}
}
out = h
"""
    g = compile_source(src)
    want = [
        f"transformer.h.{i}.{m}.{w}"
        for i in range(3)
        for m in ("attn.c_attn", "attn.c_proj", "linear")
        for w in ("weight", "bias")
    ]
    assert list(g.params) == want  # nanoGPT's state_dict keys; a call without `as` is named by its def
    assert g.shape("transformer.h.2.linear.weight") == (8, 8)


def test_loops_fill_name_segments_and_nest():
    src = """
input x: [B, 2]
h = x
for i in range(1, 3) {
    for j in range(2) {
        param w.{i}.{j}: [2, 2] = ones
        h = h @ w.{i}.{j}
    }
}
out = h
"""
    g = compile_source(src)
    assert g.params == ("w.1.0", "w.1.1", "w.2.0", "w.2.1")
    x = np.array([[1.0, 2.0]], np.float32)
    assert np.array_equal(dlc.Session(dlc.compile(src), backend="numpy").eval("out", {"x": x}), [[24.0, 24.0]])


def test_sizes_are_compile_time_numbers():
    src = """
const N = 3
const D = 2
input x: [B, D]
def scaled(x, k) {
    param w: [D, k]
    return x @ w * k
}
out = scaled(x, N - 1)
s = sum(out, axis=N - 2)
"""
    g = compile_source(src)
    assert g.shape("scaled.w") == (2, 2)
    assert g.shape("out") == ("B", 2)
    assert g.shape("s") == ("B",)


def test_a_def_returns_several_values():
    src = """
input x: [B, 2]
def halves(x) {
    return x * 0.5, x * 2
}
a, b = halves(x)
out = a + b
"""
    x = np.array([[2.0, 4.0]], np.float32)
    out = dlc.Session(dlc.compile(src), backend="numpy").eval("out", {"x": x})
    assert np.array_equal(out, [[5.0, 10.0]])


def test_inf_literal_masks_before_softmax():
    src = """
input x: [B, 3]
input keep: [B, 3]
out = softmax(where(keep > 0, x, -inf))
big = x * 0 + inf
"""
    x = np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 4.0]], np.float32)
    keep = np.array([[1, 1, 0], [0, 1, 1]], np.float32)
    s = dlc.Session(dlc.compile(src), backend="numpy")
    out, big = (s.eval(name, {"x": x, "keep": keep}) for name in ("out", "big"))
    e = np.where(keep > 0, np.exp(x - x.max(axis=1, keepdims=True)), 0.0)
    np.testing.assert_allclose(out, e / e.sum(axis=1, keepdims=True), rtol=1e-6)
    assert out[0, 2] == 0.0 and out[1, 0] == 0.0
    assert np.all(np.isposinf(big))


def test_frozen_param_is_saved_but_not_trained(tmp_path):
    src = """
input x: [B, 2]
input y: [B, 2]
frozen param emb.weight: [2, 2] = normal(0, 1)
param head.weight: [2, 2] = normal(0, 1)
loss cost = mean_squared(x @ emb.weight @ head.weight, y)
"""
    s = dlc.Session(dlc.compile(src), backend="numpy")
    before = {k: np.array(v) for k, v in s.params.items()}
    f = {k: v[:, :2] for k, v in feeds(8).items()}
    s.train(f, optimizer=dlc.Adam(0.05), steps=3, batch_size=8)
    assert np.array_equal(s.params["emb.weight"], before["emb.weight"])  # bitwise
    assert not np.array_equal(s.params["head.weight"], before["head.weight"])
    assert not any(name.startswith("emb.weight$") for name in s._train_graph().states)  # no Adam slots
    s.save(tmp_path / "w.npz")
    assert set(np.load(tmp_path / "w.npz").files) == {"emb.weight", "head.weight"}
    t = dlc.Session(dlc.compile(src), backend="numpy", seed=7)
    t.load(tmp_path / "w.npz")
    assert np.array_equal(t.params["emb.weight"], before["emb.weight"])


def test_session_freeze_globs_dotted_names():
    s = dlc.Session(dlc.compile(BLOCKS), backend="numpy", freeze=["h.0.*", "h.1.ln.scale"])
    before = {k: np.array(v) for k, v in s.params.items()}
    s.train(feeds(8), optimizer=dlc.Adam(0.05), steps=2, batch_size=8)
    for p in PARAMS:
        frozen = p.startswith("h.0.") or p == "h.1.ln.scale"
        assert np.array_equal(s.params[p], before[p]) == frozen, p
    with pytest.raises(dlc.DlcError, match="freeze pattern 'h.9.\\*' matches no param"):
        dlc.Session(dlc.compile(BLOCKS), backend="numpy", freeze=["h.9.*"])


ERRORS = [
    # (source, line, column, parts of the message)
    ("input x: [B, 2]\ndef f(x) {\n    return x @ onez\n}\nout = f(x)\n", 3, 16, ["unknown name 'onez'"]),
    (
        "input x: [B, 2]\ndef f(x) {\n    param w: [3, 3]\n    return x @ w\n}\ny = f(x)\nz = 1\nout = f(y) as g\n",
        4,
        14,
        ["matmul", "in def 'f' called at line 6:5 as f"],
    ),
    ("input x: [B, 2]\ndef f(x) {\n    return f(x)\n}\nout = f(x)\n", 3, 12, ["def 'f' calls itself", "line 5:7"]),
    ("input x: [B, 2]\ndef f(x) {\n    y = x\n}\n", 2, 5, ["def 'f' has no return"]),
    ("input x: [B, 2]\ndef f(x) {\n    return x\n    y = x\n}\n", 3, 5, ["return is the last statement"]),
    ("input x: [B, 2]\nout = g(x)\ndef g(x) {\n    return x\n}\n", 2, 7, ["called before its definition at line 3"]),
    ("input x: [B, 2]\nfor i in range(2) {\n    def f(x) {\n        return x\n    }\n}\n", 3, 9, ["top level"]),
    ("def f(x) {\n    input z: [2]\n    return x\n}\nout = f(2)\n", 2, 11, ["an input is declared at the top level"]),
    ("input x: [B, 2]\ndef f(x) {\n    param w: [2]\n    return x * w\n}\na = f(x)\nb = f(x)\n", 3, 11, ["as NAME"]),
    ("input x: [B, 2]\nfor i in [1, 2] {\n    y = x\n}\n", 2, 10, ["range(N)"]),
    ("input x: [B, 2]\nfor i in range(x) {\n    y = x\n}\n", 2, 16, ["must be an integer"]),
    ("input x: [B, 2]\nfor i in range(10000000) {\n    y = x\n}\n", 2, 10, ["at most"]),
    ("input x: [B, 2]\nparam w.{j}: [2]\n", 2, 7, ["'{j}' in a name must be a loop variable"]),
    ("input x: [B, 2]\nout = relu(x) as r\n", 2, 18, ["is not a def"]),
    ("input x: [B, 2]\ndef f(x) {\n    return x, x\n}\nout = f(x)\n", 5, 7, ["returns 2 values"]),
    ("input x: [B, 2]\ndef f(x) {\n    return x\n}\na, b = f(x)\n", 5, 8, ["returns 1 value, not 2"]),
    ("input x: [B, 2]\na, b = relu(x)\n", 2, 8, ["2 names, but the right side is one tensor"]),
    ("input x: [B, 2]\nout = x\nfor i in range(2) {\n    x = x + 1\n}\n", 4, 5, ["duplicate name 'x'"]),
    ("input x: [B, 2]\ny = x\ny = x + 1\n", 3, 1, ["duplicate name 'y'"]),  # only a body binds a name again
    ("input a.b: [B, 2]\n", 1, 7, ["cannot contain '.'"]),
    ("def relu(x) {\n    return x\n}\n", 1, 5, ["hide the built-in"]),
    ("input x: [B, 2]\ndef f(x, x) {\n    return x\n}\n", 2, 10, ["given twice"]),
    ("input x: [B, 2]\ndef f(x, n) {\n    return x\n}\nout = f(x)\n", 5, 7, ["missing argument 'n'"]),
    ("input x: [B, 2]\ndef f(x) {\n    loss l = sum(x)\n    return x\n}\nout = f(x)\n", 3, 10, ["top level"]),
    ("input x: [B, 2]\nreturn x\n", 2, 1, ["return is only"]),
    ("input x: [B, 2]\nout = range(3)\n", 2, 7, ["for loops"]),
]


@pytest.mark.parametrize("src,line,col,parts", ERRORS)
def test_errors_are_located(src, line, col, parts):
    with pytest.raises(dlc.CompileError) as info:
        dlc.compile(src)
    e = info.value
    for part in parts:
        assert part in e.message, e.format()
    assert (e.line, e.column) == (line, col), e.format()


def test_syntax_errors_in_blocks_say_what_was_expected():
    with pytest.raises(dlc.CompileError) as info:
        dlc.compile("input x: [B, 2]\ndef f(x) {\n    return x\n")
    assert "expected" in info.value.message and info.value.line == 3
    with pytest.raises(dlc.CompileError) as info:
        dlc.compile("input x: [B, 2]\nfor i in range(2)\n{\n}\n")
    assert "'{'" in info.value.message


def test_the_readme_example_compiles_to_the_documented_names():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    start = readme.index("\ninput x: [B, 64]\nconst C = 64\ndef mlp") + 1  # inside its ```dl block
    g = compile_source(readme[start : readme.index("```", start)])
    assert g.params[:3] == ("h.0.ln.scale", "h.0.mlp.c_fc.weight", "h.0.mlp.c_proj.weight")
    assert g.params[-1] == "h.5.mlp.c_proj.weight" and len(g.params) == 18
    assert g.shape("h.5.mlp.c_fc.weight") == (64, 256)


def test_the_loop_variable_is_a_number_in_expressions():
    src = "input x: [B]\nh = x\nfor i in range(4) {\n    h = h + i * x\n}\nout = h\n"
    x = np.array([1.0, 2.0], np.float32)
    assert np.array_equal(dlc.Session(dlc.compile(src), backend="numpy").eval("out", {"x": x}), 7 * x)


def test_a_frozen_param_in_a_def_is_frozen_under_its_path():
    src = """
input x: [B, 2]
def emb(x) {
    frozen param table: [2, 2] = ones
    param scale: [2] = ones
    return x @ table * scale
}
loss l = sum(emb(x) as wte)
"""
    from dlc.compiler.train_graph import frozen_params

    g = compile_source(src)
    assert g.params == ("wte.table", "wte.scale")
    assert frozen_params(g) == {"wte.table"}
    assert frozen_params(g, ["*.scale"]) == {"wte.table", "wte.scale"}
