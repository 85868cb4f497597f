"""Session: the one driver. It runs a model on a `dlc.backends.protocol.Backend`, holds its params and
optimizer state, evaluates, computes gradients and trains (seed: deeplearn.js Session).

Three backends: the NumPy reference and GL over a model (`dlc.Session(model, backend=...)`),
and GL over a compiled artifact's fixed programs (`dlc.load(DIR)`, or
`dlc.Session(DIR)`). Feeds, batching, the train loop (`dlc.runtime.training.train_loop`),
divergence and saving are here for all three; nothing else drives training.

Over an artifact nothing imports the compiler or lark: the compiler is imported only where a
model's graph is built or differentiated.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from dlc.runtime.errors import DataError
from dlc.runtime.optimizers import from_record, optimizer_record
from dlc.runtime.spec import LR
from dlc.runtime.training import RunPosition

from . import debug
from .callbacks import Callback, EpochRunner, LambdaCallback
from .metrics import metric_tensors
from .runtime.errors import DlcError, TrainingDiverged, did_you_mean
from .runtime.feeds import prepare
from .runtime.optimizers import SGD, Optimizer
from .runtime.optional import require
from .runtime.training import Callback as StepCallback
from .runtime.training import schedule, train_feeds, train_loop

if TYPE_CHECKING:  # imported on first use (a warm start needs neither)
    from .backends.artifact import ArtifactBackend
    from .data import Data

MAX_RESIDENT_ROWS = 2**24  # row indices travel as float32: exact up to here


def _checkpoints():
    """dlc.runtime.checkpoint on first use: most sessions never save one, and it keeps the
    import of a Session light (start-up)."""
    return require("dlc.runtime.checkpoint")


def _compiler(module: str):
    """dlc.compiler.MODULE, imported on first use: a session over an artifact never needs it."""
    return require(f"dlc.compiler.{module}")


def _as_returned(value) -> np.ndarray:
    """An eval result as eval returns it: int32 kept, anything else float32."""
    if type(value) is np.ndarray and value.dtype in _RETURNED:
        return value
    value = np.asarray(value)
    return value if value.dtype == np.int32 else np.asarray(value, np.float32)


_RETURNED = (np.dtype(np.float32), np.dtype(np.int32))


def _seeds_style(method: Callable) -> Callable:
    """Session.train and Session.eval called the seeds' way (the first argument a dlc.Tensor,
    or a list of them for eval) go to `dlc.seeds`."""

    @functools.wraps(method)
    def dispatch(self, *args, **kwargs):
        graph_module = sys.modules.get("dlc.graph")  # no dlc.Tensor exists before it is imported
        if graph_module is not None:
            tensor = graph_module.Tensor
            first = args[0] if args else kwargs.get("cost", kwargs.get("fetch", kwargs.get("feeds")))
            if isinstance(first, tensor) or (
                isinstance(first, (list, tuple)) and first and all(isinstance(t, tensor) for t in first)
            ):
                if self._artifact is not None:
                    raise DlcError(f"{self.model.path}: a compiled artifact has no dlc.Tensor to {method.__name__}")
                seeds = require("dlc.seeds")  # the seeds' eager API: the compiler, on first use
                return getattr(seeds, f"{method.__name__}_seeds")(self, *args, **kwargs)
        return method(self, *args, **kwargs)

    return dispatch


def _weights():
    """dlc.runtime.weights (.npz files, the params' checks), imported on first use: a new
    process's first step sets none and saves none."""
    return require("dlc.runtime.weights")


def _artifacts():
    """dlc.backends.artifact (the manifest's reader and checks), imported on first use: a
    session over a .dl model never needs it, and a warm start spends no time importing it."""
    return require("dlc.backends.artifact")


def _is(value: Any, module: str, name: str) -> bool:
    """isinstance(value, module.name), without importing `module`: nothing is an instance of a
    class whose module no one imported."""
    loaded = sys.modules.get(module)
    return loaded is not None and isinstance(value, getattr(loaded, name))


def _is_artifact_model(model: Any) -> bool:
    return _is(model, "dlc.backends.artifact", "ArtifactModel")


def _is_artifact_backend(backend: Any) -> bool:
    return _is(backend, "dlc.backends.artifact", "ArtifactBackend")


def _open_model(model: Any) -> Any:
    """A path (a .dl file or an artifact folder), .dl source text, a dlc.Graph, a Model or an
    ArtifactModel -> a Model or an ArtifactModel."""
    if isinstance(model, (str, os.PathLike)):
        if os.path.isdir(model) and _artifacts().is_artifact(model):  # (a folder: no .dl file)
            return _artifacts().ArtifactModel(model)
        return require("dlc.model").compile(model)
    if hasattr(model, "build") and not hasattr(model, "graph"):
        return model.build()  # a dlc.Graph
    return model


def _described(optimizer: Optimizer) -> str:
    """adam(beta1=0.9, beta2=0.999, eps=1e-08): the settings a training step compiles in."""
    settings = {k: v for k, v in optimizer.to_config().items() if k not in ("name", "lr")}
    return f"{optimizer.name}({', '.join(f'{k}={v}' for k, v in settings.items())})"


class Session:
    """`Session(model, backend=None, seed=0, target=None)`: `model` a dlc.Model, a dlc.Graph,
    a .dl path or source, or an artifact folder; `backend` "gl", "numpy", None (gl when a
    context can be made) or a `dlc.backends.protocol.Backend` object; `target` gl's "compute" or
    "texture". Over an artifact, "gl" runs its programs (its params and optimizer state to
    start) and "numpy" runs its model.dl on the reference with its params. `freeze`: globs of
    param names (`h.*.attn.*`) that train() leaves as they are, as `frozen param` does.

    >>> sess = dlc.Session("samples/quadratic.dl", backend="numpy", seed=0)
    >>> sess.fit(xs, ys, epochs=50, optimizer=dlc.Adam(0.1))  # or train(feeds), eval(...)
    """

    def __init__(
        self,
        model,
        backend: Any = None,
        seed: int = 0,
        target: str | None = None,
        freeze: Sequence[str] = (),
        parallel=None,
    ):
        model = _open_model(model)
        self.seed = seed
        self.freeze = (freeze,) if isinstance(freeze, str) else tuple(freeze)
        initial: dict[str, np.ndarray] | None = None
        if _is_artifact_model(model):
            if backend == "numpy":
                if target is not None:
                    raise ValueError(f"target {target!r} is for the gl backend, not numpy")
                initial = model.param_values()
                model = model.reference_model()
            elif backend in (None, "gl"):
                if target is not None and target != model.target:
                    raise DlcError(
                        f"{model.path} was compiled for the {model.target} target, not "
                        f"{target} (recompile it with --target {target})"
                    )
                backend = _artifacts().ArtifactBackend(model.path, hook=debug.gl_hook)
                target = None
            elif not _is_artifact_backend(backend):
                raise ValueError(f"unknown backend {backend!r} for an artifact: use 'gl' or 'numpy'")
        if self.freeze and _is_artifact_model(model):
            raise DlcError(
                f"{model.path}: a compiled artifact's training step is fixed; freeze params with "
                "`frozen param` in the model and compile it again"
            )
        self.model = model
        if self.freeze:  # checked now: a pattern matching no param is a typo
            _compiler("train_graph").frozen_params(model.graph, self.freeze)
        self.backend = self._make_backend(backend, target)
        # The artifact's backend answers what a model's graph answers elsewhere.
        self._artifact: ArtifactBackend | None = self.backend if _is_artifact_backend(self.backend) else None
        if self._artifact is None:
            initial_value = _compiler("initializers").initial_value
            graph = model.graph
            for name in (*graph.params, *graph.states):  # model state starts at its init, as params do
                node = graph.node(name)
                self.backend.set_leaf(name, initial_value(node.attr("init"), node.shape, seed, name))
            if initial is not None:
                self.set_params(initial)
        self._rng = np.random.default_rng(seed)  # batch order: fixed by the seed
        self._grad_graphs: dict[str, Any] = {}
        self._eval_plans: dict[tuple, Any] = {}  # eval's prepared fetch lists (dlc/eval_plan.py)
        self._default_fetches: dict[tuple, list[str]] = {}  # predict()'s, by the feeds' names
        self._reference = None  # an artifact's model.dl, for predict()'s default fetches
        self._eval_graph = None  # the model's eval form, made on first eval
        self._train_graphs: dict[tuple, Any] = {}
        self._resident_graphs: dict[tuple, Any] = {}
        # On GL, train() keeps its data on the GPU when it would upload more rows than the
        # data holds (see _resident); False always uploads each batch (benchmarks compare).
        self.resident_data = True
        # On GL, train() reads losses back a window at a time: at most this many steps, or
        # a window this old in seconds (so a progress bar moves ~10 times a second).
        self.loss_read_steps = 256
        self.loss_read_interval_s = 0.1
        self._optimizer: Optimizer | None = None  # whose state the backend holds
        self._state_ready: set[str] = set()
        # Data-parallel training (a dlc.distributed.World): train() shards each batch over
        # the ranks and all-reduces the gradients (see dlc/distributed.py).
        self.parallel = parallel
        self._parallel_steps: dict[tuple, Any] = {}
        if parallel is not None and self._artifact is not None:
            raise DlcError(f"{self.model.path}: data-parallel training needs the model's graph, not an artifact")
        self._restored_config: tuple | None = None  # a restored state's optimizer config
        # Where the last train() call's run stands (None: none, or it diverged): what
        # train(resume=True) continues and a checkpoint records.
        self._run: RunPosition | None = None

    @staticmethod
    def _make_backend(backend: Any, target: str | None):
        if _is_artifact_backend(backend):
            return backend
        return require("dlc.backends.reference").make_backend(backend, target)  # the compiler: not over an artifact

    # -- the model's names -----------------------------------------------------------------
    @property
    def inputs(self) -> dict[str, tuple]:
        """Input name -> shape (a symbolic dim as its name).

        >>> dlc.Session("samples/quadratic.dl").inputs
        {'x': ('B',), 'y_label': ('B',)}
        """
        return dict(self.model.inputs)

    @property
    def tensors(self) -> dict[str, tuple]:
        """Named tensor -> shape: everything `eval` can fetch but inputs and params.

        >>> dlc.Session("samples/quadratic.dl").tensors
        {'y': ('B',), 'cost': ()}
        """
        return dict(self.model.tensors)

    @property
    def losses(self) -> dict[str, tuple]:
        """Loss name -> shape (); the default loss to train comes first.

        >>> list(dlc.Session("samples/quadratic.dl").losses)
        ['cost']
        """
        return dict(self.model.losses)

    def needed_inputs(self, names: Sequence[str]) -> set[str]:
        """The inputs that fetching `names` reads.

        >>> sess.needed_inputs(["y"])
        {'x'}
        """
        if self._artifact is not None:
            return self._artifact.eval_plan(list(names))[2]
        return set(_compiler("reference").leaf_inputs(self.model.graph, self._roots(names)))

    # -- params ----------------------------------------------------------------
    @property
    def params(self) -> dict[str, np.ndarray]:
        """Param name -> its value now (a float32 copy read from the backend).

        >>> dlc.Session("samples/quadratic.dl", backend="numpy", seed=0).params["a"]
        array(-0.1867684, dtype=float32)
        """
        return {n: self.backend.get_leaf(n) for n in self.model.params}

    def set_params(self, values: Mapping[str, np.ndarray]) -> None:
        """Set some or all params from name -> array; each is checked (a param of the model,
        its shape, finite) before any is set, so a refusal (DataError) changes nothing.

        >>> sess.set_params({"a": 3.0, "b": 2.0})
        """
        for name, v in _weights().checked_params(values, self.model.params).items():
            self.backend.set_leaf(name, v)

    @property
    def states(self) -> dict[str, np.ndarray]:
        """The model's state now (see `Model.states`): saved and loaded with the params.

        >>> list(dlc.Session("samples/resnet_bn.dl", backend="numpy").states)[:2]
        ['stem.mean', 'stem.var']
        """
        return {n: self.backend.get_leaf(n) for n in self._model_states()}

    def _model_states(self) -> dict[str, tuple]:
        """The model's state: name -> shape (an artifact's from its manifest)."""
        if self._artifact is not None:
            states = self._artifact.runner.manifest.get("states", {})
            return {n: tuple(s) for n, s in states.items() if n != "$seed"}
        return self.model.states

    def set_states(self, values: Mapping[str, np.ndarray]) -> None:
        """Set model state (checked whole first: names, shapes, finite values).

        >>> sess.set_states(other_sess.states)
        """
        for name, v in _weights().checked_params(values, self._model_states()).items():
            self.backend.set_leaf(name, v)

    def save(self, path: str | os.PathLike) -> None:
        """Write the params and the model's state (`state` statements) to an .npz (one array
        per name) atomically: a temp file beside `path`, fsynced, then renamed. `dlc eval
        --weights` and `load` read it.

        >>> sess.save("quadratic.weights.npz")
        """
        _weights().save_npz(path, {**self.params, **self.states})

    def load(self, path: str | os.PathLike) -> None:
        """Set the params (every one) and the model's state (those the file holds; the others
        keep their values) from an .npz that `save` (or `dlc train`) wrote, or from a
        checkpoint's params. The file is untrusted: checked whole (names, shapes, finite, no
        pickles) before anything is set (DataError naming the file and the param).

        >>> sess.load("quadratic.weights.npz")
        """
        states = self._model_states()
        weights = _weights()
        by_param_name = require("dlc.runtime.saved_names").by_param_name  # `0.weight`
        values = by_param_name(weights.load_npz(path), {**self.model.params, **states})
        missing = [k for k in self.model.params if k not in values]
        if missing:
            raise DataError(f"{os.fspath(path)}: param '{missing[0]}' is missing")
        try:
            checked = weights.checked_params(values, {**self.model.params, **states})
        except DataError as e:
            raise DataError(f"{os.fspath(path)}: {e}") from None
        self.set_params({k: v for k, v in checked.items() if k in self.model.params})
        for name, v in checked.items():
            if name in states:
                self.backend.set_leaf(name, v)

    # -- evaluation ------------------------------------------------------------
    def _roots(self, names) -> list[int]:
        graph = self.model.graph
        out = []
        for n in names:
            if n not in graph.names:
                raise KeyError(f"no tensor named '{n}' in the model{did_you_mean(n, graph.names)}")
            out.append(graph.names[n])
        return out

    def _eval_program(self):
        """The model's graph as eval runs it: dropout the identity, batch_norm by its running
        statistics, no train branch computed (compiler/modes.py)."""
        if self._eval_graph is None:
            self._eval_graph = _compiler("compile_cache").eval_form(self.model.graph)  # types cached on disk
        return self._eval_graph

    @_seeds_style
    def eval(self, fetch, feeds: Mapping[str, np.ndarray] | None = None):
        """One fetch name -> its array; a list of names -> dict name -> array. `feeds` maps
        input names to arrays (only the inputs the fetches read are needed).

        >>> sess.eval("y", {"x": np.array([1.0, 2.0])})
        >>> sess.eval(["y", "cost"], dict(np.load("samples/data/quadratic.npz")))
        """
        if isinstance(fetch, str):  # one name: no dict built (the serving loop's call)
            return _as_returned(self._eval_plan((fetch,))(feeds)[0])
        names = tuple(fetch)
        return {n: _as_returned(v) for n, v in zip(names, self._eval_plan(names)(feeds))}

    def predict(self, feeds: Mapping[str, np.ndarray], fetches: str | Sequence[str] | None = None):
        """`eval` with the feeds first, for serving a batch after another: `fetches` (a name ->
        its array; a list -> dict name -> array), by default the model's outputs that `feeds`
        suffice for, as a dict (`dlc.eval_plan.model_outputs`: its named tensors, losses aside,
        that no other named tensor reads without needing more inputs). Fed the same names as
        float32 arrays of the same shapes as the call before, nothing is checked again.

        >>> sess = dlc.Session("samples/quadratic.dl", backend="numpy")
        >>> sess.predict({"x": np.array([1.0, 2.0], np.float32)}, "y").shape
        (2,)
        """
        if fetches is None:
            key = tuple(feeds)
            fetches = self._default_fetches.get(key)
            if fetches is None:
                fetches = self._default_fetches[key] = require("dlc.eval_plan").outputs_for(self, key)
        return self.eval(fetches, feeds)

    def evaluate(
        self,
        data: Mapping[str, np.ndarray] | Data,
        fetches: str | Sequence[str] | None = None,
        batch_size: int | None = None,
    ):
        """Fetch `fetches` over all of `data` (feeds, or a `dlc.data.Data` that `dlc.data.load_data`
        read), `batch_size` examples at a time (None: all at once): a list (default: the model's
        losses and metrics) -> dict name -> array, one name -> its array. Per-example fetches
        (whose first dim is the data's example dim) are concatenated over the batches; the
        others (a loss, an accuracy) are the mean over the batches weighted by their examples,
        so a mean over the data is the same whatever the batch size (`dlc eval`, and training's
        validation, run this).

        >>> sess.evaluate(dict(np.load("samples/data/quadratic.npz")), ["cost"], batch_size=64)
        {'cost': array(..., dtype=float32)}
        """
        if fetches is None:
            names = [*self.model.losses, *metric_tensors(self.model).values()]
        else:
            names = [fetches] if isinstance(fetches, str) else list(fetches)
        Data, example_inputs = (getattr(require("dlc.data"), n) for n in ("Data", "example_inputs"))
        arrays = data.arrays if isinstance(data, Data) else dict(data)
        inputs = self.model.inputs
        per_example_inputs = example_inputs(inputs, [n for n in arrays if n in inputs])
        counts = {len(np.asarray(arrays[n])) for n in per_example_inputs if np.ndim(arrays[n])}
        examples = counts.pop() if len(counts) == 1 else 0  # several counts: eval refuses them whole
        batches = Data("", arrays, {}, examples).batches(inputs, batch_size if examples else None)
        example_dims = {inputs[n][0] for n in per_example_inputs}
        shapes = {**inputs, **self.model.params, **self.model.tensors}
        parts: dict[str, list[np.ndarray]] = {n: [] for n in names}
        weights: list[int] = []
        for feeds, count in batches:
            values = self.eval(names, feeds)
            weights.append(count)
            for n in names:
                parts[n].append(np.asarray(values[n]))
        out: dict[str, np.ndarray] = {}
        for n in names:
            if len(parts[n]) == 1:
                out[n] = parts[n][0]
            elif shapes.get(n) and shapes[n][0] in example_dims:
                out[n] = np.concatenate(parts[n], axis=0)
            else:  # the mean over the data: each batch's value weighted by its examples
                w = np.asarray(weights, dtype=np.float64)
                out[n] = np.tensordot(w / w.sum(), np.stack(parts[n]).astype(np.float64), axes=1).astype(np.float32)
        return out[fetches] if isinstance(fetches, str) else out

    def _eval_plan(self, names: tuple[str, ...]):
        """The prepared eval of `names` (dlc/eval_plan.py), made on first use."""
        plan = self._eval_plans.get(names)
        if plan is None:
            if len(self._eval_plans) >= 64:  # fetch lists made on the fly: keep few
                self._eval_plans.clear()
            plan = self._eval_plans[names] = require("dlc.eval_plan").EvalPlan(self, names)
        return plan

    def _output_graph(self):
        """The graph whose outputs predict() fetches by default (an artifact's model.dl's)."""
        if self._artifact is None:
            return self.model.graph
        if self._reference is None:
            self._reference = self.model.reference_model()
        return self._reference.graph

    # -- gradients and training --------------------------------------------------
    def _needs_graph(self, what: str) -> None:
        if self._artifact is not None:
            raise DlcError(
                f"{self.model.path}: {what} needs the model's graph, which a compiled artifact "
                "does not hold (open the .dl model, or the artifact with backend='numpy')"
            )

    def gradients(
        self, feeds: Mapping[str, np.ndarray] | None = None, loss: str | None = None
    ) -> dict[str, np.ndarray]:
        """d loss / d param for every param, over all of `feeds` (default loss: the first).

        >>> sess.gradients(dict(np.load("samples/data/quadratic.npz")))["a"]
        """
        self._needs_graph("gradients()")
        names = _compiler("grad_names")
        graph = self.model.graph
        loss = names.resolve_loss(graph, loss)
        if loss not in self._grad_graphs:
            differentiated = _compiler("autodiff").differentiate(graph, loss)[0]
            self._grad_graphs[loss] = _compiler("simplify").simplify(differentiated)
        gg = self._grad_graphs[loss]
        roots = [gg.names[names.grad_name(p)] for p in graph.params]
        needed = _compiler("ir").leaf_inputs(gg, roots)
        arrays, dims = prepare(self.model.inputs, feeds, needed, self.model.input_dtypes)
        values = self.backend.run(gg, roots, arrays, dims)
        return {p: np.asarray(v, dtype=np.float32) for p, v in zip(graph.params, values)}

    def optimizer(self, optimizer: Optimizer | None = None) -> Optimizer:
        """`optimizer`, else the last one train() used, else SGD(0.01).

        >>> sess.optimizer()
        SGD(lr=0.01, clip_norm=0.0, schedule=None)
        """
        return optimizer or self._optimizer or SGD(0.01)

    def _train_graph(self, loss: str | None = None, optimizer: Optimizer | None = None):
        """The compiled training step for `loss` and `optimizer`'s config (cached)."""
        self._needs_graph("train_graph()")
        loss = _compiler("grad_names").resolve_loss(self.model.graph, loss)
        optimizer = self.optimizer(optimizer)
        key = (loss, optimizer.config())
        if key not in self._train_graphs:
            build = _compiler("compile_cache").train_graph  # build_train_graph, cached on disk
            self._train_graphs[key] = build(self.model.graph, loss, optimizer, self.freeze)
        return self._train_graphs[key]

    def _init_state(self, graph, optimizer: Optimizer) -> None:
        """Optimizer state starts at its init for a new optimizer object, then persists."""
        initial_value = _compiler("initializers").initial_value
        if optimizer is not self._optimizer:
            if optimizer.config() == self._restored_config:  # a restored state goes on
                self._optimizer = optimizer
            else:
                self._optimizer, self._state_ready = optimizer, set()
        self._restored_config = None
        model_state = set(self.model.graph.states)  # made with the params, not per optimizer
        for name in graph.states:
            if name not in self._state_ready and name not in model_state:
                node = graph.node(name)
                value = initial_value(node.attr("init"), node.shape, self.seed, name)
                self.backend.set_leaf(name, value)
                self._state_ready.add(name)

    def _train_step(
        self,
        graph,
        roots: Sequence[int],
        feeds: Mapping[str, np.ndarray],
        dims: Mapping[str, int],
        optimizer: Optimizer,
    ) -> list[np.ndarray]:
        """One step of a training-step graph (`compiler.train_graph.build_train_graph` over
        this model's params, with `optimizer`): its optimizer state made on first use, the
        learning rate fed, the updates applied; returns the values of node indices `roots`.
        The seeds' style trains with it, one step a call."""
        self._init_state(graph, optimizer)
        return self.backend.step(graph, roots, {**feeds, LR: np.asarray(optimizer.lr, dtype=np.float32)}, dims)

    @_seeds_style
    def train(
        self,
        feeds: Mapping[str, np.ndarray],
        loss: str | None = None,
        optimizer: Optimizer | None = None,
        batch_size: int | None = 32,
        epochs: int | None = None,
        steps: int | None = None,
        shuffle: bool = True,
        callback: StepCallback | None = None,
        on_epoch_end: Callable[[int], bool | None] | None = None,
        resume: bool = False,
        checkpoint: str | os.PathLike | Callable[[], object] | None = None,
        checkpoint_every: int | None = None,
        callbacks: Sequence[Callback] = (),
        validation_data: Mapping[str, np.ndarray] | None = None,
        metrics: Sequence[str] | None = None,
    ) -> list[float]:
        """Minimize `loss` (default: the model's first) over `feeds`; return each step's loss.

        >>> data = dict(np.load("samples/data/quadratic.npz"))
        >>> losses = sess.train(data, optimizer=dlc.Adam(0.1), batch_size=32, epochs=50)

        Batches of `batch_size` examples (None: all) are drawn along the leading
        symbolic dim the inputs share, reshuffled each epoch by the session's
        seed; the last batch of an epoch may be smaller. Give `epochs` (default
        1) or `steps` (which may span epochs), not both. `optimizer` defaults to the last one used, else SGD(0.01); its
        state persists across calls with the same object, and its `lr` is read
        at every step. `callback(step, epoch, loss, batch_examples)` runs after
        each step (returning False stops), `on_epoch_end(epoch)` after each
        epoch (returning False stops there: early stopping, see `fit`). A NaN
        or infinite loss raises dlc.TrainingDiverged with the params of
        the last finite loss restored.

        Over an artifact the compiled training step runs: `loss` and `optimizer` default to the
        compiled ones and may differ from them only in the learning rate.

        On GL, when the batches would upload more rows than `feeds` holds, the data goes to
        the GPU once (freed when train returns) and each step gathers its rows there.
        On GL the losses are read a window of steps at a time (`loss_read_steps`,
        `loss_read_interval_s`): `callback` runs at each read, for each step of the window,
        and a divergence or a stop inside a window is undone back to that step. Steps then
        write nothing from the host: the rows of many steps go up in one upload, the
        learning rate only when it changes (`dlc/deferred.py`).

        `resume=True` continues the last run (this session's last train() call, stopped
        early, or the one a restored checkpoint holds): given the same arguments, it runs
        only the steps that run had left, in the same batch order, so it ends where the
        uninterrupted call would have (a larger `epochs` or `steps` trains on). With
        `checkpoint_every=N`, every N-th step of the run writes a checkpoint to `checkpoint`
        (a path; or a function, called then, that may call `save_checkpoint`).

        `callbacks`: `dlc.Callback` objects (dlc/callbacks.py: `Progress`, `CSVLogger`, `Plot`,
        `StopOnSignal`, `EarlyStopping`, `ModelCheckpoint`, ...), called after each step and
        each epoch; with `validation_data` (feeds) each epoch's logs hold `val_loss` and
        `val_NAME` for each of `metrics` (default: the model's, see `fit`), from `evaluate`.
        Their `on_train_end` runs when the run ends or diverges (before TrainingDiverged).

        >>> sess.train(data, epochs=20, validation_data=val, callbacks=[dlc.EarlyStopping(patience=2)])
        """
        return self._run_with_callbacks(
            feeds, loss, optimizer, batch_size, epochs, steps, shuffle, callback, on_epoch_end, resume,
            checkpoint, checkpoint_every, callbacks, validation_data, metrics,
        )[0]  # fmt: skip

    def _run_with_callbacks(
        self, feeds, loss, optimizer, batch_size, epochs, steps, shuffle, callback, on_epoch_end, resume,
        checkpoint, checkpoint_every, callbacks, validation_data, metrics,
    ) -> tuple[list[float], EpochRunner]:  # fmt: skip
        """train()'s run with its callbacks around it: (each step's loss, the EpochRunner)."""
        if epochs is not None and steps is not None:
            raise ValueError(f"give epochs or steps, not both (got epochs={epochs}, steps={steps})")
        loss_name = loss or next(iter(self.model.losses), None)
        runner = EpochRunner(self, callbacks, self._validator(validation_data, loss_name, metrics, batch_size))
        # checked even without validation data: a misspelt metric is said before any step
        shown = metric_tensors(self.model, metrics) if validation_data is not None or metrics is not None else {}
        params = {
            "loss": loss_name,
            "epochs": None if steps is not None else (epochs or 1),
            "batch_size": batch_size,
            "val_keys": ["val_loss", *(f"val_{k}" for k in shown)] if runner.validate else [],
        }

        def begin(per_epoch: int, total: int, done: int) -> None:
            runner.begin({**params, "steps": total, "steps_per_epoch": per_epoch, "initial_step": done})

        def step_hook(step: int, epoch: int, value: float, examples: int) -> bool | None:
            go_on = runner.step_hook(step, epoch, value, examples)
            if callback is not None and callback(step, epoch, value, examples) is False:
                go_on = False
            return go_on

        def epoch_hook(epoch: int) -> bool | None:
            go_on = runner.epoch_hook(epoch)
            if on_epoch_end is not None and on_epoch_end(epoch) is False:
                go_on = False
            return go_on

        # Hooks only where something listens: an epoch hook makes GL read the losses at each
        # epoch's end, cutting the deferred windows short.
        listening = bool(runner.callbacks) or runner.validate is not None
        steps_hook = step_hook if listening or callback is not None else None
        epochs_hook = epoch_hook if listening or on_epoch_end is not None else None
        try:
            if _is(feeds, "dlc.text", "TextData"):
                losses = self._train_text(
                    feeds, loss, optimizer, batch_size, epochs, steps, steps_hook, resume, checkpoint,
                    checkpoint_every, begin,
                )  # fmt: skip
            else:
                losses = self._train_arrays(
                    feeds, loss, optimizer, batch_size, epochs, steps, shuffle, steps_hook, epochs_hook, resume,
                    checkpoint, checkpoint_every, begin,
                )  # fmt: skip
        except TrainingDiverged:  # the params are the last finite step's: callbacks end with those
            runner.end("diverged")
            raise
        runner.end("done")
        return losses, runner

    def _validator(self, data, loss: str | None, metrics, batch_size) -> Callable[[], dict[str, float]] | None:
        """The epoch's validation logs over `data` (None: no data, or a data-parallel rank
        other than 0, which leaves validating to rank 0)."""
        if data is None or (self.parallel is not None and self.parallel.rank != 0):
            return None
        shown = metric_tensors(self.model, metrics)

        def validate() -> dict[str, float]:
            values = self.evaluate(data, [loss, *shown.values()], batch_size)
            return {"val_loss": float(values[loss])} | {f"val_{k}": float(values[t]) for k, t in shown.items()}

        return validate

    def _train_arrays(
        self, feeds, loss, optimizer, batch_size, epochs, steps, shuffle, callback, on_epoch_end, resume,
        checkpoint, checkpoint_every, begin,
    ) -> list[float]:  # fmt: skip
        """train() over feeds of arrays: batches along their example dim, epochs or steps."""
        epochs = 1 if epochs is None else epochs
        position = self._resumed_position(optimizer) if resume else RunPosition()
        on_every = self._checkpoint_writer(checkpoint, checkpoint_every)
        if self._artifact is not None:
            program, loss_node, needed, compiled_lr = self._artifact.train_plan(loss, optimizer)

            def learning_rate() -> float:
                return compiled_lr

            def run_step(batch: dict[str, np.ndarray], bdims: dict[str, int]) -> float:
                batch[LR] = np.asarray(compiled_lr, dtype=np.float32)
                (value,) = self.backend.step(program, [loss_node], batch, bdims)
                return float(value)
        else:
            leaf_inputs = _compiler("ir").leaf_inputs
            optimizer = self.optimizer(optimizer)
            if self.parallel is not None:
                parallel = self._parallel_step(loss, optimizer)
                needed = parallel.needed

                def run_step(batch: dict[str, np.ndarray], bdims: dict[str, int]) -> float:
                    return parallel(batch, bdims, dim)  # `dim`: bound below, before any step
            else:
                program = self._train_graph(loss, optimizer)
                loss_node = program.names[program.losses[0]]
                needed = leaf_inputs(program, [loss_node, *(i for _, i in program.updates)]) - {LR}
                self._init_state(program, optimizer)

                def learning_rate() -> float:
                    return optimizer.lr  # read at every step

                def run_step(batch: dict[str, np.ndarray], bdims: dict[str, int]) -> float:
                    # Not _train_step: the state is made above, from the training step's graph (a
                    # resident graph's data leaves are states too, set from the data).
                    batch[LR] = np.asarray(optimizer.lr, dtype=np.float32)
                    (value,) = self.backend.step(program, [loss_node], batch, bdims)
                    return float(value)

        arrays, dims, dim = train_feeds(self.model.inputs, feeds, needed, self.model.input_dtypes)
        if self.parallel is not None:
            parallel.check(arrays, batch_size)  # every rank: the same dlc, model, optimizer and data
        select = None
        resident = self._resident(arrays, dims, dim, batch_size, epochs, steps)
        if resident:
            # The data goes to the GPU once; each step uploads only its rows' indices.
            resident_module = _compiler("resident_names")
            IDX, data_name = resident_module.IDX, resident_module.data_name
            key = (program.losses[0], optimizer.config(), dims[dim])
            if key not in self._resident_graphs:
                cached = _compiler("compile_cache").resident_graph  # resident_graph, cached on disk
                self._resident_graphs[key] = cached(program, list(arrays), dim, dims[dim])
            program = self._resident_graphs[key]
            loss_node = program.names[program.losses[0]]
            for name, v in arrays.items():
                self.backend.set_leaf(data_name(name), v, snapshot=False)

            def select(rows: np.ndarray) -> dict[str, np.ndarray]:
                return {IDX: rows}  # uploaded as float32 (exact below MAX_RESIDENT_ROWS)

        deferred = None
        # Deferred loss reads need a GPU-side loss copy (compute target only, for now).
        if (
            getattr(self.backend, "target", None) == "compute"
            and self.parallel is None  # a data-parallel step reads its loss at the all-reduce
            and self.loss_read_steps > 1
            and hasattr(self.backend, "step_into")
        ):
            deferred = require("dlc.deferred").GLDeferredSteps(  # GL only: it imports the GL runtime
                self.backend,
                program,
                loss_node,
                learning_rate,
                self.loss_read_steps,
                self.loss_read_interval_s,
                rows=IDX if resident else None,
            )
        self._run = position  # live: a checkpoint written during the run sees where it is
        per_epoch, total = schedule(dims[dim] if dim is not None else 1, batch_size, epochs, steps)[1:]
        begin(per_epoch, total, position.done)
        try:
            return train_loop(
                run_step,
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
                position=position,
                every=checkpoint_every,
                on_every=on_every,
            )
        except BaseException:  # a divergence or a hard stop: this run does not go on
            self._run = None
            raise
        finally:
            if deferred is not None:
                deferred.close()
            if resident:
                for name in arrays:
                    self.backend.drop_leaf(data_name(name))

    def generate(
        self,
        prompt,
        tokens: int = 100,
        *,
        vocab=None,
        block: int | None = None,
        temperature: float = 1.0,
        top_k: int | None = None,
        seed: int = 0,
        on_token: Callable[[Any], None] | None = None,
        cache: bool = True,
    ):
        """Continue `prompt` by `tokens` tokens sampled from the model's `logits` (nanoGPT's
        generate; see dlc/generate.py). `prompt` is text (with `vocab`, a `dlc.text.Vocab`,
        e.g. `Vocab.load("w.vocab.json")`; the text returned) or a list of ids (ids returned);
        `block`: the longest context fed (default: the vocab's, i.e. the training window);
        `on_token(t)` runs as each is drawn (text or id). The same seed gives the same text.
        `cache`: keep each position's keys and values (a KV cache) where the model allows it
        (compiler/decode.py), so a step computes only the new token; False recomputes the
        whole context each token. Either way gives the same text.

            vocab = dlc.text.Vocab.load("gpt.vocab.json")
            print(sess.generate("ROMEO:", 200, vocab=vocab, temperature=0.8, top_k=40))
        """
        gen = require("dlc.generate")
        gen.check_model(self.model.inputs, self.model.tensors)
        as_text = isinstance(prompt, str)
        if as_text and vocab is None:
            raise ValueError("a text prompt needs the vocab the model was trained with (vocab=)")
        ids = vocab.encode(prompt, "the prompt") if as_text else [int(i) for i in prompt]
        block = block or (vocab.block if vocab is not None else None)
        if block is None:
            raise ValueError("give block= (the longest context the model takes; a vocab file from dlc train holds it)")
        longest = min(block, len(ids) + tokens - 1)
        kv = gen.KVCache.of(self, block)[0] if cache and tokens else None
        run = None if kv is not None else gen.logits_of(self, longest)
        out = []
        if kv is not None:
            kv.start(len(ids), longest)
        try:
            for i in gen.generate(run, ids, tokens, block, temperature, top_k, seed, kv):
                out.append(i)
                if on_token is not None:
                    on_token(vocab.decode([i]) if as_text else i)
        finally:
            if kv is not None:
                kv.close()
        return vocab.decode(out) if as_text else out

    def _train_text(
        self, data, loss, optimizer, batch_size, epochs, steps, callback, resume, checkpoint, every, begin
    ) -> list[float]:
        """train() over a `dlc.TextData`: `steps` steps of `batch_size` random windows (step s's
        windows fixed by the seed and s), run a chunk of steps at a time as unshuffled data."""
        if steps is None or epochs is not None:
            raise ValueError("training on text draws random windows: give steps (epochs have no meaning there)")
        if batch_size is None:
            raise ValueError("training on text needs a batch_size (windows a step)")
        done = self._resumed_position(optimizer).done if resume else 0
        on_every = self._checkpoint_writer(checkpoint, every)
        begin(steps, steps, done)  # no epochs: one long one
        chunk = max(1, min(256, (1 << 22) // (batch_size * data.block)))  # steps staged at once
        losses: list[float] = []
        while done < steps:
            count = min(chunk, steps - done)
            if every:  # a chunk ends at each checkpoint step
                count = min(count, every - done % every)
            first = done

            def step_callback(step, epoch, value, examples, first=first):
                return callback(first + step, 1, value, examples) if callback else None

            got = self._train_arrays(
                data.steps(first, count, batch_size, self.seed), loss, optimizer, batch_size, None, count, False,
                step_callback, None, False, None, None, lambda *run: None,
            )  # fmt: skip
            losses += got
            done += len(got)
            optimizer = self._optimizer  # the one the chunk trained with (state and all)
            self._run = RunPosition(done=done, batch_size=batch_size, examples=len(data.train_ids), shuffle=False)
            if on_every is not None and done % every == 0:
                on_every(self._run)
            if len(got) < count:  # the callback stopped the run
                break
        return losses

    def fit(
        self,
        x,
        y,
        batch_size: int | None = 32,
        epochs: int = 1,
        optimizer: Optimizer | None = None,
        validation_data: tuple | None = None,
        callbacks: Sequence[Any] = (),
        metrics: Sequence[str] | None = None,
        loss: str | None = None,
        shuffle: bool = True,
        verbose: bool = False,
    ):
        """Keras's `fit` for a model of two inputs: `x` feeds the first one declared, `y` the
        second (the label). Trains as `train` does and returns a `dlc.History` of each epoch's
        `loss` (the mean step loss) and, with `validation_data=(x_val, y_val)`, `val_loss` and
        `val_NAME` for each metric (`metrics`: scalar tensor names; default: the model's
        `metric NAME = EXPR` statements, `accuracy` and `metric.*`; see README). `callbacks`:
        `dlc.EarlyStopping`, `dlc.ModelCheckpoint`, `dlc.LambdaCallback` or any `dlc.Callback`;
        one returning False stops after that epoch.
        `verbose=True` prints each epoch's logs.

        >>> sess = dlc.Session("samples/quadratic.dl", backend="numpy")
        >>> history = sess.fit(xs, ys, epochs=20, optimizer=dlc.Adam(0.1))
        >>> history.history["loss"][-1]
        """
        inputs = list(self.model.inputs)
        if len(inputs) != 2:
            raise DlcError(
                f"{self.model.path}: fit(x, y) needs a model of two inputs (the data, then the label), "
                f"but it has {len(inputs)} ({', '.join(inputs) or 'none'}): call train() with a dict of feeds"
            )
        loss_name = loss or next(iter(self.model.losses), None)
        if loss_name is None:
            raise DlcError(f"{self.model.path}: the model has no loss to train: add a statement 'loss NAME = EXPR'")
        val_feeds = None
        if validation_data is not None:
            if not isinstance(validation_data, (tuple, list)) or len(validation_data) != 2:
                raise ValueError("validation_data must be a pair (x_val, y_val)")
            val_feeds = dict(zip(inputs, validation_data))
        callbacks = list(callbacks)
        if verbose:

            def report(epoch: int, logs) -> None:
                print(f"epoch {epoch}/{epochs}: " + "  ".join(f"{k} {v:.6g}" for k, v in logs.items()), flush=True)

            callbacks.insert(0, LambdaCallback(on_epoch_end=report))
        _, runner = self._run_with_callbacks(
            dict(zip(inputs, (x, y))), loss_name, optimizer, batch_size, epochs, None, shuffle, None, None, False,
            None, None, callbacks, val_feeds, metrics,
        )  # fmt: skip
        if verbose and runner.stop_reason():
            print(runner.stop_reason(), flush=True)
        return runner.history

    def _parallel_step(self, loss: str | None, optimizer: Optimizer):
        """The data-parallel step over `self.parallel`'s ranks for (loss, optimizer): the
        gradients of this rank's shard, all-reduced, then the update (dlc/distributed.py)."""
        key = (loss, optimizer.config())
        if key not in self._parallel_steps:
            self._parallel_steps[key] = require("dlc.distributed").ParallelStep(self, loss, optimizer)  # MPI runs only
        step = self._parallel_steps[key]
        self._init_state(step.update, optimizer)
        return step

    def _resumed_position(self, optimizer: Optimizer | None) -> RunPosition:
        """A copy of where the run to resume stands; refused when there is none, or when
        `optimizer` is not the one it trains with (its state would not fit)."""
        if self._run is None:
            raise DlcError(
                "nothing to resume: no train() call of this session stopped early, and no "
                "checkpoint with a run in it was restored (or its run diverged)"
            )
        current = self._optimizer
        if self._artifact is None and optimizer is not None and current is not None:
            if optimizer.config() != current.config():
                raise DlcError(f"the run being resumed trains with {_described(current)}, not {_described(optimizer)}")
        return dataclasses.replace(self._run)

    def _checkpoint_writer(self, checkpoint, every: int | None) -> Callable[[RunPosition], None] | None:
        if every is None and checkpoint is None:
            return None
        if every is None or int(every) < 1 or checkpoint is None:
            raise ValueError(
                f"checkpoint and checkpoint_every go together (a path or function, and a count of steps "
                f"of at least 1); got checkpoint={checkpoint!r}, checkpoint_every={every!r}"
            )

        def write(position: RunPosition) -> None:
            if callable(checkpoint):
                checkpoint()
            else:
                self.save_checkpoint(checkpoint)

        return write

    def _resident(
        self,
        arrays: Mapping[str, np.ndarray],
        dims: Mapping[str, int],
        dim: str | None,
        batch_size: int | None,
        epochs: int,
        steps: int | None,
    ) -> bool:
        """Whether train() keeps its data on the GPU: on GL over a model, with batches drawn
        along `dim` from inputs whose other dims are concrete, when the run would upload more
        rows than the data has (one epoch or less uploads each row once anyway)."""
        if self.parallel is not None:
            return False  # each rank uploads its shard of a batch
        if not (self.resident_data and dim is not None and self.backend.name == "gl" and self._artifact is None):
            return False
        if any(isinstance(d, str) for name in arrays for d in self.model.inputs[name][1:]):
            return False
        n = dims[dim]
        size, per_epoch, total = schedule(n, batch_size, epochs, steps)
        epochs_done, rest = divmod(total, per_epoch)
        rows = epochs_done * n + min(rest * size, n)  # the rows the batches would upload
        return n < MAX_RESIDENT_ROWS and rows > n

    # -- checkpoints -----------------------------------------------------------------------
    @property
    def last_run(self) -> RunPosition | None:
        """Where the last train() call's run stands (a copy), as `train(resume=True)` would go
        on with it; None when there is none, or it diverged.

        >>> sess.last_run.done  # steps run so far
        """
        return dataclasses.replace(self._run) if self._run is not None else None

    def checkpoint(self):
        """A `dlc.runtime.checkpoint.Checkpoint` of the session now: params, optimizer state,
        the batch order's rng and the last run's position (as `save_checkpoint` writes).

        >>> sess.checkpoint().params["a"]
        """
        run = self._run
        rng_state = run.rng_state if run is not None and run.rng_state is not None else self._rng.bit_generator.state
        if run is not None:
            run = dataclasses.replace(run, rng_state=None)
        states = {name: self.backend.get_leaf(name) for name in self._state_names()}
        # The model's state goes with the optimizer's, and the random ops' seed: a resumed run
        # draws what the uninterrupted one would have, whatever the new session's seed.
        model_graph = None if self._artifact is not None else self.model.graph
        states.update({n: self.backend.get_leaf(n) for n in (model_graph.states if model_graph else ())})
        states.update(self.states)
        return _checkpoints().Checkpoint(self.params, states, self._optimizer_record(), rng_state, run)

    def save_checkpoint(self, path: str | os.PathLike) -> None:
        """Write a checkpoint (an .npz, atomically): what `restore` needs to go on exactly.

        >>> sess.save_checkpoint("ck.npz")
        """
        _checkpoints().write_checkpoint(path, self.checkpoint())

    def restore(self, path: str | os.PathLike) -> None:
        """Put back a checkpoint: params, optimizer state (the next train() with no optimizer,
        or one of the same settings, goes on with it), the batch order and the run's position
        (`train(resume=True)` continues it). The file is checked whole first: one of another
        model or optimizer, or a damaged one, is refused (DataError) and changes nothing.

        >>> sess.restore("ck.npz"); sess.train(data, epochs=10, resume=True)
        """
        path = os.fspath(path)
        ckpt = _checkpoints().read_checkpoint(path)
        optimizer = self._check_checkpoint(path, ckpt)
        self.set_params(ckpt.params)
        for name, value in ckpt.states.items():
            self.backend.set_leaf(name, value)
        if self._artifact is None:
            self._optimizer, self._state_ready = optimizer, set(ckpt.states)
            self._restored_config = optimizer.config() if optimizer is not None else None
        self._rng.bit_generator.state = ckpt.rng_state
        self._run = ckpt.run

    def _state_names(self) -> list[str]:
        """The optimizer state the backend holds (moments, the step counter)."""
        if self._artifact is not None:
            return list(require("dlc.runtime.artifact.manifest").leaf_shapes(self._artifact.runner.manifest)[1])
        return sorted(self._state_ready)

    def _optimizer_record(self) -> dict | None:
        if self._artifact is not None:
            return dict(self.model.optimizer) if self.model.optimizer else None
        return optimizer_record(self._optimizer) if self._optimizer is not None else None

    def _check_checkpoint(self, path: str, ckpt) -> Optimizer | None:
        """The checkpoint's optimizer, once the checkpoint is known to fit this model (its
        params, names and shapes) and its optimizer state to fit that optimizer."""
        mine = {n: tuple(s) for n, s in self.model.params.items()}
        theirs = {n: tuple(v.shape) for n, v in ckpt.params.items()}
        if mine != theirs:
            odd = sorted(set(mine) ^ set(theirs)) or [n for n in mine if mine[n] != theirs[n]]
            name = odd[0]
            what = (
                f"param '{name}' is {list(theirs[name])} there but {list(mine[name])} here"
                if name in mine and name in theirs
                else f"param '{name}' is only {'here' if name in mine else 'there'}"
            )
            raise DataError(f"{path}: the checkpoint belongs to another model: {what}")
        graph = None if self._artifact is not None else self.model.graph
        model_states = {n: graph.shape(n) for n in graph.states} if graph else {}  # `$seed` too
        missing = [n for n in model_states if n not in ckpt.states and n != "$seed"]
        if missing:
            raise DataError(f"{path}: the checkpoint lacks the model's state '{missing[0]}'")
        for name in model_states:
            if name in ckpt.states and ckpt.states[name].shape != tuple(model_states[name]):
                shape = list(ckpt.states[name].shape)
                raise DataError(f"{path}: state '{name}' is {shape} there but {list(model_states[name])} here")
        if ckpt.optimizer is None:
            if set(ckpt.states) - set(model_states):
                raise DataError(f"{path}: the checkpoint holds optimizer state but names no optimizer")
            return None
        try:
            optimizer = from_record(ckpt.optimizer)
        except (ValueError, TypeError) as e:
            raise DataError(f"{path}: the checkpoint's optimizer: {e}") from None
        if self._artifact is not None:
            compiled = from_record(dict(self.model.optimizer or {"name": "sgd", "lr": 0.01}))
            if optimizer.config() != compiled.config():
                raise DataError(
                    f"{path}: the checkpoint trains with {_described(optimizer)}, but {self.model.path} "
                    f"was compiled with {_described(compiled)}"
                )
            wanted = set(self._state_names())
            if set(ckpt.states) != wanted:
                odd = sorted(set(ckpt.states) ^ wanted)[0]
                raise DataError(f"{path}: optimizer state '{odd}' does not fit {self.model.path}'s training step")
        for name, value in ckpt.states.items():
            if name in model_states:
                continue
            param = name.split("$", 1)[0]
            fits = name == "$t" and value.shape == () or param in mine and value.shape == mine[param]
            if self._artifact is None and not fits:
                raise DataError(f"{path}: optimizer state '{name}' {list(value.shape)} does not fit the model's params")
        return optimizer

    # -- resources -------------------------------------------------------------------------
    def memory(self) -> dict[str, tuple[int, int]]:
        """(count, bytes) the backend holds, by kind (see `dlc.backends.protocol.Backend.memory`).

        >>> dlc.Session("samples/quadratic.dl", backend="numpy").memory()["params"]  # (count, bytes)
        (3, 12)
        """
        return self.backend.memory()

    def close(self) -> None:
        """Free what the backend holds (GPU buffers on GL); the session is not used after.

        >>> sess.close()
        """
        self.backend.close()

    def release(self) -> None:
        """Detach this session's GL device from the calling thread (flushing its work), so that
        another thread can use the session; nothing to do on the numpy backend.

        >>> sess.release()  # then use sess from another thread
        """
        device = getattr(getattr(self.backend, "store", None), "device", None)
        if device is not None:
            device.release()

    def __repr__(self) -> str:
        return (
            f"Session({self.model.path!r}, backend={self.backend.name!r}, inputs={list(self.model.inputs)}, "
            f"params={list(self.model.params)}, losses={list(self.model.losses)})"
        )
