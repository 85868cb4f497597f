"""A compiled artifact under a Session: what the folder describes (`ArtifactModel`) and the
backend that runs its fixed programs (`ArtifactBackend`, a `dlc.backends.protocol.Backend`).

Neither imports the compiler or lark: the programs come from the folder
(`dlc.runtime.artifact.runner.Runner` loads them); a Session over an artifact evaluates any named
tensor with the "eval" program (the model's outputs with the "outputs" program, where the
folder has one: fused across the names between them) and trains with the "train" program (its loss and optimizer
fixed at compile time, only the learning rate fed).
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

import dlc
from dlc.runtime.artifact.files import read_artifact, read_manifest
from dlc.runtime.artifact.manifest import LR, MANIFEST, leaf_shapes
from dlc.runtime.elements import from_storage
from dlc.runtime.errors import DataError, DlcError
from dlc.runtime.optional import require
from dlc.runtime.source_text import read_source

from .protocol import track_gl


def is_artifact(path: str | os.PathLike) -> bool:
    """Whether `path` is an artifact folder (one with a manifest.json)."""
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, MANIFEST))


class ArtifactModel:
    """An artifact folder's names and shapes, read from its checked manifest (no GL): like
    `dlc.Model`, `.inputs`, `.params`, `.tensors` and `.losses` (name -> shape; the loss the
    artifact trains comes first), `.path`; and `.train` (its training setup or None),
    `.target` (the GL target its shaders are for)."""

    def __init__(self, path: str | os.PathLike):
        self.path = str(path)
        folder = pathlib.Path(path)
        if not (folder / MANIFEST).is_file():
            raise DataError(f"{folder} is not a dlc artifact: it has no {MANIFEST}")
        m = read_manifest(folder)
        self.manifest = m
        self.inputs = {n: tuple(s) for n, s in m["inputs"].items()}
        self.input_dtypes = {n: m.get("dtypes", {}).get(n, "f32") for n in self.inputs}
        self.params, _ = leaf_shapes(m)
        self.tensors = {n: tuple(s) for n, s in m["tensors"].items()}
        self.train = m.get("train") or None
        trained = (self.train or {}).get("loss")
        self.losses = {n: () for n in sorted(m["losses"], key=lambda n: n != trained)}
        self.target = m.get("target", "compute")

    @property
    def optimizer(self) -> dict | None:
        """The optimizer config the training step was compiled with (name, lr, ...)."""
        return (self.train or {}).get("optimizer")

    def reference_model(self):
        """The `dlc.Model` of the artifact's model.dl (to run it on the NumPy reference)."""

        source = os.path.join(self.path, "model.dl")
        if not os.path.isfile(source):
            raise DlcError(
                f"{self.path}: the artifact holds no model.dl, so it runs on the gl backend "
                "only (recompile it with `dlc compile`, or run the .dl model)"
            )
        text = read_source(source)
        # A trailing newline makes dlc.compile take it as source text, never as a path.
        return dlc.compile(text if text.endswith("\n") else text + "\n", name=source)

    def param_values(self) -> dict[str, np.ndarray]:
        """The params the artifact holds (params.npz), read and checked."""

        return read_artifact(self.path).params

    def __repr__(self) -> str:
        return (
            f"ArtifactModel({self.path!r}, inputs={list(self.inputs)}, "
            f"params={list(self.params)}, losses={list(self.losses)})"
        )


class ArtifactBackend:
    """Runs an artifact's "eval" and "train" programs; its leaves start at the artifact's
    params and optimizer state. A program here is the program's name, roots are tensor ids."""

    name = "gl"

    def __init__(self, path: str | os.PathLike, hook: Callable[[], Any] | None = None):
        # OpenGL on first use: the numpy backend and `dlc check` never load it
        self.runner = require("dlc.runtime.artifact.runner").Runner(path, hook=hook)
        self.target = self.runner.target
        m = self.runner.manifest  # the tensors read back as int32 (manifest "dtypes")
        self._i32 = {m["names"][n] for n in m.get("dtypes", {}) if n in m["names"]}
        self.path = self.runner.path
        track_gl(self)

    # -- leaves ----------------------------------------------------------------------------
    @property
    def store(self):
        """The leaves' store (its device is where the steps run)."""
        return self.runner.store

    def set_leaf(self, name: str, value: np.ndarray, *, snapshot: bool = True) -> None:
        self.runner.store.set(name, value, snapshot=snapshot)

    def get_leaf(self, name: str) -> np.ndarray:
        return self.runner.store.get(name)

    def drop_leaf(self, name: str) -> None:
        self.runner.store.drop(name)

    def snapshot(self) -> object:
        return self.runner.store.snapshot()

    def restore(self, token: object) -> None:
        self.runner.store.restore(token)

    # -- running ---------------------------------------------------------------------------
    def run(
        self, program: str, roots: Sequence[int], feeds: Mapping[str, np.ndarray], dims: Mapping[str, int]
    ) -> list[np.ndarray]:
        ex = self.runner.executor(program)
        with self.runner.gpu_memory(program):
            values = ex.run(feeds, dims, list(roots))
        if program == "train":  # tensor ids name the eval (and outputs) program's tensors
            return values
        return [from_storage(v, "i32" if r in self._i32 else "f32") for r, v in zip(roots, values)]

    def step(
        self, program: str, roots: Sequence[int], feeds: Mapping[str, np.ndarray], dims: Mapping[str, int]
    ) -> list[np.ndarray]:
        ex = self.runner.executor(program)
        with self.runner.gpu_memory(program):
            return ex.run(feeds, dims, list(roots), step=True)

    def step_into(
        self, program: str, loss: int, feeds: Mapping[str, np.ndarray], dims: Mapping[str, int], sink, index: int
    ) -> None:
        """A training step that leaves its loss in float `index` of the GPU buffer `sink`."""
        ex = self.runner.executor(program)
        with self.runner.gpu_memory(program):
            ex.step_into(feeds, dims, loss, sink, index)

    # -- what a Session asks of fixed programs --------------------------------------------------
    def eval_plan(self, names: Sequence[str]) -> tuple[str, list[int], set[str]]:
        """("outputs" when every name is one of the model's outputs and the folder has that
        program, else "eval"; the tensor ids of `names`, the same in both; the inputs fetching
        them reads): only the kernels a fetch needs run."""
        roots = [self.runner.tensor(n) for n in names]
        program = self.runner.program_for(names)
        return program, roots, set(self.runner.executor(program).needs(roots)[1])

    def fetch_dims(self, program: str, roots: list[int], dims: dict[str, int]) -> dict[str, int]:
        return self.runner.fetch_dims(program, roots, dims)

    def train_plan(self, loss: str | None, optimizer: Any) -> tuple[str, int, set[str], float]:
        """("train", the loss's tensor id, the inputs a step reads, the learning rate to feed):
        `loss` and `optimizer` must be the compiled ones (the rate may differ)."""
        self.runner.check_loss(loss)
        lr = self.runner.learning_rate(optimizer)
        ex = self.runner.executor("train")
        root = ex.spec.roots[0]
        return "train", root, set(ex.needs([root], step=True)[1]) - {LR}, lr

    # -- resources -------------------------------------------------------------------------
    def memory(self) -> dict[str, tuple[int, int]]:
        """GPU buffers and bytes held, by kind (as `GLBackend.memory`)."""
        store = self.runner.store
        _, states = leaf_shapes(self.runner.manifest)
        out = {k: (0, 0) for k in ("params", "state", "data", "snapshots", "slots")}

        def add(kind: str, count: int, nbytes: int) -> None:
            out[kind] = (out[kind][0] + count, out[kind][1] + nbytes)

        for name, buf in store.buffers.items():
            kind = "data" if store.is_data(name) else "state" if name in states else "params"
            add(kind, 1, buf.capacity)
        snaps = store.snapshot_buffers()
        add("snapshots", len(snaps), sum(b.capacity for b in snaps))
        for ex in self.runner.executors:
            add("slots", *ex.buffer_bytes())
        return out

    def close(self) -> None:
        self.runner.close()
