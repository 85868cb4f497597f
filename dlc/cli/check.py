"""`dlc check MODEL...`: parse and shape-check models, print each one's table."""

from __future__ import annotations

import argparse
import sys

from ..artifact_backend import ArtifactModel
from ..errors import DlcError
from ..report import model_table
from ..runtime.manifest_files import read_artifact
from .models import frozen_params, open_model, param_inits

DESCRIPTION = (
    "Parse and shape-check a model, then print its inputs, params (shape, size, "
    "initializer),\nnamed tensors and losses as a table. Exits 1 with the "
    "located error if the model is wrong."
)
EPILOG = "examples:\n  dlc check samples/mlp_digits.dl\n  dlc check samples/*.dl"


def add_arguments(c: argparse.ArgumentParser) -> None:
    c.add_argument("models", metavar="MODEL", nargs="+", help="one or more .dl models or compiled artifact folders")


def run(args: argparse.Namespace) -> int:
    status = 0
    for k, path in enumerate(args.models):
        if k:
            print()
        try:
            t = open_model(path)
            if isinstance(t, ArtifactModel):
                read_artifact(t.path)  # every file it names, checked
        except DlcError as e:  # report each bad model and go on to the next
            if len(args.models) == 1:
                raise
            print(e, file=sys.stderr)
            status = 1
            continue
        print(f"{t.path}: ok")
        print()
        states = () if isinstance(t, ArtifactModel) else set(t.graph.states)
        metrics = getattr(t, "metrics", ())  # `metric NAME = EXPR` (an artifact keeps no statements)
        print(
            model_table(
                t.inputs, t.params, t.tensors, list(t.losses), param_inits(t), frozen_params(t), states, metrics
            )
        )
    return status
