"""The command line's shared argument declarations: value types, and the groups of options
several commands take (model, data, backend and target, seed, optimizer, training length,
checkpoints, outputs), each declared once here."""

from __future__ import annotations

import argparse
import math
import os

from .. import train_recipe
from ..runtime import optimizers
from ..runtime.errors import UsageError

OPTIMIZERS = tuple(optimizers.OPTIMIZERS)  # names, in the order --help lists them
DEFAULT_OPTIMIZER = "sgd"  # the seeds' optimizer; --lr picks the step size

TARGET_HELP = (
    "gl target: compute (GLSL 4.30 compute shaders) or texture (GLSL 3.30 fragment "
    "shaders over float textures); default: DLC_TARGET, else compute when the "
    "context has compute shaders"
)
DEBUG_KERNELS_HELP = (
    "debug mode: time every kernel and log it (name, ms, output shape), stop at the "
    "first NaN naming the op and its model line, and print a profile at the end"
)
MODEL_HELP = "a .dl model or a compiled artifact folder"


# -- value types -------------------------------------------------------------------


def positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{text}'") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {v}")
    return v


def positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got '{text}'") from None
    if not (v > 0 and math.isfinite(v)):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text}")
    return v


def batch_dim(text: str) -> str | int:
    if text.isdigit():
        return positive_int(text)
    if not text.isidentifier() or not text.isascii():
        raise argparse.ArgumentTypeError(
            f"expected a dim name (letters, digits, _) or a positive integer, got '{text}'"
        )
    return text


# -- groups ------------------------------------------------------------------------


def add_model(c: argparse.ArgumentParser, metavar: str = "MODEL", help: str = MODEL_HELP) -> None:
    c.add_argument("model", metavar=metavar, help=help)


def add_data(c: argparse.ArgumentParser, help: str) -> None:
    c.add_argument("--data", required=True, metavar="FILE", help=help)


def add_weights(c: argparse.ArgumentParser, help: str, required: bool = False) -> None:
    c.add_argument("--weights", required=required, metavar="W.npz", help=help)


def add_batch_size(c: argparse.ArgumentParser, help: str, default: int | None = None) -> None:
    c.add_argument("--batch-size", type=positive_int, default=default, metavar="N", help=help)


def add_backend(c: argparse.ArgumentParser, help: str) -> None:
    c.add_argument("--backend", choices=("gl", "numpy"), help=help)


def add_target(c: argparse.ArgumentParser, help: str = TARGET_HELP) -> None:
    c.add_argument("--target", choices=("compute", "texture"), help=help)


def add_debug_kernels(c: argparse.ArgumentParser) -> None:
    c.add_argument("--debug-kernels", action="store_true", help=DEBUG_KERNELS_HELP)


def add_seed(c: argparse.ArgumentParser, help: str) -> None:
    c.add_argument("--seed", type=int, default=0, metavar="S", help=help)


def add_optimizer(c: argparse.ArgumentParser, help: str, metavar: str | None = None) -> None:
    c.add_argument("--optimizer", type=str.lower, choices=OPTIMIZERS, metavar=metavar, help=help)


def add_lr(c: argparse.ArgumentParser, help: str) -> None:
    c.add_argument("--lr", type=positive_float, metavar="X", help=help)


def add_loss(c: argparse.ArgumentParser, help: str) -> None:
    c.add_argument("--loss", metavar="NAME", help=help)


def add_train_loss(c: argparse.ArgumentParser, help: str) -> None:
    """`--train [LOSS]` of compile and plot-model: the training step (default: the first loss)."""
    c.add_argument("--train", nargs="?", const=True, default=None, metavar="LOSS", help=help)


def add_block(c: argparse.ArgumentParser, help: str) -> None:
    c.add_argument("--block", type=positive_int, metavar="T", help=help)


def add_vocab(c: argparse.ArgumentParser, help: str) -> None:
    c.add_argument("--vocab", metavar="V.json", help=help)


def add_freeze(c: argparse.ArgumentParser, help: str) -> None:
    c.add_argument("--freeze", action="append", metavar="PATTERN", help=help)


def add_output(c: argparse.ArgumentParser, metavar: str, help: str, required: bool = False) -> None:
    c.add_argument("-o", "--output", required=required, metavar=metavar, help=help)


def add_training_length(c: argparse.ArgumentParser) -> None:
    add_batch_size(c, "examples per step (default: 32)", default=32)
    g = c.add_mutually_exclusive_group()
    g.add_argument("--epochs", type=positive_int, metavar="N", help="passes over the data (default: 1)")
    g.add_argument("--steps", type=positive_int, metavar="N", help="train for N steps instead, cycling over the data")


def add_recipe(c: argparse.ArgumentParser) -> None:
    """Weight decay, clipping and the learning-rate schedule (dlc.train_recipe reads them)."""
    g = c.add_argument_group("training recipe (compiled into the step; see README 'Training recipe')")
    g.add_argument(
        "--weight-decay",
        type=float,
        metavar="X",
        help="adamw's decoupled weight decay of params of rank >= 2 (default: 0.01)",
    )
    g.add_argument(
        "--clip-norm", type=positive_float, metavar="X", help="clip the gradients to this global L2 norm first"
    )
    g.add_argument(
        "--lr-decay",
        type=str.lower,
        choices=train_recipe.LR_DECAYS,
        metavar="KIND",
        help=f"learning-rate schedule: {' | '.join(train_recipe.LR_DECAYS)} (default: constant)",
    )
    g.add_argument(
        "--warmup", type=int, default=0, metavar="N", help="ramp the learning rate up over the first N steps"
    )
    g.add_argument(
        "--decay-steps",
        type=positive_int,
        metavar="N",
        help="cosine/linear: the step at which the rate reaches --min-lr (default: the run's last step)",
    )
    g.add_argument("--min-lr", type=float, default=0.0, metavar="X", help="cosine/linear: the final rate (default: 0)")
    g.add_argument(
        "--step-size", type=positive_int, metavar="N", help="step: multiply the rate by --gamma every N steps"
    )
    g.add_argument("--gamma", type=float, default=0.1, metavar="G", help="step: the factor (default: 0.1)")


def add_workers(c: argparse.ArgumentParser) -> None:
    g = c.add_argument_group("several GPUs (data parallel over MPI; see README 'Several GPUs and machines')")
    g.add_argument(
        "--workers",
        type=positive_int,
        metavar="N",
        help="train on N processes of this machine through mpiexec (pip install 'dlc[mpi]')",
    )
    g.add_argument(
        "--devices",
        metavar="I,J,...",
        help="EGL devices the ranks of a node use, by local rank (default: local rank mod the device count)",
    )
    g.add_argument(
        "--rank-timeout",
        type=float,
        default=120.0,
        metavar="S",
        help="stop every rank when one waits this long for the others (default: 120)",
    )


def add_checkpoints(c: argparse.ArgumentParser) -> None:
    c.add_argument("--init", metavar="W.npz", help="start from these params (a checkpoint's too)")
    c.add_argument(
        "--resume",
        metavar="CKPT",
        help="go on with the run a checkpoint holds (params, optimizer state, step, data order): "
        "give the same data, batch size and --epochs/--steps, which count from the run's start",
    )
    c.add_argument(
        "--checkpoint",
        metavar="CKPT",
        help="where checkpoints go: at the end of the run, on an interrupt, and with "
        "--checkpoint-every (default: the --save path with .ckpt.npz)",
    )
    c.add_argument(
        "--checkpoint-every", type=positive_int, metavar="N", help="also write the checkpoint after every N steps"
    )


def add_validation(c: argparse.ArgumentParser) -> None:
    c.add_argument(
        "--val",
        metavar="FILE",
        help="validation data: its loss and metrics (see --metric) after each epoch",
    )
    c.add_argument(
        "--metric",
        action="append",
        metavar="NAME",
        help="a scalar tensor reported with the val loss; repeatable (default: 'accuracy' and 'metric.*' tensors)",
    )
    c.add_argument(
        "--early-stop",
        type=positive_int,
        metavar="N",
        help="stop when the val loss has not improved for N epochs (needs --val)",
    )
    c.add_argument(
        "--keep-best",
        action="store_true",
        help="save the params of the epoch with the best val loss, not the last (needs --val)",
    )


def add_run_outputs(c: argparse.ArgumentParser) -> None:
    c.add_argument(
        "--save", metavar="W.npz", help="where to save the params (default: MODEL.weights.npz in the working folder)"
    )
    c.add_argument("--log", metavar="CSV", help="write step, epoch, loss and val columns to a CSV")
    c.add_argument(
        "--plot", metavar="PNG", help="write the loss curve as a PNG (needs matplotlib: pip install 'dlc[plot]')"
    )


def apply_target(args: argparse.Namespace) -> None:
    """--target picks the gl backend's target for this run (as DLC_TARGET does)."""
    if args.target is None:
        return
    if args.backend == "numpy":
        raise UsageError(f"--target {args.target} is for the gl backend, not --backend numpy")
    os.environ["DLC_TARGET"] = args.target
