"""`dlc compile MODEL.dl`: write the artifact folder (with -o), or print one stage (--emit)."""

from __future__ import annotations

import argparse
import json
import os
import sys

from ..compiler.dot import to_dot
from ..compiler.pipeline import STAGE_NAMES, Options, Work, format_stage, run_stages
from ..errors import DlcError
from ..optimizers import make as make_optimizer
from ..optional import require
from ..runtime.errors import UsageError
from .models import default_artifact_path, open_model, train_loss
from .options import DEFAULT_OPTIMIZER, add_batch_size, add_optimizer, add_output, add_target, add_train_loss

STAGES = STAGE_NAMES  # the compiler's stages, in order
EMIT_CHOICES = (*STAGES, "ir", "glsl", "dot")  # then the older --emit names

DESCRIPTION = (
    "Compile a .dl model and write the artifact folder (manifest.json, one GLSL "
    "file per kernel,\nparams.npz). --emit STAGE prints a stage of the "
    "compilation instead, writing nothing\nunless -o is given."
)
EPILOG = (
    "examples:\n"
    "  dlc compile samples/quadratic.dl                 # writes quadratic.dlc/\n"
    "  dlc compile samples/quadratic.dl --emit ir       # prints the IR\n"
    "  dlc compile samples/mlp_digits.dl --train --optimizer adam --emit ir\n"
    "  dlc compile samples/mlp_digits.dl -o /tmp/mlp.dlc --emit plan --batch-size 64"
)


def add_arguments(c: argparse.ArgumentParser) -> None:
    c.add_argument("model", metavar="MODEL.dl", help="the model to compile")
    add_output(
        c, "DIR", "artifact folder to write (default: MODEL.dlc in the working folder; with --emit: none unless given)"
    )
    c.add_argument(
        "--emit",
        choices=EMIT_CHOICES,
        metavar="STAGE",
        help="print this stage (and write no folder without -o): one of the compiler's stages ("
        + ", ".join(STAGES)
        + "; fuse: the IR grouped into kernels, plan: "
        "kernels and storage slots, codegen: the GLSL), or ir (the IR; with "
        "--train: the training-step IR and its kernels), glsl (= codegen), "
        "dot (the graph as Graphviz DOT text)",
    )
    add_train_loss(c, "add the training step for LOSS (default: the model's first loss)")
    add_optimizer(c, f"optimizer of the training step (default: {DEFAULT_OPTIMIZER}); needs --train")
    add_batch_size(c, "plan for batches of N examples")
    add_target(
        c,
        "shaders to write: compute (GLSL 4.30 compute shaders) or texture "
        "(GLSL 3.30 fragment shaders); default: DLC_TARGET, else compute",
    )


def run(args: argparse.Namespace) -> int:
    if os.path.isdir(args.model):
        raise UsageError(f"{args.model} is a folder; dlc compile takes a .dl model")
    if args.optimizer and args.train is None:
        raise UsageError("--optimizer needs --train")
    model = open_model(args.model)
    loss = train_loss(model, args.train)
    optimizer = make_optimizer(args.optimizer or DEFAULT_OPTIMIZER, lr=None) if loss is not None else None
    target = args.target or os.environ.get("DLC_TARGET", "").strip() or "compute"

    # Every stage from the source text, once: printed and written.
    opts = Options(loss, optimizer, args.batch_size, verify=True if args.debug else None, target=target)
    work = run_stages(Work(model.source, model.path), opts)
    progs = work.programs
    if args.emit:
        print(emitted(args.emit, model, work, loss, optimizer), end="")
        if not args.output:  # a look at a stage, not a build: nothing written
            return 0
    artifact = artifact_module()
    out_dir = args.output or default_artifact_path(args.model)
    before = describe_artifact(out_dir)
    where = artifact.write_artifact(
        model, out_dir, train_loss=loss, optimizer=optimizer, batch_size=args.batch_size, target=target, progs=progs
    )
    after = describe_artifact(str(where))
    print(f"wrote {where}", file=sys.stderr if args.emit else sys.stdout)
    if before is not None and before != after:  # say so: a build once replaced a --train one unseen
        print(f"warning: {where} held {before}; it now holds {after}", file=sys.stderr)
    return 0


def emitted(stage: str, model, work: Work, loss: str | None, optimizer) -> str:
    """What `--emit STAGE` prints (ending in a newline)."""
    progs = work.programs
    if stage == "ir":
        # The model's IR, or with --train the training step (gradients and updates).
        if loss is None:
            return f"{model.graph}\n"
        return f"{progs['train'].fusion.graph}\n\n{artifact_module().format_stage(progs, 'kernels')}\n"
    if stage in ("glsl", "plan"):
        return artifact_module().format_stage(progs, stage) + "\n"
    if stage == "dot":
        return model_dot(model, loss, optimizer, kernels=False, progs=progs)
    return format_stage(work, stage) + "\n"


def model_dot(model, loss: str | None, optimizer, kernels: bool, progs=None) -> str:
    """The DOT text of the model (with a loss to train: of its training step); `kernels`
    draws the fused GLSL kernels as clusters."""
    if progs is None and (kernels or loss is not None):
        progs = artifact_module().programs(model, train_loss=loss, optimizer=optimizer)
    name = os.path.splitext(os.path.basename(model.path))[0] or "model"
    if loss is not None:
        fusion = progs["train"].fusion
        return to_dot(fusion.graph, fusion if kernels else None, f"{name} (training step)")
    if kernels:
        fusion = progs["eval"].fusion
        return to_dot(fusion.graph, fusion, name)
    return to_dot(model.graph, None, name)


def artifact_module():
    """dlc.compiler.artifact, the artifact writer (a build of dlc may lack it)."""
    try:
        return require("dlc.compiler.artifact")
    except ModuleNotFoundError as e:
        if e.name != "dlc.compiler.artifact":
            raise
        raise DlcError(
            "this build of dlc has no GLSL compiler (dlc.compiler.artifact is missing): cannot write an artifact"
        ) from None


def describe_artifact(path: str) -> str | None:
    """What an artifact folder holds, e.g. 'a training artifact of quadratic.dl (adam, loss
    cost)'; None when `path` holds no readable manifest."""
    try:
        with open(os.path.join(path, "manifest.json"), encoding="utf-8") as f:
            manifest = json.load(f)
        model, train = manifest.get("model", "?"), manifest.get("train")
        if not train:
            return f"an eval-only artifact of {model}"
        optimizer = (train.get("optimizer") or {}).get("name", "?")
        return f"a training artifact of {model} ({optimizer}, loss {train.get('loss', '?')})"
    except (OSError, ValueError, AttributeError):
        return None
