"""The compiled artifact (SPEC section 4): a folder the runtime runs without the compiler.

    manifest.json   format version, inputs, params, fetchable tensors and losses with shapes,
                    the training setup, and each program (the storage plan and its ordered
                    kernel launches with bindings, uniforms and sizes; see pipeline.py)
    <program>_<kernel>.glsl   one readable GLSL compute shader per kernel (target compute),
    <program>_<kernel>_<tensor>.frag   or one fragment shader per kernel output (target texture)
    params.npz      the params' initial values
    state.npz       the optimizer state's initial values (when compiled with a training step)
    model.dl        the source it was compiled from

Programs: `eval` fetches any named tensor (the runtime launches only the kernels a fetch
needs); `outputs`, where the model has one (pipeline.py), fetches the model's outputs alone
(manifest `outputs`: their names), fused across the names between them, and serves every
fetch within them; `train` (with `train_loss` / `optimizer`) runs one training step and its
updates.
`emit(model, stage)` prints a stage for `dlc compile --emit`.
"""

from __future__ import annotations

import os
import pathlib

from dlc.runtime.folders import replaced_folder
from dlc.runtime.npzfile import write_npz
from dlc.runtime.optimizers import make
from dlc.runtime.spec import manifest_json
from dlc.runtime.version import __version__

from .fusion import format_fusion
from .initializers import initial_value
from .ir import Graph, model_outputs
from .pipeline import FORMAT, OUTPUTS, CompiledProgram, Options, Work, compile_model
from .plan import format_plan

EMIT_STAGES = ("kernels", "plan", "glsl")


def _optimizer(optimizer, train_loss):
    """The optimizer object for a training step (a name, an object, or the default SGD)."""
    if optimizer is None and train_loss is None:
        return None

    if optimizer is None:
        return make("sgd")
    if isinstance(optimizer, str):
        return make(optimizer)
    return optimizer


def programs(
    model,
    *,
    train_loss: str | None = None,
    optimizer=None,
    batch_size: int | None = None,
    options=None,
    verify: bool | None = None,
    work: Work | None = None,
    target: str = "compute",
) -> dict[str, CompiledProgram]:
    """The model's programs: `eval` for every named tensor, `outputs` for the model's outputs
    (where it saves work), `train` when asked for;
    `target` "compute" or "texture" (see pipeline.compile_program)."""
    if work is None:
        work = compile_model(
            model, Options(train_loss, _optimizer(optimizer, train_loss), batch_size, options, verify, target)
        )
    return work.programs


def emit(
    model,
    stage: str,
    *,
    train_loss: str | None = None,
    optimizer=None,
    batch_size: int | None = None,
    target: str = "compute",
) -> str:
    """One stage as text: "kernels" (the IR grouped into kernels), "plan" (each kernel with
    its slots and the peak bytes), or "glsl" (every shader)."""
    return format_stage(
        programs(model, train_loss=train_loss, optimizer=optimizer, batch_size=batch_size, target=target), stage
    )


def format_stage(progs: dict[str, CompiledProgram], stage: str) -> str:
    """`emit` over programs already compiled (`dlc compile --emit` also writes them)."""
    if stage not in EMIT_STAGES:
        raise ValueError(f"unknown stage '{stage}': choose one of {', '.join(EMIT_STAGES)}")
    parts = []
    for name, prog in progs.items():
        parts.append(f"=== program {name}: {len(prog.kernels)} kernels ===")
        if stage == "kernels":
            parts.append(format_fusion(prog.fusion))
        elif stage == "plan":
            parts.append(format_plan(prog.plan))
        else:
            for file, text in prog.sources.items():
                parts.append(f"// ----- {file} -----\n{text}")
    return "\n".join(parts)


def manifest(model, progs: dict[str, CompiledProgram], optimizer, batch_size) -> dict:
    g: Graph = progs["eval"].fusion.graph
    train = None
    if "train" in progs:
        step = progs["train"].fusion.graph
        train = {
            "loss": step.losses[0],
            "optimizer": optimizer.to_config(),
            "batch_size": batch_size,
            "states": {s: list(step.shape(s)) for s in step.states},
        }

    # The i32 inputs and tensors (the rest are f32): the runtime uploads and reads those by their bits.
    dtypes = {n: "i32" for n in (*model.inputs, *model.tensors) if n in g.names and g.dtype(n) == "i32"}
    return {
        **({"dtypes": dtypes} if dtypes else {}),  # absent when all are f32, as before element types
        "format": FORMAT,
        "dlc_version": __version__,
        "target": progs["eval"].spec.target,
        "model": os.path.basename(model.path),
        "inputs": {n: list(s) for n, s in model.inputs.items()},
        "params": {n: list(s) for n, s in model.params.items()},
        "tensors": {n: list(s) for n, s in model.tensors.items()},
        **({"states": {n: list(g.shape(n)) for n in g.states}} if g.states else {}),
        "losses": list(g.losses),
        "names": {n: i for n, i in g.names.items()},  # name -> tensor of the eval program
        # the names the outputs program fetches (each names the same tensor there as in eval)
        **({"outputs": [n for n in model_outputs(model.graph) if n in g.names]} if OUTPUTS in progs else {}),
        "train": train,
        "programs": {name: p.spec for name, p in progs.items()},  # ProgramSpec: manifest_json writes them
    }


def write_artifact(
    model,
    out_dir,
    *,
    train_loss: str | None = None,
    optimizer=None,
    batch_size: int | None = None,
    seed: int = 0,
    progs: dict[str, CompiledProgram] | None = None,
    target: str = "compute",
) -> pathlib.Path:
    """Compile `model` and write its artifact folder; returns the folder's path.

    The folder is written beside its destination and then moved into place, so a failed
    compile never leaves half an artifact; an existing artifact there is replaced.
    """
    out = pathlib.Path(out_dir)
    opt = _optimizer(optimizer, train_loss)
    if progs is None:  # `progs`: the same model compiled with the same options already
        progs = programs(model, train_loss=train_loss, optimizer=opt, batch_size=batch_size, target=target)
    data = manifest(model, progs, opt, batch_size)
    g = model.graph
    params = {n: initial_value(g.node(n).attr("init"), g.node(n).shape, seed, n) for n in g.params}
    with replaced_folder(out, "a dlc artifact") as tmp:
        for prog in progs.values():
            for file, text in prog.sources.items():
                (tmp / file).write_text(text, encoding="ascii")
        write_npz(tmp / "params.npz", params)
        if "train" in progs or g.states:  # the training step's state, or the model's alone
            step = progs["train"].fusion.graph if "train" in progs else g
            write_npz(
                tmp / "state.npz",
                {s: initial_value(step.node(s).attr("init"), step.node(s).shape, seed, s) for s in step.states},
            )
        if model.source:
            (tmp / "model.dl").write_text(model.source, encoding="utf-8")
        (tmp / "manifest.json").write_text(manifest_json(data), encoding="utf-8")
    return out
