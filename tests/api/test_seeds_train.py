"""Session.train / eval in the seeds' style: a cost tensor, FeedEntry list, batch size, optimizer
and CostReduction; per-example graphs average the per-example gradients into one update."""

from __future__ import annotations

import numpy as np
import pytest

import dlc
from dlc.seeds import InCPUMemoryShuffledInputProviderBuilder

INPUTS = np.array([[1.0, 2.0, 3.0], [10.0, 20.0, 30.0], [100.0, 200.0, 300.0]], np.float32)
LABELS = np.array([[4.0], [40.0], [400.0]], np.float32)
M0 = np.array([[0.3, -0.2, 0.5]], np.float32)


def linear_graph():
    g = dlc.Graph()
    x = g.placeholder("input", [3])
    label = g.placeholder("label", [1])
    multiplier = g.variable("multiplier", M0)
    out = g.matmul(multiplier, x)
    return g, x, label, out, g.mean_squared_cost(out, label)


def session_backend(backend):
    return backend  # the Session runs on the same backend as the test's arrays


def test_per_example_gradients_are_averaged_into_one_sgd_update(backend):
    g, x, label, out, cost = linear_graph()
    sess = dlc.Session(g, backend=backend)
    lr = 1e-5
    entries = [dlc.FeedEntry(x, INPUTS), dlc.FeedEntry(label, LABELS)]
    m = M0.astype(np.float64)
    for _ in range(3):
        got = sess.train(cost, entries, 3, dlc.SGD(lr), dlc.CostReduction.MEAN)
        # closed form: cost_k = (m.x_k - l_k)^2, d/dm = 2 (m.x_k - l_k) x_k; mean over k
        err = (INPUTS @ m.T - LABELS)[:, 0]
        assert got == pytest.approx(float(np.mean(err**2)), rel=1e-4)
        m = m - lr * np.mean(2 * err[:, None] * INPUTS, axis=0, keepdims=True)
        np.testing.assert_allclose(sess.params["multiplier"], m, rtol=1e-4)


def test_cost_reduction_sum_and_none(backend):
    g, x, label, out, cost = linear_graph()
    sess = dlc.Session(g, backend=backend)
    entries = [dlc.FeedEntry(x, list(INPUTS)), dlc.FeedEntry(label, list(LABELS))]  # lists of examples
    err = (INPUTS @ M0.T - LABELS)[:, 0]
    total = sess.train(cost, entries, 3, dlc.SGD(0.0), dlc.CostReduction.SUM)
    assert total == pytest.approx(float(np.sum(err.astype(np.float64) ** 2)), rel=1e-4)
    assert sess.train(cost, entries, 3, dlc.SGD(0.0), dlc.CostReduction.NONE) is None


def test_batches_are_taken_in_order_and_cycle(backend):
    g, x, label, out, cost = linear_graph()
    sess = dlc.Session(g, backend=backend)
    entries = [dlc.FeedEntry(x, INPUTS), dlc.FeedEntry(label, LABELS)]
    err = (INPUTS @ M0.T - LABELS)[:, 0].astype(np.float64) ** 2
    firsts = [sess.train(cost, entries, 2, dlc.SGD(0.0)) for _ in range(3)]
    np.testing.assert_allclose(firsts, [err[[0, 1]].mean(), err[[2, 0]].mean(), err[[1, 2]].mean()], rtol=1e-4)


@pytest.mark.parametrize("make_opt", [lambda: dlc.SGD(0.01), lambda: dlc.Momentum(0.01, 0.9), lambda: dlc.Adam(0.05)])
def test_seeds_style_equals_batched_training_of_the_same_model(backend, make_opt):
    """The seeds' quadratic with scalar placeholders, trained a batch of all four examples at a
    time, must follow exactly the .dl quadratic (batched by B) trained on the same batches."""
    xs = np.array([0.0, 1.0, 2.0, 3.0], np.float32)
    ys = np.array([1.1, 5.9, 16.8, 33.9], np.float32)
    g = dlc.Graph()
    x = g.placeholder("x", [])
    a, b, c = (g.variable(n, v) for n, v in (("a", np.float32(0.5)), ("b", np.float32(-0.3)), ("c", np.float32(0.1))))
    y = g.add(g.add(g.multiply(a, g.square(x)), g.multiply(b, x)), c)
    y_label = g.placeholder("y label", [])
    cost = g.mean_squared_cost(y, y_label)
    seeds = dlc.Session(g, backend=backend)

    batched = dlc.Session(
        dlc.compile(
            "input x: [B]\ninput y_label: [B]\nparam a: [] = 0.5\nparam b: [] = -0.3\nparam c: [] = 0.1\n"
            "y = a * x^2 + b * x + c\nloss cost = mean_squared(y, y_label)\n"
        ),
        backend=backend,
    )
    opt_seeds, opt_batched = make_opt(), make_opt()
    entries = [dlc.FeedEntry(x, xs), dlc.FeedEntry(y_label, ys)]
    for _ in range(5):
        got = seeds.train(cost, entries, 4, opt_seeds, dlc.CostReduction.MEAN)
        (want,) = batched.train({"x": xs, "y_label": ys}, optimizer=opt_batched, batch_size=4, shuffle=False)
        assert got == pytest.approx(want, rel=1e-4)
    for n in "abc":
        np.testing.assert_allclose(seeds.params[n], batched.params[n], rtol=1e-4, atol=1e-6)


def test_batched_placeholders_are_fed_whole(backend):
    g = dlc.Graph()
    x = g.placeholder("x", ["B", 3])
    label = g.placeholder("label", ["B"])
    w = g.variable("w", M0.T)
    pred = g.reshape(x @ w, ["B"])
    cost = g.mean_squared_cost(pred, label)
    sess = dlc.Session(g, backend=backend)
    got = sess.train(cost, {x: INPUTS, label: LABELS[:, 0]}, 3, dlc.SGD(1e-5), dlc.CostReduction.SUM)
    err = (INPUTS @ M0.T - LABELS)[:, 0].astype(np.float64)
    assert got == pytest.approx(float(np.sum(err**2)), rel=1e-4)  # the mean cost times the batch
    want = M0.T - 1e-5 * (2 * err[:, None] * INPUTS).mean(0)[:, None]
    np.testing.assert_allclose(sess.params["w"], want, rtol=1e-4)


def test_shuffled_providers_stay_in_sync_and_cover_each_epoch():
    inputs = [np.array([float(i)]) for i in range(5)]
    labels = [np.array([10.0 * i]) for i in range(5)]
    xp, lp = InCPUMemoryShuffledInputProviderBuilder([inputs, labels], seed=3).get_input_providers()
    xs = [float(xp.get_next_copy()[0]) for _ in range(10)]
    ls = [float(lp.get_next_copy()[0]) for _ in range(10)]
    assert ls == [10 * v for v in xs]
    assert sorted(xs[:5]) == sorted(xs[5:]) == [0, 1, 2, 3, 4]
    assert xs != sorted(xs)


def test_providers_drive_training_like_the_seeds(backend):
    g, x, label, out, cost = linear_graph()
    sess = dlc.Session(g, backend=backend)
    xp, lp = InCPUMemoryShuffledInputProviderBuilder([list(INPUTS), list(LABELS)]).getInputProviders()
    entries = [{"tensor": x, "data": xp}, {"tensor": label, "data": lp}]
    costs = [sess.train(cost, entries, 3, dlc.SGD(1e-5), dlc.CostReduction.MEAN) for _ in range(10)]
    assert costs[-1] < 1e-3 * costs[0]
    result = sess.eval(out, [dlc.FeedEntry(x, dlc.array([0.1, 0.2, 0.3]))])
    assert isinstance(result, dlc.Array) and result.shape == (1,)
    assert result.get(0) == pytest.approx(0.4, rel=2e-3)  # the multiplier learned is ~[1, 1, 1]/..


def test_eval_in_the_seeds_style(backend):
    g, x, label, out, cost = linear_graph()
    sess = dlc.Session(g, backend=backend)
    got = sess.eval([out, cost], [(x, INPUTS[1]), (label, LABELS[1])])
    assert [type(v) for v in got] == [dlc.Array, dlc.Array]
    err = float((M0 @ INPUTS[1])[0] - LABELS[1, 0])
    assert got[0].numpy() == pytest.approx([err + 40.0], rel=1e-5)
    assert got[1].item() == pytest.approx(err**2, rel=1e-5)
    assert sess.eval("multiplier").tolist() == M0.tolist()  # the name style still works


def test_mistakes_are_named(backend):
    g, x, label, out, cost = linear_graph()
    sess = dlc.Session(g, backend=backend)
    with pytest.raises(dlc.DataError, match="placeholder 'label' is needed"):
        sess.train(cost, [dlc.FeedEntry(x, INPUTS)], 3, dlc.SGD(0.1))
    with pytest.raises(dlc.DataError, match="not a placeholder"):
        sess.train(
            cost, [dlc.FeedEntry(out, LABELS), dlc.FeedEntry(x, INPUTS), dlc.FeedEntry(label, LABELS)], 3, dlc.SGD(0.1)
        )
    with pytest.raises(dlc.DataError, match="must be a scalar"):
        sess.train(out, [dlc.FeedEntry(x, INPUTS)], 3, dlc.SGD(0.1))
    with pytest.raises(dlc.DataError, match="expected one example"):
        sess.train(cost, [dlc.FeedEntry(x, np.zeros((2, 2, 3))), dlc.FeedEntry(label, LABELS)], 3, dlc.SGD(0.1))
    other = linear_graph()[4]
    with pytest.raises(ValueError, match="not from the Graph"):
        sess.train(other, [dlc.FeedEntry(x, INPUTS), dlc.FeedEntry(label, LABELS)], 3, dlc.SGD(0.1))
