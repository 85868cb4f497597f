"""Training progress: a rich progress bar on a terminal, plain lines otherwise.

The bar shows epoch, step, the last step's loss and examples per second.
When stdout is not a terminal (a log file, a pipe, CI) it prints a line at the
first step, about every tenth of the run, and the last step, so logs stay short.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from .optional import require


class TrainProgress:
    def __init__(
        self, total_steps: int | None, epochs: int | None, stream: TextIO | None = None, live: bool | None = None
    ):
        self.stream = stream or sys.stdout
        self.total = total_steps
        self.epochs = epochs
        self.live = self.stream.isatty() if live is None else live
        self.examples = 0
        self.start = time.perf_counter()
        self.every = max(1, (total_steps or 100) // 10)
        self._bar = None
        self._task = None
        if self.live:
            # rich only for a terminal's bar: a run to a log file never imports it
            bars, console = require("rich.progress"), require("rich.console")
            self._bar = bars.Progress(
                bars.TextColumn("[bold]{task.fields[epoch]}"),
                bars.BarColumn(),
                bars.TextColumn("step {task.completed}/{task.fields[of]}"),
                bars.TextColumn("loss [cyan]{task.fields[loss]}"),
                bars.TextColumn("{task.fields[speed]}"),
                bars.TimeElapsedColumn(),
                console=console.Console(file=self.stream),
                transient=False,
            )
            self._task = self._bar.add_task(
                "train", total=total_steps, epoch="", of=total_steps or "?", loss="-", speed=""
            )
            self._bar.start()

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    @property
    def rate(self) -> float:
        """Examples per second so far."""
        return self.examples / self.elapsed if self.elapsed > 0 else 0.0

    def _epoch(self, epoch: int) -> str:
        return f"epoch {epoch}/{self.epochs}" if self.epochs else f"epoch {epoch}"

    def update(self, step: int, epoch: int, loss: float, batch_examples: int) -> None:
        """After a step; `step` and `epoch` count from 1."""
        self.examples += batch_examples
        if self._bar is not None:
            self._bar.update(
                self._task, completed=step, epoch=self._epoch(epoch), loss=f"{loss:.6g}", speed=f"{self.rate:,.0f} ex/s"
            )
            return
        if step == 1 or step % self.every == 0 or step == self.total:
            of = f"/{self.total}" if self.total else ""
            print(
                f"{self._epoch(epoch)}  step {step}{of}  loss {loss:.6g}  {self.rate:,.0f} ex/s",
                file=self.stream,
                flush=True,
            )

    def message(self, text: str) -> None:
        """A line printed above the bar (or in sequence, without one)."""
        if self._bar is not None:
            self._bar.console.print(text, markup=False, highlight=False)
        else:
            print(text, file=self.stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
