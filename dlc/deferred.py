"""Training steps on GL whose losses stay on the GPU until read, a window at a time.

Each queued step copies its loss into one float of a small GPU buffer; `read` waits on a
fence for the whole window and downloads it in one transfer, so the host does not stall on
the GPU once per step (`training.train_loop` drives the windows).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from dlc.runtime.manifest import LR


class GLDeferredSteps:
    """`program` and `loss_node` as the backend's `step_into` takes them; `learning_rate()`
    is read at every step."""

    def __init__(
        self, backend, program, loss_node: int, learning_rate: Callable[[], float], capacity: int, interval_s: float
    ):
        from dlc.runtime.storage import Buffer

        self.backend, self.program, self.loss_node = backend, program, loss_node
        self.learning_rate = learning_rate
        self.capacity = int(capacity)
        self.interval_s = float(interval_s)
        self._sink = Buffer(4 * self.capacity, device=backend.store.device)  # where the steps run

    def queue(self, batch: dict[str, np.ndarray], bdims: dict[str, int], index: int) -> None:
        batch[LR] = np.asarray(self.learning_rate(), dtype=np.float32)  # read at every step
        self.backend.step_into(self.program, self.loss_node, batch, bdims, self._sink, index)

    def read(self, count: int) -> np.ndarray:
        from dlc.runtime.sync import Fence

        self._sink.device.activate()  # the fence goes on the steps' device
        Fence().wait()
        return self._sink.download(count)

    def close(self) -> None:
        self._sink.delete()
