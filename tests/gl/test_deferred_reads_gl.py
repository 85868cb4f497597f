"""Deferred loss reads on GL: losses read a window at a time must give the step-by-step
results (the numpy backend, and GL reading every step), including a divergence or a stop
in the middle of a window."""

from __future__ import annotations

import numpy as np
import pytest

import dlc
from dlc import deferred

pytestmark = pytest.mark.gl


def quadratic():
    data = np.load("samples/data/quadratic.npz")
    return {k: data[k].astype(np.float32) for k in data.files}


def digits(n: int = 60):
    d = np.load("samples/data/digits_train.npz")
    return {"pixels": d["pixels"][:n].astype(np.float32), "labels": d["labels"][:n].astype(np.float32)}


@pytest.fixture
def reads(monkeypatch):
    """How many losses each deferred read fetched."""
    counts: list[int] = []
    original = deferred.GLDeferredSteps.read

    def counting(self, count):
        counts.append(count)
        return original(self, count)

    monkeypatch.setattr(deferred.GLDeferredSteps, "read", counting)
    return counts


def gl_session(model, window: int):
    sess = dlc.Session(model, backend="gl", seed=0)
    sess.loss_read_steps, sess.loss_read_interval_s = window, 1e9  # windows by count alone
    return sess


def diverge(sess, feeds):
    with pytest.raises(dlc.TrainingDiverged) as info:
        sess.train(feeds, optimizer=dlc.SGD(0.8), batch_size=50, steps=40)
    return info.value


def test_divergence_inside_a_window_names_the_step_and_keeps_the_last_good_params(gl, reads):
    feeds = quadratic()
    ref = dlc.Session("samples/quadratic.dl", backend="numpy", seed=0)
    want = diverge(ref, feeds)
    sess = gl_session("samples/quadratic.dl", window=8)
    got = diverge(sess, feeds)
    assert 3 < want.step < 40 and want.step % 8 not in (0, 1), "the lr must diverge mid-window"
    assert got.step == want.step
    assert max(reads) == 8 and len(reads) == -(-want.step // 8)  # no per-step reads
    for name, value in ref.params.items():
        np.testing.assert_allclose(sess.params[name], value, rtol=1e-4, err_msg=name)
    assert all(np.all(np.isfinite(v)) for v in sess.params.values())


def test_windows_match_numpy_step_by_step(gl, reads):
    model = "samples/mlp_digits.dl"
    ref = dlc.Session(model, backend="numpy", seed=0)
    want = ref.train(digits(), optimizer=dlc.Adam(0.01), batch_size=16, steps=11)
    sess = gl_session(model, window=4)
    got = sess.train(digits(), optimizer=dlc.Adam(0.01), batch_size=16, steps=11)
    assert reads == [4, 4, 3]
    np.testing.assert_allclose(got, want, rtol=1e-4)
    for name, value in ref.params.items():
        np.testing.assert_allclose(
            sess.params[name], value, rtol=1e-4, atol=1e-4 * float(np.abs(value).max()), err_msg=name
        )


def test_a_stop_inside_a_window_keeps_that_steps_params_and_the_shuffle(gl):
    """A callback returning False at step 6 of a window of 8 (Ctrl-C in `dlc train`): the
    params, the losses and the next call's batch order are those of reading every step."""
    model, feeds = "samples/mlp_digits.dl", digits()

    def run(window):
        sess = gl_session(model, window)
        seen = []

        def callback(step, epoch, loss, n):
            seen.append(step)
            return step < 6

        losses = sess.train(feeds, optimizer=dlc.SGD(0.1), batch_size=16, epochs=5, callback=callback)
        later = sess.train(feeds, batch_size=16, steps=5)  # the rng must be where it was
        return seen, losses, later, sess.params

    seen_w, losses_w, later_w, params_w = run(8)
    seen_1, losses_1, later_1, params_1 = run(1)  # 1: no deferral, a read per step
    assert seen_w == seen_1 == [1, 2, 3, 4, 5, 6]
    np.testing.assert_allclose(losses_w, losses_1, rtol=1e-5)
    np.testing.assert_allclose(later_w, later_1, rtol=1e-5)
    for name in params_1:
        np.testing.assert_allclose(params_w[name], params_1[name], rtol=1e-5, atol=1e-6)


def test_epoch_end_sees_the_params_of_that_step(gl):
    model, feeds = "samples/quadratic.dl", quadratic()
    seen = {}
    sess = gl_session(model, window=64)
    sess.train(
        feeds,
        optimizer=dlc.SGD(0.01),
        batch_size=64,
        epochs=3,
        on_epoch_end=lambda e: seen.setdefault(e, sess.params["a"].copy()),
    )
    ref = dlc.Session(model, backend="numpy", seed=0)
    for epoch in (1, 2, 3):
        ref.train(feeds, optimizer=dlc.SGD(0.01), batch_size=64, epochs=1) if epoch == 1 else ref.train(
            feeds, batch_size=64, epochs=1
        )
        np.testing.assert_allclose(seen[epoch], ref.params["a"], rtol=1e-5)
