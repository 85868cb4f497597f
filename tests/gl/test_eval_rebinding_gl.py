"""The executor's bound eval (runtime/executor.py `_bind_eval`): what an eval uploads,
launches and reads is worked out once per fetch list, so each change under it must make it
work that out again: another batch size (a new binding), a larger one (buffers and the
readback replaced), new params (the store's buffers), training steps queued before. Each
value against the quadratic's closed form in float64 from the session's params."""

from __future__ import annotations

import numpy as np

import dlc

QUADRATIC = "samples/quadratic.dl"


def _want(sess, x):
    p = {k: np.float64(v) for k, v in sess.params.items()}
    x = x.astype(np.float64)
    return p["a"] * x * x + p["b"] * x + p["c"]


def _check(sess, n, rng):
    x = rng.uniform(-2, 2, n).astype(np.float32)
    got = sess.eval("y", {"x": x})
    assert got.shape == (n,)
    np.testing.assert_allclose(got, _want(sess, x), rtol=1e-5, atol=1e-5)


def test_a_bound_eval_follows_every_change_under_it(gl):
    sess = dlc.Session(QUADRATIC, backend="gl", seed=0)
    rng = np.random.default_rng(3)
    for n in (11, 11, 3, 40, 11, 11):  # same shapes, a smaller batch, buffers grown, back
        _check(sess, n, rng)
    sess.set_params({"a": np.float32(0.5), "b": np.float32(-2.0), "c": np.float32(3.0)})
    _check(sess, 11, rng)
    _check(sess, 600, rng)  # more floats than the readback held: a new readback buffer
    _check(sess, 11, rng)
    _check(sess, 600, rng)
    x = rng.uniform(-2, 2, 11).astype(np.float32)
    data = {"x": x, "y_label": (0.5 * x * x - x + 2).astype(np.float32)}
    sess.train(data, optimizer=dlc.SGD(0.01), batch_size=11, steps=5)  # steps queued on the GPU
    _check(sess, 11, rng)
    sess.close()
