"""`dlc plot-model MODEL.dl -o FILE`: the model's graph drawn by Graphviz."""

from __future__ import annotations

import argparse
import os

from ..compiler.dot import FORMATS, RenderError, render
from ..errors import DlcError
from ..optimizers import make as make_optimizer
from ..runtime.errors import UsageError
from ..weights import write_atomic
from .compile import model_dot
from .models import open_model, train_loss
from .options import DEFAULT_OPTIMIZER, add_output, add_train_loss

DESCRIPTION = (
    "Draw the model as a graph: inputs, params, ops, named tensors and losses, "
    "with the shape\nof each tensor on its edges. --kernels boxes the ops each "
    "fused GLSL kernel computes.\nNeeds Graphviz: pip install 'dlc[viz]' and its "
    "dot program (apt-get install graphviz)."
)
EPILOG = (
    "examples:\n"
    "  dlc plot-model samples/mlp_digits.dl -o mlp.svg\n"
    "  dlc plot-model samples/mlp_digits.dl -o mlp.png --kernels\n"
    "  dlc compile samples/mlp_digits.dl --emit dot    # the same graph as text"
)


def add_arguments(c: argparse.ArgumentParser) -> None:
    c.add_argument("model", metavar="MODEL.dl", help="the model to draw")
    add_output(c, "FILE", "the picture to write: .svg, .png or .pdf", required=True)
    c.add_argument("--kernels", action="store_true", help="draw the fused GLSL kernels as clusters around their ops")
    add_train_loss(c, "draw the training step for LOSS (gradients and updates) instead")


def run(args: argparse.Namespace) -> int:
    fmt = os.path.splitext(args.output)[1].lower().lstrip(".")
    if fmt not in FORMATS:
        raise UsageError(f"-o {args.output}: name a .svg, .png or .pdf file (the extension picks the format)")
    if os.path.isdir(args.model):
        raise UsageError(f"{args.model} is a folder; dlc plot-model takes a .dl model")
    model = open_model(args.model)
    loss = train_loss(model, args.train)
    optimizer = make_optimizer(DEFAULT_OPTIMIZER) if loss is not None else None
    text = model_dot(model, loss, optimizer, kernels=args.kernels)
    try:
        picture = render(text, fmt)
    except RenderError as e:
        raise DlcError(
            f"{e}; `dlc compile {args.model} --emit dot` prints the graph as text without Graphviz"
        ) from None
    write_atomic(args.output, lambda f: f.write(picture))
    print(f"wrote {args.output}")
    return 0
