"""The callbacks `dlc train` is made of, used from Python: Progress, CSVLogger, Plot,
StopOnSignal, and what Session.train hands every callback (params, steps, validation logs)."""

from __future__ import annotations

import csv
import io
import os
import signal
from pathlib import Path

import numpy as np
import pytest

import dlc
from dlc.callbacks import Callback, CSVLogger, Plot, Progress, StepLog, StopOnSignal

SAMPLES = Path(__file__).resolve().parents[2] / "samples"


def _session():
    data = {k: v.astype(np.float32) for k, v in np.load(SAMPLES / "data" / "quadratic.npz").items()}
    return dlc.Session(SAMPLES / "quadratic.dl", backend="numpy", seed=0), data


class Recorder(Callback):
    def __init__(self):
        self.events: list[tuple] = []

    def on_train_begin(self, session):
        self.events.append(("begin", dict(self.params)))

    def on_step_end(self, step, epoch, loss, examples, session):
        self.events.append(("step", step, epoch, loss, examples))

    def on_epoch_end(self, epoch, logs, session):
        self.events.append(("epoch", epoch, dict(logs)))

    def on_train_end(self, session):
        self.events.append(("end", self.params["outcome"]))


def test_train_hands_callbacks_the_run_its_steps_and_validation_logs():
    sess, data = _session()
    rec = Recorder()
    losses = sess.train(data, optimizer=dlc.Adam(0.1), batch_size=64, epochs=3, validation_data=data, callbacks=[rec])
    begin, *middle, end = rec.events
    assert begin[0] == "begin"
    params = begin[1]
    # 200 examples in batches of 64: 4 steps an epoch (the last of 8), 12 in all
    assert params["steps"] == 12 and params["steps_per_epoch"] == 4 and params["epochs"] == 3
    assert params["loss"] == "cost" and params["initial_step"] == 0 and params["val_keys"] == ["val_loss"]
    steps = [e for e in middle if e[0] == "step"]
    assert [e[1] for e in steps] == list(range(1, 13))
    assert [e[3] for e in steps] == pytest.approx(losses)
    assert [e[4] for e in steps] == [64, 64, 64, 8] * 3
    epochs = [e for e in middle if e[0] == "epoch"]
    assert [e[1] for e in epochs] == [1, 2, 3]
    assert epochs[0][2]["loss"] == pytest.approx(np.mean(losses[:4]))
    # the last epoch's val_loss is evaluate() over the validation data with the final params
    assert epochs[-1][2]["val_loss"] == pytest.approx(float(sess.evaluate(data, "cost")), rel=1e-6)
    assert end == ("end", "done")


def test_a_step_callback_returning_false_stops_after_that_step():
    sess, data = _session()

    class StopAt(Callback):
        def on_step_end(self, step, epoch, loss, examples, session):
            return step < 5

    losses = sess.train(data, batch_size=16, epochs=3, callbacks=[StopAt()])
    assert len(losses) == 5


def test_on_train_end_runs_on_divergence_with_the_last_finite_params():
    sess, data = _session()
    rec = Recorder()
    with pytest.raises(dlc.TrainingDiverged):
        sess.train(data, optimizer=dlc.SGD(1e6), batch_size=32, epochs=20, callbacks=[rec])
    assert rec.events[-1] == ("end", "diverged")
    assert all(np.isfinite(v).all() for v in sess.params.values())


def test_csv_logger_writes_each_step_and_the_epoch_val_columns(tmp_path):
    sess, data = _session()
    path = tmp_path / "log.csv"
    losses = sess.train(
        data, optimizer=dlc.Adam(0.1), batch_size=50, epochs=2, validation_data=data, callbacks=[CSVLogger(path)]
    )
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["step", "epoch", "loss", "val_loss"]
    assert [int(r["step"]) for r in rows] == list(range(1, 9))
    assert [float(r["loss"]) for r in rows] == pytest.approx(losses)
    assert [bool(r["val_loss"]) for r in rows] == [False, False, False, True] * 2  # the epochs' last steps
    assert float(rows[-1]["val_loss"]) == pytest.approx(float(sess.evaluate(data, "cost")), rel=1e-6)


def test_a_log_that_cannot_be_written_is_an_error_naming_it_or_goes_to_on_error(tmp_path):
    sess, data = _session()
    (tmp_path / "a_file").write_text("")
    bad = tmp_path / "a_file" / "log.csv"  # its folder is a file
    with pytest.raises(dlc.DlcError, match="log.csv: cannot write the training log"):
        sess.train(data, batch_size=100, epochs=1, callbacks=[CSVLogger(bad)])
    assert sess.last_run is not None  # the run itself finished
    seen = []
    sess.train(data, batch_size=100, epochs=1, callbacks=[CSVLogger(bad, on_error=seen.append)])
    assert len(seen) == 1 and isinstance(seen[0], OSError)


def test_progress_prints_plain_lines_and_the_val_line():
    sess, data = _session()
    out = io.StringIO()
    progress = Progress(stream=out, live=False)
    sess.train(data, batch_size=40, epochs=2, validation_data=data, callbacks=[progress])
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("epoch 1/2  step 1/10  loss ")
    assert any(line.startswith("epoch 1 (step 5): val cost ") for line in lines)
    assert any(line.startswith("epoch 2/2  step 10/10") for line in lines)
    assert progress.steps == 10 and progress.examples == 400 and progress.bar is None


def test_plot_draws_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    sess, data = _session()
    path = tmp_path / "loss.png"
    sess.train(data, batch_size=50, epochs=2, validation_data=data, callbacks=[Plot(path)])
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_step_log_with_a_text_free_run_of_steps():
    sess, data = _session()
    log = StepLog()
    losses = sess.train(data, batch_size=64, steps=6, callbacks=[log])
    assert [r["step"] for r in log.rows] == [1, 2, 3, 4, 5, 6]
    assert [r["epoch"] for r in log.rows] == [1, 1, 1, 1, 2, 2]
    assert [r["loss"] for r in log.rows] == pytest.approx(losses)
    assert log.params["epochs"] is None and log.params["steps"] == 6


class SendSignal(Callback):
    def __init__(self, at: int, sig: int, times: int = 1):
        self.at, self.sig, self.times = at, sig, times

    def on_step_end(self, step, epoch, loss, examples, session):
        if step == self.at:
            for _ in range(self.times):
                os.kill(os.getpid(), self.sig)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_stop_on_signal_stops_after_the_step_and_puts_the_handlers_back(sig):
    sess, data = _session()
    before = signal.getsignal(sig)
    told = []
    stop = StopOnSignal(notify=told.append)
    losses = sess.train(data, batch_size=10, epochs=5, callbacks=[SendSignal(3, sig), stop])
    assert len(losses) == 3 and stop.stop and stop.exit_code == 128 + sig
    assert told and "stopping after this step" in told[0]
    assert signal.getsignal(sig) is before
    assert sess.last_run.done == 3  # resumable


def test_a_second_signal_quits_at_once_and_a_with_block_covers_the_save():
    sess, data = _session()
    with pytest.raises(KeyboardInterrupt):
        with StopOnSignal(notify=lambda text: None) as stop:
            sess.train(data, batch_size=10, epochs=5, callbacks=[SendSignal(2, signal.SIGINT, times=2), stop])
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with StopOnSignal(notify=lambda text: None) as stop:
        sess.train(data, batch_size=10, epochs=5, callbacks=[SendSignal(2, signal.SIGINT), stop])
        assert signal.getsignal(signal.SIGINT) == stop._handle  # still caught: the save may finish
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_fit_and_train_refuse_what_is_no_callback():
    sess, data = _session()
    with pytest.raises(TypeError, match="dlc.Callback"):
        sess.train(data, epochs=1, callbacks=[print])
