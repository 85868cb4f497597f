"""An artifact folder loaded for running: its checked files, its leaves on the GPU and one
executor per program, NumPy and the GL binding only.

Nothing here imports the compiler or lark: the manifest says which kernels to launch, on
which buffers, with which uniforms and group counts (see runtime/executor.py). Feeds, batches
and the train loop are the driver's (`dlc.Session` over `dlc.backends.artifact.ArtifactBackend`);
this module answers what the driver asks of fixed programs: which tensor a name is, which
inputs a fetch reads, which dims it needs, which learning rate to feed.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
from collections.abc import Callable
from typing import Any

from ..device import get_context
from ..dims import shape_symbols
from ..errors import DataError, DlcError, RuntimeFailure, did_you_mean
from ..executor import Executor, LeafStore
from ..gl import GLError  # raised by the binding's calls under DLC_DEBUG=1
from ..program import ShaderError
from ..storage import OutOfMemory
from ..texture_executor import TextureExecutor, TextureStore
from .files import read_artifact
from .manifest import FORMAT, LR, MANIFEST, OUTPUTS, ArtifactError

__all__ = ["FORMAT", "LR", "Runner", "load"]


def load(path: str | os.PathLike, hook: Callable[[], Any] | None = None) -> Runner:
    """Open an artifact folder written by `dlc compile` (or `write_artifact`); `hook` makes
    each executor's debug hook (`dlc.load` passes debug mode's)."""
    return Runner(path, hook=hook)


class Runner:
    """An artifact's programs on this GL context: `store` holds its params and optimizer state
    (the artifact's own values at first), `executor(program)` runs "eval", "outputs" or "train"
    (`program_for(names)` says which program fetches some names).

    `.inputs`, `.params_shapes`, `.tensors`, `.losses` (name -> shape) come from the manifest;
    `.train` is its training setup (loss, optimizer config) or None.
    """

    def __init__(self, path: str | os.PathLike, hook: Callable[[], Any] | None = None):
        self._hook = hook or (lambda: None)  # debug mode lives in the API above (dlc.debug)
        self.path = pathlib.Path(path)
        if not (self.path / MANIFEST).is_file():
            raise DataError(f"{self.path} is not a dlc artifact: it has no {MANIFEST}")
        files = read_artifact(self.path)  # everything checked before any GL call
        self.manifest = m = files.manifest
        self._sources = files.sources
        self.inputs = {n: tuple(s) for n, s in m["inputs"].items()}
        self.params_shapes = files.param_shapes
        self.tensors = {n: tuple(s) for n, s in m["tensors"].items()}
        self.losses = {n: () for n in m["losses"]}
        self.train = m.get("train") or None
        self.target = m.get("target", "compute")  # which GL target its shaders are for
        if self.target == "texture":
            self.store = TextureStore()
        elif self.target == "compute":
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
        self.initial_params = files.params
        for name, value in {**files.params, **files.state}.items():
            self.store.set(name, value)

    def program_for(self, names) -> str:
        """The program to fetch `names` with: "outputs" (the model's outputs alone, fused across
        the names between them) when the artifact has it and every name is one of its outputs,
        else "eval" (every named tensor)."""
        outputs = self.manifest.get(OUTPUTS)
        if outputs and all(n in outputs for n in names):
            return OUTPUTS
        return "eval"

    def executor(self, program: str) -> Executor:
        """The executor of program "eval", "outputs" or "train" (made on first use)."""
        ex = self._executors.get(program)
        if ex is None:
            if program == "train" and not self.train:
                raise DlcError(
                    f"{self.path} was compiled without a training step: recompile with "
                    "`dlc compile MODEL --train [LOSS] --optimizer NAME`"
                )
            spec = self.manifest["programs"][program]
            try:
                if self.target == "texture":
                    ex = TextureExecutor(spec, self._sources[program], self.store)
                else:
                    ex = Executor(spec, self._sources[program], self.store, self._hook())
            except ShaderError as e:
                raise self._broken_shader(program, e) from None
            self._executors[program] = ex
        return ex

    def _broken_shader(self, program: str, e: ShaderError) -> ArtifactError:
        """dlc compiled these shaders once, so one the driver refuses was changed since (or
        was written by another version of dlc): the artifact's fault, not the code generator's."""
        files = sorted(f for f, source in self._sources[program].items() if source == e.source)
        where = f"{files[0]}" + (f":{e.line}" if e.line else "") if files else "an unknown file"
        log = "\n  ".join(e.log.strip().splitlines()[:10] or ["(empty)"])
        return ArtifactError(
            f"{self.path}: the shader of kernel '{e.name}' of the {program} program ({where}) does not "
            "compile on this driver: the artifact is corrupt or was written by another version of dlc; "
            f"compile the model again with `dlc compile`\ndriver log:\n  {log}"
        )

    @property
    def executors(self) -> list[Executor]:
        return list(self._executors.values())

    def tensor(self, name: str) -> int:
        """The tensor id of a named tensor (KeyError with a suggestion for another name)."""
        names = self.manifest["names"]
        if name not in names:
            raise KeyError(f"no tensor named '{name}' in the model{did_you_mean(name, names)}")
        return int(names[name])

    def fetch_dims(self, program: str, fetch: list[int], dims: dict[str, int]) -> dict[str, int]:
        """`dims` plus 1 for each dim that only unfed inputs bind: the eval program sizes
        every buffer, but the kernels a fetch launches must not depend on such a dim."""
        ex = self.executor(program)
        kernels, _ = ex.needs(fetch)
        used = shape_symbols(ex.tensors[t].shape for t in fetch)  # the symbols of products too (B*T)
        for k in kernels:
            spec = ex.kernels[k]
            used.update(spec.uniforms.values())
            used |= shape_symbols(ex.tensors[t].shape for t in (*spec.reads, *spec.writes))
        for d in sorted(used - set(dims)):
            binders = sorted(n for n, s in self.inputs.items() if d in s)
            raise DataError(
                f"fetching these tensors needs the dim {d}: feed "
                f"{' or '.join(repr(n) for n in binders)}, which binds it"
            )
        unbound = shape_symbols(self.inputs.values()) - set(dims)
        return {**dict.fromkeys(unbound, 1), **dims}

    def check_loss(self, loss: str | None) -> str:
        """The loss the training step minimizes (`loss`, if given, must be it)."""
        self.executor("train")  # a DlcError when the artifact has no training step
        setup = self.train
        if loss is not None and loss != setup["loss"]:
            raise DlcError(f"{self.path} was compiled to train loss '{setup['loss']}', not '{loss}'")
        return setup["loss"]

    def learning_rate(self, optimizer: Any) -> float:
        """The learning rate to feed for `optimizer` (None: the compiled one); any other
        hyper-parameter must be the compiled one (the training step holds it)."""
        compiled = self.train["optimizer"]
        if optimizer is None:
            return float(compiled["lr"])
        if isinstance(optimizer, str):
            optimizer = {"name": optimizer.lower()}
        else:
            optimizer = optimizer.to_config()
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

    @contextlib.contextmanager
    def gpu_memory(self, program: str):
        """A buffer the driver cannot allocate (an artifact may size its buffers absurdly) as a
        dlc error naming the program, not the binding's GLError."""

        try:
            yield
        except OutOfMemory as e:  # the buffer's own check of glGetError
            raise RuntimeFailure(
                f"{self.path}: the {program} program ran out of GPU memory allocating a buffer of {e.nbytes} bytes"
            ) from None
        except GLError as e:  # DLC_DEBUG=1: the allocating call itself raised
            if getattr(e, "err", None) != 0x0505:  # GL_OUT_OF_MEMORY
                raise
            args = getattr(e, "pyArgs", None) or ()
            size = f" of {args[1]} bytes" if len(args) > 1 and isinstance(args[1], int) else ""
            raise RuntimeFailure(
                f"{self.path}: the {program} program ran out of GPU memory allocating a buffer{size}"
            ) from None

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
