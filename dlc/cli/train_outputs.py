"""What `dlc train` leaves behind: its checkpoints, the saved params and the summary it prints."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Callable

from ..callbacks import Callback, StopOnSignal
from ..errors import TrainingDiverged
from ..runtime.checkpoint import checkpoint_arrays
from ..weights import SaveFailed, save_or_rescue


def default_checkpoint_path(weights_path: str) -> str:
    """`mlp.weights.npz` -> `mlp.weights.ckpt.npz` (beside the weights)."""
    stem, ext = os.path.splitext(weights_path)
    return stem + ".ckpt" + (ext or ".npz")


class CheckpointWriter(Callback):
    """Where `dlc train` writes its checkpoints, and the last one written: every
    --checkpoint-every steps (`write`), and as the run ends (a callback: before a --keep-best
    restore) when one is wanted or a signal stopped it. A checkpoint that cannot be written
    goes to a fallback (or is skipped with a warning): the run goes on."""

    def __init__(self, args: argparse.Namespace, save_path: str, stop: StopOnSignal):
        self.args, self.stop = args, stop
        self.path = args.checkpoint or default_checkpoint_path(save_path)
        self.wanted = bool(args.checkpoint or args.checkpoint_every)  # also at the run's end
        self.written: str | None = None
        self.notify: Callable[[str], None] = lambda text: print(text, file=sys.stderr)

    def on_train_end(self, session) -> None:
        if self.params.get("outcome") != "diverged" and (self.stop.stopped(session) or self.wanted):
            self.write(session)  # before the weights: it holds them too

    def write(self, session) -> None:
        try:
            written, why = save_or_rescue(self.path, checkpoint_arrays(session.checkpoint()), "the checkpoint")
        except SaveFailed as e:
            self.notify(f"warning: {e}")
            return
        if why:
            self.notify(f"warning: cannot write {self.path} ({why}): wrote the checkpoint to {written} instead")
        self.written = written

    def resume_command(self) -> str:
        """The command line that goes on with the run: this one, --resume the checkpoint."""
        argv, skip = [], False
        for word in getattr(self.args, "argv", None) or ["train", self.args.model, "--data", self.args.data]:
            if skip:
                skip = False
            elif word in ("--init", "--resume"):
                skip = True
            elif not word.startswith(("--init=", "--resume=")):
                argv.append(word)
        return shlex.join(["dlc", *argv, "--resume", self.written or self.path])


def save_weights(session, path: str, checkpoints: CheckpointWriter) -> tuple[str | None, str | None]:
    """(where the params went, an error to report): `path`, or a fallback when `path` cannot
    be written; (None, how to keep them) when nothing can be."""
    try:
        saved, why = save_or_rescue(path, {**session.params, **session.states}, "the trained params")
    except SaveFailed as e:
        advice = "(or give --save another place) and run again"
        if checkpoints.written:
            advice = f"the checkpoint {checkpoints.written} holds them: {checkpoints.resume_command()}"
        return None, f"error: {e} {advice}" if not checkpoints.written else f"error: {e}\n  {advice}"
    if why:
        return saved, f"error: cannot write {path} ({why}): the trained params were saved to {saved} instead"
    return saved, None


def print_summary(
    t,
    data,
    rows: list[dict[str, float]],
    progress,
    loss: str,
    save_path: str | None,
    args: argparse.Namespace,
    per_epoch: int,
    final_val: dict | None,
    diverged: TrainingDiverged | None,
    metrics: dict[str, str],
) -> None:
    steps = len(rows)
    epochs = steps / per_epoch if per_epoch else 0
    shown = f"{epochs:,.0f}" if epochs >= 100 else f"{epochs:.3g}"
    elapsed = progress.elapsed
    rate = progress.examples / elapsed if elapsed > 0 else 0.0
    verb = "trained" if args.outcome == "done" else f"{args.outcome}: trained"
    print(
        f"{verb} {t.path} on {data.path}: {steps:,} steps ({shown} epochs) in {elapsed:.2f} s, {rate:,.0f} examples/s"
    )
    if rows:
        print(f"  {loss}: {rows[0]['loss']:.6g} at the first step -> {rows[-1]['loss']:.6g} at the last")
    if final_val is not None:
        acc = "".join(f", {k} {float(final_val[n]):.4g}" for k, n in metrics.items())
        which = "the last params with a finite loss" if diverged is not None else f"after step {steps:,}"
        if args.keep_best and diverged is None:
            which = "the best epoch's"
        shown = args.val or "the last 10%"
        print(f"  val ({shown}) of the saved params ({which}): {loss} {float(final_val[loss]):.6g}{acc}")
    print(f"  weights saved to {save_path}" if save_path else "  weights NOT saved (see the error below)")
    if args.log:
        print(f"  log written to {args.log}")
    if args.plot and rows:
        print(f"  loss curve written to {args.plot}")
