"""The seeds' training and evaluation style on a Session: FeedEntry, CostReduction, input providers.

    x = g.placeholder("input", [3]); label = g.placeholder("label", [1])
    cost = g.mean_squared_cost(g.matmul(multiplier, x), label)
    session = dlc.Session(g)
    entries = [dlc.FeedEntry(x, xs), dlc.FeedEntry(label, ys)]
    session.train(cost, entries, batch_size, dlc.SGD(lr), dlc.CostReduction.MEAN)  # -> float
    session.eval(y, [dlc.FeedEntry(x, dlc.array([0.1, 0.2, 0.3]))])              # -> dlc.Array

As in deeplearn.js, where placeholders have no batch dim the graph computes one example: a
batch of `batch_size` examples gives `batch_size` per-example costs, their gradients are
averaged and the optimizer makes one update. dlc does that in one program: the graph's
per-example part is copied once per example of the batch (each copy reading its row of the
stacked inputs; the pass `dlc.compiler.unroll.unroll`), the costs are averaged, and the
optimizer's training step is built over that mean, whose gradient is the average of the
per-example gradients. The step runs through `Session._train_step`, the Session's one step. Where the placeholders do
lead with a symbolic batch dim, the batch is fed whole and the cost tensor is taken as the
batch's mean cost.

The returned cost: CostReduction.MEAN the mean of the per-example costs, SUM their sum
(batched graphs: the mean times the batch size), NONE nothing (None).
"""

from __future__ import annotations

import enum
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dlc.compiler.reference import leaf_inputs
from dlc.compiler.train_graph import build_train_graph
from dlc.compiler.unroll import COST, COST_SUM, cost_as_loss, unroll

from .arrays import array
from .graph import Tensor
from .runtime.errors import DataError, format_shape
from .runtime.feeds import as_element_type, bind_dims


class CostReduction(enum.Enum):
    """What `Session.train` in the seeds' style returns: the batch's cost summed, averaged, or
    nothing. The update always follows the average of the per-example gradients, as in the
    seeds.

    >>> cost = session.train(cost_tensor, feed_entries, batch_size, optimizer, dlc.CostReduction.MEAN)
    """

    NONE = "none"
    SUM = "sum"
    MEAN = "mean"


# -- input providers --------------------------------------------------------------------


class InputProvider:
    """Gives one example at a time (the seeds' InputProvider)."""

    def __init__(self, next_copy: Callable[[], np.ndarray]):
        self._next = next_copy

    def get_next_copy(self) -> np.ndarray:
        return self._next()

    def dispose_copy(self, copy: Any) -> None:
        """Nothing to free: copies are host arrays (kept for the seeds' interface)."""


class InCPUMemoryShuffledInputProviderBuilder:
    """Providers over parallel lists of examples, shuffled together each epoch so that the
    i-th example of every provider stays matched (the seeds' builder of the same name).

    >>> builder = dlc.InCPUMemoryShuffledInputProviderBuilder([inputs, labels], seed=0)
    >>> input_provider, label_provider = builder.get_input_providers()
    """

    def __init__(self, inputs: Sequence[Sequence[Any]], seed: int | None = None):
        self.inputs = [[_host(x) for x in examples] for examples in inputs]
        sizes = {len(examples) for examples in self.inputs}
        if len(sizes) != 1 or 0 in sizes:
            raise DataError(
                f"the inputs must hold the same, non-zero number of examples, got {[len(e) for e in self.inputs]}"
            )
        self.count = sizes.pop()
        self._rng = np.random.default_rng(seed)
        self._orders: list[np.ndarray] = []

    def _order(self, epoch: int) -> np.ndarray:
        while len(self._orders) <= epoch:
            self._orders.append(self._rng.permutation(self.count))
        return self._orders[epoch]

    def get_input_providers(self) -> list[InputProvider]:
        """One provider per list of examples; each `get_next_copy()` gives its next example.

        >>> input_provider, label_provider = builder.get_input_providers()
        """
        providers = []
        for examples in self.inputs:
            cursor = [0]

            def next_copy(examples=examples, cursor=cursor) -> np.ndarray:
                epoch, k = divmod(cursor[0], self.count)
                cursor[0] += 1
                return examples[int(self._order(epoch)[k])].copy()

            providers.append(InputProvider(next_copy))
        return providers

    getInputProviders = get_input_providers  # noqa: N815  (the seeds' spelling)


InMemoryShuffledInputProviderBuilder = InCPUMemoryShuffledInputProviderBuilder


# -- feed entries -------------------------------------------------------------------------


@dataclass(eq=False)
class FeedEntry:
    """Feeds `data` to placeholder `tensor`. `data`: an InputProvider; a list of per-example
    arrays; an array whose first axis is examples; or one example (used for every example of
    a batch, as the seeds do with an NDArray).

    >>> feeds = [dlc.FeedEntry(input_tensor, input_provider), dlc.FeedEntry(label_tensor, label_provider)]
    """

    tensor: Tensor
    data: Any
    _cursor: int = field(default=0, repr=False)

    def examples(self, count: int, example_shape: tuple) -> np.ndarray:
        """The next `count` examples, stacked; plain data is taken in order, cycling.

        >>> dlc.FeedEntry(x, dlc.array([[1, 2, 3], [4, 5, 6]])).examples(3, (3,)).shape
        (3, 3)
        """
        data = self.data
        if hasattr(data, "get_next_copy"):
            return np.stack([_host(data.get_next_copy()) for _ in range(count)])
        if isinstance(data, (list, tuple)) and data and not _is_number_list(data, example_shape):
            data = np.stack([_host(x) for x in data])
        data = _host(data)
        rank = len(example_shape)
        if data.ndim == rank:
            return np.broadcast_to(data, (count, *data.shape)).copy()
        if data.ndim != rank + 1 or len(data) == 0:
            raise DataError(
                f"feed for '{_name(self.tensor)}' has shape {list(data.shape)}: expected one example "
                f"{format_shape(example_shape)} or examples [N, {format_shape(example_shape)[1:]}"
            )
        idx = (self._cursor + np.arange(count)) % len(data)
        self._cursor = int((self._cursor + count) % len(data))
        return data[idx]

    def value(self, shape: tuple) -> np.ndarray:
        """The value for one evaluation (providers give their next example).

        >>> dlc.FeedEntry(x, dlc.array([1, 2, 3])).value((3,))
        array([1., 2., 3.], dtype=float32)
        """
        data = self.data
        if hasattr(data, "get_next_copy"):
            return _host(data.get_next_copy())
        if isinstance(data, (list, tuple)) and data and not _is_number_list(data, shape):
            return np.stack([_host(x) for x in data])
        return _host(data)


def _is_number_list(data: Sequence, example_shape: tuple) -> bool:
    """A nested list of numbers that is itself one example or a plain batch, not a list of
    per-example arrays."""
    first = data[0]
    return isinstance(first, (int, float, np.number)) or (isinstance(first, list) and len(example_shape) > 1)


def _host(x: Any) -> np.ndarray:
    return np.asarray(x.numpy() if hasattr(x, "numpy") else x, dtype=np.float32)


def _name(t: Tensor) -> str:
    return t.name or f"%{t.index}"


def feed_entries(feeds: Any) -> list[FeedEntry]:
    """FeedEntry objects from: a list of FeedEntry, {"tensor", "data"} dicts or (tensor, data)
    pairs; or a mapping tensor (or placeholder name) -> data."""
    if isinstance(feeds, FeedEntry):
        return [feeds]
    if isinstance(feeds, Mapping):
        return [FeedEntry(k, v) for k, v in feeds.items()]
    out = []
    for e in feeds or ():
        if isinstance(e, FeedEntry):
            out.append(e)
        elif isinstance(e, Mapping):
            out.append(FeedEntry(e["tensor"], e["data"]))
        else:
            tensor, data = e
            out.append(FeedEntry(tensor, data))
    return out


# -- the seeds' calls on a Session (Session.train / Session.eval send them here) ----------


_compiled: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # session -> {key: step graph}


def _node(session: Any, t: Tensor) -> int:
    """The node of `t` in the session's model, checking that the model came from t's Graph."""
    if not isinstance(t, Tensor):
        raise TypeError(f"expected a dlc.Tensor of the session's Graph, got {type(t).__name__}")
    graph = session.model.graph
    origin = getattr(session.model, "origin", None)
    if (
        (origin is not None and origin() is not t.graph)
        or t.index >= len(graph.nodes)
        or graph.nodes[t.index] != t.graph._b.nodes[t.index]
    ):
        raise ValueError(
            f"tensor {_name(t)} is not from the Graph this Session was made from "
            "(or it was added to the Graph after the Session was made)"
        )
    return t.index


def eval_seeds(session: Any, fetch: Tensor | Sequence[Tensor], feeds: Any = None) -> Any:
    """The seeds' `session.eval(tensor, feed_entries)`: a dlc.Array (a list for a list)."""

    graph = session.model.graph
    single = isinstance(fetch, Tensor)
    roots = [_node(session, t) for t in ([fetch] if single else fetch)]
    arrays = {
        name: as_element_type(name, e.value(graph.shape(name)), graph.dtype(name))  # ids as int32
        for name, e in _placeholders(session, feeds).items()
    }
    dims = bind_dims(session.model.inputs, arrays, needed=leaf_inputs(graph, roots))
    values = session.backend.run(graph, roots, arrays, dims)
    backend = session.backend.name if session.backend.name in ("gl", "numpy") else None
    out = [array(np.asarray(v, np.float32), backend=backend) for v in values]
    return out[0] if single else out


def _placeholders(session: Any, feeds: Any) -> dict[str, FeedEntry]:
    """Placeholder name -> its feed entry, refusing entries that feed anything else."""
    graph = session.model.graph
    fed = {}
    for e in feed_entries(feeds):
        idx = _node(session, e.tensor)
        if graph.nodes[idx].op != "input":
            raise DataError(f"'{_name(e.tensor)}' is fed but it is not a placeholder")
        fed[graph.nodes[idx].attr("name")] = e
    return fed


def train_seeds(
    session: Any,
    cost: Tensor,
    feeds: Any,
    batch_size: int = 1,
    optimizer: Any = None,
    cost_reduction: CostReduction = CostReduction.MEAN,
) -> float | None:
    """The seeds' `session.train(cost, feed_entries, batch_size, optimizer, reduction)`:
    one update from a batch; returns the batch's cost (see CostReduction)."""
    graph = session.model.graph
    cost_node = _node(session, cost)
    if graph.nodes[cost_node].shape != ():
        shape = format_shape(graph.nodes[cost_node].shape)
        raise DataError(f"the cost {_name(cost)} must be a scalar, its shape is {shape}")
    batch_size = int(batch_size)
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    optimizer = session.optimizer(optimizer)
    fed = _placeholders(session, feeds)
    needed = leaf_inputs(graph, [cost_node])
    missing = sorted(needed - set(fed))
    if missing:
        raise DataError(f"placeholder '{missing[0]}' is needed by the cost but has no FeedEntry")
    names = sorted(needed)
    batched = any(graph.shape(n) and isinstance(graph.shape(n)[0], str) for n in names)

    key = (cost_node, batched, None if batched else batch_size, optimizer.config())
    cache = _compiled.setdefault(session, {})
    if key not in cache:
        per_batch = cost_as_loss(graph, cost_node) if batched else unroll(graph, cost_node, batch_size)
        cache[key] = build_train_graph(per_batch, COST, optimizer)
    step = cache[key]

    arrays = {}
    for n in names:
        shape = graph.shape(n)
        arrays[n] = as_element_type(n, fed[n].examples(batch_size, shape[1:] if batched else shape), graph.dtype(n))
    if batched:
        dims = bind_dims(session.model.inputs, arrays, needed=set(names))
    else:
        dims = {}
        for n in names:
            dims.update(bind_dims({n: graph.shape(n)}, {n: arrays[n][0]}))
    mean, total = session._train_step(step, [step.names[COST], step.names[COST_SUM]], arrays, dims, optimizer)
    if cost_reduction in (CostReduction.MEAN, "mean"):
        return float(mean)
    if cost_reduction in (CostReduction.SUM, "sum"):
        return float(total) if not batched else float(mean) * batch_size
    return None
