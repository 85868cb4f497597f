"""Keras-style callbacks of `Session.fit`, `Session.train`'s `callbacks=` and `dlc train`, which
builds its whole display and bookkeeping from them (progress bar, --log, --plot, Ctrl-C,
--early-stop, --keep-best): one mechanism for all three.

Each epoch's logs are a dict: `loss` (the mean of the epoch's step losses), then, with
validation data, `val_loss` and `val_NAME` for each metric. A callback's `on_epoch_end`
(or `on_step_end`) returning False ends the run after that epoch (or step). Before the run
starts, each callback's `params` says what it is: `loss`, `epochs` (None: a count of steps),
`steps` (the run's last step), `steps_per_epoch`, `initial_step` (a resumed run's steps done),
`val_keys` (the validation logs' keys); at its end `outcome` is "done" or "diverged".

    >>> stop = dlc.EarlyStopping(monitor="val_loss", patience=3)
    >>> best = dlc.ModelCheckpoint("best.weights.npz")  # params of the best val_loss
    >>> history = sess.fit(x, y, epochs=50, validation_data=(xv, yv), callbacks=[stop, best])
"""

from __future__ import annotations

import csv
import io
import math
import os
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

from .progress import TrainProgress
from .runtime.errors import DlcError, did_you_mean
from .runtime.optional import require

__all__ = [
    "Callback",
    "EarlyStopping",
    "ModelCheckpoint",
    "LambdaCallback",
    "History",
    "EpochRunner",
    "StepLog",
    "Progress",
    "CSVLogger",
    "Plot",
    "StopOnSignal",
]


class Callback:
    """Base class: override any of `on_train_begin(session)`, `on_epoch_end(epoch, logs,
    session)` (return False to stop after this epoch) and `on_train_end(session)`.

    >>> class Printer(dlc.Callback):
    ...     def on_epoch_end(self, epoch, logs, session):
    ...         print(epoch, logs["loss"])
    """

    params: dict[str, Any] = {}  # what the run is (set before on_train_begin; see the module)

    def on_step_end(self, step: int, epoch: int, loss: float, examples: int, session) -> bool | None:
        """Called after each step (counted from 1 over the whole run) with its loss and the
        examples in its batch; returning False stops training after this step.

        >>> def on_step_end(self, step, epoch, loss, examples, session):
        ...     return loss > 1e-4  # False: stop
        """
        return None

    def on_train_begin(self, session) -> None:
        """Called once before the first epoch, with the Session that trains.

        >>> def on_train_begin(self, session):
        ...     self.start = dict(session.params)
        """

    def on_epoch_end(self, epoch: int, logs: Mapping[str, float], session) -> bool | None:
        """Called after each epoch (counted from 1) with its `logs` (`loss`, `val_loss`, ...);
        returning False stops training after this epoch.

        >>> def on_epoch_end(self, epoch, logs, session):
        ...     return logs["loss"] > 0.01  # False: stop
        """
        return None

    def on_train_end(self, session) -> None:
        """Called once after the last epoch, stopped early or not.

        >>> def on_train_end(self, session):
        ...     session.save("last.npz")
        """


def _better(mode: str, monitor: str) -> Callable[[float, float, float], bool]:
    """(value, best, min_delta) -> whether value improves on best; mode "auto" maximizes a
    monitor naming an accuracy and minimizes everything else (as Keras does)."""
    if mode not in ("auto", "min", "max"):
        raise ValueError(f"mode must be 'auto', 'min' or 'max', not {mode!r}")
    if mode == "max" or (mode == "auto" and "acc" in monitor):
        return lambda v, best, d: v > best + d
    return lambda v, best, d: v < best - d


def _monitored(logs: Mapping[str, float], monitor: str, who: str) -> float:
    if monitor not in logs:
        hint = did_you_mean(monitor, logs)
        why = " (give validation data for val_ values)" if monitor.startswith("val_") else ""
        raise DlcError(f"{who}: no '{monitor}' in the epoch's logs (they hold {', '.join(logs)}){why}{hint}")
    return float(logs[monitor])


class EarlyStopping(Callback):
    """Stop when `monitor` (default `val_loss`) has not improved by more than `min_delta`
    for `patience` epochs in a row (Keras's rule; 0 stops at the first); `restore_best=True`
    puts back the params of the best epoch.

    >>> early = dlc.EarlyStopping(monitor="val_accuracy", patience=5, restore_best=True)
    """

    def __init__(
        self,
        monitor: str = "val_loss",
        patience: int = 0,
        min_delta: float = 0.0,
        mode: str = "auto",
        restore_best: bool = False,
    ):
        if patience < 0:
            raise ValueError(f"patience must be 0 or more epochs, not {patience}")
        self.monitor, self.patience, self.min_delta = monitor, int(patience), abs(float(min_delta))
        self.restore_best = restore_best
        self._better = _better(mode, monitor)
        self.best: float | None = None
        self.best_epoch: int | None = None
        self.stopped_epoch: int | None = None  # the epoch after which it stopped the run
        self._wait = 0
        self._best_params: dict | None = None

    def on_train_begin(self, session) -> None:
        self.best = self.best_epoch = self.stopped_epoch = self._best_params = None
        self._wait = 0

    def on_epoch_end(self, epoch: int, logs: Mapping[str, float], session) -> bool | None:
        value = _monitored(logs, self.monitor, "EarlyStopping")
        if self.best is None or (math.isfinite(value) and self._better(value, self.best, self.min_delta)):
            self.best, self.best_epoch, self._wait = value, epoch, 0
            if self.restore_best:
                self._best_params = {n: v.copy() for n, v in session.params.items()}
            return None
        self._wait += 1
        if self._wait >= self.patience:  # Keras's rule: patience 0 stops as 1 does
            self.stopped_epoch = epoch
            return False
        return None

    def on_train_end(self, session) -> None:
        if self.restore_best and self._best_params is not None:
            session.set_params(self._best_params)

    def reason(self) -> str | None:
        """Why the run stopped early, as a sentence; None if it did not.

        >>> early = dlc.EarlyStopping(patience=3)
        >>> history = sess.fit(xs, ys, epochs=100, validation_data=(xv, yv), callbacks=[early])
        >>> early.reason()
        """
        if self.stopped_epoch is None:
            return None
        return (
            f"stopped early after epoch {self.stopped_epoch}: {self.monitor} did not improve for "
            f"{self._wait} epoch{'s' if self._wait > 1 else ''} (best {self.best:.6g} at epoch {self.best_epoch})"
        )


class ModelCheckpoint(Callback):
    """Save the params to `path` (an .npz, written atomically) at each epoch whose `monitor`
    (default `val_loss`) is the best so far; `save_best_only=False` saves every epoch.
    `restore_best=True` puts the best epoch's params back in the session when training ends
    (`path=None` then keeps them in memory only: `dlc train --keep-best`).

    >>> checkpoint = dlc.ModelCheckpoint("best.weights.npz", monitor="val_accuracy")
    """

    def __init__(
        self,
        path: str | os.PathLike | None,
        monitor: str = "val_loss",
        mode: str = "auto",
        save_best_only=True,
        restore_best=False,
    ):
        if path is None and not restore_best:
            raise ValueError("ModelCheckpoint needs a path (or restore_best=True to keep the best params in memory)")
        self.path = os.fspath(path) if path is not None else None
        self.monitor, self.save_best_only, self.restore_best = monitor, save_best_only, restore_best
        self._better = _better(mode, monitor)
        self.best: float | None = None
        self.best_epoch: int | None = None
        self._best_params: dict | None = None

    def on_train_begin(self, session) -> None:
        self.best = self.best_epoch = self._best_params = None

    def on_epoch_end(self, epoch: int, logs: Mapping[str, float], session) -> bool | None:
        if not self.save_best_only and self.path is not None:
            session.save(self.path)
        value = _monitored(logs, self.monitor, "ModelCheckpoint")
        if math.isfinite(value) and (self.best is None or self._better(value, self.best, 0.0)):
            self.best, self.best_epoch = value, epoch
            if self.restore_best:
                self._best_params = {n: v.copy() for n, v in session.params.items()}
            if self.save_best_only and self.path is not None:
                session.save(self.path)
        return None

    def on_train_end(self, session) -> None:
        if self.restore_best and self._best_params is not None:
            session.set_params(self._best_params)


class LambdaCallback(Callback):
    """A callback from functions: `on_epoch_end(epoch, logs)` (return False to stop),
    `on_train_begin()`, `on_train_end()`.

    >>> printer = dlc.LambdaCallback(on_epoch_end=lambda epoch, logs: print(epoch, logs["loss"]))
    """

    def __init__(
        self,
        on_epoch_end: Callable[[int, Mapping[str, float]], bool | None] | None = None,
        on_train_begin: Callable[[], None] | None = None,
        on_train_end: Callable[[], None] | None = None,
    ):
        self._epoch_end, self._begin, self._end = on_epoch_end, on_train_begin, on_train_end

    def on_train_begin(self, session) -> None:
        if self._begin is not None:
            self._begin()

    def on_epoch_end(self, epoch: int, logs: Mapping[str, float], session) -> bool | None:
        return self._epoch_end(epoch, dict(logs)) if self._epoch_end is not None else None

    def on_train_end(self, session) -> None:
        if self._end is not None:
            self._end()


class History:
    """What `Session.fit` returns: `history[key]` is the list of each epoch's value of `loss`,
    `val_loss`, `val_METRIC` (as Keras's `History.history`); `epochs` the epochs run.

    >>> history.history["val_loss"][-1]
    """

    def __init__(self) -> None:
        self.history: dict[str, list[float]] = {}
        self.epochs: list[int] = []

    def record(self, epoch: int, logs: Mapping[str, float]) -> None:
        """Append one epoch's logs (what `Session.fit` does after each epoch).

        >>> h = dlc.History()
        >>> h.record(1, {"loss": 0.5})
        >>> h.history
        {'loss': [0.5]}
        """
        self.epochs.append(epoch)
        for k, v in logs.items():
            self.history.setdefault(k, []).append(float(v))

    def __repr__(self) -> str:
        return f"History(epochs={len(self.epochs)}, keys={list(self.history)})"


class EpochRunner:
    """What `Session.train` runs its callbacks with: `step_hook` after each step (each
    callback's `on_step_end`), `epoch_hook` after each epoch (the epoch's logs: the mean step
    loss, then `validate()`'s values, recorded in `history` and handed to `on_epoch_end`);
    `begin(params)` and `end(outcome)` go around the run."""

    def __init__(
        self,
        session,
        callbacks: Sequence[Callback] = (),
        validate: Callable[[], Mapping[str, float]] | None = None,
    ):
        for cb in callbacks:
            if not isinstance(cb, Callback):
                raise TypeError(f"callbacks take dlc.Callback objects (e.g. dlc.LambdaCallback), not {cb!r}")
        self.session, self.callbacks, self.validate = session, list(callbacks), validate
        self.history = History()
        self.stopped_by: Callback | None = None
        self.began = False
        self._sum, self._count = 0.0, 0

    def begin(self, params: Mapping[str, Any]) -> None:
        self.began = True
        for cb in self.callbacks:
            cb.params = dict(params)
        for cb in self.callbacks:
            cb.on_train_begin(self.session)

    def step_hook(self, step: int, epoch: int, loss: float, examples: int) -> bool | None:
        self._sum += float(loss)
        self._count += 1
        go_on = None
        for cb in self.callbacks:  # every one sees the step, whichever asks to stop
            if cb.on_step_end(step, epoch, float(loss), examples, self.session) is False:
                go_on = False
        return go_on

    def epoch_hook(self, epoch: int) -> bool | None:
        logs: dict[str, Any] = {"loss": self._sum / self._count if self._count else math.nan}
        self._sum, self._count = 0.0, 0
        if self.validate is not None:
            logs.update(self.validate())
        self.history.record(epoch, logs)
        go_on = None
        for cb in self.callbacks:
            if cb.on_epoch_end(epoch, logs, self.session) is False and self.stopped_by is None:
                self.stopped_by, go_on = cb, False
        return go_on

    def end(self, outcome: str = "done") -> None:
        """The callbacks' `on_train_end`, in their order (a checkpoint before a restore_best)."""
        if not self.began:
            return
        for cb in self.callbacks:
            cb.params["outcome"] = outcome
        for cb in self.callbacks:
            cb.on_train_end(self.session)

    def stop_reason(self) -> str | None:
        """A sentence saying which callback stopped the run early, or None."""
        if self.stopped_by is None:
            return None
        reason = getattr(self.stopped_by, "reason", None)
        text = reason() if callable(reason) else None
        return text or f"stopped early by {type(self.stopped_by).__name__} after epoch {self.history.epochs[-1]}"


class StepLog(Callback):
    """Records one row per step (`step`, `epoch`, `loss`), the validation logs merged into the
    row of the step that ended their epoch: what `CSVLogger` writes and `Plot` draws.

    >>> log = dlc.callbacks.StepLog()
    >>> sess.train(data, steps=100, callbacks=[log])
    >>> log.rows[-1]["loss"]
    """

    def __init__(self) -> None:
        self.rows: list[dict[str, float]] = []

    def on_train_begin(self, session) -> None:
        self.rows = []

    def on_step_end(self, step: int, epoch: int, loss: float, examples: int, session) -> bool | None:
        self.rows.append({"step": step, "epoch": epoch, "loss": float(loss)})
        return None

    def on_epoch_end(self, epoch: int, logs: Mapping[str, float], session) -> bool | None:
        if self.rows:
            self.rows[-1].update({k: float(v) for k, v in logs.items() if k.startswith("val_")})
        return None

    def columns(self) -> list[str]:
        """The CSV's columns: step, epoch, loss, then the validation logs' keys.

        >>> log.columns()
        ['step', 'epoch', 'loss', 'val_loss']
        """
        return ["step", "epoch", "loss", *self.params.get("val_keys", ())]


class _FileWriter(StepLog):
    """A StepLog that writes a file (its subclass's `write()`) when training ends; `on_error(OSError)` is told when it
    cannot (default: a DlcError naming the file), so that a failed log loses no params."""

    what = "a file"

    def __init__(self, path: str | os.PathLike, on_error: Callable[[OSError], None] | None = None):
        super().__init__()
        self.path, self.on_error = os.fspath(path), on_error

    def on_train_end(self, session) -> None:
        if not self.rows:
            return
        try:
            self.write()
        except OSError as e:
            if self.on_error is None:
                raise DlcError(f"{self.path}: cannot write {self.what} ({e.strerror or e})") from None
            self.on_error(e)


class CSVLogger(_FileWriter):
    """Write `step, epoch, loss` and the validation columns (`val_loss`, `val_NAME`: on the
    row of the step that ended their epoch) to a CSV when training ends (atomically).

    >>> sess.fit(xs, ys, epochs=5, validation_data=(xv, yv), callbacks=[dlc.CSVLogger("train.csv")])
    """

    what = "the training log"

    def write(self) -> None:
        """Write the rows so far (on_train_end does it).

        >>> logger.write()
        """
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        cols = self.columns()
        w.writerow(cols)
        for r in self.rows:
            w.writerow([_csv_cell(r.get(c)) for c in cols])
        require("dlc.runtime.weights").write_atomic(self.path, lambda f: f.write(buf.getvalue().encode()))


def _csv_cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float) and (not math.isfinite(v) or v != int(v)):
        return repr(v)
    return str(int(v)) if isinstance(v, (int, float)) else str(v)


class Plot(_FileWriter):
    """Draw the loss curve (each step's loss; the val loss at each epoch's end) to a PNG when
    training ends. Needs matplotlib (`pip install 'dlc[plot]'`): checked when made.

    >>> sess.train(data, epochs=20, callbacks=[dlc.Plot("loss.png")])
    """

    what = "the loss curve"

    def __init__(self, path: str | os.PathLike, on_error: Callable[[OSError], None] | None = None, why: str = "Plot"):
        require("matplotlib", extra="plot", why=why)  # before training, not after
        super().__init__(path, on_error)

    def write(self) -> None:
        """Draw the rows so far (on_train_end does it).

        >>> plot.write()
        """
        matplotlib = require("matplotlib", extra="plot")
        matplotlib.use("Agg")
        plt = require("matplotlib.pyplot", extra="plot")
        loss_name = self.params.get("loss") or "loss"
        steps = [r["step"] for r in self.rows]
        fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
        ax.plot(steps, [r["loss"] for r in self.rows], lw=1, label=f"{loss_name} (train)")
        val = [(r["step"], r["val_loss"]) for r in self.rows if "val_loss" in r]
        if val:
            ax.plot(*zip(*val), "o-", lw=1.5, label=f"{loss_name} (val)")
        losses = [r["loss"] for r in self.rows if math.isfinite(r["loss"])]
        if losses and min(losses) > 0 and max(losses) / min(losses) > 100:
            ax.set_yscale("log")
        ax.set_xlabel("step")
        ax.set_ylabel(loss_name)
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        try:
            require("dlc.runtime.weights").write_atomic(self.path, lambda f: fig.savefig(f, format="png"))
        finally:
            plt.close(fig)


class Progress(Callback):
    """A progress bar on a terminal (epoch, step, loss, examples/s), plain lines otherwise (the
    first step, about every tenth, the last), and a line per epoch with validation logs.
    `message(text)` prints a line above the bar.

    >>> sess.train(data, epochs=10, callbacks=[dlc.callbacks.Progress()])
    """

    def __init__(self, stream: TextIO | None = None, live: bool | None = None):
        self.stream, self.live = stream, live
        self.bar: TrainProgress | None = None
        self.steps = 0  # steps this run has shown
        self.examples = 0
        self.elapsed = 0.0

    def on_train_begin(self, session) -> None:
        self.close()
        self.bar = TrainProgress(self.params.get("steps"), self.params.get("epochs"), self.stream, self.live)
        self.steps = self.examples = 0

    def on_step_end(self, step: int, epoch: int, loss: float, examples: int, session) -> bool | None:
        if self.bar is not None:
            self.bar.update(step, epoch, loss, examples)
            self.steps, self.examples, self.elapsed = self.steps + 1, self.bar.examples, self.bar.elapsed
        return None

    def on_epoch_end(self, epoch: int, logs: Mapping[str, float], session) -> bool | None:
        if "val_loss" not in logs:  # no validation data (or a rank that does not validate)
            return None
        loss = self.params.get("loss") or "loss"
        text = f"epoch {epoch} (step {self.steps}): val {loss} {logs['val_loss']:.6g}"
        text += "".join(f"  val {k[4:]} {v:.4g}" for k, v in logs.items() if k.startswith("val_") and k != "val_loss")
        self.message(text)
        return None

    def on_train_end(self, session) -> None:
        self.close()

    def message(self, text: str) -> None:
        """A line above the bar (in sequence with the plain lines; before the run, as it is).

        >>> progress.message("resuming from step 40")
        """
        if self.bar is not None:
            self.bar.message(text)
        else:
            print(text, file=self.stream or sys.stdout, flush=True)

    def close(self) -> None:
        """Stop the bar (on_train_end does it; again is nothing).

        >>> progress.close()
        """
        if self.bar is not None:
            self.elapsed = self.bar.elapsed
            self.bar.close()
            self.bar = None


# Ctrl-C, `kill` (and `timeout`, a container stop), a closed terminal: each stops a run alike.
STOP_SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))
EXIT_INTERRUPTED = 130  # what a shell reports of a process Ctrl-C stopped


class StopOnSignal(Callback):
    """SIGINT, SIGTERM or SIGHUP while training: the first asks to stop after the current step
    (train returns, the params are the last step's); a second quits at once (KeyboardInterrupt).
    As a callback it catches the signals for the run; as a context manager (`with
    StopOnSignal() as stop:`) also while what follows the run, e.g. saving, finishes. In a
    data-parallel run every rank stops after the same step.

    >>> stop = dlc.callbacks.StopOnSignal()
    >>> sess.train(data, epochs=100, callbacks=[stop]); sess.save("w.npz")
    """

    def __init__(self, notify: Callable[[str], None] | None = None):
        self.stop = False
        self.signal: int | None = None  # the first one received
        self.notify = notify or (lambda text: print(text, file=sys.stderr, flush=True))
        self._old: dict[int, Any] = {}
        self._entered = False

    def __enter__(self) -> StopOnSignal:
        self._entered = True
        self._install()
        return self

    def __exit__(self, *exc) -> None:
        self._entered = False
        self._uninstall()

    def _install(self) -> None:
        if self._old:
            return
        for sig in STOP_SIGNALS:
            if signal.getsignal(sig) is signal.SIG_IGN:  # `nohup dlc train`: it stays ignored
                continue
            try:
                self._old[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread (an embedding): keep Python's default
                break

    def _uninstall(self) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old = {}

    def _handle(self, signum, frame) -> None:
        if self.stop:  # a second signal: stop now, without saving
            raise KeyboardInterrupt
        self.stop, self.signal = True, signum
        again = "Ctrl-C again" if signum == signal.SIGINT else "another signal"
        self.notify(
            f"interrupted ({signal.Signals(signum).name}): stopping after this step ({again} to quit without saving)"
        )

    def stopped(self, session) -> bool:
        """Whether the run stops (in a data-parallel run: whether any rank asked).

        >>> stop.stopped(sess)
        False
        """
        world = getattr(session, "parallel", None)
        return world.stopping if world is not None else self.stop

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, as a shell reports a process it stopped (130: Ctrl-C).

        >>> sys.exit(stop.exit_code if stop.stop else 0)
        """
        return 128 + self.signal if self.signal is not None else EXIT_INTERRUPTED

    def on_train_begin(self, session) -> None:
        self._install()
        world = getattr(session, "parallel", None)
        if world is not None:  # this rank's wish travels with its next all-reduce
            world.stop_requested = lambda: self.stop

    def on_step_end(self, step: int, epoch: int, loss: float, examples: int, session) -> bool | None:
        return False if self.stopped(session) else None

    def on_train_end(self, session) -> None:
        if not self._entered:
            self._uninstall()
