"""Training on GL matches the numpy backend step by step (same seed, same batches)."""

from __future__ import annotations

import numpy as np
import pytest

import dlc
from dlc.compiler.train_graph import build_train_graph
from dlc.runtime import optimizers

pytestmark = pytest.mark.gl

CONV = """
input images: [B, 6, 6, 1]
input labels: [B]
param k: [3, 3, 1, 4] = he
param kb: [4]
param W: [36, 3] = glorot
param b: [3]
h = max_pool(relu(conv2d(images, k) + kb), 2)
logits = reshape(h, [B, 36]) @ W + b
loss cost = softmax_cross_entropy(logits, one_hot(labels, 3))
"""


def digits(n: int = 100):
    d = np.load("samples/data/digits_train.npz")
    return {"pixels": d["pixels"][:n].astype(np.float32), "labels": d["labels"][:n].astype(np.float32)}


def run_both(model, feeds, optimizer_factory, steps, batch_size):
    out = {}
    for name in ("numpy", "gl"):
        sess = dlc.Session(model, backend=name, seed=0)
        losses = sess.train(feeds, optimizer=optimizer_factory(), batch_size=batch_size, steps=steps)
        out[name] = (np.array(losses), sess.params)
    return out


@pytest.mark.parametrize("optimizer", [lambda: dlc.SGD(0.05), lambda: dlc.Adam(0.01)], ids=["sgd", "adam"])
def test_twenty_steps_match_numpy(gl, optimizer):
    # 100 examples in batches of 32: every fourth step has 4, so the batch dim is rebound
    out = run_both("samples/mlp_digits.dl", digits(), optimizer, steps=20, batch_size=32)
    (ln, pn), (lg, pg) = out["numpy"], out["gl"]
    assert len(lg) == 20
    np.testing.assert_allclose(lg, ln, rtol=1e-4)
    for name in pn:
        np.testing.assert_allclose(
            pg[name], pn[name], rtol=1e-4, atol=1e-4 * float(np.abs(pn[name]).max()), err_msg=name
        )


@pytest.mark.parametrize("name", sorted(optimizers.OPTIMIZERS))
def test_every_optimizer_matches_numpy(gl, name):
    # small and quick: every optimizer's update kernels (also run on the texture target)
    data = dict(np.load("samples/data/quadratic.npz"))
    out = run_both("samples/quadratic.dl", data, lambda: optimizers.make(name, lr=0.01), steps=5, batch_size=16)
    (ln, pn), (lg, pg) = out["numpy"], out["gl"]
    np.testing.assert_allclose(lg, ln, rtol=1e-4)
    for p in pn:
        np.testing.assert_allclose(pg[p], pn[p], rtol=1e-4, atol=1e-5, err_msg=p)


def test_a_conv_net_trains_the_same(gl):
    rng = np.random.default_rng(0)
    feeds = {
        "images": rng.normal(size=(10, 6, 6, 1)).astype(np.float32),
        "labels": rng.integers(0, 3, size=10).astype(np.float32),
    }
    model = dlc.compile(CONV)
    out = run_both(model, feeds, lambda: dlc.Momentum(0.05), steps=6, batch_size=4)
    np.testing.assert_allclose(out["gl"][0], out["numpy"][0], rtol=1e-4)


def test_gradients_match(gl):
    feeds = digits(40)
    want = dlc.Session("samples/mlp_digits.dl", backend="numpy").gradients(feeds)
    got = dlc.Session("samples/mlp_digits.dl", backend="gl").gradients(feeds)
    for name in want:
        np.testing.assert_allclose(
            got[name], want[name], rtol=1e-4, atol=1e-5 * float(np.abs(want[name]).max()), err_msg=name
        )


def test_every_update_of_an_adam_step_is_in_place(backend):
    model = dlc.compile("samples/mlp_digits.dl")
    step = build_train_graph(model.graph, "cost", dlc.Adam(0.01))
    compiled, _ = backend.program(step, [step.names["cost"]], True, {"B": 32})
    assert compiled.spec.copies == ()
    assert len(compiled.spec.inplace) == len(step.updates)


def test_snapshot_restore_puts_params_back(gl):
    from dlc.backends.gl import GLBackend

    be = GLBackend()
    be.set_leaf("w", np.arange(6, dtype=np.float32).reshape(2, 3))
    token = be.snapshot()
    be.set_leaf("w", np.zeros((2, 3), np.float32))
    be.snapshot()
    be.restore(token)
    np.testing.assert_array_equal(be.get_leaf("w"), np.arange(6).reshape(2, 3))
    be.close()


def test_a_diverging_step_restores_finite_params(gl):
    sess = dlc.Session("samples/quadratic.dl", backend="gl", seed=0)
    data = np.load("samples/data/quadratic.npz")
    feeds = {k: data[k].astype(np.float32) for k in data.files}
    with pytest.raises(dlc.TrainingDiverged):
        sess.train(feeds, optimizer=dlc.SGD(1e6), batch_size=None, steps=50)
    assert all(np.all(np.isfinite(v)) for v in sess.params.values())
