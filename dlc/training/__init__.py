"""The training loop's schedule; it lives in `dlc.runtime.training`."""

from dlc.runtime.training import (
    Callback,
    RunPosition,
    Step,
    batch_dim,
    schedule,
    steps_per_epoch,
    train_feeds,
    train_loop,
)

__all__ = ["Callback", "RunPosition", "Step", "batch_dim", "schedule", "steps_per_epoch", "train_feeds", "train_loop"]
