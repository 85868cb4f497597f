"""Reverse-mode autodiff as an IR transform: structure, fan-out, zero paths, errors,
and whole models against float64 central differences."""

from __future__ import annotations

import numpy as np
import pytest

import dlc
from dlc.compiler import gradients
from dlc.compiler.autodiff import differentiate, grad_name
from dlc.compiler.initializers import initial_value
from dlc.compiler.reference import evaluate
from dlc.runtime.errors import CompileError


def graph_of(src: str):
    return dlc.compile(src).graph


def grads_at(g, values, dims, loss=None, wrt=None):
    gg, grads = differentiate(g, loss, wrt)
    out = evaluate(gg, list(grads.values()), values, dims, np.float64)
    return {name: out[i] for name, i in grads.items()}


def central(g, loss, values, dims, name, h=1e-6):
    i = g.names[loss]
    x = np.asarray(values[name], dtype=np.float64)
    out = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        vals = []
        for s in (h, -h):
            y = x.copy()
            y[idx] += s
            vals.append(float(evaluate(g, [i], {**values, name: y}, dims, np.float64)[i]))
        out[idx] = (vals[0] - vals[1]) / (2 * h)
    return out


def test_forward_nodes_keep_their_indices_and_gradients_are_named():
    g = graph_of("input x: [B]\nparam w: [] = 2\nloss l = sum(w * x)\n")
    gg, grads = differentiate(g)
    assert gg.nodes[: len(g.nodes)] == g.nodes
    assert gg.names[grad_name("w")] == grads["w"]
    assert "grad$w = " in str(gg)


def test_fan_out_gradients_are_summed():
    # l = x*x + x: dl/dx = 2x + 1, reached along three paths
    g = graph_of("param x: [3] = 0\nloss l = sum(x * x + x)\n")
    x = np.array([1.0, -2.0, 0.5])
    got = grads_at(g, {"x": x}, {})["x"]
    np.testing.assert_allclose(got, 2 * x + 1)
    adds = [n for n in differentiate(g)[0].nodes[len(g.nodes) :] if n.op == "add"]
    assert adds, "fan-out should be summed with add nodes"


def test_gradient_nodes_carry_the_forward_line():
    src = "input x: [B]\nparam w: [] = 1\nh = exp(w * x)\nloss l = mean(h)\n"
    g = graph_of(src)
    gg, _ = differentiate(g)
    new = gg.nodes[len(g.nodes) :]
    assert all(n.loc is not None for n in new)
    # the exp's gradient (a mul by exp's output) sits on line 3
    exp_node = g.names["h"]
    assert any(n.op == "mul" and exp_node in n.inputs and n.loc.line == 3 for n in new)


def test_param_not_reached_gets_zeros():
    g = graph_of("input x: [B]\nparam w: [2, 3]\nparam unused: [4, 2] = 1\nloss l = sum(x) * sum(w)\n")
    got = grads_at(g, {"x": np.ones(3), "w": np.ones((2, 3)), "unused": np.ones((4, 2))}, {"B": 3})
    np.testing.assert_array_equal(got["unused"], np.zeros((4, 2)))
    np.testing.assert_allclose(got["w"], np.full((2, 3), 3.0))


@pytest.mark.parametrize("expr", ["sign(w) * 3", "step(w)", "(w > 0) * 2", "one_hot(argmax(w), 3)", "w == 1"])
def test_non_differentiable_paths_give_zero(expr):
    g = graph_of(f"param w: [3] = 1\nloss l = sum({expr}) + sum(w)\n")
    got = grads_at(g, {"w": np.array([0.5, -1.0, 2.0])}, {})["w"]
    np.testing.assert_array_equal(got, np.ones(3))


def test_stop_gradient_blocks_but_logsumexp_is_still_right():
    g = graph_of("param x: [4] = 0\nloss l = logsumexp(x)\n")
    x = np.array([0.1, 2.0, -1.0, 0.5])
    got = grads_at(g, {"x": x}, {})["x"]
    np.testing.assert_allclose(got, np.exp(x) / np.exp(x).sum())


def test_missing_rule_is_an_error_naming_the_op(monkeypatch):
    monkeypatch.delitem(gradients.GRADIENTS, "tanh")
    g = graph_of("param w: [2] = 1\nloss l = sum(tanh(w))\n")
    with pytest.raises(CompileError, match="no gradient rule for op 'tanh'") as e:
        differentiate(g)
    assert e.value.line == 2


def test_missing_rule_off_the_gradient_path_is_fine(monkeypatch):
    monkeypatch.delitem(gradients.GRADIENTS, "tanh")
    g = graph_of("input x: [2]\nparam w: [2] = 1\nloss l = sum(tanh(x) * w)\n")
    differentiate(g)


def test_loss_errors():
    g = graph_of("input x: [B]\nparam w: [] = 1\ny = w * x\nloss cost = mean(y)\n")
    with pytest.raises(CompileError, match="did you mean 'cost'"):
        differentiate(g, "cots")
    with pytest.raises(CompileError, match="must be a scalar"):
        differentiate(g, "y")
    with pytest.raises(CompileError, match="no loss"):
        differentiate(graph_of("input x: [B]\ny = x * 2\n"))


def test_gradient_with_respect_to_an_input():
    g = graph_of("input x: [B, 2]\nparam w: [2, 1] = 1\nloss l = sum(x @ w)\n")
    got = grads_at(g, {"x": np.ones((3, 2)), "w": np.array([[2.0], [-1.0]])}, {"B": 3}, wrt=["x"])
    np.testing.assert_allclose(got["x"], np.tile([2.0, -1.0], (3, 1)))


def test_rank_1_matmul_both_sides():
    g = graph_of(
        "param v: [3] = 1\nparam M: [3, 4] = 1\nparam u: [4] = 1\nloss l = sum(v @ M) + sum(M @ u) + v @ M @ u\n"
    )
    rng = np.random.default_rng(0)
    vals = {"v": rng.normal(size=3), "M": rng.normal(size=(3, 4)), "u": rng.normal(size=4)}
    got = grads_at(g, vals, {})
    for name in vals:
        np.testing.assert_allclose(got[name], central(g, "l", vals, {}, name), rtol=1e-6)


MODELS = {
    "mlp_softmax_xent": """
input x: [B, 5]
input labels: [B]
param W1: [5, 6] = glorot
param b1: [6] = normal(0, 0.1)
param W2: [6, 3] = glorot
param b2: [3] = normal(0, 0.1)
h = tanh(x @ W1 + b1)
logits = h @ W2 + b2
loss cost = softmax_cross_entropy(logits, one_hot(labels, 3))
""",
    "sigmoid_xent_and_softmax": """
input x: [B, 4]
input t: [B, 4]
param w: [4] = normal(0, 1)
param s: [4] = normal(0, 1)
p = softmax(x * w)
loss cost = sigmoid_cross_entropy(x * s + w, t) + mean_squared(p, t) + mean(log_softmax(x * s))
""",
    "conv_pool": """
input img: [B, 6, 6, 2]
param k: [3, 3, 2, 3] = glorot
param k2: [2, 2, 3, 2] = glorot
h = relu(conv2d(img, k, stride=1, padding="same"))
p = max_pool(h, 2)
q = avg_pool(conv2d(p, k2, stride=1, padding="valid"), 2, stride=1, padding="same")
loss cost = mean(q * q) + mean(clip(p, 0.1, 0.5))
""",
    "shapes": """
input x: [B, 4]
param a: [2, 3] = normal(0, 1)
param c: [4] = normal(0, 1)
s = slice(x * c, [0, 1], [-1, 2])
y = concat([reshape(a, [6]), c], axis=0)
z = transpose(reshape(x * c, [B, 2, 2]), [0, 2, 1])
loss cost = (sum(y * y) + sum(s * s) + sum(z * slice(c, [0], [2])) + max(x * c) - min(a)
             + sum(where(x > 0, x * c, -c)))
""",
}


def _values(g, dims, seed=0):
    rng = np.random.default_rng(seed)
    vals = {}
    for name in g.inputs:
        shape = tuple(dims.get(d, d) for d in g.shape(name))
        vals[name] = rng.integers(0, 3, size=shape).astype(float) if name == "labels" else rng.normal(size=shape)
    for name in g.params:
        n = g.node(name)
        vals[name] = initial_value(n.attr("init"), n.shape, seed, name).astype(np.float64)
    return vals


@pytest.mark.parametrize("name", MODELS)
def test_whole_models_against_central_differences(name):
    g = graph_of(MODELS[name])
    dims = {"B": 3}
    vals = _values(g, dims)
    got = grads_at(g, vals, dims)
    for p in g.params:
        np.testing.assert_allclose(
            got[p], central(g, "cost", vals, dims, p), rtol=1e-5, atol=1e-7, err_msg=f"{name}: d cost / d {p}"
        )


def test_samples_mlp_digits_gradient():
    model = dlc.compile("samples/mlp_digits.dl")
    g = model.graph
    d = np.load("samples/data/digits_train.npz")
    vals = {"pixels": d["pixels"][:8].astype(float), "labels": d["labels"][:8].astype(float)}
    for p in g.params:
        n = g.node(p)
        vals[p] = initial_value(n.attr("init"), n.shape, 0, p).astype(np.float64)
    got = grads_at(g, vals, {"B": 8})
    # W1 (64x64) would take 8192 evaluations: the others are checked fully
    for p in ("b1", "W2", "b2"):
        np.testing.assert_allclose(got[p], central(g, "cost", vals, {"B": 8}, p), rtol=1e-5, atol=1e-8)
