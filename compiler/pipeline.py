"""The compiler as one ordered list of named stages (Triton's `add_stages`):

    parse -> build -> verify -> autodiff -> optimizer -> simplify -> fuse -> plan -> codegen

`STAGES` holds them in order; each is a function of a `Work` (what the stages before it made)
and `Options` (a frozen dataclass: the training step, batch size, codegen options, whether
to verify). `run_stages` runs them, checking every graph a stage made with the IR checker
(`verify.check_graph`) when `Options.verify` is on (`dlc --debug`, and the test suite: see
`set_verify`); `format_stage` prints what one stage made (`dlc compile --emit STAGE`).
A model compiles to programs: `eval` (every named tensor), `outputs` (the model's outputs
alone, `ir.model_outputs`, fused across the names between them: kept only when it launches
fewer kernels or stores fewer tensors than `eval`, as for an imported model, which names every
ONNX value) and, with a loss to train, `train` (one step and its updates); simplify runs once
on each of eval and train (`outputs` is fused from eval's graph).

`compile_program` runs the back end (fuse, plan, codegen) for one graph: the eager ops and the
GL session call it directly. It returns a `CompiledProgram`: the fusion and plan, the GLSL
sources, and `spec`, a `runtime.spec.ProgramSpec` (frozen dataclasses) describing every launch
that `dlc.runtime.executor` runs without the compiler. The artifact writer puts specs in
manifest.json through `ProgramSpec.to_json`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any

from dlc.runtime.dims import shape_symbols as symbols_of_shapes
from dlc.runtime.optional import require
from dlc.runtime.spec import FORMAT, ProgramSpec  # noqa: F401  (FORMAT: artifact.py reads it here)

from . import train_graph
from .codegen import CodegenOptions, KernelSource, Target, codegen_options, get_target
from .fusion import Capabilities, Fusion, format_fusion, fuse
from .ir import Graph, model_outputs
from .plan import DEFAULT_BATCH, Plan, format_plan, plan
from .simplify import simplify
from .verify import check_graph


@dataclass
class CompiledProgram:
    name: str
    fusion: Fusion
    plan: Plan
    kernels: list[KernelSource]
    spec: ProgramSpec
    sources: dict[str, str]  # file name -> GLSL text


@dataclass(frozen=True)
class Options:
    """How to compile a model: the training step (`optimizer`, a `dlc.runtime.optimizers` object, or
    None for no training step; `train_loss`, None for the model's first loss), the batch size the storage plan
    is made for, codegen options (`CodegenOptions`; a mapping such as `{"nan_flags": True}` is
    turned into one), and `verify`: check every
    graph between stages (None: the process default, `set_verify`)."""

    train_loss: str | None = None
    optimizer: Any = None
    batch_size: int | None = None
    codegen: CodegenOptions | Mapping | None = None
    verify: bool | None = None
    target: str | Target = "compute"  # "compute", "texture" or a codegen Target (compile_program)


@dataclass
class Work:
    """What the stages have made so far; each stage fills its fields."""

    source: str = ""
    path: str = "<model>"
    statements: list | None = None  # parse
    graph: Graph | None = None  # build: the model's IR
    loss: str | None = None  # autodiff: the loss the training step minimizes
    with_grads: Graph | None = None  # autodiff: the model with d loss / d param appended
    trained: dict[str, int] = field(default_factory=dict)  # autodiff: param -> gradient node
    graphs: dict[str, Graph] = field(default_factory=dict)  # optimizer, simplify: per program
    fusions: dict[str, Fusion] = field(default_factory=dict)  # fuse
    plans: dict[str, Plan] = field(default_factory=dict)  # plan
    programs: dict[str, CompiledProgram] = field(default_factory=dict)  # codegen


def _front_end():
    """(parser, lang): the front end's modules, imported by the stages that need them (lark:
    compile_program, the GL back end, needs no front end)."""
    return require("dlc.compiler.parser"), require("dlc.compiler.lang")


def _parse(w: Work, o: Options) -> list[Graph]:
    parser, _ = _front_end()
    w.statements = parser.parse(w.source, w.path)
    return []


def _build(w: Work, o: Options) -> list[Graph]:
    _, lang = _front_end()
    w.graph = lang.FrontEnd().run(w.statements)
    return [w.graph]


def _verify(w: Work, o: Options) -> list[Graph]:
    check_graph(w.graph)  # always: the model the later stages trust
    return []


def _autodiff(w: Work, o: Options) -> list[Graph]:
    if o.optimizer is None:
        return []

    w.loss, w.with_grads, w.trained = train_graph.gradients_for(w.graph, o.train_loss)
    return [w.with_grads]


def _optimizer(w: Work, o: Options) -> list[Graph]:
    w.graphs = {"eval": w.graph}
    if o.optimizer is None:
        return []

    w.graphs["train"] = train_graph.add_optimizer(w.graph, w.loss, w.with_grads, w.trained, o.optimizer)
    return [w.graphs["train"]]


def _simplify(w: Work, o: Options) -> list[Graph]:
    # Once per program: the train step is built from the unsimplified model, so its forward
    # part is simplified here with its gradients, not before.
    w.graphs = {name: simplify(g) for name, g in w.graphs.items()}  # CSE: softmax and the loss share one max
    return list(w.graphs.values())


def _roots(g: Graph, name: str) -> list[int]:
    return [g.names[g.losses[0]]] if name == "train" else sorted(set(g.names.values()))


def _fuse(w: Work, o: Options) -> list[Graph]:
    caps = _capabilities(o.target, o.codegen)
    w.fusions = {
        name: fuse(g, _roots(g, name), g.updates if name == "train" else (), caps=caps) for name, g in w.graphs.items()
    }
    outputs = _outputs_fusion(w, caps)
    if outputs is not None:
        w.fusions[OUTPUTS] = outputs
    return []


OUTPUTS = "outputs"  # the program of the model's outputs alone


def output_roots(model_graph: Graph, graph: Graph) -> list[int]:
    """The tensors of `graph` (the model's, simplified) that the model's outputs name
    (`ir.model_outputs` of the model as built, as `Session.predict` reads them)."""
    return sorted({graph.names[n] for n in model_outputs(model_graph) if n in graph.names})


def _outputs_fusion(w: Work, caps: Capabilities) -> Fusion | None:
    """The eval graph fused for the model's outputs alone, where that saves work: fewer
    kernels, or fewer stored tensors, than the eval program (which stores every named one)
    launches to fetch the same outputs."""
    g = w.graphs["eval"]
    roots = output_roots(w.graph, g)
    every = w.fusions["eval"]
    if not roots or set(roots) == set(every.roots):
        return None
    f = fuse(g, roots, (), caps=caps)
    used = _launched(every, roots)
    stored = sum(len(every.kernels[k].outputs) for k in used)
    return f if len(f.kernels) < len(used) or sum(len(k.outputs) for k in f.kernels) < stored else None


def _launched(f: Fusion, roots: Sequence[int]) -> set[int]:
    """The kernels of `f` that fetching `roots` launches (as the runtime's `needs` finds them)."""
    todo = [f.base(r) for r in roots]
    seen: set[int] = set()
    while todo:
        k = f.producer.get(todo.pop())
        if k is not None and k not in seen:
            seen.add(k)
            todo.extend(f.base(t) for t in f.kernels[k].inputs)
    return seen


def _plan(w: Work, o: Options) -> list[Graph]:
    dims = ref_dims(w.graphs["eval"], o.batch_size)
    w.plans = {name: plan(f, dims) for name, f in w.fusions.items()}
    return []


def _codegen(w: Work, o: Options) -> list[Graph]:
    for name, p in w.plans.items():
        w.programs[name] = render_program(name, p, o.codegen, o.target)
    return []


Stage = Callable[[Work, Options], list[Graph]]  # returns the graphs it made, to verify

STAGES: tuple[tuple[str, Stage], ...] = (
    ("parse", _parse),
    ("build", _build),
    ("verify", _verify),
    ("autodiff", _autodiff),
    ("optimizer", _optimizer),
    ("simplify", _simplify),
    ("fuse", _fuse),
    ("plan", _plan),
    ("codegen", _codegen),
)
STAGE_NAMES = tuple(name for name, _ in STAGES)

_verify_default = os.environ.get("DLC_VERIFY_IR", "") not in ("", "0")


def set_verify(on: bool) -> bool:
    """Check every graph between stages by default (the test suite turns it on); returns
    the previous setting."""
    global _verify_default
    old, _verify_default = _verify_default, bool(on)
    return old


def run_stages(work: Work, options: Options, *, start: str = "parse", stop: str | None = None) -> Work:
    """Run the stages from `start` through `stop` (default: the last) over `work`."""
    for name in (start, stop):
        if name is not None and name not in STAGE_NAMES:
            raise ValueError(f"unknown stage '{name}': choose one of {', '.join(STAGE_NAMES)}")
    verify = _verify_default if options.verify is None else options.verify
    names = STAGE_NAMES[STAGE_NAMES.index(start) :]
    for name, stage in STAGES:
        if name not in names:
            continue
        made = stage(work, options)
        if verify:
            for g in made:
                check_graph(g)
        if name == stop:
            break
    return work


def compile_model(model, options: Options, *, stop: str | None = None) -> Work:
    """Run the stages over a model already built (`dlc.compile`): from verify on."""
    return run_stages(Work(model.source, model.path, graph=model.graph), options, start="verify", stop=stop)


def ref_dims(graph: Graph, batch_size: int | None) -> dict[str, int]:
    """The size every symbolic dim is planned for."""
    names = symbols_of_shapes(n.shape for n in graph.nodes)
    return {d: int(batch_size or DEFAULT_BATCH) for d in names}


def format_stage(work: Work, stage: str) -> str:
    """What `stage` made, as text (`dlc compile --emit STAGE`)."""
    if stage == "parse":
        return "\n".join(f"{s.loc.line}: {_tree(s)}" for s in work.statements)
    if stage in ("build", "verify"):
        text = str(work.graph)
        return text if stage == "build" else f"{text}\n# verified: {len(work.graph.nodes)} nodes"
    if stage in ("autodiff", "optimizer") and work.with_grads is None:
        return f"# {stage}: no training step (pass --train)"
    if stage == "autodiff":
        grads = ", ".join(f"{p} -> %{i}" for p, i in work.trained.items())
        return f"{work.with_grads}\n# d {work.loss} / d param: {grads}"
    if stage == "optimizer":
        return str(work.graphs["train"])
    parts = []
    for name in work.graphs if stage == "simplify" else work.fusions or work.graphs:
        if stage == "simplify":
            parts += [f"=== program {name} ===", str(work.graphs[name])]
            continue
        prog = work.programs.get(name)
        count = f": {len(prog.kernels)} kernels" if prog else ""
        parts.append(f"=== program {name}{count} ===")
        if stage == "fuse":
            parts.append(format_fusion(work.fusions[name]))
        elif stage == "plan":
            parts.append(format_plan(work.plans[name]))
        elif stage == "codegen":
            for file, text in prog.sources.items():
                parts.append(f"// ----- {file} -----\n{text}")
        else:
            raise ValueError(f"unknown stage '{stage}': choose one of {', '.join(STAGE_NAMES)}")
    return "\n".join(parts)


def _tree(x) -> str:
    """A parse tree node without its source locations."""
    if is_dataclass(x):
        items = [_tree(getattr(x, f.name)) for f in fields(x) if f.name != "loc"]
        return f"{type(x).__name__}({', '.join(items)})"
    if isinstance(x, tuple):
        return "(" + ", ".join(_tree(v) for v in x if type(v).__name__ != "Loc") + ")"
    return repr(x)


def compile_program(
    graph: Graph,
    roots: Sequence[int],
    *,
    name: str = "eval",
    updates: Iterable[tuple[str, int]] = (),
    ref_dims: Mapping[str, int] | None = None,
    options: CodegenOptions | Mapping | None = None,
    target: str | Target = "compute",
) -> CompiledProgram:
    """Fuse, plan and render the work of fetching `roots` (and applying `updates`) for
    `target`: "compute" (GLSL 4.30 compute shaders), "texture" (codegen/texture.py) or a
    codegen Target object (codegen/target.py)."""
    caps = _capabilities(target, options)
    return render_program(name, plan(fuse(graph, roots, updates, caps=caps), ref_dims), options, target)


def _capabilities(target: str | Target, options: CodegenOptions | Mapping | None) -> Capabilities:
    """What one kernel may do on `target` of the device the options name (its `limits`; none:
    the spec minimums, so an artifact compiled offline runs on any conforming device)."""
    return get_target(target).capabilities(codegen_options(options))


def render_program(
    name: str, storage: Plan, options: CodegenOptions | Mapping | None, target: str | Target
) -> CompiledProgram:
    """The codegen stage for one planned program and target."""
    rendered = get_target(target).render(name, storage, codegen_options(options))
    return CompiledProgram(name, storage.fusion, storage, rendered.kernels, rendered.spec, rendered.sources)
