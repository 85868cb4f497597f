"""Checkpoints on the numpy backend: an interrupted run, restored and resumed, ends bitwise
where the uninterrupted run does (SGD and Adam, shuffled, mid-epoch and at an epoch's end);
the train loop's deferred windows continue a run the same way; a checkpoint of another
model or optimizer, or a damaged one, is refused and changes nothing."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

import dlc
from dlc.runtime.checkpoint import META, read_checkpoint
from dlc.runtime.errors import DataError, DlcError
from dlc.runtime.training import RunPosition, train_loop

MODEL = """
input x: [B, 3]
input y: [B]
param w: [3] = normal(0, 1)
param b: [] = zeros
loss cost = mean_squared(sum(x * w, axis=1) + b, y)
"""
OTHER = MODEL.replace("param w: [3]", "param w: [3, 1]").replace("sum(x * w, axis=1)", "sum(x @ w, axis=1)")

_rng = np.random.default_rng(1)
X = _rng.normal(size=(10, 3)).astype(np.float32)
FEEDS = {"x": X, "y": (X @ np.float32([1, -2, 0.5]) + 0.3).astype(np.float32)}
RUN = dict(batch_size=3, epochs=3)  # 4 steps an epoch (the last of 1 example), 12 in all


def optimizer(name: str):
    return dlc.SGD(0.1) if name == "sgd" else dlc.Adam(0.05)


def full_run(name: str) -> tuple[list[float], dict[str, np.ndarray]]:
    s = dlc.Session(MODEL, backend="numpy")
    losses = s.train(FEEDS, optimizer=optimizer(name), **RUN)
    return losses, s.params


def stopped_run(name: str, after: int) -> tuple[dlc.Session, list[float]]:
    s = dlc.Session(MODEL, backend="numpy")
    losses = s.train(FEEDS, optimizer=optimizer(name), callback=lambda k, e, loss, n: k < after, **RUN)
    assert len(losses) == after
    return s, losses


def assert_same_params(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for k in want:
        assert np.array_equal(got[k], want[k]), k


@pytest.mark.parametrize("name", ["sgd", "adam"])
@pytest.mark.parametrize("after", [5, 4, 1])  # mid-epoch, an epoch's end, the first step
def test_resumed_run_ends_bitwise_where_the_uninterrupted_one_does(tmp_path, name, after):
    want_losses, want = full_run(name)
    s, first = stopped_run(name, after)
    s.save_checkpoint(tmp_path / "ck.npz")

    fresh = dlc.Session(MODEL, backend="numpy", seed=7)  # other initial params and order
    fresh.restore(tmp_path / "ck.npz")
    rest = fresh.train(FEEDS, resume=True, **RUN)  # the checkpoint's optimizer
    assert first + rest == want_losses
    assert_same_params(fresh.params, want)


def test_the_same_session_resumes_without_a_file():
    want_losses, want = full_run("adam")
    s, first = stopped_run("adam", 6)
    rest = s.train(FEEDS, resume=True, **RUN)
    assert first + rest == want_losses
    assert_same_params(s.params, want)


def test_a_restored_state_goes_on_with_an_optimizer_of_the_same_settings(tmp_path):
    _, want = full_run("adam")
    s, _ = stopped_run("adam", 7)
    s.save_checkpoint(tmp_path / "ck.npz")
    fresh = dlc.Session(MODEL, backend="numpy")
    fresh.restore(tmp_path / "ck.npz")
    fresh.train(FEEDS, optimizer=dlc.Adam(0.05), resume=True, **RUN)
    assert_same_params(fresh.params, want)


def test_a_checkpoint_holds_the_optimizer_state_step_and_order(tmp_path):
    s, _ = stopped_run("adam", 5)
    s.save_checkpoint(tmp_path / "ck.npz")
    ck = read_checkpoint(tmp_path / "ck.npz")
    assert ck.optimizer == {"name": "adam", "lr": 0.05, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8}
    assert set(ck.states) == {"$t", "w$m", "w$v", "b$m", "b$v"}
    assert float(ck.states["$t"]) == 5.0  # Adam's step counter
    for name, value in ck.states.items():
        assert np.array_equal(value, s.backend.get_leaf(name))
    assert (ck.run.done, ck.run.batch_size, ck.run.examples, ck.run.shuffle) == (5, 3, 10, True)
    # step 5 is the first of epoch 2: the order is that epoch's, drawn from the seed's rng
    rng = np.random.default_rng(0)
    rng.permutation(10)
    assert np.array_equal(ck.run.order, rng.permutation(10))
    assert ck.rng_state == rng.bit_generator.state


@pytest.mark.parametrize("name", ["sgd", "adam"])
def test_periodic_checkpoints_each_resume_to_the_same_end(tmp_path, name):
    want_losses, want = full_run(name)
    s = dlc.Session(MODEL, backend="numpy")
    written = []

    def write():
        path = tmp_path / f"ck{len(written)}.npz"
        s.save_checkpoint(path)
        written.append(path)

    assert s.train(FEEDS, optimizer=optimizer(name), checkpoint=write, checkpoint_every=5, **RUN) == want_losses
    assert len(written) == 2  # after steps 5 and 10
    for done, path in zip((5, 10), written):
        fresh = dlc.Session(MODEL, backend="numpy", seed=3)
        fresh.restore(path)
        assert fresh.last_run.done == done
        assert fresh.train(FEEDS, resume=True, **RUN) == want_losses[done:]
        assert_same_params(fresh.params, want)


def test_checkpoint_every_writes_to_a_path(tmp_path):
    s = dlc.Session(MODEL, backend="numpy")
    s.train(FEEDS, checkpoint=tmp_path / "ck.npz", checkpoint_every=4, **RUN)
    assert read_checkpoint(tmp_path / "ck.npz").run.done == 12
    for half in (dict(checkpoint_every=4), dict(checkpoint=tmp_path / "x.npz")):
        with pytest.raises(ValueError, match="checkpoint and checkpoint_every go together"):
            s.train(FEEDS, **half, **RUN)


def test_a_finished_run_resumes_with_nothing_left_or_trains_on_with_more_epochs(tmp_path):
    s = dlc.Session(MODEL, backend="numpy")
    s.train(FEEDS, optimizer=dlc.SGD(0.1), batch_size=3, epochs=2)
    s.save_checkpoint(tmp_path / "ck.npz")
    fresh = dlc.Session(MODEL, backend="numpy")
    fresh.restore(tmp_path / "ck.npz")
    assert fresh.train(FEEDS, resume=True, batch_size=3, epochs=2) == []
    assert fresh.train(FEEDS, resume=True, **RUN) == full_run("sgd")[0][8:]
    assert_same_params(fresh.params, full_run("sgd")[1])


def test_load_and_init_take_a_checkpoints_params(tmp_path):
    s, _ = stopped_run("adam", 3)
    s.save_checkpoint(tmp_path / "ck.npz")
    fresh = dlc.Session(MODEL, backend="numpy", seed=9)
    fresh.load(tmp_path / "ck.npz")
    assert_same_params(fresh.params, s.params)


# -- refusals: each names the file and changes nothing --------------------------------------


def session_and_checkpoint(tmp_path):
    s, _ = stopped_run("adam", 5)
    path = tmp_path / "ck.npz"
    s.save_checkpoint(path)
    target = dlc.Session(MODEL, backend="numpy", seed=4)
    return target, path


def rewrite(path, **changes) -> None:
    """The checkpoint at `path` with some arrays replaced (a `meta` dict is JSON-encoded)."""
    with np.load(path) as z:
        arrays = dict(z)
    for k, v in changes.items():
        arrays[k] = np.frombuffer(json.dumps(v).encode(), np.uint8) if isinstance(v, dict) else v
    np.savez(path, **arrays)


def meta_of(path) -> dict:
    with np.load(path) as z:
        return json.loads(z[META].tobytes())


def refused(target, path, match: str) -> None:
    before = target.params
    with pytest.raises(DataError, match=match) as e:
        target.restore(path)
    assert str(path) in str(e.value)
    assert_same_params(target.params, before)
    assert target.last_run is None


def test_a_checkpoint_of_another_model_is_refused(tmp_path):
    other = dlc.Session(OTHER, backend="numpy")
    other.train(FEEDS, optimizer=dlc.Adam(0.05), steps=2, batch_size=3)
    other.save_checkpoint(tmp_path / "other.npz")
    refused(dlc.Session(MODEL, backend="numpy"), tmp_path / "other.npz", "another model: param 'w' is \\[3, 1\\]")


def test_resuming_with_another_optimizer_or_batching_is_refused(tmp_path):
    target, path = session_and_checkpoint(tmp_path)
    target.restore(path)
    with pytest.raises(DlcError, match="trains with adam\\(beta1=0.9.*not sgd"):
        target.train(FEEDS, optimizer=dlc.SGD(0.1), resume=True, **RUN)
    with pytest.raises(DataError, match="batches of 3 from 10 examples.*batches of 4"):
        target.train(FEEDS, resume=True, batch_size=4, epochs=3)
    with pytest.raises(DlcError, match="nothing to resume"):
        dlc.Session(MODEL, backend="numpy").train(FEEDS, resume=True, **RUN)


@pytest.mark.parametrize(
    "damage, match",
    [
        (lambda p: p.write_bytes(p.read_bytes()[:300]), "damaged or truncated"),
        (lambda p: rewrite(p, meta=np.frombuffer(b"{not json", np.uint8)), "not valid JSON"),
        (lambda p: rewrite(p, **{"state/w$m": np.full(3, np.nan, np.float32)}), "'w\\$m' holds NaN"),
        (lambda p: rewrite(p, order=np.zeros(10, np.int64)), "not an order of the run's 10 examples"),
        (lambda p: rewrite(p, meta={**meta_of(p), "rng": {"bit_generator": "MT19937"}}), "rng state"),
        (lambda p: rewrite(p, meta={**meta_of(p), "optimizer": {"name": "adam", "lr": 1, "x": 2}}), "no setting 'x'"),
        (lambda p: rewrite(p, meta={**meta_of(p), "version": 99}), "version 99"),
        (lambda p: rewrite(p, meta={**meta_of(p), "run": {"done": -1}}), "the run in 'meta'"),
    ],
)
def test_a_damaged_checkpoint_is_refused(tmp_path, damage, match):
    target, path = session_and_checkpoint(tmp_path)
    damage(path)
    refused(target, path, match)


def test_a_weights_file_is_not_a_checkpoint(tmp_path):
    np.savez(tmp_path / "w.npz", w=np.zeros(3, np.float32), b=np.float32(0))
    refused(dlc.Session(MODEL, backend="numpy"), tmp_path / "w.npz", "not a dlc checkpoint")
    with zipfile.ZipFile(tmp_path / "w.npz") as z:
        assert "meta.npy" not in z.namelist()


# -- the loop's deferred windows (GL's way) continue a run the same way ---------------------


class DeferredNow:
    """Deferred steps run at once, their losses held until read, as GL's are."""

    def __init__(self, step, capacity: int):
        self.step, self.capacity, self.interval_s = step, capacity, 1e9
        self.losses = [0.0] * capacity

    def stage(self, batches) -> None:
        pass

    def queue(self, batch, bdims, index: int) -> None:
        self.losses[index] = self.step(batch, bdims)

    def read(self, count: int) -> np.ndarray:
        return np.asarray(self.losses[:count])


class Linear:
    """A least-squares fit by SGD in float32: a step function with snapshot/restore."""

    def __init__(self):
        self.w = np.zeros(3, np.float32)

    def step(self, batch, bdims) -> float:
        err = batch["x"] @ self.w - batch["y"]
        self.w = self.w - np.float32(0.05) * (batch["x"].T @ err) / np.float32(len(err))
        return float(np.mean(err * err))

    def snapshot(self):
        return self.w.copy()

    def restore(self, token) -> None:
        self.w = token.copy()


def loop(model: Linear, deferred: bool, **kw) -> list[float]:
    dims = {"B": 10}
    return train_loop(
        model.step,
        FEEDS,
        dims,
        "B",
        batch_size=3,
        epochs=5,
        snapshot=model.snapshot,
        restore=model.restore,
        deferred=DeferredNow(model.step, 3) if deferred else None,
        **kw,
    )


@pytest.mark.parametrize("deferred", [False, True])
@pytest.mark.parametrize("stop", [2, 4, 7, 8])
def test_the_loop_continues_a_stopped_run_from_its_position(deferred, stop):
    whole = Linear()
    want = loop(whole, deferred, rng=np.random.default_rng(5))
    part, rng, position = Linear(), np.random.default_rng(5), RunPosition()
    first = loop(part, deferred, rng=rng, position=position, callback=lambda k, e, loss, n: k < stop)
    assert position.done == stop and len(first) == stop
    saved = (part.snapshot(), rng.bit_generator.state, RunPosition(**vars(position)))
    resumed, rng2 = Linear(), np.random.default_rng(99)
    resumed.restore(saved[0])
    rng2.bit_generator.state = saved[1]
    rest = loop(resumed, deferred, rng=rng2, position=saved[2])
    assert first + rest == want
    assert np.array_equal(resumed.w, whole.w)


@pytest.mark.parametrize("deferred", [False, True])
def test_the_loop_writes_checkpoints_with_the_params_and_rng_of_their_step(deferred):
    whole = Linear()
    want = loop(whole, deferred, rng=np.random.default_rng(5))
    model, rng, saved = Linear(), np.random.default_rng(5), []

    def on_every(position: RunPosition) -> None:
        state = position.rng_state or rng.bit_generator.state
        saved.append((model.snapshot(), state, RunPosition(position.done, position.order, None, 3, 10, True)))

    assert loop(model, deferred, rng=rng, position=RunPosition(), every=4, on_every=on_every) == want
    assert [p.done for _, _, p in saved] == [4, 8, 12, 16, 20]
    for w, state, position in saved:
        resumed, rng2 = Linear(), np.random.default_rng(0)
        resumed.restore(w)
        rng2.bit_generator.state = state
        done = position.done  # the loop moves it on
        assert loop(resumed, deferred, rng=rng2, position=position) == want[done:]
        assert np.array_equal(resumed.w, whole.w)
