"""Session: runs a Model on a backend; holds its params (seed: deeplearn.js Session)."""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np

from dlc.compiler.initializers import initial_value
from dlc.compiler.reference import leaf_inputs

from .backends import make_backend
from .errors import DataError
from .feeds import bind_dims
from .model import Model, compile


class Session:
    def __init__(self, model, backend: str | None = None, seed: int = 0):
        if isinstance(model, (str, os.PathLike)):
            model = compile(model)
        elif hasattr(model, "build") and not isinstance(model, Model):
            model = model.build()  # a dlc.Graph
        self.model: Model = model
        self.seed = seed
        self.backend = make_backend(backend)
        graph = model.graph
        for name in graph.params:
            node = graph.node(name)
            self.backend.set_leaf(name, initial_value(node.attr("init"), node.shape, seed, name))

    # -- params ----------------------------------------------------------------
    @property
    def params(self) -> dict[str, np.ndarray]:
        return {n: self.backend.get_leaf(n) for n in self.model.graph.params}

    def set_params(self, values: Mapping[str, np.ndarray]) -> None:
        shapes = self.model.params
        for name, v in values.items():
            if name not in shapes:
                raise DataError(f"'{name}' is not a param of the model "
                                f"(params: {', '.join(shapes) or 'none'})")
            v = np.asarray(v, dtype=np.float32)
            if v.shape != tuple(shapes[name]):
                raise DataError(f"param '{name}' has shape {list(v.shape)} but the model "
                                f"expects {list(shapes[name])}")
            if not np.all(np.isfinite(v)):
                raise DataError(f"param '{name}' holds NaN or infinite values")
        for name, v in values.items():
            self.backend.set_leaf(name, np.asarray(v, dtype=np.float32))

    def save(self, path: str | os.PathLike) -> None:
        """Write the params to an .npz atomically (a temp file, then rename)."""
        from .weights import save_npz
        save_npz(path, self.params)

    def load(self, path: str | os.PathLike) -> None:
        from .weights import load_npz
        self.set_params(load_npz(path, self.model.params))

    # -- evaluation ------------------------------------------------------------
    def _feeds(self, feeds: Mapping[str, np.ndarray], roots) -> tuple[dict, dict]:
        graph = self.model.graph
        arrays = {k: np.asarray(v, dtype=np.float32) for k, v in feeds.items()}
        dims = bind_dims(self.model.inputs, arrays, needed=leaf_inputs(graph, roots))
        return arrays, dims

    def _roots(self, names) -> list[int]:
        graph = self.model.graph
        out = []
        for n in names:
            if n not in graph.names:
                import difflib
                close = difflib.get_close_matches(n, list(graph.names), n=1)
                hint = f", did you mean '{close[0]}'?" if close else ""
                raise KeyError(f"no tensor named '{n}' in the model{hint}")
            out.append(graph.names[n])
        return out

    def eval(self, fetch, feeds: Mapping[str, np.ndarray] | None = None):
        """One fetch name -> its array; a list of names -> dict name -> array."""
        names = [fetch] if isinstance(fetch, str) else list(fetch)
        roots = self._roots(names)
        arrays, dims = self._feeds(feeds or {}, roots)
        values = self.backend.run(self.model.graph, roots, arrays, dims)
        out = {n: np.asarray(v, dtype=np.float32) for n, v in zip(names, values)}
        return out[fetch] if isinstance(fetch, str) else out
