"""The golden texts: what each file under expected/ holds, made through the pipeline's public
stages and printed by `pipeline.format_stage` (what `dlc compile --emit STAGE` prints)."""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable
from pathlib import Path

import dlc
from dlc.compiler.modes import eval_form
from dlc.compiler.pipeline import STAGE_NAMES, Options, Work, format_stage, run_stages

HERE = Path(__file__).resolve().parent
MODELS = HERE / "models"
EXPECTED = HERE / "expected"
UPDATE_COMMAND = "python -m tests.golden --update"

BATCH = 8  # the batch size every plan is made for
TARGETS = ("compute", "texture")
# The stages whose text depends on the GL target (fusion asks the target what a kernel may do).
TARGET_STAGES = STAGE_NAMES[STAGE_NAMES.index("fuse") :]

# The training step of each model; between them every kind of optimizer state (none, one
# slot, two, a step counter) and gradient clipping.
OPTIMIZERS: dict[str, Callable[[], object]] = {
    "mlp_adam": lambda: dlc.Adam(0.01),
    "conv_net": lambda: dlc.Momentum(0.05, momentum=0.9),
    "attention_block": lambda: dlc.AdamW(0.001, weight_decay=0.1),
    "gather_i32": lambda: dlc.SGD(0.1, clip_norm=1.0),
    "state_dropout": lambda: dlc.RMSProp(0.01),
}


def model_names() -> list[str]:
    return sorted(p.stem for p in MODELS.glob("*.dl"))


def file_names() -> list[str]:
    """The golden files of one model, without `.txt`."""
    names = [s for s in STAGE_NAMES if s not in TARGET_STAGES]
    names += [f"{s}.{t}" for t in TARGETS for s in TARGET_STAGES]
    return [*names, "reference"]


def cases() -> list[tuple[str, str]]:
    return [(m, f) for m in model_names() for f in file_names()]


def expected_path(model: str, name: str) -> Path:
    return EXPECTED / model / f"{name}.txt"


@functools.cache
def compiled(model: str, target: str) -> Work:
    """Every stage of `model`'s eval and training programs for `target`."""
    if model not in OPTIMIZERS:
        raise KeyError(f"tests/golden/models/{model}.dl has no optimizer in texts.OPTIMIZERS")
    path = MODELS / f"{model}.dl"
    # The file name alone: it is what the generated code's comments cite (`mlp_adam.dl:10`).
    options = Options(optimizer=OPTIMIZERS[model](), batch_size=BATCH, target=target)
    return run_stages(Work(path.read_text(encoding="utf-8"), path.name), options)


def text(model: str, name: str) -> str:
    """What expected/<model>/<name>.txt should hold, ending in a newline."""
    stage, _, target = name.partition(".")
    if name == "reference":
        out = reference_text(compiled(model, TARGETS[0]))
    elif stage == "codegen":
        out = codegen_text(compiled(model, target))
    else:
        out = format_stage(compiled(model, target or TARGETS[0]), stage)
    return out.rstrip("\n") + "\n"


def reference_text(work: Work) -> str:
    """The graph the NumPy reference evaluates to fetch tensors (Session.eval): the model's
    eval form. Its training step is the simplify stage's train program (test_golden checks)."""
    return f"# the NumPy reference's eval graph\n{eval_form(work.graph)}"


def codegen_text(work: Work) -> str:
    """The codegen stage's text (`--emit codegen`) keeping a few kernels of each program: in
    `eval`, the first kernel of each kind (the forward pass); in `train`, the last of each
    kind (gradients and optimizer updates), so the two do not repeat one kernel; and every
    kernel that draws random numbers (its bits must be the NumPy reference's). The `outputs`
    program's kernels are eval's templates again: its fuse and plan texts show it."""
    programs = {}
    for name, prog in work.programs.items():
        if name == "outputs":
            programs[name] = dataclasses.replace(prog, sources={})
            continue
        kernels = list(prog.spec.kernels)
        if name == "train":
            kernels.reverse()
        kept: dict[str, object] = {}
        for k in kernels:
            kept.setdefault(k.kind, k)
        files = {f for k in kernels if k in kept.values() or _draws(k) for f in _files(k)}
        sources = {f: src for f, src in prog.sources.items() if f in files}  # in launch order
        programs[name] = dataclasses.replace(prog, sources=sources)
    head = "// golden: eval's first and train's last kernel of each kind, and those that draw random numbers"
    return f"{head}\n{format_stage(dataclasses.replace(work, programs=programs), 'codegen')}"


def _draws(kernel) -> bool:
    """Whether a kernel of a program spec implements a random op (its IR lines: `x = op(...)`)."""
    return any(re.search(r"= random_\w+\(", line) for line in kernel.ir)


def _files(kernel) -> tuple[str, ...]:
    """The shader files of one kernel of a program spec: a compute kernel has one, a texture
    kernel one per pass."""
    return (kernel.file,) if kernel.file else tuple(p.file for p in kernel.passes)
