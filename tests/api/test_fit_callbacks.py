"""Session.fit(x, y) and the Keras-style callbacks (dlc/callbacks.py), on the numpy backend:
the history against the losses train() returns and eval() gives, early stopping against a
scripted val_loss, the best checkpoint against the params of the best epoch."""

from __future__ import annotations

import numpy as np
import pytest

import dlc

QUAD = dict(np.load("samples/data/quadratic.npz"))
DIGITS = dict(np.load("samples/data/digits_train.npz"))
DIGITS_TEST = dict(np.load("samples/data/digits_test.npz"))


def test_fit_history_is_the_mean_step_loss_and_the_val_values():
    sess = dlc.Session("samples/quadratic.dl", backend="numpy", seed=0)
    twin = dlc.Session("samples/quadratic.dl", backend="numpy", seed=0)
    x, y = QUAD["x"], QUAD["y_label"]
    history = sess.fit(x, y, batch_size=50, epochs=3, optimizer=dlc.SGD(0.01), validation_data=(x[:20], y[:20]))
    losses = twin.train({"x": x, "y_label": y}, optimizer=dlc.SGD(0.01), batch_size=50, epochs=3)
    assert history.epochs == [1, 2, 3]
    np.testing.assert_allclose(history.history["loss"], np.mean(np.reshape(losses, (3, 4)), axis=1), rtol=1e-6)
    want = float(sess.eval("cost", {"x": x[:20], "y_label": y[:20]}))
    assert history.history["val_loss"][-1] == pytest.approx(want, rel=1e-6)
    assert set(history.history) == {"loss", "val_loss"}  # the quadratic has no metric


def test_fit_reports_accuracy_and_reaches_it():
    sess = dlc.Session("samples/mlp_digits.dl", backend="numpy", seed=0)
    val = (DIGITS_TEST["pixels"], DIGITS_TEST["labels"])
    x, y = DIGITS["pixels"], DIGITS["labels"]
    h = sess.fit(x, y, batch_size=64, epochs=5, optimizer=dlc.Adam(0.01), validation_data=val)
    assert h.history["val_accuracy"][-1] == pytest.approx(float(sess.eval("accuracy", dict(DIGITS_TEST))), abs=1e-6)
    assert h.history["val_accuracy"][-1] >= 0.93


def test_early_stopping_stops_after_patience_epochs_without_improvement():
    sess = dlc.Session("samples/quadratic.dl", backend="numpy", seed=0)
    scripted = iter([5.0, 4.0, 4.5, 4.2, 3.0, 1.0])  # best at epoch 2, then 2 epochs worse

    class Scripted(dlc.Callback):  # rewrites the logs the next callback sees
        def on_epoch_end(self, epoch, logs, session):
            logs["val_loss"] = next(scripted)

    stop = dlc.EarlyStopping(patience=2)
    seen = []
    h = sess.fit(
        QUAD["x"],
        QUAD["y_label"],
        epochs=6,
        optimizer=dlc.SGD(0.001),
        validation_data=(QUAD["x"], QUAD["y_label"]),
        callbacks=[Scripted(), stop, dlc.LambdaCallback(on_epoch_end=lambda e, logs: seen.append(e))],
    )
    assert h.epochs == [1, 2, 3, 4] and seen == [1, 2, 3, 4]
    assert (stop.stopped_epoch, stop.best_epoch, stop.best) == (4, 2, 4.0)
    assert "did not improve for 2 epochs" in stop.reason()


def test_model_checkpoint_keeps_the_best_epochs_params(tmp_path):
    sess = dlc.Session("samples/quadratic.dl", backend="numpy", seed=0)
    params_at = {}
    record = dlc.LambdaCallback(on_epoch_end=lambda e, logs: params_at.__setitem__(e, sess.params))
    best = dlc.ModelCheckpoint(tmp_path / "best.npz", monitor="val_loss", restore_best=True)
    h = sess.fit(
        QUAD["x"],
        QUAD["y_label"],
        epochs=4,
        optimizer=dlc.SGD(0.5),  # too large a step: the val loss jumps about
        validation_data=(QUAD["x"][:50], QUAD["y_label"][:50]),
        callbacks=[record, best],
    )
    want = int(np.argmin(h.history["val_loss"])) + 1
    assert best.best_epoch == want
    with np.load(tmp_path / "best.npz") as saved:
        for name, value in params_at[want].items():
            np.testing.assert_array_equal(saved[name], value)
            np.testing.assert_array_equal(sess.params[name], value)  # restore_best put them back


def test_a_callback_returning_false_stops_after_its_epoch():
    sess = dlc.Session("samples/quadratic.dl", backend="numpy", seed=0)
    h = sess.fit(QUAD["x"], QUAD["y_label"], epochs=5, callbacks=[dlc.LambdaCallback(lambda e, logs: e < 2)])
    assert h.epochs == [1, 2] and sess.last_run.done == 2 * 7  # 200 examples in batches of 32


def test_fit_refusals_name_what_is_wrong():
    sess = dlc.Session("samples/linear.dl", backend="numpy")
    with pytest.raises(dlc.DlcError, match="monitor|val_loss"):
        sess.fit(np.ones((3, 3)), np.ones(3), callbacks=[dlc.EarlyStopping()])  # no validation data
    with pytest.raises(dlc.DlcError, match="metric 'acuracy' is not a named tensor"):
        dlc.Session("samples/mlp_digits.dl", backend="numpy").fit(
            DIGITS["pixels"], DIGITS["labels"], metrics=["acuracy"]
        )
    with pytest.raises(TypeError, match="dlc.Callback"):
        sess.fit(np.ones((3, 3)), np.ones(3), callbacks=[print])
    with pytest.raises(dlc.DlcError, match="two inputs"):
        dlc.Session("input x: [B]\nparam w: [] = 1\nloss c = mean(x * w)\n", backend="numpy").fit(np.ones(3), None)


def test_metric_convention_and_summary():
    model = dlc.compile(
        "input x: [B, 2]\ninput y: [B]\nparam dense.w: [2, 1]\nparam dense.b: [1]\nfrozen param s: [] = 1\n"
        "p = reshape(x @ dense.w + dense.b, [B]) * s\nloss cost = mean_squared(p, y)\n"
        "metric.mae = mean(abs(p - y))\nmetric worst = max(abs(p - y))\n"
    )
    sess = dlc.Session(model, backend="numpy")
    x, y = np.random.default_rng(0).normal(size=(16, 2)), np.zeros(16)
    h = sess.fit(x, y, epochs=1, validation_data=(x, y))
    assert list(h.history) == ["loss", "val_loss", "val_worst", "val_mae"]  # declared first, then by convention
    assert model.metrics == {"worst": ()} and "worst" in model.tensors
    assert h.history["val_worst"][0] == pytest.approx(float(np.max(np.abs(sess.eval("p", {"x": x})))), rel=1e-5)
    assert h.history["val_mae"][0] == pytest.approx(float(np.mean(np.abs(sess.eval("p", {"x": x})))), rel=1e-5)
    lines = []
    model.summary(print_fn=lines.append)
    text = lines[0]
    assert "dense        w [2, 1], b [1]  3" in text and "(top level)  s []             1" in text
    assert "total: 4 params in 2 layers (3 trainable, 1 frozen)" in text


@pytest.mark.gl
def test_a_callback_stops_a_gl_run_at_its_epoch_end_as_on_numpy():
    # On GL losses are read a window at a time; the epoch's end ends a window, so the stop
    # lands there and the params are those numpy has after the same two epochs.
    gl = dlc.Session("samples/quadratic.dl", backend="gl", seed=0)
    ref = dlc.Session("samples/quadratic.dl", backend="numpy", seed=0)
    stop = dlc.LambdaCallback(lambda e, logs: e < 2)
    h_gl = gl.fit(QUAD["x"], QUAD["y_label"], epochs=5, optimizer=dlc.SGD(0.01), callbacks=[stop])
    h_ref = ref.fit(QUAD["x"], QUAD["y_label"], epochs=5, optimizer=dlc.SGD(0.01), callbacks=[stop])
    assert h_gl.epochs == h_ref.epochs == [1, 2] and gl.last_run.done == 14
    np.testing.assert_allclose(h_gl.history["loss"], h_ref.history["loss"], rtol=1e-4)
    for name, value in ref.params.items():
        np.testing.assert_allclose(gl.params[name], value, rtol=1e-4, atol=1e-6)
