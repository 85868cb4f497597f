"""The `dlc` command line: check, compile, train, eval, plot-model, import, export, info (SPEC section 2).

Errors in a model or in data print the located message and exit 1 without a
traceback (`--debug` shows one); usage errors exit 2 (argparse). A MODEL may
be a `.dl` file or a compiled artifact folder (`dlc compile` writes one).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import os
import signal
import sys
import traceback
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from . import __version__, train_recipe, workers
from . import text as text_data
from .backends.artifact import ArtifactBackend, ArtifactModel, is_artifact
from .callbacks import EarlyStopping, EpochRunner, ModelCheckpoint
from .metrics import metric_tensors
from .runtime import optimizers
from .runtime.artifact.files import read_artifact
from .runtime.errors import DataError, DlcError, TrainingDiverged, UsageError, did_you_mean
from .runtime.training import steps_per_epoch
from .runtime.weights import write_atomic
from .stdout_guard import guard_stdout

OPTIMIZERS = tuple(optimizers.OPTIMIZERS)  # names, in the order --help lists them
DEFAULT_OPTIMIZER = "sgd"  # the seeds' optimizer; --lr picks the step size
EXIT_INTERRUPTED = 130


# -- the model a command works on --------------------------------------------------
# A MODEL argument is a .dl file (a dlc.Model) or an artifact folder (an ArtifactModel, read
# from its manifest): both name their inputs, params, tensors and losses; a command runs on a
# dlc.Session over either.


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


def compiled_optimizer(model: ArtifactModel, lr: float | None) -> optimizers.Optimizer:
    """The optimizer an artifact was compiled with (its hyper-parameters), `lr` if given."""
    config = dict(model.optimizer or {"name": DEFAULT_OPTIMIZER})
    cls = optimizers.OPTIMIZERS[config.pop("name")]
    if lr is not None:
        config["lr"] = lr
    return cls(**config)


def read_model_source(path: str) -> str:
    from .model import read_text  # lark only for a file that is not UTF-8

    try:
        return read_text(path)  # bytes that are not UTF-8: a CompileError at their line:col
    except FileNotFoundError:
        raise DlcError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise DlcError(f"{path}: a folder that is not a compiled artifact (no manifest.json)") from None
    except OSError as e:
        raise DlcError(f"{path}: cannot read the model ({e})") from None


def open_model(path: str):
    """A .dl file as a dlc.Model, an artifact folder as an ArtifactModel (no GL needed)."""
    if is_artifact(path):
        return ArtifactModel(path)
    import dlc

    text = read_model_source(path)
    # A trailing newline makes dlc.compile take it as source text, never as a path.
    return dlc.compile(text if text.endswith("\n") else text + "\n", name=path)


def open_session(model, backend: str | None, seed: int, freeze: Sequence[str] = (), parallel=None):
    """The Session a command runs on: an artifact's programs on gl (its model.dl with its
    params on numpy), a .dl model on either; `freeze`: globs of params training leaves alone."""
    import dlc

    if isinstance(model, ArtifactModel) and backend != "numpy":
        wanted = os.environ.get("DLC_TARGET", "").strip()  # --target sets it
        if wanted and wanted != model.target:
            raise UsageError(
                f"{model.path} was compiled for the {model.target} target, not "
                f"{wanted} (recompile it with --target {wanted})"
            )
    return dlc.Session(model, backend=backend, seed=seed, freeze=freeze, parallel=parallel)


def needed_inputs(model, names: Iterable[str], session=None) -> set[str]:
    """The inputs fetching `names` reads: from a .dl model's graph, or from the session over
    an artifact (its eval program's kernels)."""
    if isinstance(model, ArtifactModel):
        return session.needed_inputs(list(names))
    from dlc.compiler.reference import leaf_inputs

    return set(leaf_inputs(model.graph, [model.graph.names[n] for n in names]))


def param_inits(model) -> dict[str, tuple]:
    if isinstance(model, ArtifactModel):
        return {}
    return {n: model.graph.node(n).attr("init") for n in model.graph.params}


def weights_text(path: str | None, model, seed: int) -> str:
    """Which params a run starts from, as the start line says it."""
    if path:
        return path
    return (
        f"the artifact's params ({model.path})" if isinstance(model, ArtifactModel) else f"initial params, seed {seed}"
    )


def run_line(session, weights: str) -> str:
    """'backend gl, target compute, device RENDERER; weights ...': where and with what a
    command runs (one line, printed at the start of train and eval)."""
    impl = getattr(session, "backend", None)
    backend = getattr(impl, "name", "gl")  # an artifact runs on gl
    target = "compute"
    if backend == "gl":
        from dlc.runtime.context import get_context

        device = get_context().renderer
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


def describe_artifact(path: str) -> str | None:
    """What an artifact folder holds, e.g. 'a training artifact of quadratic.dl (adam, loss
    cost)'; None when `path` holds no readable manifest."""
    import json

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


# -- check -------------------------------------------------------------------------


def cmd_check(args: argparse.Namespace) -> int:
    from .report import model_table

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
        frozen = () if isinstance(t, ArtifactModel) else {p for p in t.params if t.graph.node(p).attr("frozen")}
        states = () if isinstance(t, ArtifactModel) else set(t.graph.states)
        metrics = getattr(t, "metrics", ())  # `metric NAME = EXPR` (an artifact keeps no statements)
        print(model_table(t.inputs, t.params, t.tensors, list(t.losses), param_inits(t), frozen, states, metrics))
    return status


# -- compile -----------------------------------------------------------------------


def cmd_compile(args: argparse.Namespace) -> int:
    if os.path.isdir(args.model):
        raise UsageError(f"{args.model} is a folder; dlc compile takes a .dl model")
    if args.optimizer and args.train is None:
        raise UsageError("--optimizer needs --train")
    model = open_model(args.model)
    train_loss = pick_loss(model, None if args.train is True else args.train) if args.train else None
    optimizer = None
    if train_loss is not None:
        optimizer = optimizers.make(args.optimizer or DEFAULT_OPTIMIZER, lr=None)
    target = args.target or os.environ.get("DLC_TARGET", "").strip() or "compute"
    options = dict(train_loss=train_loss, optimizer=optimizer, batch_size=args.batch_size, target=target)
    out_dir = args.output or default_artifact_path(args.model)

    artifact = _artifact_module()
    from dlc.compiler.pipeline import Options, Work, format_stage, run_stages

    # Every stage from the source text, once: printed and written.
    opts = Options(train_loss, optimizer, args.batch_size, verify=True if args.debug else None, target=target)
    work = run_stages(Work(model.source, model.path), opts)
    progs = work.programs
    if args.emit == "ir":
        # The model's IR, or with --train the training step (gradients and updates).
        print(str(progs["train"].fusion.graph if train_loss is not None else model.graph))
        if train_loss is not None:
            print()
            print(artifact.format_stage(progs, "kernels"))
    elif args.emit in ("glsl", "plan"):
        print(artifact.format_stage(progs, args.emit))
    elif args.emit == "dot":
        print(model_dot(model, train_loss, optimizer, kernels=False, progs=progs), end="")
    elif args.emit:
        print(format_stage(work, args.emit))
    before = describe_artifact(out_dir) if is_artifact(out_dir) else None
    where = artifact.write_artifact(model, out_dir, **options, progs=progs)
    after = describe_artifact(str(where))
    print(f"wrote {where}", file=sys.stderr if args.emit else sys.stdout)
    if before is not None and before != after:  # say so: `--emit glsl` once replaced a --train build unseen
        print(f"warning: {where} held {before}; it now holds {after}", file=sys.stderr)
    return 0


def model_dot(model, train_loss: str | None, optimizer, kernels: bool, progs=None) -> str:
    """The DOT text of the model (with a loss to train: of its training step); `kernels`
    draws the fused GLSL kernels as clusters."""
    from dlc.compiler.dot import to_dot

    if progs is None and (kernels or train_loss is not None):
        progs = _artifact_module().programs(model, train_loss=train_loss, optimizer=optimizer)
    name = os.path.splitext(os.path.basename(model.path))[0] or "model"
    if train_loss is not None:
        fusion = progs["train"].fusion
        return to_dot(fusion.graph, fusion if kernels else None, f"{name} (training step)")
    if kernels:
        fusion = progs["eval"].fusion
        return to_dot(fusion.graph, fusion, name)
    return to_dot(model.graph, None, name)


# -- plot-model --------------------------------------------------------------------


def cmd_plot_model(args: argparse.Namespace) -> int:
    from dlc.compiler.dot import FORMATS, RenderError, render

    fmt = os.path.splitext(args.output)[1].lower().lstrip(".")
    if fmt not in FORMATS:
        raise UsageError(f"-o {args.output}: name a .svg, .png or .pdf file (the extension picks the format)")
    if os.path.isdir(args.model):
        raise UsageError(f"{args.model} is a folder; dlc plot-model takes a .dl model")
    model = open_model(args.model)
    train_loss = pick_loss(model, None if args.train is True else args.train) if args.train else None
    optimizer = optimizers.make(DEFAULT_OPTIMIZER) if train_loss is not None else None
    text = model_dot(model, train_loss, optimizer, kernels=args.kernels)
    try:
        picture = render(text, fmt)
    except RenderError as e:
        raise DlcError(
            f"{e}; `dlc compile {args.model} --emit dot` prints the graph as text without Graphviz"
        ) from None
    write_atomic(args.output, lambda f: f.write(picture))
    print(f"wrote {args.output}")
    return 0


def _artifact_module():
    import importlib

    try:
        artifact = importlib.import_module("dlc.compiler.emit")
    except ModuleNotFoundError as e:
        if e.name != "dlc.compiler.emit":
            raise
        raise DlcError(
            "this build of dlc has no GLSL compiler (dlc.compiler.emit is missing): cannot write an artifact"
        ) from None
    return artifact


# -- evaluation over a data file ---------------------------------------------------


def evaluate(session, data, names: Sequence[str], model, batch_size: int | None) -> dict[str, np.ndarray]:
    """Fetch `names` over all of `data`, in batches of `batch_size` examples if given.

    Per-example fetches (whose first dim is the data's example dim) are
    concatenated along axis 0; all others (scalars such as a loss or an
    accuracy) are averaged over the batches, weighted by batch size.
    """
    from .data import example_inputs

    example_dims = {model.inputs[n][0] for n in example_inputs(model.inputs, data.arrays)}
    shapes = model_shapes(model)
    per_example = {n for n in names if shapes[n] and shapes[n][0] in example_dims}
    parts: dict[str, list[np.ndarray]] = {n: [] for n in names}
    weights: list[int] = []
    for feeds, count in data.batches(model.inputs, batch_size):
        values = session.eval(list(names), feeds)
        weights.append(count)
        for n in names:
            v = np.asarray(values[n])
            parts[n].append(v if v.dtype == np.int32 else v.astype(np.float32))  # i32 fetches stay ints
    out: dict[str, np.ndarray] = {}
    for n in names:
        if n in per_example or len(parts[n]) == 1:
            out[n] = parts[n][0] if len(parts[n]) == 1 else np.concatenate(parts[n], axis=0)
        else:
            w = np.asarray(weights, dtype=np.float64)
            stacked = np.stack(parts[n]).astype(np.float64)
            avg = np.tensordot(w / w.sum(), stacked, axes=1)
            out[n] = np.asarray(avg, dtype=np.float32)
    return out


def parse_fetch(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",")]
    if any(not n for n in names):
        raise UsageError(f"--fetch '{text}': give names separated by commas, e.g. --fetch y,cost")
    return list(dict.fromkeys(names))


def cmd_eval(args: argparse.Namespace) -> int:
    from .data import load_data
    from .report import describe_array
    from .runtime.weights import save_npz

    names = parse_fetch(args.fetch)
    _apply_target(args)
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
    values = evaluate(session, data, names, t, args.batch_size)
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


# -- train -------------------------------------------------------------------------


# Ctrl-C, `kill` (and `timeout`, a container stop), a closed terminal: each stops a run alike.
STOP_SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))


class StopFlag:
    """SIGINT, SIGTERM or SIGHUP while training (and saving): the first one asks to stop
    after the current step; a second quits at once (KeyboardInterrupt)."""

    def __init__(self, notify: Callable[[str], None]):
        self.stop = False
        self.signal: int | None = None  # the first one received
        self.notify = notify
        self._old: dict[int, object] = {}

    def __enter__(self) -> StopFlag:
        for sig in STOP_SIGNALS:
            if signal.getsignal(sig) is signal.SIG_IGN:  # `nohup dlc train`: it stays ignored
                continue
            try:
                self._old[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread (an embedding): keep Python's default
                break
        return self

    def _handle(self, signum, frame) -> None:
        if self.stop:  # a second signal: stop now, without saving
            raise KeyboardInterrupt
        self.stop, self.signal = True, signum
        again = "Ctrl-C again" if signum == signal.SIGINT else "another signal"
        self.notify(
            f"interrupted ({signal.Signals(signum).name}): stopping after this step ({again} to quit without saving)"
        )

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, as a shell reports a process it stopped (130: Ctrl-C)."""
        return 128 + self.signal if self.signal is not None else EXIT_INTERRUPTED

    def __exit__(self, *exc) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


def _require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise DlcError(
            "--plot needs matplotlib, which is not installed: pip install 'dlc[plot]' (or pip install matplotlib)"
        ) from None


@dataclass
class TrainLog:
    """What a run records: one row per step, val metrics on the step that ended an epoch."""

    rows: list[dict[str, float]] = field(default_factory=list)
    val_columns: list[str] = field(default_factory=list)

    def columns(self) -> list[str]:
        return ["step", "epoch", "loss", *self.val_columns]

    def write_csv(self, path: str) -> None:
        import csv
        import io

        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        cols = self.columns()
        w.writerow(cols)
        for r in self.rows:
            w.writerow([_csv_cell(r.get(c)) for c in cols])
        write_atomic(path, lambda f: f.write(buf.getvalue().encode()))

    def plot(self, path: str, loss_name: str) -> None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        steps = [r["step"] for r in self.rows]
        fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
        ax.plot(steps, [r["loss"] for r in self.rows], lw=1, label=f"{loss_name} (train)")
        val = [(r["step"], r["val_loss"]) for r in self.rows if "val_loss" in r]
        if val:
            ax.plot(*zip(*val), "o-", lw=1.5, label=f"{loss_name} (val)")
        losses = [r["loss"] for r in self.rows if math.isfinite(r["loss"])]
        if losses and min(losses) > 0 and max(losses) / min(losses) > 100:
            ax.set_yscale("log")
        ax.set_xlabel("step")
        ax.set_ylabel(loss_name)
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        write_atomic(path, lambda f: fig.savefig(f, format="png"))
        plt.close(fig)


def _csv_cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float) and v != int(v) or isinstance(v, float) and not math.isfinite(v):
        return repr(v)
    return str(int(v)) if isinstance(v, (int, float)) else str(v)


def _apply_target(args: argparse.Namespace) -> None:
    """--target picks the gl backend's target for this run (as DLC_TARGET does)."""
    if args.target is None:
        return
    if args.backend == "numpy":
        raise UsageError(f"--target {args.target} is for the gl backend, not --backend numpy")
    os.environ["DLC_TARGET"] = args.target


TARGET_HELP = (
    "gl target: compute (GLSL 4.30 compute shaders) or texture (GLSL 3.30 fragment "
    "shaders over float textures); default: DLC_TARGET, else compute when the "
    "context has compute shaders"
)


def cmd_generate(args: argparse.Namespace) -> int:
    """Print the prompt, then each sampled character as it comes."""
    _apply_target(args)
    if args.tokens < 0 or not args.temperature >= 0:
        raise UsageError("--tokens and --temperature must be 0 or more")
    t = open_model(args.model)
    vocab = text_data.Vocab.load(args.vocab or text_data.vocab_path(args.weights))
    session = open_session(t, args.backend, 0)
    session.load(args.weights)
    prompt = args.prompt.replace("\\n", "\n")  # a typed \n is a newline
    print(prompt, end="", flush=True)
    session.generate(
        prompt,
        args.tokens,
        vocab=vocab,
        block=args.block,
        temperature=args.temperature,
        top_k=args.top_k,
        seed=args.seed,
        on_token=lambda c: print(c, end="", flush=True),
    )
    print()
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from .distributed import launched_by_mpi

    several = (args.workers or 1) > 1 or launched_by_mpi()
    for flag, given in (("--early-stop", args.early_stop), ("--keep-best", args.keep_best)):
        if given and several:  # said once, before any rank starts
            raise UsageError(f"{flag} is not available with several workers (data-parallel runs)")
    launched = workers.launch(args)  # --workers N: this command again, under mpiexec -n N
    if launched is not None:
        return launched
    world = workers.world_for(args)
    if world is None or world.rank == 0:
        return _train(args, world)
    with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):  # rank 0 alone reports
        return _train(args, world)


def _train(args: argparse.Namespace, world) -> int:
    from .data import load_data
    from .progress import TrainProgress

    _apply_target(args)
    if args.resume and args.init:
        raise UsageError("--resume goes on with a checkpoint's params (and all the rest); --init: give one of them")
    t = open_model(args.model)
    artifact = isinstance(t, ArtifactModel)
    loss = pick_loss(t, args.loss)
    optimizer = None
    if not artifact or args.optimizer or args.lr is not None:
        # An artifact trains with its compiled optimizer; only --lr may change (it is fed).
        compiled = (t.optimizer or {}).get("name") if artifact else None
        optimizer = optimizers.make(args.optimizer or compiled or DEFAULT_OPTIMIZER, lr=args.lr)
    # An artifact's session answers which inputs a fetch reads (it loads the programs).
    session = open_session(t, args.backend, args.seed, args.freeze or ()) if artifact else None
    # Metrics (`accuracy`, `metric.*`, --metric) are reported with the val loss, as Keras's are.
    metrics = metric_tensors(t, args.metric)
    val_names = [loss, *metrics.values()]
    text = None
    if args.data.lower().endswith(".txt"):  # a corpus: random windows, its last 10% held out
        if not args.steps or args.val:
            raise UsageError("training on text draws random windows: give --steps N (its last 10% is the val data)")
        text, val = text_data.for_model(args.data, t.inputs, t.input_dtypes, args.block, args.batch_size, args.seed)
        data = text_data.TextRun(text)
    else:
        for flag, given in (
            ("--metric", args.metric),
            ("--early-stop", args.early_stop),
            ("--keep-best", args.keep_best),
        ):
            if given and not args.val:
                raise UsageError(f"{flag} works on the validation data: give --val FILE")
        data = load_data(args.data, t.inputs, needed_inputs(t, [loss], session), t.input_dtypes)
        val = load_data(args.val, t.inputs, needed_inputs(t, val_names, session), t.input_dtypes) if args.val else None
    if args.plot:
        _require_matplotlib()
    for flag, path in (("--init", args.init), ("--resume", args.resume)):
        if path and not os.path.isfile(path):
            raise DataError(f"{path}: no such file ({flag})")
    save_path = args.save or default_weights_path(t.path)
    checkpoints = CheckpointWriter(args, save_path)

    lead = world is None or world.rank == 0  # the rank that validates, checkpoints and saves
    if session is None:
        session = open_session(t, args.backend, args.seed, args.freeze or (), parallel=world)
    if args.init:
        session.load(args.init)
    done = 0
    if args.resume:
        session.restore(args.resume)
        if session.last_run is None:
            raise DataError(
                f"{args.resume}: the checkpoint holds no run to go on with (its run diverged): "
                f"start from its params with --init {args.resume}"
            )
        done = session.last_run.done
        if not artifact and not args.optimizer:  # the checkpoint's optimizer, --lr if given
            optimizer = session.optimizer()
            optimizer = dataclasses.replace(optimizer, lr=args.lr) if args.lr is not None else optimizer
    if artifact and not args.optimizer and not isinstance(session.backend, ArtifactBackend):
        optimizer = compiled_optimizer(t, args.lr)  # an artifact's model on the numpy backend
    announce_run(session, f"{args.resume} (step {done})" if args.resume else weights_text(args.init, t, args.seed))

    epochs = None if args.steps else (args.epochs or 1)
    per_epoch = steps_per_epoch(data.examples, args.batch_size)
    total = args.steps or (epochs * per_epoch)
    recipe = train_recipe.optimizer_options(args, total)
    if recipe:
        if optimizer is None:
            raise UsageError(f"{args.model} trains with the recipe it was compiled with: give --optimizer to change it")
        optimizer = train_recipe.apply(optimizer, recipe)
    log = TrainLog(val_columns=["val_loss", *(f"val_{k}" for k in metrics)] if val else [])
    progress = TrainProgress(total, epochs)
    checkpoints.notify = progress.message
    if args.resume:
        progress.message(f"resuming {args.resume}: step {done} of {total} done (epoch {done // per_epoch + 1} next)")
    first_loss: list[float] = []

    def callback(step: int, epoch: int, value: float, batch_examples: int) -> bool:
        value = float(value)
        if not first_loss:
            first_loss.append(value)
        progress.update(step, epoch, value, batch_examples)
        log.rows.append({"step": step, "epoch": epoch, "loss": value})
        epochs_run.step_hook(step, epoch, value, batch_examples)
        return not (world.stopping if world else stop.stop)

    def validate() -> dict[str, float]:
        values = evaluate(session, val, val_names, t, args.batch_size)
        return {"val_loss": float(values[loss])} | {f"val_{k}": float(values[n]) for k, n in metrics.items()}

    def report(epoch: int, logs) -> None:
        if "val_loss" not in logs:  # no --val, or a rank other than 0 (which does not validate)
            return
        row = log.rows[-1] if log.rows else {}
        row.update({k: v for k, v in logs.items() if k.startswith("val_")})
        text = f"epoch {epoch} (step {len(log.rows)}): val {loss} {logs['val_loss']:.6g}"
        text += "".join(f"  val {k} {logs[f'val_{k}']:.4g}" for k in metrics)
        progress.message(text)

    # --early-stop and --keep-best are the callbacks Session.fit takes (dlc/callbacks.py).
    callbacks = []
    if args.early_stop:
        callbacks.append(EarlyStopping("val_loss", patience=args.early_stop))
    if args.keep_best:
        callbacks.append(ModelCheckpoint(None, "val_loss", restore_best=True))
    epochs_run = EpochRunner(session, callbacks, validate if val is not None and lead else None, report)
    epochs_run.begin()

    diverged: TrainingDiverged | None = None
    interrupted = False
    # The signals stay caught while the run is saved: one then lets the save finish.
    with StopFlag(progress.message) as stop:
        if world is not None:
            world.stop_requested = lambda: stop.stop
        try:
            try:
                length = dict(steps=args.steps) if args.steps else dict(epochs=epochs)
                session.train(
                    data.arrays,
                    loss=loss,
                    optimizer=optimizer,
                    batch_size=args.batch_size,
                    **length,
                    shuffle=True,
                    callback=callback,
                    on_epoch_end=epochs_run.epoch_hook,
                    resume=bool(args.resume),
                    checkpoint=(lambda: checkpoints.write(session)) if args.checkpoint_every and lead else None,
                    checkpoint_every=args.checkpoint_every if lead else None,
                )
            except TrainingDiverged as e:  # the session has put back the last finite params
                diverged = e
            finally:
                progress.close()
            interrupted = world.stopping if world else stop.stop
            if not lead:
                return stop.exit_code if interrupted else 1 if diverged else 0
            if diverged is None and (interrupted or checkpoints.wanted):
                checkpoints.write(session)  # before the weights: it holds them too
            epochs_run.end()  # --keep-best: the best epoch's params go back before saving
            saved, save_error = _save_weights(session, save_path, checkpoints)
            if text is not None and saved is not None:  # every later command reads it
                text.vocab.save(text_data.vocab_path(saved))
        except KeyboardInterrupt:  # a second signal: quit at once, keep no weights
            progress.close()
            print("interrupted twice: quit without saving", file=sys.stderr)
            return stop.exit_code

    elapsed = progress.elapsed
    args.outcome = "diverged" if diverged else "interrupted" if interrupted else "done"
    errors = [save_error] if save_error else []
    for flag, path, write in (
        ("--log", args.log, lambda: log.write_csv(args.log)),
        ("--plot", args.plot if log.rows else None, lambda: log.plot(args.plot, loss)),
    ):
        if path:
            try:
                write()
            except OSError as e:
                errors.append(f"error: cannot write {path} ({flag}): {e.strerror or e}")
    final_val = None
    if val is not None and saved is not None:  # the summary describes the params just saved
        final_val = evaluate(session, val, val_names, t, args.batch_size)
    _summary(t, data, log, progress, elapsed, first_loss, loss, saved, args, per_epoch, final_val, diverged, metrics)
    if epochs_run.stop_reason():
        print(f"  {epochs_run.stop_reason()}")
    if args.keep_best and callbacks[-1].best_epoch is not None:
        print(f"  kept the params of epoch {callbacks[-1].best_epoch} (the best val {loss})")
    for text in errors:
        print(text, file=sys.stderr)
    if diverged is not None:
        print(
            f"error: training diverged at step {diverged.step}: the loss {loss} is "
            f"{diverged.loss}; "
            + (f"saved the params of the last step with a finite loss to {saved}" if saved else "nothing saved"),
            file=sys.stderr,
        )
        rate = getattr(optimizer, "lr", None)
        if rate is not None:  # the usual cause: a step too large for the data's scale
            print(f"  the learning rate may be too large for this data: try an --lr below {rate:g}", file=sys.stderr)
        return 1
    if interrupted:
        where = checkpoints.written or "nowhere (it could not be written)"
        print(f"interrupted: stopped early; checkpoint written to {where}", file=sys.stderr)
        if checkpoints.written:
            print(f"  to go on: {checkpoints.resume_command()}", file=sys.stderr)
    if errors:
        return 1
    return stop.exit_code if interrupted else 0


def default_checkpoint_path(weights_path: str) -> str:
    """`mlp.weights.npz` -> `mlp.weights.ckpt.npz` (beside the weights)."""
    stem, ext = os.path.splitext(weights_path)
    return stem + ".ckpt" + (ext or ".npz")


class CheckpointWriter:
    """Where `dlc train` writes its checkpoints, and the last one written. A checkpoint that
    cannot be written goes to a fallback (or is skipped with a warning): the run goes on."""

    def __init__(self, args: argparse.Namespace, save_path: str):
        self.args = args
        self.path = args.checkpoint or default_checkpoint_path(save_path)
        self.wanted = bool(args.checkpoint or args.checkpoint_every)  # also at the run's end
        self.written: str | None = None
        self.notify: Callable[[str], None] = lambda text: print(text, file=sys.stderr)

    def write(self, session) -> None:
        from .runtime.checkpoint import checkpoint_arrays
        from .runtime.weights import SaveFailed, save_or_rescue

        try:
            written, why = save_or_rescue(self.path, checkpoint_arrays(session.checkpoint()), "the checkpoint")
        except SaveFailed as e:
            self.notify(f"warning: {e}")
            return
        if why:
            self.notify(f"warning: cannot write {self.path} ({why}): wrote the checkpoint to {written} instead")
        self.written = written

    def resume_command(self) -> str:
        """The command line that goes on with the run: this one, --resume the checkpoint."""
        import shlex

        argv, skip = [], False
        for word in getattr(self.args, "argv", None) or ["train", self.args.model, "--data", self.args.data]:
            if skip:
                skip = False
            elif word in ("--init", "--resume"):
                skip = True
            elif not word.startswith(("--init=", "--resume=")):
                argv.append(word)
        return shlex.join(["dlc", *argv, "--resume", self.written or self.path])


def _save_weights(session, path: str, checkpoints: CheckpointWriter) -> tuple[str | None, str | None]:
    """(where the params went, an error to report): `path`, or a fallback when `path` cannot
    be written; (None, how to keep them) when nothing can be."""
    from .runtime.weights import SaveFailed, save_or_rescue

    try:
        saved, why = save_or_rescue(path, {**session.params, **session.states}, "the trained params")
    except SaveFailed as e:
        advice = "(or give --save another place) and run again"
        if checkpoints.written:
            advice = f"the checkpoint {checkpoints.written} holds them: {checkpoints.resume_command()}"
        return None, f"error: {e} {advice}" if not checkpoints.written else f"error: {e}\n  {advice}"
    if why:
        return saved, f"error: cannot write {path} ({why}): the trained params were saved to {saved} instead"
    return saved, None


def _summary(
    t,
    data,
    log: TrainLog,
    progress,
    elapsed: float,
    first_loss: list[float],
    loss: str,
    save_path: str | None,
    args: argparse.Namespace,
    per_epoch: int,
    final_val: dict[str, np.ndarray] | None,
    diverged: TrainingDiverged | None,
    metrics: dict[str, str],
) -> None:
    steps = len(log.rows)
    epochs = steps / per_epoch if per_epoch else 0
    shown = f"{epochs:,.0f}" if epochs >= 100 else f"{epochs:.3g}"
    rate = progress.examples / elapsed if elapsed > 0 else 0.0
    verb = "trained" if args.outcome == "done" else f"{args.outcome}: trained"
    print(
        f"{verb} {t.path} on {data.path}: {steps:,} steps ({shown} epochs) in {elapsed:.2f} s, {rate:,.0f} examples/s"
    )
    if log.rows:
        print(f"  {loss}: {first_loss[0]:.6g} at the first step -> {log.rows[-1]['loss']:.6g} at the last")
    if final_val is not None:
        acc = "".join(f", {k} {float(final_val[n]):.4g}" for k, n in metrics.items())
        which = "the last params with a finite loss" if diverged is not None else f"after step {steps:,}"
        if args.keep_best and diverged is None:
            which = "the best epoch's"
        shown = args.val or "the last 10%"
        print(f"  val ({shown}) of the saved params ({which}): {loss} {float(final_val[loss]):.6g}{acc}")
    print(f"  weights saved to {save_path}" if save_path else "  weights NOT saved (see the error below)")
    if args.log:
        print(f"  log written to {args.log}")
    if args.plot and log.rows:
        print(f"  loss curve written to {args.plot}")


# -- import ------------------------------------------------------------------------


def cmd_import(args: argparse.Namespace) -> int:
    from dlc.onnx_import import import_onnx

    imported = import_onnx(
        args.model,
        batch=args.batch,
        max_const_bytes=args.max_const_bytes,
        freeze=args.freeze or (),
        trainable=args.trainable,
    )
    out = args.output or os.path.splitext(os.path.basename(args.model))[0] + ".dl"  # in the working folder
    weights = imported.save(out)
    print(f"wrote {out} ({len(imported.source.splitlines())} lines) and {weights} ({len(imported.weights)} params)")
    for kind, names in (("input", imported.inputs), ("output", imported.outputs)):
        for onnx_name, dl_name in names.items():
            shape = imported.model.graph.shape(dl_name)
            dtype = "i32" if imported.model.input_dtypes.get(dl_name) == "i32" and kind == "input" else ""
            print(f"  {kind} {onnx_name} -> {dl_name}: {dtype}[{', '.join(map(str, shape))}]")
    return 0


# -- export ------------------------------------------------------------------------


def cmd_export(args: argparse.Namespace) -> int:
    from dlc.web import export_web

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


# -- info --------------------------------------------------------------------------


def cmd_info(args: argparse.Namespace) -> int:
    if args.model:  # a model's params per layer, as Model.summary() prints them
        from .report import param_summary

        t = open_model(args.model)
        frozen = () if isinstance(t, ArtifactModel) else {p for p in t.params if t.graph.node(p).attr("frozen")}
        print(f"{t.path}:")
        print(param_summary(t.params, frozen))
        return 0
    from dlc.runtime.info import describe

    print(f"dlc {__version__}")
    print(describe())
    return 0


# -- argument parsing --------------------------------------------------------------


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{text}'") from None
    if v <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {v}")
    return v


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got '{text}'") from None
    if not (v > 0 and math.isfinite(v)):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text}")
    return v


def _batch_dim(text: str) -> str | int:
    if text.isdigit():
        return _positive_int(text)
    if not text.isidentifier() or not text.isascii():
        raise argparse.ArgumentTypeError(
            f"expected a dim name (letters, digits, _) or a positive integer, got '{text}'"
        )
    return text


class _Parser(argparse.ArgumentParser):
    """No abbreviated flags (`--epoch` is not `--epochs`): a typo must not pass for a flag."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)


# What PyTorch, Keras and other CLIs call a flag -> dlc's name for it.
FLAG_ALIASES = {
    "--learning-rate": "--lr",
    "--learningrate": "--lr",
    "--epoch": "--epochs",
    "--num-epochs": "--epochs",
    "--batch": "--batch-size",
    "--bs": "--batch-size",
    "--step": "--steps",
    "--max-steps": "--steps",
    "--optim": "--optimizer",
    "--opt": "--optimizer",
    "--validation": "--val",
    "--validation-data": "--val",
    "--val-data": "--val",
    "--output": "--save",
    "--out": "--save",
    "--early-stopping": "--early-stop",
    "--patience": "--early-stop",
    "--metrics": "--metric",
    "--weights": "--init",
}


def suggest_flag(word: str, options: Sequence[str]) -> str:
    """' (did you mean --lr?)' for an unknown flag, from the command's own flags: the same
    with '-' for '_', a common name from other tools, a flag it abbreviates, a close spelling."""
    import difflib

    flag = word.split("=", 1)[0]
    norm = flag.replace("_", "-").lower()
    candidates = [norm, FLAG_ALIASES.get(norm, "")]
    candidates += [o for o in options if o.startswith(norm) and len(norm) > 2]
    candidates += difflib.get_close_matches(norm, options, n=1, cutoff=0.6)
    for c in candidates:
        if c in options and c != flag:
            return f" (did you mean {c}?)"
    return ""


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """`parser.parse_args`, but an unknown flag is reported by the command it was given to,
    with the flag it looks like."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        sub = _subparsers(parser).get(getattr(args, "command", None), parser)
        flags = [w for w in extra if w.startswith("-")]
        word = flags[0] if flags else extra[0]
        options = [o for a in sub._actions for o in a.option_strings if o.startswith("--")]
        hint = suggest_flag(word, options) if word.startswith("-") else ""
        sub.error(f"unrecognized argument{'s' if len(extra) > 1 else ''}: {' '.join(extra)}{hint}")
    return args


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


class _Formatter(argparse.RawDescriptionHelpFormatter):
    def __init__(self, prog: str):
        super().__init__(prog, max_help_position=32)


def build_parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help="show a traceback with any error"
    )
    p = _Parser(
        prog="dlc",
        formatter_class=_Formatter,
        description="dlc compiles models written in the .dl language to OpenGL shaders and runs "
        "them:\nevaluation, gradients and training.",
        epilog="examples:\n"
        "  dlc check samples/mlp_digits.dl\n"
        "  dlc train samples/quadratic.dl --data samples/data/quadratic.npz --steps 200\n"
        "  dlc eval samples/quadratic.dl --data samples/data/quadratic.npz --fetch y,cost "
        "--weights quadratic.weights.npz\n"
        "  dlc compile samples/mlp_digits.dl --emit ir\n"
        "  dlc plot-model samples/mlp_digits.dl -o mlp.svg --kernels\n\n"
        "run 'dlc COMMAND --help' for a command's options.",
    )
    p.add_argument("--version", action="version", version=f"dlc {__version__}")
    p.add_argument("--debug", action="store_true", default=False, help="show a traceback with any error")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    c = sub.add_parser(
        "check",
        parents=[common],
        formatter_class=_Formatter,
        help="parse and shape-check a model; list its inputs, params, tensors and losses",
        description="Parse and shape-check a model, then print its inputs, params (shape, size, "
        "initializer),\nnamed tensors and losses as a table. Exits 1 with the "
        "located error if the model is wrong.",
        epilog="examples:\n  dlc check samples/mlp_digits.dl\n  dlc check samples/*.dl",
    )
    c.add_argument("models", metavar="MODEL", nargs="+", help="one or more .dl models or compiled artifact folders")
    c.set_defaults(func=cmd_check)

    c = sub.add_parser(
        "compile",
        parents=[common],
        formatter_class=_Formatter,
        help="compile a model to an artifact folder (GLSL kernels, plan, params)",
        description="Compile a .dl model and write the artifact folder (manifest.json, one GLSL "
        "file per kernel,\nparams.npz). --emit also prints a stage of the "
        "compilation.",
        epilog="examples:\n"
        "  dlc compile samples/quadratic.dl                 # writes quadratic.dlc/\n"
        "  dlc compile samples/quadratic.dl --emit ir       # prints the IR\n"
        "  dlc compile samples/mlp_digits.dl --train --optimizer adam --emit ir\n"
        "  dlc compile samples/mlp_digits.dl -o /tmp/mlp.dlc --emit plan --batch-size 64",
    )
    c.add_argument("model", metavar="MODEL.dl", help="the model to compile")
    c.add_argument(
        "-o", "--output", metavar="DIR", help="artifact folder to write (default: MODEL.dlc in the working folder)"
    )
    c.add_argument(
        "--emit",
        choices=EMIT_CHOICES,
        metavar="STAGE",
        help="also print this stage: one of the compiler's stages ("
        + ", ".join(STAGES)
        + "; fuse: the IR grouped into kernels, plan: "
        "kernels and storage slots, codegen: the GLSL), or ir (the IR; with "
        "--train: the training-step IR and its kernels), glsl (= codegen), "
        "dot (the graph as Graphviz DOT text)",
    )
    c.add_argument(
        "--train",
        nargs="?",
        const=True,
        default=None,
        metavar="LOSS",
        help="add the training step for LOSS (default: the model's first loss)",
    )
    c.add_argument(
        "--optimizer",
        type=str.lower,
        choices=OPTIMIZERS,
        help=f"optimizer of the training step (default: {DEFAULT_OPTIMIZER}); needs --train",
    )
    c.add_argument("--batch-size", type=_positive_int, metavar="N", help="plan for batches of N examples")
    c.add_argument(
        "--target",
        choices=("compute", "texture"),
        help="shaders to write: compute (GLSL 4.30 compute shaders) or texture "
        "(GLSL 3.30 fragment shaders); default: DLC_TARGET, else compute",
    )
    c.set_defaults(func=cmd_compile)

    c = sub.add_parser(
        "train",
        parents=[common],
        formatter_class=_Formatter,
        help="train a model's params on a data file",
        description="Train a model on a data file (.npz keyed by input name, or .csv with a "
        "header: column x\nfeeds x: [B], columns x.0 ... x.k-1 feed x: [B, k]). The "
        "data is checked before the first\nstep. Shows a progress bar, prints a "
        "summary and saves the params. Ctrl-C, SIGTERM or SIGHUP stop after\nthe current "
        "step, save the params and a checkpoint (--resume goes on with it) and exit\n128 + "
        "the signal's number (130, 143, 129).",
        epilog="examples:\n"
        "  dlc train samples/quadratic.dl --data samples/data/quadratic.npz --steps 200\n"
        "  dlc train samples/mlp_digits.dl --data samples/data/digits_train.npz \\\n"
        "      --val samples/data/digits_test.npz --optimizer adam --lr 0.01 --epochs 10 "
        "\\\n      --log train.csv --plot loss.png --save mlp.npz",
    )
    c.add_argument("model", metavar="MODEL", help="a .dl model or a compiled artifact folder")
    c.add_argument("--data", required=True, metavar="FILE", help="training data: .npz or .csv")
    c.add_argument("--loss", metavar="NAME", help="the loss to minimize (default: the first)")
    c.add_argument(
        "--optimizer",
        type=str.lower,
        choices=OPTIMIZERS,
        metavar="NAME",
        help=f"{' | '.join(OPTIMIZERS)} (default: {DEFAULT_OPTIMIZER})",
    )
    c.add_argument("--lr", type=_positive_float, metavar="X", help="learning rate (default: the optimizer's)")
    c.add_argument(
        "--block",
        type=_positive_int,
        metavar="T",
        help="text data: the window length, when the model's T is symbolic (a vocab file beside --save keeps it)",
    )
    train_recipe.add_arguments(c, _positive_float, _positive_int)
    workers.add_arguments(c, _positive_int)
    c.add_argument("--batch-size", type=_positive_int, default=32, metavar="N", help="examples per step (default: 32)")
    g = c.add_mutually_exclusive_group()
    g.add_argument("--epochs", type=_positive_int, metavar="N", help="passes over the data (default: 1)")
    g.add_argument("--steps", type=_positive_int, metavar="N", help="train for N steps instead, cycling over the data")
    c.add_argument(
        "--seed", type=int, default=0, metavar="S", help="seed of the initial params and the shuffling (default: 0)"
    )
    c.add_argument("--init", metavar="W.npz", help="start from these params (a checkpoint's too)")
    c.add_argument(
        "--resume",
        metavar="CKPT",
        help="go on with the run a checkpoint holds (params, optimizer state, step, data order): "
        "give the same data, batch size and --epochs/--steps, which count from the run's start",
    )
    c.add_argument(
        "--checkpoint",
        metavar="CKPT",
        help="where checkpoints go: at the end of the run, on an interrupt, and with "
        "--checkpoint-every (default: the --save path with .ckpt.npz)",
    )
    c.add_argument(
        "--checkpoint-every", type=_positive_int, metavar="N", help="also write the checkpoint after every N steps"
    )
    c.add_argument(
        "--freeze",
        action="append",
        metavar="PATTERN",
        help="keep the params matching this glob (e.g. 'h.*.attn.*') as they are; repeatable; saved all the same",
    )
    c.add_argument(
        "--save", metavar="W.npz", help="where to save the params (default: MODEL.weights.npz in the working folder)"
    )
    c.add_argument(
        "--backend",
        choices=("gl", "numpy"),
        help="gl (compiled GLSL) or numpy (the reference); default: gl when an OpenGL context can be made, else numpy",
    )
    c.add_argument(
        "--val",
        metavar="FILE",
        help="validation data: its loss and metrics (see --metric) after each epoch",
    )
    c.add_argument(
        "--metric",
        action="append",
        metavar="NAME",
        help="a scalar tensor reported with the val loss; repeatable (default: 'accuracy' and 'metric.*' tensors)",
    )
    c.add_argument(
        "--early-stop",
        type=_positive_int,
        metavar="N",
        help="stop when the val loss has not improved for N epochs (needs --val)",
    )
    c.add_argument(
        "--keep-best",
        action="store_true",
        help="save the params of the epoch with the best val loss, not the last (needs --val)",
    )
    c.add_argument("--log", metavar="CSV", help="write step, epoch, loss and val columns to a CSV")
    c.add_argument(
        "--plot", metavar="PNG", help="write the loss curve as a PNG (needs matplotlib: pip install 'dlc[plot]')"
    )
    c.add_argument("--target", choices=("compute", "texture"), help=TARGET_HELP)
    c.add_argument("--debug-kernels", action="store_true", help=DEBUG_KERNELS_HELP)
    c.set_defaults(func=cmd_train)

    c = sub.add_parser(
        "eval",
        parents=[common],
        formatter_class=_Formatter,
        help="evaluate named tensors over a data file",
        description="Evaluate named tensors over a data file. Prints each scalar fetch (its mean "
        "over the data when\nrun in batches) and a summary of the others; --out saves "
        "them all. Per-example fetches\n(first dim the example dim) are concatenated "
        "over batches; the others are averaged,\nweighted by batch size.",
        epilog="examples:\n"
        "  dlc eval samples/quadratic.dl --data samples/data/quadratic.npz --fetch y\n"
        "  dlc eval samples/mlp_digits.dl --data samples/data/digits_test.npz \\\n"
        "      --weights mlp.npz --fetch accuracy,prediction --out pred.npz",
    )
    c.add_argument("model", metavar="MODEL", help="a .dl model or a compiled artifact folder")
    c.add_argument("--data", required=True, metavar="FILE", help="input data: .npz or .csv")
    c.add_argument(
        "--fetch", required=True, metavar="NAME[,NAME...]", help="named tensors to evaluate, separated by commas"
    )
    c.add_argument("--weights", metavar="W.npz", help="params to use (default: the initial params for --seed)")
    c.add_argument("--out", metavar="OUT.npz", help="save every fetch to this .npz")
    c.add_argument(
        "--batch-size", type=_positive_int, metavar="N", help="evaluate N examples at a time (default: all at once)"
    )
    c.add_argument(
        "--backend",
        choices=("gl", "numpy"),
        help="gl or numpy; default: gl when an OpenGL context can be made, else numpy",
    )
    c.add_argument(
        "--seed",
        type=int,
        default=0,
        metavar="S",
        help="seed of the initial params when no --weights are given (default: 0)",
    )
    c.add_argument("--target", choices=("compute", "texture"), help=TARGET_HELP)
    c.add_argument("--debug-kernels", action="store_true", help=DEBUG_KERNELS_HELP)
    c.set_defaults(func=cmd_eval)

    c = sub.add_parser(
        "generate",
        parents=[common],
        formatter_class=_Formatter,
        help="sample text from a language model trained on a text file",
        description="Continue a prompt with characters sampled from the model's `logits` "
        "(tokens: i32[B, T] with T symbolic),\nprinted as they are drawn. The vocabulary "
        "(and the window length) come from the file\n`dlc train` wrote beside the weights. "
        "The same seed gives the same text.",
        epilog="example:\n"
        "  dlc generate samples/char_gpt.dl --weights gpt.npz --prompt 'ROMEO:' --tokens 500 "
        "--temperature 0.8 --top-k 40",
    )
    c.add_argument("model", metavar="MODEL", help="a .dl model or a compiled artifact folder")
    c.add_argument("--weights", required=True, metavar="W.npz", help="the trained params (and W.vocab.json beside)")
    c.add_argument("--vocab", metavar="V.json", help="the vocabulary file (default: beside the weights)")
    c.add_argument("--prompt", default="\n", metavar="TEXT", help="the text to continue (default: a newline)")
    c.add_argument("--tokens", type=int, default=500, metavar="N", help="characters to generate (default: 500)")
    c.add_argument("--temperature", type=float, default=1.0, metavar="T", help="0: the most likely; default 1")
    c.add_argument("--top-k", type=_positive_int, metavar="K", help="draw from the K most likely only")
    c.add_argument("--block", type=_positive_int, metavar="T", help="the longest context (default: the vocab's)")
    c.add_argument("--seed", type=int, default=0, metavar="S", help="seed of the sampling (default: 0)")
    c.add_argument("--backend", choices=("gl", "numpy"), help="gl or numpy; default: gl when it can be made")
    c.add_argument("--target", choices=("compute", "texture"), help=TARGET_HELP)
    c.set_defaults(func=cmd_generate)

    c = sub.add_parser(
        "plot-model",
        parents=[common],
        formatter_class=_Formatter,
        help="draw the model's graph to an SVG, PNG or PDF (needs Graphviz)",
        description="Draw the model as a graph: inputs, params, ops, named tensors and losses, "
        "with the shape\nof each tensor on its edges. --kernels boxes the ops each "
        "fused GLSL kernel computes.\nNeeds Graphviz: pip install 'dlc[viz]' and its "
        "dot program (apt-get install graphviz).",
        epilog="examples:\n"
        "  dlc plot-model samples/mlp_digits.dl -o mlp.svg\n"
        "  dlc plot-model samples/mlp_digits.dl -o mlp.png --kernels\n"
        "  dlc compile samples/mlp_digits.dl --emit dot    # the same graph as text",
    )
    c.add_argument("model", metavar="MODEL.dl", help="the model to draw")
    c.add_argument("-o", "--output", required=True, metavar="FILE", help="the picture to write: .svg, .png or .pdf")
    c.add_argument("--kernels", action="store_true", help="draw the fused GLSL kernels as clusters around their ops")
    c.add_argument(
        "--train",
        nargs="?",
        const=True,
        default=None,
        metavar="LOSS",
        help="draw the training step for LOSS (gradients and updates) instead",
    )
    c.set_defaults(func=cmd_plot_model)

    c = sub.add_parser(
        "import",
        parents=[common],
        formatter_class=_Formatter,
        help="import an ONNX model as a .dl model and a weights file",
        description="Import an ONNX model: write MODEL.dl (one statement per ONNX node, named "
        "after its tensors)\nand MODEL.weights.npz (its initializers, as params). "
        'Needs the onnx package:\npip install "dlc[onnx]".',
        epilog="examples:\n"
        "  dlc import resnet50.onnx -o r50.dl --batch N\n"
        "  dlc eval r50.dl --weights r50.weights.npz --data input.npz --fetch output",
    )
    c.add_argument("model", metavar="MODEL.onnx", help="the ONNX model to import")
    c.add_argument(
        "-o",
        "--output",
        metavar="MODEL.dl",
        help="the .dl file to write (default: MODEL.dl in the working folder); the weights go beside it",
    )
    c.add_argument(
        "--batch",
        type=_batch_dim,
        metavar="NAME|N",
        help="make the inputs' first dim the symbolic dim NAME (any batch size) or N",
    )
    c.add_argument(
        "--max-const-bytes",
        type=_positive_int,
        metavar="N",
        help="the most bytes one constant folded at import, and all of them together, may hold (default: 64 MiB)",
    )
    c.add_argument(
        "--freeze",
        action="append",
        metavar="PATTERN",
        help="write the params matching this glob (ONNX or .dl name) as `frozen param`; repeatable",
    )
    c.add_argument(
        "--trainable",
        action="append",
        metavar="PATTERN",
        help="keep only the params matching this glob trainable, freezing all others; repeatable",
    )
    c.set_defaults(func=cmd_import)

    c = sub.add_parser(
        "export",
        parents=[common],
        formatter_class=_Formatter,
        help="export a model to run and train in a browser (WebGL2)",
        description="Write a folder a browser runs: index.html, the JavaScript runtime dlc.js, "
        "manifest.json,\nthe GLSL ES 3.00 shaders and the weights (see README 'The model in a browser').",
        epilog="examples:\n  dlc export samples/mlp_digits.dl --weights digits.weights.npz --web out/\n"
        "  dlc export samples/char_gpt.dl --weights gpt.npz --web out/   # gpt.vocab.json beside: the text page",
    )
    c.add_argument("model", metavar="MODEL", help="a .dl model or a compiled artifact folder")
    c.add_argument("--web", required=True, metavar="DIR", help="the folder to write (replaced if it is an export)")
    c.add_argument("--weights", metavar="W.npz", help="the params (default: the artifact's, or drawn with --seed)")
    c.add_argument("--loss", metavar="NAME", help="the loss the training step minimizes (default: the first)")
    c.add_argument("--optimizer", type=str.lower, choices=OPTIMIZERS, help="the optimizer compiled in (default: sgd)")
    c.add_argument("--lr", type=_positive_float, metavar="X", help="its learning rate (default: the optimizer's)")
    c.add_argument("--seed", type=int, default=0, metavar="S", help="the seed of the params' initializers")
    c.add_argument(
        "--vocab", metavar="V.json", help="a language model's vocabulary (default: W.vocab.json beside --weights)"
    )
    c.set_defaults(func=cmd_export)

    c = sub.add_parser(
        "info",
        parents=[common],
        formatter_class=_Formatter,
        help="show the OpenGL context dlc finds and the backend it would use",
        description="Show the OpenGL context found (vendor, renderer, version, limits) and the "
        "backend that\n'--backend' would default to; with a MODEL, its params per layer and their counts.",
        epilog="examples:\n  dlc info\n  dlc info samples/lstm.dl",
    )
    c.add_argument("model", metavar="MODEL", nargs="?", help="a .dl model or artifact: list its params by layer")
    c.set_defaults(func=cmd_info)
    return p


# The compiler's stages in order (dlc.compiler.pipeline.STAGE_NAMES; a test keeps them equal,
# listed here so that building the parser imports no compiler), then the older --emit names.
STAGES = ("parse", "build", "verify", "autodiff", "optimizer", "simplify", "fuse", "plan", "codegen")
EMIT_CHOICES = (*STAGES, "ir", "glsl", "dot")

DEBUG_KERNELS_HELP = (
    "debug mode: time every kernel and log it (name, ms, output shape), stop at the "
    "first NaN naming the op and its model line, and print a profile at the end"
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parse_args(parser, argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # to say how to go on with a run
    if not args.debug:
        # NumPy's overflow and invalid-value warnings while running a model are noise here:
        # a NaN loss is reported as divergence, and fetched values are printed as they are.
        warnings.filterwarnings("ignore", category=RuntimeWarning)
    profile = getattr(args, "debug_kernels", False)
    if profile:
        from . import debug

        debug.enable()
    plain_stdout = sys.stdout
    guard_stdout()  # `dlc ... | head` stops the printing, never the work
    try:
        return args.func(args)
    except BrokenPipeError:  # stderr's reader gone too: nothing left to say it to
        return 0
    except UsageError as e:
        if args.debug:
            traceback.print_exc()
        parser.exit(2, f"dlc {args.command}: error: {e}\n")
    except DlcError as e:
        if args.debug:
            traceback.print_exc()
        text = str(e)
        print(text if text.startswith(_located_prefix(e)) else f"error: {text}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        if args.debug:
            traceback.print_exc()
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as e:  # a bug in dlc: say so briefly, the traceback is one flag away
        if args.debug:
            traceback.print_exc()
        else:
            print(
                f"dlc: internal error: {type(e).__name__}: {e}\n(run again with --debug for the traceback)",
                file=sys.stderr,
            )
        return 1
    finally:
        if profile:
            _print_profile(debug.summary())
        sys.stdout = plain_stdout
    return 0  # unreachable: parser.exit raises


def _print_profile(text: str) -> None:
    try:
        print("dlc debug: kernel profile\n" + text, file=sys.stderr)
    except BrokenPipeError:
        pass


def _located_prefix(e: DlcError) -> str:
    """CompileErrors already print as 'file:line:col: error: ...'."""
    loc = getattr(e, "loc", None)
    return str(loc) if loc is not None else "\0"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
