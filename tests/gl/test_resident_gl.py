"""Session.train on GL with its data on the GPU: each step uploads only its rows' indices."""

from __future__ import annotations

import numpy as np
import pytest

import dlc
from dlc.compiler.reference import evaluate
from dlc.compiler.resident import IDX, data_name, resident_graph
from dlc.compiler.train_graph import LR, build_train_graph


def digits(n: int = 50):
    d = np.load("samples/data/digits_train.npz")
    return {"pixels": d["pixels"][:n].astype(np.float32), "labels": d["labels"][:n].astype(np.float32)}


def test_resident_graph_reads_the_rows_it_is_given():
    # The NumPy reference: the rewritten step over (all data, rows) equals the step over the
    # rows sliced on the host, updates included.
    model = dlc.compile("samples/mlp_digits.dl")
    step = build_train_graph(model.graph, None, dlc.Adam(0.01))
    res = resident_graph(step, ["pixels", "labels"], "B", 50)
    assert set(res.inputs) == {LR, IDX}
    assert {data_name("pixels"), data_name("labels")} <= set(res.states)
    assert res.node(data_name("pixels")).shape == (50, 64)
    data, rows = digits(), np.array([7, 3, 49, 0, 3])
    leaves = dlc.Session(model, backend="numpy").backend.leaves
    leaves = {**leaves, **{s: np.zeros(step.node(s).shape, np.float32) for s in step.states}}
    lr = np.float32(0.01)
    want_roots = [step.names["cost"], *(i for _, i in step.updates)]
    got_roots = [res.names["cost"], *(i for _, i in res.updates)]
    want = evaluate(step, want_roots, {**leaves, LR: lr, **{k: v[rows] for k, v in data.items()}}, {"B": 5})
    got = evaluate(
        res,
        got_roots,
        {**leaves, LR: lr, IDX: rows.astype(np.float32), **{data_name(k): v for k, v in data.items()}},
        {"B": 5},
    )
    for w, g in zip(want_roots, got_roots):
        np.testing.assert_array_equal(got[g], want[w])


class Spy:
    """Records what each backend.step uploads and which leaves each snapshot holds."""

    def __init__(self, sess):
        self.feeds: list[set[str]] = []
        self.snapshots: list[set[str]] = []
        be = sess.backend
        step, snapshot = be.step, be.snapshot

        def spy_step(graph, roots, feeds, dims):
            self.feeds.append(set(feeds))
            return step(graph, roots, feeds, dims)

        step_into = be.step_into

        def spy_step_into(graph, loss, feeds, dims, sink, index):  # a deferred-read step
            self.feeds.append(set(feeds))
            return step_into(graph, loss, feeds, dims, sink, index)

        def spy_snapshot():
            token = snapshot()
            self.snapshots.append(set(be.store._ring[token[0]]))
            self.held = set(be.store.buffers)
            return token

        be.step, be.step_into, be.snapshot = spy_step, spy_step_into, spy_snapshot


def test_steps_upload_only_indices_and_the_data_is_freed(gl):
    sess = dlc.Session("samples/mlp_digits.dl", backend="gl", seed=0)
    spy = Spy(sess)
    sess.train(digits(), optimizer=dlc.Adam(0.01), batch_size=16, epochs=2)
    assert len(spy.feeds) == 8 and all(f == {IDX, LR} for f in spy.feeds)
    # During training the data is on the GPU but no snapshot copies it: params and state only.
    assert data_name("pixels") in spy.held
    want = set(sess.model.params) | {n for n in spy.held if not n.startswith("$data$")}
    assert all(s == want for s in spy.snapshots)
    assert not any(n.startswith("$data$") for n in sess.backend.store.buffers)


def test_resident_and_uploaded_batches_train_the_same(gl):
    out = []
    for resident in (True, False):
        sess = dlc.Session("samples/mlp_digits.dl", backend="gl", seed=3)
        sess.resident_data = resident
        losses = sess.train(digits(), optimizer=dlc.SGD(0.05), batch_size=20, epochs=2)
        losses += sess.train(digits(30), optimizer=dlc.SGD(0.05), batch_size=7, steps=9)
        out.append((losses, sess.params))
    (lr, pr), (lu, pu) = out
    np.testing.assert_allclose(lr, lu, rtol=1e-6)
    for name in pr:
        np.testing.assert_allclose(pr[name], pu[name], rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("kw", [{"epochs": 1}, {"steps": 1}], ids=["one-epoch", "one-step"])
def test_one_pass_or_less_uploads_batches(gl, kw):
    # Uploading the data set first would move at least as many rows as the batches do.
    sess = dlc.Session("samples/mlp_digits.dl", backend="gl", seed=0)
    spy = Spy(sess)
    sess.train(digits(), optimizer=dlc.SGD(0.05), batch_size=16, **kw)
    assert spy.feeds and all(f == {"pixels", "labels", LR} for f in spy.feeds)


def test_a_diverging_resident_run_restores_params_and_frees_the_data(gl):
    sess = dlc.Session("samples/quadratic.dl", backend="gl", seed=0)
    data = np.load("samples/data/quadratic.npz")
    feeds = {k: data[k].astype(np.float32) for k in data.files}
    before = sess.params
    with pytest.raises(dlc.TrainingDiverged) as info:
        sess.train(feeds, optimizer=dlc.SGD(1e6), batch_size=8, epochs=5)
    assert all(np.all(np.isfinite(v)) for v in sess.params.values())
    if info.value.step == 1:
        for name, v in before.items():
            np.testing.assert_array_equal(sess.params[name], v)
    assert not any(n.startswith("$data$") for n in sess.backend.store.buffers)


def _host_writes(monkeypatch) -> list[int]:
    """The bytes of every host-to-GPU buffer write from here on."""
    from dlc.runtime import storage

    sizes: list[int] = []
    upload = storage.Buffer.upload

    def counted(self, array, offset_bytes=0):
        sizes.append(np.asarray(array).size * 4)
        return upload(self, array, offset_bytes)

    monkeypatch.setattr(storage.Buffer, "upload", counted)
    return sizes


@pytest.mark.parametrize("steps", [12, 36])
def test_deferred_steps_upload_their_rows_in_one_go_not_per_step(gl, monkeypatch, steps):
    sess = dlc.Session("samples/mlp_digits.dl", backend="gl", seed=0)
    sess.loss_read_steps, sess.loss_read_interval_s = 64, 1e9
    ref = dlc.Session("samples/mlp_digits.dl", backend="numpy", seed=0)
    writes = _host_writes(monkeypatch)
    got = sess.train(digits(60), optimizer=dlc.SGD(0.05), batch_size=16, steps=steps)
    # the data (2 leaves), every step's rows at once, the learning rate once: not a write a step
    assert len(writes) == 4, writes
    assert 4 in writes and 4 * 60 * (steps // 4) in writes  # lr; 60 rows an epoch of 4 steps
    want = ref.train(digits(60), optimizer=dlc.SGD(0.05), batch_size=16, steps=steps)
    np.testing.assert_allclose(got, want, rtol=1e-4)


def test_unshuffled_whole_batch_steps_copy_their_rows_once(gl, monkeypatch):
    from dlc.runtime.executor import Executor

    copies: list = []
    copy_range = Executor._copy_range
    monkeypatch.setattr(
        Executor, "_copy_range", lambda self, feed, dst: copies.append(feed) or copy_range(self, feed, dst)
    )
    feeds = {k: v.astype(np.float32) for k, v in np.load("samples/data/quadratic.npz").items()}
    sess = dlc.Session("samples/quadratic.dl", backend="gl", seed=0)
    ref = dlc.Session("samples/quadratic.dl", backend="numpy", seed=0)
    got = sess.train(feeds, optimizer=dlc.SGD(0.01), batch_size=None, steps=20, shuffle=False)
    assert len(copies) == 1  # one rows object for every step: the slot keeps it
    want = ref.train(feeds, optimizer=dlc.SGD(0.01), batch_size=None, steps=20, shuffle=False)
    np.testing.assert_allclose(got, want, rtol=1e-4)
    for name, value in ref.params.items():
        np.testing.assert_allclose(sess.params[name], value, rtol=1e-4, err_msg=name)


def test_stages_smaller_than_a_window_still_match_numpy(gl, monkeypatch):
    from dlc import deferred
    from dlc.runtime import training

    monkeypatch.setattr(training, "STAGE_ROWS", 40)  # 2 batches of 16 a stage, windows of 8
    stages: list[int] = []
    stage = deferred.GLDeferredSteps.stage
    monkeypatch.setattr(deferred.GLDeferredSteps, "stage", lambda self, b: stages.append(len(b)) or stage(self, b))
    sess = dlc.Session("samples/mlp_digits.dl", backend="gl", seed=0)
    sess.loss_read_steps, sess.loss_read_interval_s = 8, 1e9
    ref = dlc.Session("samples/mlp_digits.dl", backend="numpy", seed=0)
    got = sess.train(digits(60), optimizer=dlc.Adam(0.01), batch_size=16, steps=13)
    want = ref.train(digits(60), optimizer=dlc.Adam(0.01), batch_size=16, steps=13)
    assert stages == [2] * 6 + [1]
    np.testing.assert_allclose(got, want, rtol=1e-4)
    for name, value in ref.params.items():
        np.testing.assert_allclose(sess.params[name], value, rtol=1e-4, atol=1e-5, err_msg=name)
