"""The model a command works on, and the session it runs on.

A MODEL argument is a .dl file (a dlc.Model) or an artifact folder (an ArtifactModel, read
from its manifest): both name their inputs, params, tensors and losses; a command runs on a
dlc.Session over either. Over an artifact nothing here imports the compiler.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from ..runtime import optimizers
from ..runtime.errors import DlcError, UsageError, did_you_mean
from ..runtime.optional import require

if TYPE_CHECKING:
    from ..backends.artifact import ArtifactModel
from ..runtime.source_text import read_source
from ..session import Session
from .options import DEFAULT_OPTIMIZER


def model_shapes(model) -> dict[str, tuple]:
    return {**model.inputs, **model.params, **model.tensors}


def check_names(model, names: Sequence[str], what: str = "tensor") -> None:
    shapes = model_shapes(model)
    for n in names:
        if n not in shapes:
            hint = did_you_mean(n, shapes)
            raise DlcError(f"{model.path}: no {what} named '{n}' in the model{hint}")


def pick_loss(model, name: str | None) -> str:
    """`name`, checked to be a loss of the model; None: its first (an artifact's: the one its
    training step minimizes)."""
    losses = list(model.losses)
    if not losses:
        raise DlcError(f"{model.path}: the model has no loss to train: add a statement 'loss NAME = EXPR'")
    if name is None:
        return losses[0]
    if name not in losses:
        hint = did_you_mean(name, losses)
        raise DlcError(f"{model.path}: '{name}' is not a loss of the model{hint} (losses: {', '.join(losses)})")
    return name


def train_loss(model, flag: str | bool | None) -> str | None:
    """`--train [LOSS]`: the loss its training step minimizes (None: no --train)."""
    return pick_loss(model, None if flag is True else flag) if flag else None


def compiled_optimizer(model: ArtifactModel, lr: float | None) -> optimizers.Optimizer:
    """The optimizer an artifact was compiled with (its hyper-parameters), `lr` if given."""
    config = dict(model.optimizer or {"name": DEFAULT_OPTIMIZER})
    cls = optimizers.OPTIMIZERS[config.pop("name")]
    if lr is not None:
        config["lr"] = lr
    return cls(**config)


def _model_module():
    return require("dlc.model")  # the compiler's IR: only for a .dl model, never an artifact's


def read_model_source(path: str) -> str:
    try:
        return read_source(path)  # bytes that are not UTF-8: a CompileError at their line:col
    except FileNotFoundError:
        raise DlcError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise DlcError(f"{path}: a folder that is not a compiled artifact (no manifest.json)") from None
    except OSError as e:
        raise DlcError(f"{path}: cannot read the model ({e})") from None


def is_artifact_model(model) -> bool:
    """Whether `model` is an ArtifactModel, without importing the artifact's module: no model is
    one while nothing has imported it (open_model imports it for a folder)."""
    loaded = sys.modules.get("dlc.backends.artifact")
    return loaded is not None and isinstance(model, loaded.ArtifactModel)


def open_model(path: str):
    """A .dl file as a dlc.Model, an artifact folder as an ArtifactModel (no GL needed)."""
    if os.path.isdir(path):  # an artifact's module only for a folder: a .dl file never needs it
        artifact = require("dlc.backends.artifact")
        if artifact.is_artifact(path):
            return artifact.ArtifactModel(path)
    text = read_model_source(path)
    # A trailing newline makes compile take it as source text, never as a path.
    return _model_module().compile(text if text.endswith("\n") else text + "\n", name=path)


def open_session(model, backend: str | None, seed: int, freeze: Sequence[str] = (), parallel=None) -> Session:
    """The Session a command runs on: an artifact's programs on gl (its model.dl with its
    params on numpy), a .dl model on either; `freeze`: globs of params training leaves alone."""
    if is_artifact_model(model) and backend != "numpy":
        wanted = os.environ.get("DLC_TARGET", "").strip()  # --target sets it
        if wanted and wanted != model.target:
            raise UsageError(
                f"{model.path} was compiled for the {model.target} target, not "
                f"{wanted} (recompile it with --target {wanted})"
            )
    return Session(model, backend=backend, seed=seed, freeze=freeze, parallel=parallel)


def needed_inputs(model, names: Iterable[str], session=None) -> set[str]:
    """The inputs fetching `names` reads: from a .dl model's graph, or from the session over
    an artifact (its eval program's kernels)."""
    if is_artifact_model(model):
        return session.needed_inputs(list(names))
    reference = require("dlc.compiler.ir")
    return set(reference.leaf_inputs(model.graph, [model.graph.names[n] for n in names]))


def param_inits(model) -> dict[str, tuple]:
    if is_artifact_model(model):
        return {}
    return {n: model.graph.node(n).attr("init") for n in model.graph.params}


def frozen_params(model) -> set[str]:
    """The params a .dl model declares `frozen param` (an artifact keeps no statements)."""
    if is_artifact_model(model):
        return set()
    return {p for p in model.params if model.graph.node(p).attr("frozen")}


def weights_text(path: str | None, model, seed: int) -> str:
    """Which params a run starts from, as the start line says it."""
    if path:
        return path
    return f"the artifact's params ({model.path})" if is_artifact_model(model) else f"initial params, seed {seed}"


def run_line(session, weights: str) -> str:
    """'backend gl, target compute, device RENDERER; weights ...': where and with what a
    command runs (one line, printed at the start of train and eval)."""
    impl = getattr(session, "backend", None)
    backend = getattr(impl, "name", "gl")  # an artifact runs on gl
    target = "compute"
    if backend == "gl":
        device = require("dlc.runtime.device").get_context().renderer  # GL only for a gl run
        target = getattr(impl, "target", None) or "compute"  # texture where chosen or forced
    else:
        device = "CPU (NumPy reference)"
    return f"dlc: backend {backend}, target {target}, device {device}; weights: {weights}"


def announce_run(session, weights: str) -> None:
    print(run_line(session, weights), file=sys.stderr, flush=True)


def default_weights_path(model_path: str) -> str:
    """`samples/quadratic.dl` -> `quadratic.weights.npz`, in the working folder (as a
    compiler's outputs go), never into the folder the model was read from."""
    base = os.path.basename(os.path.normpath(model_path))
    stem, ext = os.path.splitext(base)
    return (stem if ext in (".dl", ".dlc") else base) + ".weights.npz"


def default_artifact_path(model_path: str) -> str:
    """`samples/quadratic.dl` -> `quadratic.dlc`, in the working folder."""
    stem, ext = os.path.splitext(os.path.basename(os.path.normpath(model_path)))
    return (stem if ext == ".dl" else stem + ext) + ".dlc"
