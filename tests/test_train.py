"""Session.train / Session.gradients on the numpy backend: the seeds' examples,
the digits classifier, batching, shuffling, callbacks and divergence."""

from __future__ import annotations

import numpy as np
import pytest

import dlc
from dlc.runtime.errors import CompileError, DataError, RuntimeFailure, TrainingDiverged

QUADRATIC = dict(np.load("samples/data/quadratic.npz"))


def quadratic(seed=0):
    return dlc.Session("samples/quadratic.dl", backend="numpy", seed=seed)


def y_at_4(sess) -> float:
    return float(sess.eval("y", {"x": np.array([4.0], dtype=np.float32)})[0])


# -- the seeds' examples ----------------------------------------------------------------


def test_quadratic_20_full_batch_sgd_steps_then_y4_near_57():
    sess = quadratic()
    costs = sess.train(QUADRATIC, optimizer=dlc.SGD(0.01), batch_size=None, steps=20)
    assert len(costs) == 20
    assert costs[-1] < costs[0] / 5
    assert all(b < a for a, b in zip(costs, costs[1:]))  # full batch, small lr: monotone
    sess.train(QUADRATIC, batch_size=None, steps=480)  # the same SGD object goes on
    assert y_at_4(sess) == pytest.approx(57.0, abs=0.5)  # 3*4^2 + 2*4 + 1
    p = sess.params
    assert (float(p["a"]), float(p["b"]), float(p["c"])) == pytest.approx((3, 2, 1), abs=0.1)


def test_linear_seed_example_cost_falls():
    table = np.genfromtxt("samples/data/linear.csv", delimiter=",", names=True)
    feeds = {"x": np.stack([table["x0"], table["x1"], table["x2"]], axis=1), "label": table["label"]}
    sess = dlc.Session("samples/linear.dl", backend="numpy", seed=0)
    before = float(sess.eval("cost", feeds))
    costs = sess.train(feeds, optimizer=dlc.SGD(0.00001), batch_size=3, steps=10)
    assert costs[-1] < costs[0] and float(sess.eval("cost", feeds)) < before / 10


@pytest.mark.parametrize("seed", [0, 1])
def test_mlp_digits_reaches_95_percent(seed):
    train = dict(np.load("samples/data/digits_train.npz"))
    test = dict(np.load("samples/data/digits_test.npz"))
    sess = dlc.Session("samples/mlp_digits.dl", backend="numpy", seed=seed)
    costs = sess.train(train, optimizer=dlc.Adam(0.01), batch_size=64, epochs=10)
    assert len(costs) == 10 * 23  # 1437 examples: 22 full batches and one of 29
    assert float(sess.eval("accuracy", test)) >= 0.95


# -- gradients --------------------------------------------------------------------------


def test_gradients_match_the_closed_form():
    sess = quadratic(seed=4)
    p = {k: float(v) for k, v in sess.params.items()}
    x, y = QUADRATIC["x"].astype(np.float64), QUADRATIC["y_label"].astype(np.float64)
    r = p["a"] * x**2 + p["b"] * x + p["c"] - y
    want = {"a": np.mean(2 * r * x**2), "b": np.mean(2 * r * x), "c": np.mean(2 * r)}
    got = sess.gradients(QUADRATIC)
    assert set(got) == {"a", "b", "c"}
    for k in want:
        assert float(got[k]) == pytest.approx(want[k], rel=1e-4)
        assert got[k].dtype == np.float32 and got[k].shape == ()


def test_gradients_of_a_chosen_loss():
    src = "input x: [B]\nparam a: [] = 1\nparam b: [] = 2\nloss first = mean(a * x)\nloss second = mean(b * b * x)\n"
    sess = dlc.Session(dlc.compile(src), backend="numpy")
    x = np.array([1.0, 3.0], dtype=np.float32)
    assert {k: float(v) for k, v in sess.gradients({"x": x}).items()} == {"a": 2.0, "b": 0.0}
    g = sess.gradients({"x": x}, loss="second")
    assert (float(g["a"]), float(g["b"])) == (0.0, 8.0)
    sess.train({"x": x}, loss="second", optimizer=dlc.SGD(0.1), batch_size=None, steps=1)
    assert float(sess.params["a"]) == 1.0 and float(sess.params["b"]) == pytest.approx(1.2)


# -- batching, epochs, steps, shuffling -------------------------------------------------

PROBE = "input x: [B]\nparam w: [] = 0\nloss l = mean(x) + 0 * w\n"
XS = np.arange(10, dtype=np.float32)


def probe(seed=0):
    return dlc.Session(dlc.compile(PROBE), backend="numpy", seed=seed)


def test_batches_epochs_and_the_last_partial_batch():
    seen, ends = [], []
    costs = probe().train(
        {"x": XS},
        optimizer=dlc.SGD(0.0),
        batch_size=4,
        epochs=2,
        shuffle=False,
        callback=lambda *a: seen.append(a),
        on_epoch_end=ends.append,
    )
    assert costs == [1.5, 5.5, 8.5] * 2
    assert [(s, e, n) for s, e, _, n in seen] == [(1, 1, 4), (2, 1, 4), (3, 1, 2), (4, 2, 4), (5, 2, 4), (6, 2, 2)]
    assert [c for _, _, c, _ in seen] == costs
    assert ends == [1, 2]


def test_steps_span_epochs():
    seen, ends = [], []
    costs = probe().train(
        {"x": XS},
        optimizer=dlc.SGD(0.0),
        batch_size=4,
        steps=7,
        shuffle=False,
        callback=lambda *a: seen.append(a[3]),
        on_epoch_end=ends.append,
    )
    assert len(costs) == 7 and seen == [4, 4, 2, 4, 4, 2, 4] and ends == [1, 2]


def test_epochs_and_steps_together_are_refused_as_the_cli_refuses_them():
    with pytest.raises(ValueError, match="epochs or steps, not both"):
        probe().train({"x": XS}, optimizer=dlc.SGD(0.0), batch_size=4, epochs=3, steps=5)


def test_shuffling_covers_every_example_once_per_epoch_and_follows_the_seed():
    def run(seed):
        sizes = []
        costs = probe(seed).train(
            {"x": XS}, optimizer=dlc.SGD(0.0), batch_size=3, epochs=3, callback=lambda *a: sizes.append(a[3])
        )
        return costs, sizes

    costs, sizes = run(0)
    for e in range(3):  # 4 batches per epoch: their example sums add up to sum(XS)
        total = sum(c * n for c, n in zip(costs[4 * e : 4 * e + 4], sizes[4 * e : 4 * e + 4]))
        assert total == pytest.approx(XS.sum())
    assert costs[:4] != costs[4:8]  # reshuffled each epoch
    assert run(0)[0] == costs  # same seed, same order
    assert run(1)[0] != costs


def test_batch_size_none_or_larger_than_the_data_is_full_batch():
    assert probe().train({"x": XS}, optimizer=dlc.SGD(0.0), batch_size=None, epochs=2) == [4.5] * 2
    assert probe().train({"x": XS}, optimizer=dlc.SGD(0.0), batch_size=100) == [4.5]


def test_inputs_without_a_symbolic_dim_train_on_everything_each_step():
    sess = dlc.Session(dlc.compile("input x: [3]\nparam w: [3] = 0\nloss l = sum((w - x)^2)\n"), backend="numpy")
    costs = sess.train({"x": np.array([1.0, 2.0, 3.0])}, optimizer=dlc.SGD(0.25), steps=3)
    assert costs == pytest.approx([14.0, 3.5, 0.875])


def test_callback_false_stops_after_that_step():
    costs = probe().train(
        {"x": XS}, optimizer=dlc.SGD(0.0), batch_size=2, epochs=5, callback=lambda step, *rest: step < 3
    )
    assert len(costs) == 3


def test_two_calls_continue_like_one():
    one, two = quadratic(), quadratic()
    opt1, opt2 = dlc.Adam(0.05), dlc.Adam(0.05)
    a = one.train(QUADRATIC, optimizer=opt1, batch_size=50, steps=12, shuffle=False)
    b = two.train(QUADRATIC, optimizer=opt2, batch_size=50, steps=4, shuffle=False)
    b += two.train(QUADRATIC, optimizer=opt2, batch_size=50, steps=8, shuffle=False)
    assert a == pytest.approx(b, rel=1e-6)
    for k, v in one.params.items():
        np.testing.assert_allclose(two.params[k], v, rtol=1e-6)


# -- divergence and errors --------------------------------------------------------------


def test_nan_loss_raises_and_restores_the_last_finite_params():
    sess = quadratic()
    after = {0: sess.params}  # params after each step (0: the initial ones)
    with pytest.raises(TrainingDiverged) as e:
        sess.train(
            QUADRATIC,
            optimizer=dlc.SGD(10.0),
            batch_size=None,
            steps=1000,
            callback=lambda step, *r: after.__setitem__(step, sess.params),
        )
    k = e.value.step
    assert isinstance(e.value, RuntimeFailure) and not np.isfinite(e.value.loss)
    assert f"step {k}" in str(e.value)
    assert k == len(after)  # steps 1 .. k-1 had finite losses
    # the loss of step k-1 (computed from the params after step k-2) was the last finite one
    for name, v in sess.params.items():
        assert np.all(np.isfinite(v))
        np.testing.assert_array_equal(v, after[max(k - 2, 0)][name])
    assert np.isfinite(float(sess.eval("cost", QUADRATIC)))


def test_nan_at_the_first_step_keeps_the_initial_params():
    sess = quadratic()
    start = sess.params
    bad = {**QUADRATIC, "x": QUADRATIC["x"].copy()}
    bad["x"][3] = np.nan
    with pytest.raises(TrainingDiverged) as e:
        sess.train(bad, optimizer=dlc.Adam(0.1), batch_size=None, steps=5)
    assert e.value.step == 1
    for name, v in sess.params.items():
        np.testing.assert_array_equal(v, start[name])


def test_data_errors():
    sess = quadratic()
    with pytest.raises(DataError, match="input 'y_label' is missing"):
        sess.train({"x": QUADRATIC["x"]})
    with pytest.raises(DataError, match="y_label"):
        sess.train({"x": QUADRATIC["x"], "y_label": QUADRATIC["y_label"][:10]})
    two_dims = dlc.compile("input x: [B]\ninput z: [N]\nparam w: [] = 0\nloss l = mean(x) * w + mean(z) * w\n")
    with pytest.raises(DataError, match="share a leading symbolic dim"):
        dlc.Session(two_dims, backend="numpy").train({"x": np.ones(3), "z": np.ones(4)})
    with pytest.raises(CompileError, match="did you mean 'cost'"):
        sess.train(QUADRATIC, loss="cots")
    with pytest.raises(ValueError, match="batch_size"):
        sess.train(QUADRATIC, batch_size=0)
    no_loss = dlc.compile("input x: [B]\nparam w: [] = 0\ny = w * x\n")
    with pytest.raises(CompileError, match="no loss"):
        dlc.Session(no_loss, backend="numpy").train({"x": np.ones(3)})
