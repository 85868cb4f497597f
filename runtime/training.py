"""The training loop: batches, epochs, shuffling, callbacks, divergence.

Free of the compiler (and of lark) so that both `Session.train` and the
artifact runner drive their steps with it. A step is a function of one batch
(input name -> array) and its symbolic dim binding, returning the batch's loss.
"""

from __future__ import annotations

import itertools
import math
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from .errors import DataError, TrainingDiverged
from .feeds import prepare

Step = Callable[[dict[str, np.ndarray], dict[str, int]], float]
STAGE_ROWS = 1 << 22  # deferred steps stage the rows of at most this many examples at once
Callback = Callable[[int, int, float, int], "bool | None"]


@dataclass
class RunPosition:
    """Where a run stands, to continue it exactly: the steps done, the order of the epoch in
    progress (None at an epoch's end, or unshuffled: the next order is drawn or plain), the
    batch-order rng's state after them (None: the rng object's own state), and the batching
    the run draws (None until it starts: a run goes on only with the same)."""

    done: int = 0
    order: np.ndarray | None = None
    rng_state: dict | None = None
    batch_size: int | None = None
    examples: int | None = None
    shuffle: bool | None = None


class DeferredSteps(Protocol):
    """Steps whose losses stay on the GPU until read, many at once (see `train_loop`)."""

    capacity: int  # losses one read can hold: a window of steps is at most this long
    interval_s: float  # a window is read once it is this old (so a progress bar moves)

    def queue(self, batch: dict[str, np.ndarray], bdims: dict[str, int], index: int) -> None:
        """Run a step without reading anything back; its loss goes to place `index`."""

    def stage(self, batches: list[dict[str, np.ndarray]]) -> None:
        """The batches of the steps queued next, before they are (to move them in one go)."""

    def read(self, count: int) -> np.ndarray:
        """The first `count` losses, once the GPU has computed them (waits on a fence)."""


def batch_dim(inputs: Mapping[str, tuple], fed: list[str]) -> str | None:
    """The symbolic dim leading every fed input: batches are drawn along it.

    None when no fed input leads with a symbolic dim (each step then takes all
    the data); a DataError when they lead with different dims.
    """
    leading = {name: (inputs[name][0] if inputs[name] else None) for name in fed}
    symbolic = {d for d in leading.values() if isinstance(d, str)}
    if not symbolic:
        return None
    if len(symbolic) > 1 or any(not isinstance(d, str) for d in leading.values()):
        shown = ", ".join(f"'{n}' [{', '.join(map(str, inputs[n]))}]" for n in fed)
        raise DataError(
            f"training draws batches along the first axis of every input, so the "
            f"inputs must share a leading symbolic dim: {shown}"
        )
    return symbolic.pop()


def steps_per_epoch(examples: int, batch_size: int) -> int:
    return max(1, math.ceil(examples / batch_size))


def schedule(n: int, batch_size: int | None, epochs: int, steps: int | None) -> tuple[int, int, int]:
    """(batch size, steps per epoch, total steps) for `n` examples."""
    size = n if batch_size is None else int(batch_size)
    if size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    size = min(size, n)
    per_epoch = steps_per_epoch(n, size)
    total = int(steps) if steps is not None else int(epochs) * per_epoch
    if total < 0:
        raise ValueError(f"steps and epochs must not be negative, got {steps or epochs}")
    return size, per_epoch, total


def train_feeds(
    inputs: Mapping[str, tuple],
    feeds: Mapping[str, np.ndarray],
    needed: set[str],
    dtypes: Mapping[str, str] | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, int], str | None]:
    """The fed arrays a training step reads (checked, float32; int32 for i32 inputs), the dims
    they bind, and the dim batches are drawn along."""
    arrays, dims = prepare(inputs, feeds, needed, dtypes)
    arrays = {k: v for k, v in arrays.items() if k in needed}
    return arrays, dims, batch_dim(inputs, list(arrays))


def train_loop(
    step: Step,
    feeds: Mapping[str, np.ndarray],
    dims: Mapping[str, int],
    dim: str | None,
    *,
    batch_size: int | None = 32,
    epochs: int = 1,
    steps: int | None = None,
    shuffle: bool = True,
    rng: np.random.Generator | None = None,
    callback: Callback | None = None,
    on_epoch_end: Callable[[int], bool | None] | None = None,
    snapshot: Callable[[], object] | None = None,
    restore: Callable[[object], None] | None = None,
    select: Callable[[np.ndarray], dict[str, np.ndarray]] | None = None,
    deferred: DeferredSteps | None = None,
    position: RunPosition | None = None,
    every: int | None = None,
    on_every: Callable[[RunPosition], None] | None = None,
) -> list[float]:
    """Run `step` over batches of `feeds` along `dim`; return each step's loss.

    `steps` (if given) wins over `epochs` and may span epochs; the last batch of
    an epoch may be smaller. `callback(step, epoch, loss, batch_examples)` runs
    after every step (both counted from 1); returning False stops after that
    step. `on_epoch_end(epoch)` runs after each full epoch (returning False stops there). A NaN or infinite
    loss puts back the params of the last finite loss (via snapshot/restore)
    and raises TrainingDiverged. `select(rows)`, when given, makes a step's batch from the
    indices of its examples along `dim` (default: those rows of every feed); a backend that
    holds the data on the GPU takes the indices alone.

    With `deferred` (and snapshot/restore), steps are queued without a read: their losses
    are read a window at a time (at most `deferred.capacity` steps, or `interval_s` old, and
    at each epoch's end), with one snapshot per window instead of one per step. Callbacks
    then run at each read, for each step of the window in order. A window that holds a
    non-finite loss, or a callback returning False inside it, is undone: the params go back
    to the snapshot and the steps up to the wanted one are run again (steps are
    deterministic), so the results match the step-by-step loop.

    `position` continues a run: its `done` steps are skipped (the epoch in progress goes on
    in its `order`), and it is kept up to date as steps finish (the steps' numbers in
    callbacks count from the run's start). `on_every(position)` runs after every `every`-th
    step of the run, with the params of that step (a deferred window ends there).
    """
    n = dims[dim] if dim is not None else 1
    size, per_epoch, total = schedule(n, batch_size, epochs, steps)
    rng = rng if rng is not None else np.random.default_rng(0)
    position = position if position is not None else RunPosition()
    _check_same_batching(position, size, n, shuffle)
    position.batch_size, position.examples, position.shuffle = size, n, shuffle
    start = position.done
    if start % per_epoch and shuffle and dim is not None and position.order is None:
        raise DataError(f"continuing a run at step {start} (mid-epoch) needs that epoch's order of examples")
    every = every if on_every is not None and every else None
    if deferred is not None and snapshot is not None and restore is not None:
        drawn: dict[int, dict] = {}  # step index -> the rng's state before its epoch's order
        batches = _batches(feeds, dims, dim, size, per_epoch, total, shuffle, rng, select, drawn, position)
        stage_steps = max(1, min(deferred.capacity, STAGE_ROWS // size))
        return _deferred_loop(
            deferred,
            step,
            batches,
            per_epoch,
            total,
            callback,
            on_epoch_end,
            snapshot,
            restore,
            rng,
            drawn,
            stage_steps,
            position,
            every,
            on_every,
        )

    losses: list[float] = []
    # Params before the previous step and before this one: when this step's loss is
    # not finite, the previous step's update made it so, and `before_prev` had a
    # finite loss.
    before_prev = before = None
    order = _first_order(position, n, shuffle and dim is not None)
    for k in range(start, total):
        epoch, pos = divmod(k, per_epoch)
        if pos == 0 and shuffle and dim is not None:
            order = rng.permutation(n)
        if dim is None:
            batch, bdims, examples = dict(feeds), dict(dims), 1
        else:
            idx = order[pos * size : (pos + 1) * size]
            batch = select(idx) if select is not None else {name: v[idx] for name, v in feeds.items()}
            bdims, examples = {**dims, dim: len(idx)}, len(idx)
        if snapshot is not None:
            before_prev, before = before, snapshot()
        loss = float(step(batch, bdims))
        if not math.isfinite(loss):
            if restore is not None:
                restore(before_prev if before_prev is not None else before)
            raise TrainingDiverged(k + 1, loss)
        losses.append(loss)
        _advance(position, k, per_epoch, order if shuffle and dim is not None else None)
        go_on = callback(k + 1, epoch + 1, loss, examples) if callback is not None else None
        if pos == per_epoch - 1 and on_epoch_end is not None and on_epoch_end(epoch + 1) is False:
            go_on = False  # early stopping: the run ends with this epoch
        if every is not None and (k + 1) % every == 0:
            on_every(position)
        if go_on is False:
            break
    return losses


def _check_same_batching(position: RunPosition, size: int, n: int, shuffle: bool) -> None:
    """A run goes on only over batches drawn as before (its epochs' orders index the data)."""
    if position.batch_size is None:
        return
    was = (position.batch_size, position.examples, position.shuffle)
    if was != (size, n, shuffle):

        def said(b, e, s):
            return f"batches of {b} from {e} examples, {'shuffled' if s else 'in order'}"

        raise DataError(
            f"the run being continued drew {said(*was)}; this one would draw {said(size, n, shuffle)}: "
            "give it the same data and batch size"
        )


def _first_order(position: RunPosition, n: int, shuffled: bool) -> np.ndarray:
    """The order a (continued) run starts in: the epoch in progress's, else the plain one."""
    return np.asarray(position.order) if shuffled and position.order is not None else np.arange(n)


def _advance(position: RunPosition, k: int, per_epoch: int, order) -> None:
    """Step index `k` is done: the run continues after it."""
    position.done = k + 1
    position.order = order if (k + 1) % per_epoch else None
    position.rng_state = None


def _batches(
    feeds: Mapping[str, np.ndarray],
    dims: Mapping[str, int],
    dim: str | None,
    size: int,
    per_epoch: int,
    total: int,
    shuffle: bool,
    rng: np.random.Generator,
    select: Callable[[np.ndarray], dict[str, np.ndarray]] | None,
    drawn: dict[int, dict],
    position: RunPosition,
):
    """(step index, epoch index, position in epoch, batch, dims, examples, the epoch's order
    or None unshuffled) for each step from `position.done`; an epoch's order is drawn when
    its first batch is asked for (as the step-by-step loop does), noting in `drawn` the rng's
    state before it."""
    n = dims[dim] if dim is not None else 1
    shuffled = shuffle and dim is not None
    order = _first_order(position, n, shuffled)
    for k in range(position.done, total):
        epoch, pos = divmod(k, per_epoch)
        if pos == 0 and shuffled:
            drawn[k] = rng.bit_generator.state
            order = rng.permutation(n)
        kept = order if shuffled else None
        if dim is None:
            yield k, epoch, pos, dict(feeds), dict(dims), 1, kept
        else:
            # An epoch of one batch passes its order itself: unshuffled, every step then
            # shares one rows object (deferred steps on GL copy nothing for it again).
            idx = order if size == n else order[pos * size : (pos + 1) * size]
            batch = select(idx) if select is not None else {name: v[idx] for name, v in feeds.items()}
            yield k, epoch, pos, batch, {**dims, dim: len(idx)}, len(idx), kept


def _deferred_loop(
    deferred: DeferredSteps,
    step: Step,
    batches,
    per_epoch: int,
    total: int,
    callback: Callback | None,
    on_epoch_end: Callable[[int], bool | None] | None,
    snapshot: Callable[[], object],
    restore: Callable[[object], None],
    rng: np.random.Generator,
    drawn: dict[int, dict],
    stage_steps: int,
    position: RunPosition,
    every: int | None,
    on_every: Callable[[RunPosition], None] | None,
) -> list[float]:
    losses: list[float] = []
    # Snapshots at the start of the previous window and of this one: (params before step
    # index, token). `ran` keeps each step's batch since the older one, to run steps again.
    older = None
    newer = (position.done, snapshot())
    ran: dict[int, tuple[dict, dict]] = {}
    window: list[tuple[int, int, int, int, object]] = []  # (k, epoch, pos, examples, order)

    def rewind(target: int, last: int) -> None:
        """Put back the params before step index `target` (after `target` steps), and the
        rng as if the loop had stopped after step index `last`."""
        start, token = newer if newer[0] <= target else older
        restore(token)
        for i in range(start, target):
            step(*ran[i])
        settle_rng(last)

    def settle_rng(last: int) -> None:
        """The rng as if the loop had stopped after step index `last` (staging draws ahead)."""
        rng.bit_generator.state = rng_state_after(last)

    def rng_state_after(last: int) -> dict:
        later = [i for i in drawn if i > last]
        return drawn[min(later)] if later else rng.bit_generator.state

    ahead: deque = deque()  # staged steps not yet queued
    started = time.monotonic()
    while True:
        if not ahead:
            # The next steps' batches, staged in one go (their row indices uploaded at once).
            chunk = list(itertools.islice(batches, stage_steps))
            if not chunk:
                break
            deferred.stage([item[3] for item in chunk])
            ahead.extend(chunk)
        k, epoch, pos, batch, bdims, examples, order = ahead.popleft()
        deferred.queue(batch, bdims, len(window))
        ran[k] = (batch, bdims)
        window.append((k, epoch, pos, examples, order))
        epoch_end = pos == per_epoch - 1 and on_epoch_end is not None  # it may read params
        if not (
            len(window) >= deferred.capacity
            or epoch_end
            or (every is not None and (k + 1) % every == 0)  # so does on_every
            or k == total - 1
            or time.monotonic() - started >= deferred.interval_s
        ):
            continue
        values = deferred.read(len(window))
        for (j, ep, ps, ex, order), value in zip(window, values):
            loss = float(value)
            if not math.isfinite(loss):
                # Step j's loss comes from step j-1's update: keep the params before it.
                rewind(max(j - 1, 0), j)
                raise TrainingDiverged(j + 1, loss)
            losses.append(loss)
            _advance(position, j, per_epoch, order)
            go_on = callback(j + 1, ep + 1, loss, ex) if callback is not None else None
            # The window ends here: the params are step j's. False ends the run with this epoch.
            if ps == per_epoch - 1 and on_epoch_end is not None and on_epoch_end(ep + 1) is False:
                go_on = False
            if every is not None and (j + 1) % every == 0:
                position.rng_state = rng_state_after(j)  # staging may have drawn ahead
                on_every(position)  # the window ends here too
                position.rng_state = None
            if go_on is False:
                if j != window[-1][0]:  # later steps of the window ran: undo them
                    rewind(j + 1, j)
                settle_rng(j)
                return losses
        next_k = window[-1][0] + 1
        if next_k >= total:
            break
        older, newer = newer, (next_k, snapshot())
        for i in [i for i in ran if i < older[0]]:
            del ran[i]
        for i in [i for i in drawn if i < older[0]]:
            del drawn[i]
        window = []
        started = time.monotonic()
    return losses
