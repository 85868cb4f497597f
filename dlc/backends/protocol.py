"""The Backend protocol: what `dlc.Session` needs of a place that runs programs.

A Session is the one driver (feeds, batches, the train loop, divergence, saving); a backend
only stores leaves and runs programs. Three implement it:

- `dlc.backends.reference.NumpyBackend`: the NumPy reference interpreter over the IR (the oracle);
- `dlc.backends.gl.GLBackend`: the IR compiled to GLSL on first use (compute or texture target);
- `dlc.backends.artifact.ArtifactBackend`: the fixed programs of a compiled artifact folder.

A *program* is whatever the backend runs: an IR `Graph` for the first two, the artifact's
program name ("eval" or "train") for the third. `roots` are what to read back: node indices
of the graph, or tensor ids of the artifact's manifest. `feeds` maps input names (runtime
scalars such as the learning rate "$lr" included) to float32 arrays; `dims` binds the
symbolic dims.

Optional: a backend with `step_into(program, loss, feeds, dims, sink, index)` (the GL ones on
the compute target) lets the Session read losses a window of steps at a time
(`dlc.deferred`); one with `target` names its GL target ("compute" or "texture").
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Backend(Protocol):
    name: str  # "numpy" or "gl": what `dlc.Array`s a seeds-style eval returns live on

    # -- leaves: params, optimizer state, training data kept on the device -----------------
    def set_leaf(self, name: str, value: np.ndarray, *, snapshot: bool = True) -> None:
        """Store a leaf; `snapshot=False`: one no step writes (data), left out of snapshots."""

    def get_leaf(self, name: str) -> np.ndarray:
        """A host copy of a leaf."""

    def drop_leaf(self, name: str) -> None:
        """Forget a leaf and free its storage."""

    def snapshot(self) -> Any:
        """A token holding every snapshotted leaf as it is now (training undoes a NaN step)."""

    def restore(self, token: Any) -> None:
        """Put back the leaves a `snapshot` token holds."""

    # -- running ---------------------------------------------------------------------------
    def run(
        self, program: Any, roots: Sequence[int], feeds: Mapping[str, np.ndarray], dims: Mapping[str, int]
    ) -> list[np.ndarray]:
        """The values of `roots`; no leaf changes."""

    def step(
        self, program: Any, roots: Sequence[int], feeds: Mapping[str, np.ndarray], dims: Mapping[str, int]
    ) -> list[np.ndarray]:
        """The values of `roots`, then every update of the training step is applied to its
        leaf (params and optimizer state)."""

    # -- resources -------------------------------------------------------------------------
    def memory(self) -> dict[str, tuple[int, int]]:
        """(count, bytes) held, by kind: "params", "state", "data", "snapshots", "slots"."""

    def close(self) -> None:
        """Free everything the backend holds; it is not used after."""


# Live GL backends (over a model or an artifact), for dlc.memory()'s account of what sessions hold.
_live_gl: weakref.WeakSet = weakref.WeakSet()


def track_gl(backend: Backend) -> None:
    """Count a GL backend in `live_gl_backends` while it lives."""
    _live_gl.add(backend)


def live_gl_backends() -> list[Backend]:
    return list(_live_gl)
