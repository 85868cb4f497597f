"""The training form of a graph: what the training step computes.

A graph as written is its eval form: `training(train, eval)` nodes (dropout, batch_norm)
give their eval input. The training step runs `training_form(graph)`, where each such node
gives its train input instead; the eval program and `Session.eval` run the graph as is.
"""

from __future__ import annotations

from .ir import Graph, Node, make_attrs


def training_form(graph: Graph) -> Graph:
    """`graph` with every `training` node replaced by its train input (node indices kept)."""
    if not any(n.op == "training" for n in graph.nodes):
        return graph
    alias: dict[int, int] = {}
    nodes = list(graph.nodes)
    for i, n in enumerate(nodes):
        inputs = tuple(alias.get(j, j) for j in n.inputs)
        if n.op == "training":
            train = inputs[0]
            if nodes[train].shape == n.shape:
                alias[i] = train
            else:  # broadcast against the eval input: keep the node's shape
                nodes[i] = Node("broadcast_to", (train,), n.shape, make_attrs(shape=n.shape), n.loc)
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
