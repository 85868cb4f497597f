"""The .dl front end: statements, precedence, continuation lines, feed checks (the IR text: tests/golden)."""

from __future__ import annotations

import numpy as np
import pytest

import dlc


def ev(src, fetch="out", **feeds):
    return dlc.Session(dlc.compile(src), backend="numpy").eval(fetch, feeds)


def test_precedence_matches_the_spec():
    x = np.array([2.0], np.float32)
    # ^ binds tighter than unary minus, which binds tighter than * / @, then + -, then comparisons.
    assert ev("input x: [1]\nout = -x ^ 2 + 3 * x\n", x=x)[0] == -4 + 6
    assert ev("input x: [1]\nout = 1 + 2 * 3 ^ 2 - x\n", x=x)[0] == 1 + 18 - 2
    assert ev("input x: [1]\nout = x + 1 > 2 * x\n", x=x)[0] == 0.0  # 3 > 4 is false
    assert ev("input x: [1]\nout = 2 * x > 1 + x\n", x=x)[0] == 1.0
    assert ev("input x: [1]\nout = 12 / 2 / 3 + 0 * x\n", x=x)[0] == 2.0  # left associative
    assert ev("input x: [1]\nout = 2 ^ -1 + 0 * x\n", x=x)[0] == 0.5


def test_comments_blank_lines_and_bracket_continuation():
    src = """
# a comment line

input x: [B, 2]   # trailing comment
param w: [2, 3] = uniform(
    -1,           # low
    1)
out = sum(
    x @ w,
    axis=[
        0, 1],
)
"""
    m = dlc.compile(src)
    assert m.inputs == {"x": ("B", 2)} and m.params == {"w": (2, 3)}
    assert m.tensors == {"out": ()}


def test_shapes_accept_f32_and_symbolic_dims_are_shared():
    m = dlc.compile("input x: f32[N, 3]\ninput y: [N]\nout = sum(x, axis=1) + y\n")
    assert m.tensors["out"] == ("N",)


def test_model_tables():
    m = dlc.compile("samples/mlp_digits.dl")
    assert m.inputs == {"pixels": ("B", 64), "labels": ("B",)}
    assert m.params == {"W1": (64, 64), "b1": (64,), "W2": (64, 10), "b2": (10,)}
    assert m.losses == {"cost": ()}
    assert m.tensors["accuracy"] == () and m.tensors["probs"] == ("B", 10)


def test_initializers_are_deterministic_per_seed_and_follow_their_law():
    src = (
        "param w: [200, 300] = glorot\nparam h: [400, 50] = he\nparam n: [1000] = normal(2, 0.5)\n"
        "param u: [1000] = uniform(3, 4)\nparam z: [3]\nparam o: [2] = ones\nparam k: [] = -1.5\n"
    )
    p0 = dlc.Session(dlc.compile(src), backend="numpy", seed=0).params
    p0b = dlc.Session(dlc.compile(src), backend="numpy", seed=0).params
    p1 = dlc.Session(dlc.compile(src), backend="numpy", seed=1).params
    for k in p0:
        np.testing.assert_array_equal(p0[k], p0b[k])
    assert not np.array_equal(p0["w"], p1["w"])
    limit = np.sqrt(6 / 500)
    assert np.abs(p0["w"]).max() <= limit and np.abs(p0["w"]).max() > 0.9 * limit
    assert abs(p0["h"].std() - np.sqrt(2 / 400)) < 0.01
    assert abs(p0["n"].mean() - 2) < 0.1 and abs(p0["n"].std() - 0.5) < 0.05
    assert p0["u"].min() >= 3 and p0["u"].max() <= 4
    np.testing.assert_array_equal(p0["z"], 0)
    np.testing.assert_array_equal(p0["o"], 1)
    assert p0["k"] == -1.5


def test_feeds_are_checked_against_symbolic_dims():
    sess = dlc.Session(dlc.compile("input x: [B, 2]\ninput y: [B]\nout = sum(x, axis=1) + y\n"), backend="numpy")
    with pytest.raises(
        dlc.DataError,
        match=r"input 'y' has shape \[4\] but the model expects "
        r"\[B\]: B = 4 here but 3 from input 'x'",
    ):
        sess.eval("out", {"x": np.zeros((3, 2)), "y": np.zeros(4)})
    with pytest.raises(dlc.DataError, match=r"input 'x' has shape \[3, 5\] .* \[B, 2\]: 5 != 2"):
        sess.eval("out", {"x": np.zeros((3, 5)), "y": np.zeros(3)})
    with pytest.raises(dlc.DataError, match="input 'y' is missing"):
        sess.eval("out", {"x": np.zeros((3, 2))})


def test_only_the_inputs_a_fetch_needs_are_required():
    sess = dlc.Session(dlc.compile("samples/quadratic.dl"), backend="numpy")
    y = sess.eval("y", {"x": np.array([1.0, 2.0])})
    p = sess.params
    np.testing.assert_allclose(y, p["a"] * np.array([1, 4]) + p["b"] * np.array([1, 2]) + p["c"], rtol=1e-6)


def test_params_save_load_roundtrip(tmp_path):
    sess = dlc.Session("samples/mlp_digits.dl", backend="numpy", seed=3)
    sess.save(tmp_path / "w.npz")
    other = dlc.Session("samples/mlp_digits.dl", backend="numpy", seed=4)
    other.load(tmp_path / "w.npz")
    for k, v in sess.params.items():
        np.testing.assert_array_equal(other.params[k], v)
    with pytest.raises(dlc.DataError, match="param 'W1' has shape"):
        other.set_params({"W1": np.zeros((2, 2))})
