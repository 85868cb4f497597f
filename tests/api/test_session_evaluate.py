"""Session.evaluate: fetches over all of the data in batches; per-example fetches concatenated,
the others the mean over the batches weighted by their examples (checked against NumPy)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import dlc
from dlc.data import load_data

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
QUAD = SAMPLES / "data" / "quadratic.npz"


def _quadratic(backend: str = "numpy"):
    sess = dlc.Session(SAMPLES / "quadratic.dl", backend=backend, seed=3)
    data = {k: v.astype(np.float32) for k, v in np.load(QUAD).items()}
    return sess, data


def _numpy_cost(sess, data) -> float:
    p = {k: float(v) for k, v in sess.params.items()}
    x, t = data["x"].astype(np.float64), data["y_label"].astype(np.float64)
    return float(np.mean((p["a"] * x**2 + p["b"] * x + p["c"] - t) ** 2))


@pytest.mark.parametrize("batch_size", [None, 1, 7, 64, 199, 200, 1000])
def test_the_weighted_mean_over_uneven_batches_is_the_full_data_loss(batch_size):
    sess, data = _quadratic()
    assert len(data["x"]) % 7 and len(data["x"]) % 64  # the last batch is smaller
    got = sess.evaluate(data, ["cost", "y"], batch_size=batch_size)
    np.testing.assert_allclose(float(got["cost"]), _numpy_cost(sess, data), rtol=2e-5)
    # `y` is per example: every example's, in order
    p = {k: float(v) for k, v in sess.params.items()}
    x = data["x"].astype(np.float64)
    np.testing.assert_allclose(got["y"], p["a"] * x**2 + p["b"] * x + p["c"], rtol=1e-5, atol=1e-5)
    assert got["y"].shape == (200,) and got["y"].dtype == np.float32


def test_one_name_gives_its_array_and_the_default_is_the_losses_and_metrics():
    sess, data = _quadratic()
    cost = sess.evaluate(data, "cost", batch_size=30)
    assert isinstance(cost, np.ndarray) and cost.shape == ()
    assert list(sess.evaluate(data)) == ["cost"]
    digits = dlc.Session(SAMPLES / "mlp_digits.dl", backend="numpy", seed=0)
    test = dict(np.load(SAMPLES / "data" / "digits_test.npz"))
    assert list(digits.evaluate(test, batch_size=100)) == ["cost", "accuracy"]


def test_an_accuracy_over_batches_is_the_fraction_right_over_all_the_data():
    sess = dlc.Session(SAMPLES / "mlp_digits.dl", backend="numpy", seed=0)
    test = dict(np.load(SAMPLES / "data" / "digits_test.npz"))
    got = sess.evaluate(test, ["accuracy", "prediction", "logits"], batch_size=33)  # 360 = 10 * 33 + 30
    np.testing.assert_array_equal(got["prediction"], np.argmax(got["logits"], axis=1))
    right = got["prediction"] == test["labels"]
    assert 0 < right.mean() < 1
    np.testing.assert_allclose(float(got["accuracy"]), right.mean(), rtol=1e-5)
    assert got["prediction"].shape[0] == len(test["labels"])


def test_a_data_file_read_by_load_data_is_taken_as_it_is():
    sess, data = _quadratic()
    loaded = load_data(QUAD, sess.inputs)
    a = sess.evaluate(loaded, ["cost"], batch_size=16)
    b = sess.evaluate(data, ["cost"])
    np.testing.assert_allclose(float(a["cost"]), float(b["cost"]), rtol=2e-5)


def test_bad_names_are_refused_naming_them():
    sess, data = _quadratic()
    with pytest.raises((KeyError, dlc.DlcError), match="cots"):
        sess.evaluate(data, ["cots"], batch_size=10)


@pytest.mark.gl
def test_gl_agrees_with_numpy():
    ref, data = _quadratic("numpy")
    try:
        gl = dlc.Session(SAMPLES / "quadratic.dl", backend="gl", seed=3)
    except dlc.RuntimeFailure as e:
        pytest.skip(str(e))
    small = {k: v[:50] for k, v in data.items()}
    want = ref.evaluate(small, ["cost", "y"], batch_size=16)
    got = gl.evaluate(small, ["cost", "y"], batch_size=16)
    np.testing.assert_allclose(float(got["cost"]), float(want["cost"]), rtol=1e-4)
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-4, atol=1e-5)
