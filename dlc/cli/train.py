"""`dlc train MODEL --data FILE`: set up a run from the flags, hand it to `Session.train` with
the callbacks that make its display and outputs (dlc/callbacks.py), then save and report.
No training loop here: the session runs it."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
from collections.abc import Callable

from .. import text as text_data
from .. import train_recipe, workers
from ..callbacks import CSVLogger, EarlyStopping, ModelCheckpoint, Plot, Progress, StepLog, StopOnSignal
from ..data import load_data
from ..distributed import launched_by_mpi
from ..metrics import metric_tensors
from ..runtime import optimizers
from ..runtime.errors import DataError, TrainingDiverged, UsageError
from ..runtime.optional import require
from ..runtime.training import steps_per_epoch
from .models import (
    announce_run,
    compiled_optimizer,
    default_weights_path,
    is_artifact_model,
    needed_inputs,
    open_model,
    open_session,
    pick_loss,
    weights_text,
)
from .options import (
    DEFAULT_OPTIMIZER,
    OPTIMIZERS,
    add_backend,
    add_block,
    add_checkpoints,
    add_data,
    add_debug_kernels,
    add_freeze,
    add_loss,
    add_lr,
    add_model,
    add_optimizer,
    add_recipe,
    add_run_outputs,
    add_seed,
    add_target,
    add_training_length,
    add_validation,
    add_workers,
    apply_target,
)
from .train_outputs import CheckpointWriter, print_summary, save_weights

DESCRIPTION = (
    "Train a model on a data file (.npz keyed by input name, or .csv with a "
    "header: column x\nfeeds x: [B], columns x.0 ... x.k-1 feed x: [B, k]). The "
    "data is checked before the first\nstep. Shows a progress bar, prints a "
    "summary and saves the params. Ctrl-C, SIGTERM or SIGHUP stop after\nthe current "
    "step, save the params and a checkpoint (--resume goes on with it) and exit\n128 + "
    "the signal's number (130, 143, 129)."
)
EPILOG = (
    "examples:\n"
    "  dlc train samples/quadratic.dl --data samples/data/quadratic.npz --steps 200\n"
    "  dlc train samples/mlp_digits.dl --data samples/data/digits_train.npz \\\n"
    "      --val samples/data/digits_test.npz --optimizer adam --lr 0.01 --epochs 10 "
    "\\\n      --log train.csv --plot loss.png --save mlp.npz"
)


def add_arguments(c: argparse.ArgumentParser) -> None:
    add_model(c)
    add_data(c, "training data: .npz or .csv")
    add_loss(c, "the loss to minimize (default: the first)")
    add_optimizer(c, f"{' | '.join(OPTIMIZERS)} (default: {DEFAULT_OPTIMIZER})", metavar="NAME")
    add_lr(c, "learning rate (default: the optimizer's)")
    add_block(c, "text data: the window length, when the model's T is symbolic (a vocab file beside --save keeps it)")
    add_recipe(c)
    add_workers(c)
    add_training_length(c)
    add_seed(c, "seed of the initial params and the shuffling (default: 0)")
    add_checkpoints(c)
    add_freeze(c, "keep the params matching this glob (e.g. 'h.*.attn.*') as they are; repeatable; saved all the same")
    add_run_outputs(c)
    add_backend(
        c, "gl (compiled GLSL) or numpy (the reference); default: gl when an OpenGL context can be made, else numpy"
    )
    add_validation(c)
    add_target(c)
    add_debug_kernels(c)


def run(args: argparse.Namespace) -> int:
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


def _training_data(args: argparse.Namespace, t, needs: Callable[[list[str]], set[str]], loss: str, val_names):
    """(the training data, the validation data or None, the TextData of a .txt corpus or None),
    each checked whole against the model before any step; `needs(names)`: the inputs that
    fetching `names` reads."""
    if args.data.lower().endswith(".txt"):  # a corpus: random windows, its last 10% held out
        if not args.steps or args.val:
            raise UsageError("training on text draws random windows: give --steps N (its last 10% is the val data)")
        text, val = text_data.for_model(args.data, t.inputs, t.input_dtypes, args.block, args.batch_size, args.seed)
        return text_data.TextRun(text), val, text
    for flag, given in (("--metric", args.metric), ("--early-stop", args.early_stop), ("--keep-best", args.keep_best)):
        if given and not args.val:
            raise UsageError(f"{flag} works on the validation data: give --val FILE")
    data = load_data(args.data, t.inputs, needs([loss]), t.input_dtypes)
    val = load_data(args.val, t.inputs, needs(val_names), t.input_dtypes) if args.val else None
    return data, val, None


def _train(args: argparse.Namespace, world) -> int:
    apply_target(args)
    if args.resume and args.init:
        raise UsageError("--resume goes on with a checkpoint's params (and all the rest); --init: give one of them")
    t = open_model(args.model)
    artifact = is_artifact_model(t)
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
    data, val, text = _training_data(args, t, lambda names: needed_inputs(t, names, session), loss, val_names)
    file_errors: list[str] = []  # --log and --plot files that could not be written

    def file_error(flag: str, path: str):
        return lambda e: file_errors.append(f"error: cannot write {path} ({flag}): {e.strerror or e}")

    lead = world is None or world.rank == 0  # the rank that validates, checkpoints and saves
    log = CSVLogger(args.log, on_error=file_error("--log", args.log)) if args.log and lead else StepLog()
    plot = Plot(args.plot, on_error=file_error("--plot", args.plot), why="--plot") if args.plot and lead else None
    for flag, path in (("--init", args.init), ("--resume", args.resume)):
        if path and not os.path.isfile(path):
            raise DataError(f"{path}: no such file ({flag})")
    save_path = args.save or default_weights_path(t.path)

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
    over_programs = artifact and isinstance(session.backend, require("dlc.backends.artifact").ArtifactBackend)
    if artifact and not args.optimizer and not over_programs:
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
    progress = Progress()
    if args.resume:
        progress.message(f"resuming {args.resume}: step {done} of {total} done (epoch {done // per_epoch + 1} next)")

    diverged: TrainingDiverged | None = None
    # The signals stay caught while the run is saved: one then lets the save finish.
    with StopOnSignal(progress.message) as stop:
        checkpoints = CheckpointWriter(args, save_path, stop)
        checkpoints.notify = progress.message
        early = EarlyStopping("val_loss", patience=args.early_stop) if args.early_stop else None
        best = ModelCheckpoint(None, "val_loss", restore_best=True) if args.keep_best else None
        # In this order: a checkpoint holds the last step's params, then --keep-best puts the best back.
        callbacks = [stop, progress, log, plot, checkpoints if lead else None, early, best]
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
                    resume=bool(args.resume),
                    checkpoint=(lambda: checkpoints.write(session)) if args.checkpoint_every and lead else None,
                    checkpoint_every=args.checkpoint_every if lead else None,
                    callbacks=[cb for cb in callbacks if cb is not None],
                    validation_data=val,
                    metrics=args.metric,
                )
            except TrainingDiverged as e:  # the session has put back the last finite params
                diverged = e
            finally:
                progress.close()  # (its on_train_end did, unless the run failed: no bar left behind)
            interrupted = stop.stopped(session)
            if not lead:
                return stop.exit_code if interrupted else 1 if diverged else 0
            saved, save_error = save_weights(session, save_path, checkpoints)
            if text is not None and saved is not None:  # every later command reads it
                text.vocab.save(text_data.vocab_path(saved))
        except KeyboardInterrupt:  # a second signal: quit at once, keep no weights
            progress.close()
            print("interrupted twice: quit without saving", file=sys.stderr)
            return stop.exit_code

    args.outcome = "diverged" if diverged else "interrupted" if interrupted else "done"
    errors = [save_error] if save_error else []
    errors += file_errors
    final_val = None
    if val is not None and saved is not None:  # the summary describes the params just saved
        final_val = session.evaluate(val, val_names, args.batch_size)
    print_summary(t, data, log.rows, progress, loss, saved, args, per_epoch, final_val, diverged, metrics)
    if early is not None and early.reason():
        print(f"  {early.reason()}")
    if best is not None and best.best_epoch is not None:
        print(f"  kept the params of epoch {best.best_epoch} (the best val {loss})")
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
