"""The NumPy reference backend of a Session, and `make_backend` (a backend by name).

Every backend implements `dlc.backends.protocol.Backend` (see there); this one evaluates the IR with
the reference interpreter (`dlc.compiler.reference`), node by node in debug mode.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence

import numpy as np

from dlc.compiler.ir import Graph
from dlc.runtime.optional import require

from .. import debug


def _evaluator():
    """Debug mode evaluates node by node, timing each and stopping at the first NaN. The NumPy
    interpreter on first use: a GL session's warm start never needs the op registry it reads."""
    return debug.evaluate if debug.enabled() else require("dlc.compiler.reference").evaluate


class NumpyBackend:
    name = "numpy"

    def __init__(self, dtype=np.float32):
        self.dtype = dtype
        self.leaves: dict[str, np.ndarray] = {}

        self._data: set[str] = set()  # leaves no step writes: kept out of snapshots

    def set_leaf(self, name: str, value: np.ndarray, *, snapshot: bool = True) -> None:
        self.leaves[name] = np.array(value, dtype=self.dtype)
        if snapshot:
            self._data.discard(name)
        else:
            self._data.add(name)

    def get_leaf(self, name: str) -> np.ndarray:
        return self.leaves[name].copy()

    def drop_leaf(self, name: str) -> None:
        self.leaves.pop(name, None)
        self._data.discard(name)

    def run(
        self, graph: Graph, roots: Sequence[int], feeds: Mapping[str, np.ndarray], dims: Mapping[str, int]
    ) -> list[np.ndarray]:
        with np.errstate(all="ignore"):  # inf/NaN are values here, as on a GPU
            values = _evaluator()(graph, roots, {**self.leaves, **feeds}, dims, self.dtype)
        return [self._out(graph, values, i) for i in roots]

    def _out(self, graph: Graph, values: dict[int, np.ndarray], i: int) -> np.ndarray:
        # A fetched leaf is the stored array itself: hand out a copy so it stays ours.
        return values[i].copy() if graph.nodes[i].is_leaf else values[i]

    def step(
        self, graph: Graph, roots: Sequence[int], feeds: Mapping[str, np.ndarray], dims: Mapping[str, int]
    ) -> list[np.ndarray]:
        targets = [i for _, i in graph.updates]
        with np.errstate(all="ignore"):
            values = _evaluator()(graph, [*roots, *targets], {**self.leaves, **feeds}, dims, self.dtype)
        for name, i in graph.updates:
            self.leaves[name] = values[i]
        return [self._out(graph, values, i) for i in roots]

    # Leaves are replaced, never written in place, so a snapshot is a shallow copy.
    def snapshot(self) -> dict[str, np.ndarray]:
        return {k: v for k, v in self.leaves.items() if k not in self._data}

    def restore(self, token: dict[str, np.ndarray]) -> None:
        self.leaves = {**dict(token), **{k: self.leaves[k] for k in self._data}}

    def memory(self) -> dict[str, tuple[int, int]]:
        """Host arrays and bytes held (params and optimizer state together, as "params")."""
        out = {k: (0, 0) for k in ("params", "state", "data", "snapshots", "slots")}
        for name, v in self.leaves.items():
            kind = "data" if name in self._data else "params"
            out[kind] = (out[kind][0] + 1, out[kind][1] + v.nbytes)
        return out

    def close(self) -> None:
        self.leaves.clear()
        self._data.clear()


def make_backend(name: str | None, target: str | None = None):
    """'numpy', 'gl', or None: gl when a context can be made, else numpy with a notice.
    `target` picks gl's "compute" or "texture" target (default: runtime/target.py decides).
    A backend object (anything implementing `dlc.backends.protocol.Backend`) is used as it is."""
    if name is not None and not isinstance(name, str):
        if target is not None:
            raise ValueError("target is for a backend by name ('gl'), not for a backend object")
        return name
    if target is not None and name == "numpy":
        raise ValueError(f"target {target!r} is for the gl backend, not numpy")
    if name == "numpy":
        return NumpyBackend()
    if name not in (None, "gl"):
        raise ValueError(f"unknown backend {name!r}: use 'gl' or 'numpy'")

    device = require("dlc.runtime.device")  # OpenGL on first use: a numpy session never loads it
    if name is None and not device.has_context():
        reason = "no OpenGL context"
        try:
            device.get_context()
        except Exception as e:  # the cached one-line reason
            reason = str(e).splitlines()[0]
        print(f"dlc: {reason}; using the numpy backend", file=sys.stderr)
        return NumpyBackend()
    return require("dlc.backends.gl").GLBackend(target=target)
