"""Checkpoints: everything a training run needs to go on exactly where it stopped.

One .npz (written atomically, read with the safe reader like any weights file): the params
(`param/NAME`), the optimizer's state (`state/NAME`: moments, the step counter), the epoch
in progress's example order (`order`), and `meta`, a JSON text as uint8 bytes: the params'
and states' shapes, the optimizer (name and hyper-parameters), the batch-order rng's state
and the run's position (steps done, batch size, examples, shuffled). A file read back is
untrusted: every part is checked before anything is used, and each refusal names the file.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass

import numpy as np

from .errors import DataError
from .npzfile import NpzReader
from .training import RunPosition
from .weights import META, PARAM, save_npz

FORMAT = "dlc checkpoint"
VERSION = 1
STATE = "state/"
ORDER = "order"


@dataclass
class Checkpoint:
    params: dict[str, np.ndarray]
    states: dict[str, np.ndarray]
    optimizer: dict | None  # {"name": ..., "lr": ..., hyper-parameters}; None: none trained yet
    rng_state: dict  # numpy's PCG64 state, as `bit_generator.state` gives it
    run: RunPosition | None  # None: no run to continue (none yet, or it diverged)


def write_checkpoint(path, ckpt: Checkpoint) -> None:
    save_npz(path, checkpoint_arrays(ckpt))


def checkpoint_arrays(ckpt: Checkpoint) -> dict[str, np.ndarray]:
    """The arrays of a checkpoint file (what `write_checkpoint` saves)."""
    run = ckpt.run
    meta = {
        "format": FORMAT,
        "version": VERSION,
        "params": {n: list(np.shape(v)) for n, v in ckpt.params.items()},
        "states": {n: list(np.shape(v)) for n, v in ckpt.states.items()},
        "optimizer": ckpt.optimizer,
        "rng": ckpt.rng_state,
        "run": None
        if run is None
        else {"done": run.done, "batch_size": run.batch_size, "examples": run.examples, "shuffle": run.shuffle},
    }
    arrays = {META: np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)}
    arrays.update({PARAM + n: np.asarray(v, dtype=np.float32) for n, v in ckpt.params.items()})
    arrays.update({STATE + n: np.asarray(v, dtype=np.float32) for n, v in ckpt.states.items()})
    if run is not None and run.order is not None:
        arrays[ORDER] = np.asarray(run.order, dtype=np.int64)
    return arrays


def read_checkpoint(path) -> Checkpoint:
    """A checkpoint file, checked whole (DataError naming the file on any problem)."""
    path = os.fspath(path)
    with NpzReader(path) as z:
        if META not in z.files:
            raise DataError(f"{path}: not a dlc checkpoint (no '{META}' array; dlc train --checkpoint writes one)")
        meta = _meta(path, z[META])
        params = _arrays(path, z, PARAM, meta["params"], "param")
        states = _arrays(path, z, STATE, meta["states"], "optimizer state")
        order = z[ORDER] if ORDER in z.files else None
    run = _run(path, meta["run"], order)
    return Checkpoint(params, states, _optimizer(path, meta["optimizer"]), _rng_state(path, meta["rng"]), run)


def _meta(path: str, raw: np.ndarray) -> dict:
    if raw.dtype != np.uint8 or raw.ndim != 1:
        raise DataError(f"{path}: array '{META}' is not JSON text (uint8 bytes)")
    try:
        meta = json.loads(raw.tobytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise DataError(f"{path}: array '{META}' is not valid JSON ({e})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise DataError(f"{path}: not a dlc checkpoint ('{META}' does not say format '{FORMAT}')")
    if meta.get("version") != VERSION:
        raise DataError(f"{path}: checkpoint version {meta.get('version')!r}; this dlc reads version {VERSION}")
    for key in ("params", "states"):
        table = meta.get(key)
        if not isinstance(table, dict) or not all(_is_shape(s) for s in table.values()):
            raise DataError(f"{path}: '{key}' in '{META}' is not a table of names and shapes")
    for key in ("optimizer", "rng", "run"):
        if key not in meta:
            raise DataError(f"{path}: '{META}' has no '{key}'")
    return meta


def _is_shape(s) -> bool:
    return isinstance(s, list) and all(type(d) is int and d >= 0 for d in s)


def _arrays(path: str, z: NpzReader, prefix: str, shapes: dict, what: str) -> dict[str, np.ndarray]:
    listed = {k[len(prefix) :] for k in z.files if k.startswith(prefix)}
    if listed != set(shapes):
        odd = sorted(listed ^ set(shapes))
        raise DataError(f"{path}: the {what} arrays and the names in '{META}' differ ('{odd[0]}')")
    out = {}
    for name, shape in shapes.items():
        a = z[prefix + name]
        if a.dtype.kind != "f" or list(a.shape) != shape:
            raise DataError(f"{path}: {what} '{name}' is {a.dtype} {list(a.shape)}, not float32 {shape}")
        if not np.all(np.isfinite(a)):
            raise DataError(f"{path}: {what} '{name}' holds NaN or infinite values")
        out[name] = np.asarray(a, dtype=np.float32)
    return out


def _optimizer(path: str, opt) -> dict | None:
    if opt is None:
        return None
    ok = isinstance(opt, dict) and isinstance(opt.get("name"), str)
    ok = ok and all(k in ("name", "schedule") or _finite(v) for k, v in opt.items())
    if not ok or "lr" not in opt:
        raise DataError(f"{path}: the optimizer in '{META}' is not a name with finite numeric settings")
    schedule = opt.get("schedule")
    if schedule is not None:  # a learning-rate schedule: a name and finite numbers
        ok = isinstance(schedule, dict) and isinstance(schedule.get("name"), str)
        if not ok or not all(k == "name" or _finite(v) for k, v in schedule.items()):
            raise DataError(f"{path}: the optimizer's schedule in '{META}' is not a name with finite numbers")
    return dict(opt)


def _finite(v) -> bool:
    return type(v) in (int, float) and math.isfinite(v)


def _rng_state(path: str, state) -> dict:
    """The state, tried on a fresh generator: numpy checks its parts."""
    try:
        if not isinstance(state, dict) or state.get("bit_generator") != "PCG64":
            raise ValueError("not a PCG64 state")
        np.random.PCG64().state = state
    except (ValueError, TypeError, KeyError, OverflowError) as e:
        raise DataError(f"{path}: the rng state in '{META}' is not valid ({e})") from None
    return state


def _run(path: str, run, order: np.ndarray | None) -> RunPosition | None:
    if run is None:
        return None
    fields = ("done", "batch_size", "examples")
    if not isinstance(run, dict) or not all(type(run.get(k)) is int and run[k] >= 0 for k in fields):
        raise DataError(f"{path}: the run in '{META}' is not steps, batch size and examples (counts)")
    if not isinstance(run.get("shuffle"), bool) or run["batch_size"] < 1:
        raise DataError(f"{path}: the run in '{META}' has no valid batch size and shuffle flag")
    if order is not None:
        n = run["examples"]
        if order.dtype.kind not in "iu" or order.shape != (n,) or not np.array_equal(np.sort(order), np.arange(n)):
            raise DataError(f"{path}: '{ORDER}' is not an order of the run's {n} examples")
        order = np.asarray(order, dtype=np.int64)
    return RunPosition(run["done"], order, None, run["batch_size"], run["examples"], run["shuffle"])
