"""Checkpoints on GL: a run stopped inside a deferred window (or checkpointed at a window's
end), restored and resumed, ends within float tolerance of the uninterrupted run (SGD and
Adam, shuffled, data resident on the GPU); a checkpoint moves between GL and numpy."""

from __future__ import annotations

import numpy as np
import pytest

import dlc

pytestmark = pytest.mark.gl

MODEL = """
input x: [B, 3]
input y: [B]
param w: [3] = normal(0, 1)
param b: [] = zeros
loss cost = mean_squared(sum(x * w, axis=1) + b, y)
"""
_rng = np.random.default_rng(1)
X = _rng.normal(size=(10, 3)).astype(np.float32)
FEEDS = {"x": X, "y": (X @ np.float32([1, -2, 0.5]) + 0.3).astype(np.float32)}
RUN = dict(batch_size=3, epochs=3)  # 4 steps an epoch, 12 in all: the data goes resident


def optimizer(name: str):
    return dlc.SGD(0.1) if name == "sgd" else dlc.Adam(0.05)


def close(got: dict, want: dict) -> None:
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-5, err_msg=k)


@pytest.mark.parametrize("name", ["sgd", "adam"])
def test_a_run_stopped_inside_a_window_resumes_to_the_same_end(gl, tmp_path, name):
    whole = dlc.Session(MODEL, backend="gl")
    want_losses = whole.train(FEEDS, optimizer=optimizer(name), **RUN)

    stopped = dlc.Session(MODEL, backend="gl")  # one window holds all 12 steps: the stop undoes 7
    first = stopped.train(FEEDS, optimizer=optimizer(name), callback=lambda k, e, loss, n: k < 5, **RUN)
    assert len(first) == 5
    stopped.save_checkpoint(tmp_path / "ck.npz")
    stopped.close()

    fresh = dlc.Session(MODEL, backend="gl", seed=7)
    fresh.restore(tmp_path / "ck.npz")
    rest = fresh.train(FEEDS, resume=True, **RUN)
    np.testing.assert_allclose(first + rest, want_losses, rtol=1e-4, atol=1e-6)
    close(fresh.params, whole.params)
    fresh.close()
    whole.close()


def test_checkpoints_inside_a_window_resume_to_the_same_end(gl, tmp_path):
    ref = dlc.Session(MODEL, backend="numpy")
    want_losses = ref.train(FEEDS, optimizer=dlc.Adam(0.05), **RUN)
    s = dlc.Session(MODEL, backend="gl")
    paths = []

    def write():
        paths.append(tmp_path / f"ck{len(paths)}.npz")
        s.save_checkpoint(paths[-1])

    losses = s.train(FEEDS, optimizer=dlc.Adam(0.05), checkpoint=write, checkpoint_every=5, **RUN)
    np.testing.assert_allclose(losses, want_losses, rtol=1e-4, atol=1e-6)
    s.close()
    assert len(paths) == 2
    for done, path in zip((5, 10), paths):
        for backend in ("gl", "numpy"):  # a GL checkpoint goes on on either backend
            fresh = dlc.Session(MODEL, backend=backend, seed=3)
            fresh.restore(path)
            assert fresh.last_run.done == done
            rest = fresh.train(FEEDS, resume=True, **RUN)
            np.testing.assert_allclose(rest, want_losses[done:], rtol=1e-4, atol=1e-6)
            close(fresh.params, ref.params)
            fresh.close()


def test_an_artifacts_run_resumes_and_refuses_another_optimizer(gl, tmp_path):
    from dlc.compiler.emit import write_artifact
    from dlc.runtime.target import choose_target

    out = tmp_path / "lin.dlc"
    target = choose_target()[0]
    write_artifact(dlc.compile(MODEL), out, train_loss="cost", optimizer=dlc.Adam(0.05), batch_size=3, target=target)
    whole = dlc.load(out)
    want_losses = whole.train(FEEDS, **RUN)
    stopped = dlc.load(out)
    first = stopped.train(FEEDS, callback=lambda k, e, loss, n: k < 6, **RUN)
    stopped.save_checkpoint(tmp_path / "ck.npz")
    for backend in ("gl", "numpy"):  # the artifact's programs, or its model.dl on the reference
        fresh = dlc.Session(out, backend=backend)
        fresh.restore(tmp_path / "ck.npz")
        rest = fresh.train(FEEDS, resume=True, **RUN)
        np.testing.assert_allclose(first + rest, want_losses, rtol=1e-4, atol=1e-6)
        close(fresh.params, whole.params)

    sgd = tmp_path / "sgd.dlc"
    write_artifact(dlc.compile(MODEL), sgd, train_loss="cost", optimizer=dlc.SGD(0.1), batch_size=3, target=target)
    with pytest.raises(dlc.DataError, match="trains with adam.*compiled with sgd"):
        dlc.load(sgd).restore(tmp_path / "ck.npz")
