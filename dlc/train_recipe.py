"""The training recipe's command-line options (`dlc train`; declared in dlc/cli/options.py): weight decay,
gradient clipping and the learning-rate schedule, turned into the optimizer's fields."""

from __future__ import annotations

import argparse
from dataclasses import fields

from .runtime import schedules
from .runtime.errors import DlcError, UsageError
from .runtime.optimizers import Optimizer, make

LR_DECAYS = ("constant", "cosine", "linear", "step")


def optimizer_options(args: argparse.Namespace, total_steps: int) -> dict:
    """The optimizer fields the recipe flags ask for (none when no flag is given)."""
    options: dict = {}
    if args.weight_decay is not None:
        options["weight_decay"] = args.weight_decay
    if args.clip_norm is not None:
        options["clip_norm"] = args.clip_norm
    if args.warmup < 0:
        raise UsageError(f"--warmup must be 0 or more steps, not {args.warmup}")
    kind = args.lr_decay or ("constant" if args.warmup else None)
    if kind in ("cosine", "linear"):
        decay_steps = args.decay_steps or total_steps
        if decay_steps <= args.warmup:
            raise UsageError(f"--decay-steps ({decay_steps}) must be more than --warmup ({args.warmup})")
        options["schedule"] = schedules.SCHEDULES[kind](warmup=args.warmup, decay_steps=decay_steps, min_lr=args.min_lr)
    elif kind == "step":
        if args.step_size is None:
            raise UsageError("--lr-decay step needs --step-size N")
        options["schedule"] = schedules.Step(warmup=args.warmup, step_size=args.step_size, gamma=args.gamma)
    elif kind == "constant":
        options["schedule"] = schedules.Constant(warmup=args.warmup)
    for flag, value, needs in (
        ("--decay-steps", args.decay_steps, ("cosine", "linear")),
        ("--step-size", args.step_size, ("step",)),
    ):
        if value is not None and kind not in needs:
            raise UsageError(f"{flag} needs --lr-decay {' or '.join(needs)}")
    return options


def apply(optimizer: Optimizer, options: dict) -> Optimizer:
    """`optimizer` with the recipe's fields set (one it lacks, e.g. --weight-decay for sgd,
    is refused naming it)."""
    current = {f.name: getattr(optimizer, f.name) for f in fields(optimizer) if f.name != "lr"}
    try:
        return make(optimizer.name, optimizer.lr, **{**current, **options})
    except DlcError as e:
        raise UsageError(f"--optimizer {optimizer.name}: {e}") from None
