"""`dlc.load(DIR)`: a compiled artifact as a Session-like Runner, NumPy and PyOpenGL only.

Nothing here imports the compiler or lark: the manifest says which kernels to launch, on
which buffers, with which uniforms and group counts (see runtime/executor.py).
"""

from __future__ import annotations

import contextlib
import os
import pathlib
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from dlc.runtime.errors import DataError, DlcError, RuntimeFailure, did_you_mean
from dlc.runtime.executor import Executor, LeafStore
from dlc.runtime.feeds import prepare
from dlc.runtime.manifest import FORMAT, LR, MANIFEST
from dlc.runtime.manifest_files import read_artifact

__all__ = ["FORMAT", "LR", "Runner", "load"]


@contextlib.contextmanager
def _gpu_memory(path: pathlib.Path, program: str):
    """A buffer the driver cannot allocate (an artifact may size its buffers absurdly) as a
    dlc error naming the program, not PyOpenGL's GLError."""
    from OpenGL.error import GLError

    try:
        yield
    except GLError as e:
        if getattr(e, "err", None) != 0x0505:  # GL_OUT_OF_MEMORY
            raise
        args = getattr(e, "pyArgs", None) or ()
        size = f" of {args[1]} bytes" if len(args) > 1 and isinstance(args[1], int) else ""
        raise RuntimeFailure(f"{path}: the {program} program ran out of GPU memory allocating a buffer{size}") from None


def load(path: str | os.PathLike, seed: int = 0, hook: Callable[[], Any] | None = None) -> Runner:
    """Open an artifact folder written by `dlc compile` (or `write_artifact`); `hook` makes
    each executor's debug hook (`dlc.load` passes debug mode's)."""
    return Runner(path, seed=seed, hook=hook)


class Runner:
    """Runs an artifact's programs: eval always, train when it was compiled with --train.

    Like Session: `eval`, `train`, `params`, `set_params`, `save`, `load`, and `.inputs`,
    `.params`, `.tensors`, `.losses` (name -> shape) from the manifest.
    """

    def __init__(self, path: str | os.PathLike, seed: int = 0, hook: Callable[[], Any] | None = None):
        self._hook = hook or (lambda: None)  # debug mode lives in the API above (dlc.debug)
        self.path = pathlib.Path(path)
        if not (self.path / MANIFEST).is_file():
            raise DataError(f"{self.path} is not a dlc artifact: it has no {MANIFEST}")
        files = read_artifact(self.path)  # everything checked before any GL call
        self.manifest = m = files.manifest
        self._sources = files.sources
        params = files.param_shapes
        self.inputs = {n: tuple(s) for n, s in m["inputs"].items()}
        self.params_shapes = params
        self.tensors = {n: tuple(s) for n, s in m["tensors"].items()}
        self.losses = {n: () for n in m["losses"]}
        self.seed = seed
        self._rng = np.random.default_rng(seed)
        self.target = m.get("target", "compute")  # which GL target its shaders are for
        if self.target == "texture":
            from dlc.runtime.texture_executor import TextureStore

            self.store = TextureStore()
        elif self.target == "compute":
            from dlc.runtime.context import get_context

            if not get_context().has_compute:
                raise RuntimeFailure(
                    f"{self.path} was compiled for the compute target, but this "
                    "OpenGL context has no compute shaders: recompile it with "
                    "--target texture"
                )
            self.store = LeafStore()
        else:
            raise DataError(f"{self.path}: target '{self.target}' is not one this dlc runs (compute, texture)")
        self._executors: dict[str, Executor] = {}
        self.set_params(files.params)
        for name, value in files.state.items():
            self.store.set(name, value)

    # -- Session-like surface ----------------------------------------------------------------
    @property
    def params(self) -> dict[str, np.ndarray]:
        return {n: self.store.get(n) for n in self.params_shapes}

    def set_params(self, values: Mapping[str, np.ndarray]) -> None:
        from dlc.runtime.weights import checked_params

        for name, v in checked_params(values, self.params_shapes).items():
            self.store.set(name, v)

    def save(self, path: str | os.PathLike) -> None:
        from dlc.runtime.weights import save_npz

        save_npz(path, self.params)

    def load(self, path: str | os.PathLike) -> None:
        from dlc.runtime.weights import load_npz

        self.set_params(load_npz(path, self.params_shapes))

    def needed_inputs(self, names) -> set[str]:
        """The inputs that fetching `names` reads (only the kernels they need run)."""
        tensors = [self._tensor(n) for n in names]
        ex = self._executor("eval")
        return set(ex.needs(tensors)[1])

    def eval(self, fetch, feeds: Mapping[str, np.ndarray] | None = None):
        """One fetch name -> its array; a list of names -> dict name -> array."""
        names = [fetch] if isinstance(fetch, str) else list(fetch)
        tensors = [self._tensor(n) for n in names]
        ex = self._executor("eval")
        kernels, needed = ex.needs(tensors)
        arrays, dims = prepare(self.inputs, feeds, needed)
        with _gpu_memory(self.path, "eval"):
            values = ex.run(arrays, self._all_dims(ex, kernels, tensors, dims), tensors)
        out = dict(zip(names, values))
        return out[fetch] if isinstance(fetch, str) else out

    def train(
        self,
        feeds: Mapping[str, np.ndarray],
        loss: str | None = None,
        optimizer=None,
        batch_size: int | None = 32,
        epochs: int = 1,
        steps: int | None = None,
        shuffle: bool = True,
        callback: Callable | None = None,
        on_epoch_end: Callable[[int], None] | None = None,
    ) -> list[float]:
        """Session.train over the compiled training step (its loss and optimizer are fixed)."""
        from dlc.runtime.training import train_feeds, train_loop

        setup = self.manifest.get("train")
        if not setup:
            raise DlcError(
                f"{self.path} was compiled without a training step: recompile with "
                "`dlc compile MODEL --train [LOSS] --optimizer NAME`"
            )
        if loss is not None and loss != setup["loss"]:
            raise DlcError(f"{self.path} was compiled to train loss '{setup['loss']}', not '{loss}'")
        lr = self._lr(setup["optimizer"], optimizer)
        ex = self._executor("train")
        spec = ex.spec
        loss_tensor = spec.roots[0]
        needed = ex.needs([loss_tensor], step=True)[1] - {LR}
        arrays, dims, dim = train_feeds(self.inputs, feeds, needed)
        lr_value = np.asarray(lr, dtype=np.float32)

        def step(batch: dict[str, np.ndarray], bdims: dict[str, int]) -> float:
            batch[LR] = lr_value
            with _gpu_memory(self.path, "train"):
                (value,) = ex.run(batch, bdims, [loss_tensor], step=True)
            return float(value)

        return train_loop(
            step,
            arrays,
            dims,
            dim,
            batch_size=batch_size,
            epochs=epochs,
            steps=steps,
            shuffle=shuffle,
            rng=self._rng,
            callback=callback,
            on_epoch_end=on_epoch_end,
            snapshot=self.store.snapshot,
            restore=self.store.restore,
        )

    def close(self) -> None:
        """Free the GPU buffers."""
        for ex in self._executors.values():
            ex.delete()
        self._executors.clear()
        self.store.delete()

    def __repr__(self) -> str:
        return (
            f"Runner({str(self.path)!r}, inputs={list(self.inputs)}, "
            f"params={list(self.params_shapes)}, losses={list(self.losses)})"
        )

    # -- internals ---------------------------------------------------------------------------
    def _tensor(self, name: str) -> int:
        names = self.manifest["names"]
        if name not in names:
            raise KeyError(f"no tensor named '{name}' in the model{did_you_mean(name, names)}")
        return int(names[name])

    def _executor(self, program: str) -> Executor:
        ex = self._executors.get(program)
        if ex is None:
            spec = self.manifest["programs"][program]
            if self.target == "texture":
                from dlc.runtime.texture_executor import TextureExecutor

                ex = TextureExecutor(spec, self._sources[program], self.store)
            else:
                ex = Executor(spec, self._sources[program], self.store, self._hook())
            self._executors[program] = ex
        return ex

    def _all_dims(self, ex: Executor, kernels, fetch, dims: dict[str, int]) -> dict[str, int]:
        """`dims` plus 1 for each dim that only unfed inputs bind: the eval program sizes
        every buffer, but the kernels a fetch launches must not depend on such a dim."""
        used = {d for t in fetch for d in ex.tensors[t].shape if isinstance(d, str)}
        for k in kernels:
            spec = ex.kernels[k]
            used.update(spec.uniforms.values())
            used.update(d for t in (*spec.reads, *spec.writes) for d in ex.tensors[t].shape if isinstance(d, str))
        for d in sorted(used - set(dims)):
            binders = sorted(n for n, s in self.inputs.items() if d in s)
            raise DataError(
                f"fetching these tensors needs the dim {d}: feed "
                f"{' or '.join(repr(n) for n in binders)}, which binds it"
            )
        unbound = {d for s in self.inputs.values() for d in s if isinstance(d, str)} - set(dims)
        return {**dict.fromkeys(unbound, 1), **dims}

    def _lr(self, compiled: dict, optimizer) -> float:
        """The learning rate to feed; any other hyper-parameter must be the compiled one."""
        if optimizer is None:
            return float(compiled["lr"])
        if isinstance(optimizer, str):
            optimizer = {"name": optimizer.lower()}
        else:
            optimizer = {"name": optimizer.name, **vars(optimizer)}
        if optimizer["name"] != compiled["name"]:
            raise DlcError(
                f"{self.path} was compiled with the {compiled['name']} optimizer, "
                f"not {optimizer['name']}: recompile with --optimizer "
                f"{optimizer['name']}"
            )
        for k, v in optimizer.items():
            if k not in ("name", "lr") and k in compiled and compiled[k] != v:
                raise DlcError(
                    f"{self.path} was compiled with {compiled['name']} {k}="
                    f"{compiled[k]}, not {v}: recompile to change it"
                )
        return float(optimizer.get("lr", compiled["lr"]))
