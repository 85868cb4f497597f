"""Keras-style callbacks run at the end of each epoch of `Session.fit`, `Session.train`'s
`callbacks=` and `dlc train` (`--early-stop N`, `--keep-best`): one mechanism for all three.

Each epoch's logs are a dict: `loss` (the mean of the epoch's step losses), then, with
validation data, `val_loss` and `val_NAME` for each metric. A callback's `on_epoch_end`
returning False ends the run after that epoch (`Session.train`'s `on_epoch_end` does it).

    >>> stop = dlc.EarlyStopping(monitor="val_loss", patience=3)
    >>> best = dlc.ModelCheckpoint("best.weights.npz")  # params of the best val_loss
    >>> history = sess.fit(x, y, epochs=50, validation_data=(xv, yv), callbacks=[stop, best])
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .runtime.errors import DlcError

__all__ = ["Callback", "EarlyStopping", "ModelCheckpoint", "LambdaCallback", "History", "EpochRunner"]


class Callback:
    """Base class: override any of `on_train_begin(session)`, `on_epoch_end(epoch, logs,
    session)` (return False to stop after this epoch) and `on_train_end(session)`.

    >>> class Printer(dlc.Callback):
    ...     def on_epoch_end(self, epoch, logs, session):
    ...         print(epoch, logs["loss"])
    """

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
        from .runtime.errors import did_you_mean

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
    """The per-step and per-epoch hooks `Session.train` takes, turning its step losses into
    each epoch's logs (the mean loss, then `validate()`'s values), recorded in `history` and
    handed to the callbacks. `step_hook` and `epoch_hook` are what `train(callback=,
    on_epoch_end=)` take; `begin()` and `end()` go around the run."""

    def __init__(
        self,
        session,
        callbacks: Sequence[Callback] = (),
        validate: Callable[[], Mapping[str, float]] | None = None,
        on_logs: Callable[[int, Mapping[str, float]], None] | None = None,
    ):
        for cb in callbacks:
            if not isinstance(cb, Callback):
                raise TypeError(f"callbacks take dlc.Callback objects (e.g. dlc.LambdaCallback), not {cb!r}")
        self.session, self.callbacks, self.validate, self.on_logs = session, list(callbacks), validate, on_logs
        self.history = History()
        self.stopped_by: Callback | None = None
        self._sum, self._count = 0.0, 0

    def begin(self) -> None:
        for cb in self.callbacks:
            cb.on_train_begin(self.session)

    def step_hook(self, step: int, epoch: int, loss: float, examples: int) -> None:
        self._sum += float(loss)
        self._count += 1

    def epoch_hook(self, epoch: int) -> bool | None:
        logs: dict[str, Any] = {"loss": self._sum / self._count if self._count else math.nan}
        self._sum, self._count = 0.0, 0
        if self.validate is not None:
            logs.update(self.validate())
        self.history.record(epoch, logs)
        if self.on_logs is not None:
            self.on_logs(epoch, logs)
        go_on = None
        for cb in self.callbacks:
            if cb.on_epoch_end(epoch, logs, self.session) is False and self.stopped_by is None:
                self.stopped_by, go_on = cb, False
        return go_on

    def end(self) -> None:
        for cb in self.callbacks:
            cb.on_train_end(self.session)

    def stop_reason(self) -> str | None:
        """A sentence saying which callback stopped the run early, or None."""
        if self.stopped_by is None:
            return None
        reason = getattr(self.stopped_by, "reason", None)
        text = reason() if callable(reason) else None
        return text or f"stopped early by {type(self.stopped_by).__name__} after epoch {self.history.epochs[-1]}"
