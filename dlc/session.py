"""Session: runs a Model on a backend; holds its params and optimizer state, evaluates,
computes gradients and trains (seed: deeplearn.js Session)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

import numpy as np

from dlc.compiler.autodiff import differentiate, grad_name, resolve_loss
from dlc.compiler.initializers import initial_value
from dlc.compiler.ir import Graph
from dlc.compiler.reference import leaf_inputs
from dlc.compiler.resident import IDX, data_name, resident_graph
from dlc.compiler.simplify import simplify
from dlc.compiler.train_graph import LR, build_train_graph

from .backends import make_backend
from .errors import did_you_mean
from .feeds import prepare
from .model import Model, compile
from .optimizers import SGD, Optimizer
from .seeds import seeds_style
from .training import Callback, schedule, train_feeds, train_loop

MAX_RESIDENT_ROWS = 2**24  # row indices travel as float32: exact up to here


class Session:
    def __init__(self, model, backend: str | None = None, seed: int = 0, target: str | None = None):
        if isinstance(model, (str, os.PathLike)):
            model = compile(model)
        elif hasattr(model, "build") and not isinstance(model, Model):
            model = model.build()  # a dlc.Graph
        self.model: Model = model
        self.seed = seed
        self.backend = make_backend(backend, target)  # target: gl's "compute" or "texture"
        graph = model.graph
        for name in graph.params:
            node = graph.node(name)
            self.backend.set_leaf(name, initial_value(node.attr("init"), node.shape, seed, name))
        self._rng = np.random.default_rng(seed)  # batch order: fixed by the seed
        self._grad_graphs: dict[str, Graph] = {}
        self._train_graphs: dict[tuple, Graph] = {}
        self._resident_graphs: dict[tuple, Graph] = {}
        # On GL, train() keeps its data on the GPU when it would upload more rows than the
        # data holds (see _resident); False always uploads each batch (benchmarks compare).
        self.resident_data = True
        # On GL, train() reads losses back a window at a time: at most this many steps, or
        # a window this old in seconds (so a progress bar moves ~10 times a second).
        self.loss_read_steps = 256
        self.loss_read_interval_s = 0.1
        self._optimizer: Optimizer | None = None  # whose state the backend holds
        self._state_ready: set[str] = set()

    # -- params ----------------------------------------------------------------
    @property
    def params(self) -> dict[str, np.ndarray]:
        return {n: self.backend.get_leaf(n) for n in self.model.graph.params}

    def set_params(self, values: Mapping[str, np.ndarray]) -> None:
        from .weights import checked_params

        for name, v in checked_params(values, self.model.params).items():
            self.backend.set_leaf(name, v)

    def save(self, path: str | os.PathLike) -> None:
        """Write the params to an .npz atomically (a temp file, then rename)."""
        from .weights import save_npz

        save_npz(path, self.params)

    def load(self, path: str | os.PathLike) -> None:
        from .weights import load_npz

        self.set_params(load_npz(path, self.model.params))

    # -- evaluation ------------------------------------------------------------
    def _feeds(self, feeds: Mapping[str, np.ndarray] | None, graph: Graph, roots) -> tuple[dict, dict]:
        return prepare(self.model.inputs, feeds, leaf_inputs(graph, roots))

    def _roots(self, names) -> list[int]:
        graph = self.model.graph
        out = []
        for n in names:
            if n not in graph.names:
                raise KeyError(f"no tensor named '{n}' in the model{did_you_mean(n, graph.names)}")
            out.append(graph.names[n])
        return out

    @seeds_style
    def eval(self, fetch, feeds: Mapping[str, np.ndarray] | None = None):
        """One fetch name -> its array; a list of names -> dict name -> array."""
        names = [fetch] if isinstance(fetch, str) else list(fetch)
        roots = self._roots(names)
        arrays, dims = self._feeds(feeds, self.model.graph, roots)
        values = self.backend.run(self.model.graph, roots, arrays, dims)
        out = {n: np.asarray(v, dtype=np.float32) for n, v in zip(names, values)}
        return out[fetch] if isinstance(fetch, str) else out

    # -- gradients and training --------------------------------------------------
    def gradients(
        self, feeds: Mapping[str, np.ndarray] | None = None, loss: str | None = None
    ) -> dict[str, np.ndarray]:
        """d loss / d param for every param, over all of `feeds` (default loss: the first)."""
        graph = self.model.graph
        loss = resolve_loss(graph, loss)
        if loss not in self._grad_graphs:
            self._grad_graphs[loss] = simplify(differentiate(graph, loss)[0])
        gg = self._grad_graphs[loss]
        roots = [gg.names[grad_name(p)] for p in graph.params]
        arrays, dims = self._feeds(feeds, gg, roots)
        values = self.backend.run(gg, roots, arrays, dims)
        return {p: np.asarray(v, dtype=np.float32) for p, v in zip(graph.params, values)}

    def optimizer(self, optimizer: Optimizer | None = None) -> Optimizer:
        """`optimizer`, else the last one train() used, else SGD(0.01)."""
        return optimizer or self._optimizer or SGD(0.01)

    def train_graph(self, loss: str | None = None, optimizer: Optimizer | None = None) -> Graph:
        """The compiled training step for `loss` and `optimizer`'s config (cached)."""
        loss = resolve_loss(self.model.graph, loss)
        optimizer = self.optimizer(optimizer)
        key = (loss, optimizer.config())
        if key not in self._train_graphs:
            self._train_graphs[key] = build_train_graph(self.model.graph, loss, optimizer)
        return self._train_graphs[key]

    def _init_state(self, graph: Graph, optimizer: Optimizer) -> None:
        """Optimizer state starts at its init for a new optimizer object, then persists."""
        if optimizer is not self._optimizer:
            self._optimizer, self._state_ready = optimizer, set()
        for name in graph.states:
            if name not in self._state_ready:
                node = graph.node(name)
                value = initial_value(node.attr("init"), node.shape, self.seed, name)
                self.backend.set_leaf(name, value)
                self._state_ready.add(name)

    @seeds_style
    def train(
        self,
        feeds: Mapping[str, np.ndarray],
        loss: str | None = None,
        optimizer: Optimizer | None = None,
        batch_size: int | None = 32,
        epochs: int | None = None,
        steps: int | None = None,
        shuffle: bool = True,
        callback: Callback | None = None,
        on_epoch_end: Callable[[int], None] | None = None,
    ) -> list[float]:
        """Minimize `loss` (default: the model's first) over `feeds`; return each step's loss.

        Batches of `batch_size` examples (None: all) are drawn along the leading
        symbolic dim the inputs share, reshuffled each epoch by the session's
        seed; the last batch of an epoch may be smaller. Give `epochs` (default
        1) or `steps` (which may span epochs), not both. `optimizer` defaults to the last one used, else SGD(0.01); its
        state persists across calls with the same object, and its `lr` is read
        at every step. `callback(step, epoch, loss, batch_examples)` runs after
        each step (returning False stops), `on_epoch_end(epoch)` after each
        epoch. A NaN or infinite loss raises dlc.errors.TrainingDiverged with
        the params of the last finite loss restored.

        On GL, when the batches would upload more rows than `feeds` holds, the data goes to
        the GPU once (freed when train returns) and each step uploads only its rows' indices.
        On GL the losses are read a window of steps at a time (`loss_read_steps`,
        `loss_read_interval_s`): `callback` runs at each read, for each step of the window,
        and a divergence or a stop inside a window is undone back to that step.
        """
        if epochs is not None and steps is not None:
            raise ValueError(f"give epochs or steps, not both (got epochs={epochs}, steps={steps})")
        epochs = 1 if epochs is None else epochs
        optimizer = self.optimizer(optimizer)
        graph = self.train_graph(loss, optimizer)
        loss_node = graph.names[graph.losses[0]]
        needed = leaf_inputs(graph, [loss_node, *(i for _, i in graph.updates)]) - {LR}
        arrays, dims, dim = train_feeds(self.model.inputs, feeds, needed)
        self._init_state(graph, optimizer)
        select = None
        resident = self._resident(arrays, dims, dim, batch_size, epochs, steps)
        if resident:
            # The data goes to the GPU once; each step uploads only its rows' indices.
            key = (graph.losses[0], optimizer.config(), dims[dim])
            if key not in self._resident_graphs:
                self._resident_graphs[key] = resident_graph(graph, list(arrays), dim, dims[dim])
            graph = self._resident_graphs[key]
            loss_node = graph.names[graph.losses[0]]
            for name, v in arrays.items():
                self.backend.set_leaf(data_name(name), v, snapshot=False)

            def select(rows: np.ndarray) -> dict[str, np.ndarray]:
                return {IDX: rows.astype(np.float32)}

        def step(batch: dict[str, np.ndarray], bdims: dict[str, int]) -> float:
            batch[LR] = np.asarray(optimizer.lr, dtype=np.float32)
            (value,) = self.backend.step(graph, [loss_node], batch, bdims)
            return float(value)

        deferred = None
        # Deferred loss reads need a GPU-side loss copy (compute target only, for now).
        if (
            getattr(self.backend, "target", None) == "compute"
            and self.loss_read_steps > 1
            and hasattr(self.backend, "step_into")
        ):
            from .deferred import GLDeferredSteps

            deferred = GLDeferredSteps(
                self.backend, graph, loss_node, optimizer, self.loss_read_steps, self.loss_read_interval_s
            )
        try:
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
                snapshot=self.backend.snapshot,
                restore=self.backend.restore,
                select=select,
                deferred=deferred,
            )
        finally:
            if deferred is not None:
                deferred.close()
            if resident:
                for name in arrays:
                    self.backend.drop_leaf(data_name(name))

    def _resident(
        self,
        arrays: Mapping[str, np.ndarray],
        dims: Mapping[str, int],
        dim: str | None,
        batch_size: int | None,
        epochs: int,
        steps: int | None,
    ) -> bool:
        """Whether train() keeps its data on the GPU: on GL, with batches drawn along `dim`
        from inputs whose other dims are concrete, when the run would upload more rows than
        the data has (one epoch or less uploads each row once anyway)."""
        if not (self.resident_data and dim is not None and hasattr(self.backend, "drop_leaf")):
            return False
        if any(isinstance(d, str) for name in arrays for d in self.model.inputs[name][1:]):
            return False
        n = dims[dim]
        size, per_epoch, total = schedule(n, batch_size, epochs, steps)
        epochs_done, rest = divmod(total, per_epoch)
        rows = epochs_done * n + min(rest * size, n)  # the rows the batches would upload
        return n < MAX_RESIDENT_ROWS and rows > n
