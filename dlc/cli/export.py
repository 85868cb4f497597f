"""`dlc export MODEL --web DIR`: a folder a browser runs and trains the model in (WebGL2)."""

from __future__ import annotations

import argparse

from ..web import export_web
from .options import add_loss, add_lr, add_model, add_optimizer, add_seed, add_vocab, add_weights

DESCRIPTION = (
    "Write a folder a browser runs: index.html, the JavaScript runtime dlc.js, "
    "manifest.json,\nthe GLSL ES 3.00 shaders and the weights (see README 'The model in a browser')."
)
EPILOG = (
    "examples:\n  dlc export samples/mlp_digits.dl --weights digits.weights.npz --web out/\n"
    "  dlc export samples/char_gpt.dl --weights gpt.npz --web out/   # gpt.vocab.json beside: the text page"
)


def add_arguments(c: argparse.ArgumentParser) -> None:
    add_model(c)
    c.add_argument("--web", required=True, metavar="DIR", help="the folder to write (replaced if it is an export)")
    add_weights(c, "the params (default: the artifact's, or drawn with --seed)")
    add_loss(c, "the loss the training step minimizes (default: the first)")
    add_optimizer(c, "the optimizer compiled in (default: sgd)")
    add_lr(c, "its learning rate (default: the optimizer's)")
    add_seed(c, "the seed of the params' initializers")
    add_vocab(c, "a language model's vocabulary (default: W.vocab.json beside --weights)")


def run(args: argparse.Namespace) -> int:
    out = export_web(
        args.model,
        args.web,
        weights=args.weights,
        optimizer=args.optimizer,
        lr=args.lr,
        loss=args.loss,
        seed=args.seed,
        vocab=args.vocab,
    )
    print(f"wrote {out}: serve it (python -m http.server -d {out}) and open index.html")
    return 0
