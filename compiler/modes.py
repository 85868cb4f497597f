"""The training and eval forms of a graph.

A graph as written holds both: each `training(train, eval)` node (dropout, batch_norm) is
`eval` by its reference. The training step runs `training_form(graph)`, where each such node
is its train input; evaluation runs `eval_form(graph)`, where it is its eval input, so that
fetching a tensor computes no train branch (no random draw, no batch statistics). Both keep
every node's index, so a node of the graph is the same node in either form.
"""

from __future__ import annotations

from .ir import Graph, Node, make_attrs

TRAIN, EVAL = 0, 1  # the inputs of a `training` node


def training_form(graph: Graph) -> Graph:
    """`graph` with every `training` node replaced by its train input."""
    return _select(graph, TRAIN)


def eval_form(graph: Graph) -> Graph:
    """`graph` with every `training` node replaced by its eval input."""
    return _select(graph, EVAL)


def _select(graph: Graph, which: int) -> Graph:
    if not any(n.op == "training" for n in graph.nodes):
        return graph
    alias: dict[int, int] = {}
    nodes = list(graph.nodes)
    for i, n in enumerate(nodes):
        inputs = tuple(alias.get(j, j) for j in n.inputs)
        if n.op == "training":
            chosen = inputs[which]
            if nodes[chosen].shape == n.shape:
                alias[i] = chosen  # the node itself stays, unused
            else:  # it broadcasts against the other input: keep the node's shape
                nodes[i] = Node("broadcast_to", (chosen,), n.shape, make_attrs(shape=n.shape), n.loc)
        elif inputs != n.inputs:
            nodes[i] = Node(n.op, inputs, n.shape, n.attrs, n.loc)
    return Graph(
        tuple(nodes),
        {name: alias.get(i, i) for name, i in graph.names.items()},
        graph.inputs,
        graph.params,
        graph.states,
        graph.losses,
        tuple((name, alias.get(i, i)) for name, i in graph.updates),
    )
