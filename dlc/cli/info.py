"""`dlc info [MODEL]`: the OpenGL context and default backend; a model's params per layer."""

from __future__ import annotations

import argparse

from ..report import param_summary
from ..runtime.info import describe
from ..runtime.version import __version__
from .models import frozen_params, open_model

DESCRIPTION = (
    "Show the OpenGL context found (vendor, renderer, version, limits) and the "
    "backend that\n'--backend' would default to; with a MODEL, its params per layer and their counts."
)
EPILOG = "examples:\n  dlc info\n  dlc info samples/lstm.dl"


def add_arguments(c: argparse.ArgumentParser) -> None:
    c.add_argument("model", metavar="MODEL", nargs="?", help="a .dl model or artifact: list its params by layer")


def run(args: argparse.Namespace) -> int:
    if args.model:  # a model's params per layer, as Model.summary() prints them
        t = open_model(args.model)
        print(f"{t.path}:")
        print(param_summary(t.params, frozen_params(t)))
        return 0
    print(f"dlc {__version__}")
    print(describe())
    return 0
