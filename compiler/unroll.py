"""Named passes that make a cost tensor of a model the loss of a training step, as the seeds'
`session.train(cost, feed_entries, batch_size, ...)` trains (`dlc.seeds`):

- `unroll(graph, cost, batch)`: for a model of one example (inputs without a batch dim), the
  per-example part copied `batch` times, each copy reading its row of the stacked inputs;
  the loss is the mean of the copies' costs, so its gradient is the mean of the per-example
  gradients (one optimizer update per batch, as in deeplearn.js);
- `cost_as_loss(graph, cost)`: for a model whose inputs lead with a batch dim, the cost
  itself as the loss (taken as the batch's mean cost).

Both declare `COST` (the loss minimized) and `COST_SUM` (the costs' sum, for
CostReduction.SUM; for `cost_as_loss` it is the cost itself).
"""

from __future__ import annotations

from dlc.runtime.errors import DataError

from .autodiff import extend
from .builder import GraphBuilder
from .ir import Graph, cone
from .registry import FUNCTIONS

COST = "$seeds_cost"  # the loss the seeds' step minimizes: mean of per-example costs
COST_SUM = "$seeds_cost_sum"  # their sum, for CostReduction.SUM


def unroll(graph: Graph, cost_node: int, batch: int) -> Graph:
    """The cone of `cost_node` copied `batch` times: each copy reads its row of the stacked
    inputs (input x [s...] becomes [batch, s...]); params and constants are shared. The loss
    `COST` is the mean of the copies' costs, `COST_SUM` their sum."""
    if batch < 1:
        raise ValueError(f"batch must be at least 1, got {batch}")
    b = GraphBuilder()
    nodes = cone(graph, [cost_node])
    shared: dict[int, int] = {}
    stacked: dict[int, int] = {}
    for i in nodes:
        n = graph.nodes[i]
        if n.op == "param":
            shared[i] = b.param(n.attr("name"), n.shape, n.attr("init"), n.loc)
        elif n.op == "const":
            shared[i] = b.const(n.attr("value"), n.shape, n.loc)
        elif n.op == "input":
            stacked[i] = b.input(n.attr("name"), (batch, *n.shape), n.loc, dtype=n.attr("dtype", "f32"))
        elif n.op == "state":
            raise DataError("the seeds' style of training needs a model without optimizer state leaves")
    costs = []
    for k in range(batch):
        local = dict(shared)
        for i, x in stacked.items():
            shape = graph.nodes[i].shape
            row = FUNCTIONS["slice"].impl(b, graph.nodes[i].loc, x, (k, *[0] * len(shape)), (1, *[-1] * len(shape)))
            local[i] = FUNCTIONS["reshape"].impl(b, graph.nodes[i].loc, row, tuple(shape))
        for i in nodes:
            n = graph.nodes[i]
            if i not in local:
                local[i] = b.add(n.op, [local[j] for j in n.inputs], n.loc, **dict(n.attrs))
        costs.append(local[cost_node])
    loc = graph.nodes[cost_node].loc
    total = costs[0]
    for c in costs[1:]:
        total = b.add("add", [total, c], loc)
    b.declare(COST_SUM, total, loc)
    mean = b.add("div", [total, b.const(float(batch), (), loc)], loc)
    b.declare(COST, mean, loc)
    b.loss(COST, mean, loc)
    return b.build()


def cost_as_loss(graph: Graph, cost_node: int) -> Graph:
    """The model with its cost tensor as the loss `COST` (inputs fed a whole batch)."""
    b = extend(graph)
    b.declare(COST, cost_node, graph.nodes[cost_node].loc)
    b.declare(COST_SUM, cost_node, graph.nodes[cost_node].loc)
    b.losses = [COST]
    return b.build()
