"""`dlc eval MODEL --data FILE --fetch NAMES`: named tensors over a data file (Session.evaluate)."""

from __future__ import annotations

import argparse
import os
import sys

from ..artifact_backend import ArtifactModel
from ..data import load_data
from ..errors import DataError
from ..report import describe_array
from ..runtime.errors import UsageError
from ..weights import save_npz
from .models import announce_run, check_names, needed_inputs, open_model, open_session, weights_text
from .options import (
    add_backend,
    add_batch_size,
    add_data,
    add_debug_kernels,
    add_model,
    add_seed,
    add_target,
    add_weights,
    apply_target,
)

DESCRIPTION = (
    "Evaluate named tensors over a data file. Prints each scalar fetch (its mean "
    "over the data when\nrun in batches) and a summary of the others; --out saves "
    "them all. Per-example fetches\n(first dim the example dim) are concatenated "
    "over batches; the others are averaged,\nweighted by batch size."
)
EPILOG = (
    "examples:\n"
    "  dlc eval samples/quadratic.dl --data samples/data/quadratic.npz --fetch y\n"
    "  dlc eval samples/mlp_digits.dl --data samples/data/digits_test.npz \\\n"
    "      --weights mlp.npz --fetch accuracy,prediction --out pred.npz"
)


def add_arguments(c: argparse.ArgumentParser) -> None:
    add_model(c)
    add_data(c, "input data: .npz or .csv")
    c.add_argument(
        "--fetch", required=True, metavar="NAME[,NAME...]", help="named tensors to evaluate, separated by commas"
    )
    add_weights(c, "params to use (default: the initial params for --seed)")
    c.add_argument("--out", metavar="OUT.npz", help="save every fetch to this .npz")
    add_batch_size(c, "evaluate N examples at a time (default: all at once)")
    add_backend(c, "gl or numpy; default: gl when an OpenGL context can be made, else numpy")
    add_seed(c, "seed of the initial params when no --weights are given (default: 0)")
    add_target(c)
    add_debug_kernels(c)


def parse_fetch(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",")]
    if any(not n for n in names):
        raise UsageError(f"--fetch '{text}': give names separated by commas, e.g. --fetch y,cost")
    return list(dict.fromkeys(names))


def run(args: argparse.Namespace) -> int:
    names = parse_fetch(args.fetch)
    apply_target(args)
    t = open_model(args.model)
    check_names(t, names)
    # An artifact's session answers which inputs a fetch reads (it loads the programs).
    session = open_session(t, args.backend, args.seed) if isinstance(t, ArtifactModel) else None
    data = load_data(args.data, t.inputs, needed_inputs(t, names, session), t.input_dtypes)
    if args.weights and not os.path.isfile(args.weights):
        raise DataError(f"{args.weights}: no such file")
    if session is None:
        session = open_session(t, args.backend, args.seed)
    if args.weights:
        session.load(args.weights)
    announce_run(session, weights_text(args.weights, t, args.seed))
    if not args.weights and not isinstance(t, ArtifactModel):  # an artifact holds params of its own
        print(
            f"warning: no --weights given: evaluating the initial params (seed {args.seed}); "
            f"pass --weights W.npz for trained ones",
            file=sys.stderr,
        )
    values = session.evaluate(data, names, args.batch_size)
    what = f"{data.examples} examples" if data.examples else "the data"
    if args.batch_size and data.examples > args.batch_size:
        what += f" in batches of {args.batch_size}; values without the example axis are means over the batches"
    print(f"{t.path} on {data.path} ({what}):")
    for n in names:
        print("  " + describe_array(n, values[n]))
    if args.out:
        save_npz(args.out, values)
        print(f"saved {', '.join(names)} to {args.out}")
    return 0
