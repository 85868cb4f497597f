"""Training steps on GL that write nothing from the host and read nothing back, step by step.

`training.train_loop` drives the windows. Each queued step copies its loss into one float of a
small GPU buffer; `read` waits on a fence for the whole window and downloads it in one
transfer, so the host does not stall on the GPU once per step. When the data lives on the GPU
(`compiler.resident`), the batches' row indices are uploaded many steps at once (`stage`: the
rows of the next steps, each epoch's order uploaded once) and each step copies its range on
the GPU; the learning rate is written again only when it changes. So a step is launches
alone, and the host runs ahead of the GPU.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from dlc.runtime.executor import GPUFeed
from dlc.runtime.spec import LR
from dlc.runtime.storage import Buffer
from dlc.runtime.sync import Fence

STAGES = 2  # staged row buffers: one being read by queued steps while the next is written


class GLDeferredSteps:
    """`program` and `loss_node` as the backend's `step_into` takes them; `learning_rate()`
    is read at every step. `rows`: the input that takes a batch's row indices (the resident
    graph's), staged on the GPU; None when the batches themselves are uploaded."""

    def __init__(
        self,
        backend,
        program,
        loss_node: int,
        learning_rate: Callable[[], float],
        capacity: int,
        interval_s: float,
        rows: str | None = None,
    ):
        self.backend, self.program, self.loss_node = backend, program, loss_node
        self.learning_rate = learning_rate
        self.capacity = int(capacity)
        self.interval_s = float(interval_s)
        self.rows = rows
        self._device = backend.store.device  # where the steps run
        self._sink = Buffer(4 * self.capacity, device=self._device)
        self._lr = (None, None)  # (value, the array fed for it): one object while it holds
        self._stages: list = [None] * STAGES  # row buffers
        self._stage_fences: list = [None] * STAGES  # each one's last reader's end
        self._staged = 0  # stage() calls so far
        self._feeds: dict[int, object] = {}  # id of a staged batch's rows -> its GPUFeed

    def stage(self, batches: Sequence[dict[str, np.ndarray]]) -> None:
        """The next steps' batches, before they are queued: their row indices go to the GPU
        in one upload (a batch repeating the one before it, as an unshuffled epoch of one
        batch does, shares its rows)."""
        if self.rows is None or not batches:
            return

        parts, starts, previous, total = [], [], None, 0
        for batch in batches:
            rows = batch[self.rows]
            if rows is not previous:
                parts.append(rows)
                starts.append((rows, total))
                total += len(rows)
            previous = rows
        data = np.concatenate(parts).astype(np.float32)
        slot = self._staged % STAGES
        fence = self._stage_fences[slot]
        if fence is not None:  # queued steps may still copy from this buffer: a host write waits
            fence.wait()
        buffer = self._stages[slot]
        if buffer is None or buffer.nbytes < data.nbytes:
            if buffer is not None:
                buffer.delete()
            buffer = self._stages[slot] = Buffer(max(data.nbytes, 4), device=self._device)
        buffer.upload(data)
        self._feeds = {id(rows): GPUFeed(buffer, first, len(rows)) for rows, first in starts}
        if self._staged:  # the buffer staged before is done with once the steps so far are
            self._device.activate()
            self._stage_fences[(self._staged - 1) % STAGES] = Fence()
        self._staged += 1

    def queue(self, batch: dict[str, np.ndarray], bdims: dict[str, int], index: int) -> None:
        lr = self.learning_rate()  # read at every step
        if lr != self._lr[0]:
            self._lr = (lr, np.asarray(lr, dtype=np.float32))
        feeds = dict(batch)
        feeds[LR] = self._lr[1]
        if self.rows is not None:
            feeds[self.rows] = self._feeds[id(batch[self.rows])]
        self.backend.step_into(self.program, self.loss_node, feeds, bdims, self._sink, index)

    def read(self, count: int) -> np.ndarray:
        self._device.activate()  # the fence goes on the steps' device
        Fence().wait()
        return self._sink.download(count)

    def close(self) -> None:
        self._sink.delete()
        for buffer in self._stages:
            if buffer is not None:
                buffer.delete()
