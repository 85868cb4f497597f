"""The training step as one graph: forward, gradients, optimizer updates, simplified.

`build_train_graph(graph, loss, optimizer)` returns a Graph with:
  - the forward graph and every named tensor of it;
  - `grad$<param>`: d loss / d param for every param;
  - the input `$lr` (shape []): the learning rate, fed each step;
  - `state` leaves for the optimizer's slots (`<param>$<slot>`, `$t`), zeros at start;
  - `updates`: (param or state name, node of its value after the step);
  - `losses[0]`: the loss the step minimizes.
Backends run it with `step`, which applies the updates. `str()` prints it.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable

from dlc.runtime.errors import DlcError
from dlc.runtime.spec import LR

from .autodiff import differentiate, extend
from .builder import GraphBuilder
from .grad_names import grad_name, resolve_loss
from .ir import Graph, cone
from .modes import training_form
from .optimizers import add_updates
from .simplify import simplify
from .verify import check_graph


def build_train_graph(graph: Graph, loss: str | None, optimizer, freeze: Iterable[str] = ()) -> Graph:
    """The training step of `graph` minimizing `loss` (default: the first) with `optimizer`
    (a `dlc.runtime.optimizers` object: `.name` and its hyper-parameters), simplified. Params declared
    `frozen` or matching a glob of `freeze` keep their values (no gradient, no optimizer state).
    The step runs the graph's training form (dropout drops, batch_norm uses batch statistics)
    and applies the model's state updates too."""
    loss, with_grads, trained = gradients_for(graph, loss, freeze)
    step = add_optimizer(graph, loss, with_grads, trained, optimizer)
    check_graph(step)
    out = simplify(step)
    check_graph(out)
    return out


def gradients_for(graph: Graph, loss: str | None, freeze: Iterable[str] = ()) -> tuple[str, Graph, dict[str, int]]:
    """The autodiff stage: (the loss, `graph` with d loss / d param appended, param -> its
    gradient node for the params the loss depends on and that are not frozen). The graph
    differentiated is `graph`'s training form (dropout drops, batch_norm uses batch statistics)."""
    graph = training_form(graph)
    loss = resolve_loss(graph, loss)
    with_grads, grads = differentiate(graph, loss)
    # A param the loss does not depend on keeps its value (its gradient is zero).
    reached = _reached(graph, loss) - frozen_params(graph, freeze)
    return loss, with_grads, {p: g for p, g in grads.items() if p in reached}


def frozen_params(graph: Graph, freeze: Iterable[str] = ()) -> set[str]:
    """The params training leaves alone: those declared `frozen param` and those matching a
    glob of `freeze` (`h.*.attn.*`; `*` matches dots too). A glob matching no param is an
    error (a typo would otherwise train everything)."""
    if isinstance(freeze, str):
        freeze = [freeze]
    out = {p for p in graph.params if graph.node(p).attr("frozen")}
    for pattern in freeze:
        matched = fnmatch.filter(graph.params, pattern)
        if not matched:
            raise DlcError(f"freeze pattern '{pattern}' matches no param (params: {', '.join(graph.params) or 'none'})")
        out.update(matched)
    return out


def add_optimizer(graph: Graph, loss: str, with_grads: Graph, trained: dict[str, int], optimizer) -> Graph:
    """The optimizer stage: the step graph (not simplified) that applies `optimizer` to the
    gradients `trained` of `with_grads`, built from the forward `graph` (whose state updates
    it applies as the training form computes them)."""
    graph = training_form(graph)
    b = extend(with_grads)
    lr = b.input(LR, ())
    states, updates = add_updates(b, optimizer, trained, lr)
    losses = (loss, *(name for name in graph.losses if name != loss))
    return Graph(
        tuple(b.nodes),
        dict(b.names),
        tuple(b.inputs),
        graph.params,
        (*graph.states, *states),
        losses,
        (*graph.updates, *updates),
    )


def _reached(graph: Graph, loss: str) -> set[str]:
    """Params the loss depends on."""
    needed = set(cone(graph, [graph.names[loss]]))
    return {p for p in graph.params if graph.names[p] in needed}


def build_split_step(graph: Graph, loss: str | None, optimizer, freeze: Iterable[str] = ()) -> tuple[Graph, Graph]:
    """The training step in two graphs, for data-parallel training (`dlc.distributed`): the
    gradients (`grad$<param>` named, with the loss), then the update, whose inputs are the
    (all-reduced) gradients `grad$<param>` and `$lr`, and whose params and optimizer state
    are the one-graph step's, by the same names. Both simplified."""
    if graph.states:
        raise DlcError(
            f"data-parallel training of a model with state ({', '.join(graph.states)}) is not supported yet: "
            "train it on one device"
        )
    loss, with_grads, trained = gradients_for(graph, loss, freeze)
    grads = simplify(with_grads)
    check_graph(grads)
    b = GraphBuilder()
    fed = {}
    for p in trained:
        node = graph.node(p)
        b.param(p, node.shape, node.attr("init"), node.loc)
        fed[p] = b.input(grad_name(p), node.shape, node.loc)
    lr = b.input(LR, ())
    states, updates = add_updates(b, optimizer, fed, lr)
    update = Graph(tuple(b.nodes), dict(b.names), tuple(b.inputs), tuple(trained), tuple(states), (), tuple(updates))
    check_graph(update)
    update = simplify(update)
    check_graph(update)
    return grads, update
