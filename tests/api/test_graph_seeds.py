"""The seeds' examples written with dlc.Graph and in the .dl language: the same IR, the same results."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import dlc
from dlc.compiler.ir import format_graph

SAMPLES = Path(__file__).resolve().parents[2] / "samples"


def quadratic_graph() -> dlc.Graph:
    g = dlc.Graph()
    x = g.placeholder("x", ["B"])
    y_label = g.placeholder("y_label", ["B"])
    a = g.variable("a", ("normal", 0, 1))
    b = g.variable("b", ("normal", 0, 1))
    c = g.variable("c", ("normal", 0, 1))
    y = g.name("y", a * x**2 + b * x + c)
    g.loss("cost", g.mean_squared_cost(y, y_label))
    return g


def linear_graph() -> dlc.Graph:
    g = dlc.Graph()
    x = g.placeholder("x", ["B", 3])
    label = g.placeholder("label", ["B"])
    multiplier = g.variable("multiplier", "normal", shape=[1, 3])
    y = g.name("y", g.reshape(x @ g.transpose(multiplier), ["B"]))
    g.loss("cost", g.mean_squared_cost(y, label))
    return g


def mlp_graph() -> dlc.Graph:
    g = dlc.Graph()
    pixels = g.placeholder("pixels", ["B", 64])
    labels = g.placeholder("labels", ["B"])
    w1 = g.variable("W1", "he", shape=[64, 64])
    b1 = g.variable("b1", shape=[64])
    w2 = g.variable("W2", "glorot", shape=[64, 10])
    b2 = g.variable("b2", shape=[10])
    h = g.name("h", g.relu((pixels / 16) @ w1 + b1))
    logits = g.name("logits", h @ w2 + b2)
    g.name("probs", g.softmax(logits))
    prediction = g.name("prediction", g.argmax(logits))
    g.loss("cost", g.softmax_cross_entropy_cost(logits, g.one_hot(labels, 10)))
    g.name("accuracy", g.mean(g.eq(prediction, labels)))
    return g


EXAMPLES = {"quadratic": quadratic_graph, "linear": linear_graph, "mlp_digits": mlp_graph}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_same_ir_both_ways(name):
    from_text = dlc.compile(str(SAMPLES / f"{name}.dl"))
    from_graph = EXAMPLES[name]().build()
    assert format_graph(from_graph.graph, locs=False) == format_graph(from_text.graph, locs=False)
    assert from_graph.inputs == from_text.inputs and from_graph.params == from_text.params
    assert from_graph.losses == from_text.losses


def _data(name):
    if name == "quadratic":
        d = np.load(SAMPLES / "data" / "quadratic.npz")
        return {"x": d["x"], "y_label": d["y_label"]}
    if name == "linear":
        x = np.array([[1, 2, 3], [10, 20, 30], [100, 200, 300]], np.float32) / 100
        return {"x": x, "label": x.sum(1) * 2 / 3}
    d = np.load(SAMPLES / "data" / "digits_train.npz")
    return {"pixels": d["pixels"][:64], "labels": d["labels"][:64].astype(np.float32)}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_same_results_both_ways(backend, name):
    feeds = _data(name)
    text = dlc.Session(dlc.compile(str(SAMPLES / f"{name}.dl")), backend=backend, seed=5)
    graph = dlc.Session(EXAMPLES[name](), backend=backend, seed=5)
    for k in text.params:
        np.testing.assert_array_equal(text.params[k], graph.params[k])
    got = graph.train(feeds, optimizer=dlc.Momentum(0.01), batch_size=16, epochs=2, shuffle=True)
    want = text.train(feeds, optimizer=dlc.Momentum(0.01), batch_size=16, epochs=2, shuffle=True)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    fetch = [n for n in text.model.tensors if n in ("y", "cost", "accuracy")]
    a, b = graph.eval(fetch, feeds), text.eval(fetch, feeds)
    for n in fetch:
        np.testing.assert_allclose(a[n], b[n], rtol=1e-5)
