"""Reverse-mode autodiff as an IR -> IR transform.

`differentiate` copies the graph and appends, for one scalar loss, the
gradient of every requested leaf, walking the nodes backwards and applying
the rules of `gradients.py`. Gradients reaching a node along several paths
(fan-out) are summed. Every gradient node carries the source position of the
forward node it comes from, so an error or a NaN in it points at that line.
Forward nodes keep their indices; the gradient of leaf `p` is named `grad$p`.
"""

from __future__ import annotations

from collections.abc import Sequence

from dlc.runtime.errors import CompileError

from .builder import GraphBuilder
from .grad_names import grad_name, resolve_loss
from .gradients import Emit, rule_for
from .ir import Graph, format_shape
from .rewriter import eliminate_dead_code


def extend(g: Graph) -> GraphBuilder:
    """A builder holding a copy of `g`, to append nodes to (its consts are shared)."""
    b = GraphBuilder()
    b.nodes = list(g.nodes)
    b.dtypes = list(g.dtypes)
    b.names = dict(g.names)
    b.name_locs = {name: g.nodes[i].loc for name, i in g.names.items()}
    b.inputs, b.params, b.losses = list(g.inputs), list(g.params), list(g.losses)
    for i, n in enumerate(g.nodes):
        if n.op == "const":
            b._consts.setdefault((n.attr("value"), n.shape), i)
    return b


def differentiate(g: Graph, loss: str | None = None, wrt: Sequence[str] | None = None) -> tuple[Graph, dict[str, int]]:
    """Append d loss / d leaf for each leaf named in `wrt` (default: every param).

    Returns the new graph and leaf name -> gradient node. A leaf the loss does
    not depend on gets zeros. Raises CompileError for a differentiable op with
    no gradient rule, naming the op and its source position.
    """
    loss = resolve_loss(g, loss)
    wrt = list(g.params if wrt is None else wrt)
    for name in wrt:
        if name not in g.names or not g.node(name).is_leaf:
            raise CompileError(
                f"cannot differentiate with respect to '{name}': it is not an input, param or state of the model"
            )
        if g.dtype(name) != "f32":
            raise CompileError(
                f"cannot differentiate with respect to '{name}': it is {g.dtype(name)} (ids carry no gradient)"
            )
    targets = {g.names[name] for name in wrt}
    root = g.names[loss]

    # Only nodes between a target and the loss carry gradients.
    reaches = [False] * len(g.nodes)
    for i, n in enumerate(g.nodes):
        reaches[i] = i in targets or any(reaches[j] for j in n.inputs)

    b = extend(g)
    start = len(b.nodes)
    pending: dict[int, list[int]] = {root: [b.const(1.0, (), g.nodes[root].loc)]} if reaches[root] else {}
    total: dict[int, int] = {}
    for i in range(root, -1, -1):
        parts = pending.pop(i, None)
        if not parts:
            continue
        n = g.nodes[i]
        e = Emit(b, n.loc)
        acc = parts[0]
        for p in parts[1:]:
            acc = e("add", acc, p)
        total[i] = acc
        if n.is_leaf:
            continue
        rule = rule_for(n)
        if rule is None:
            continue
        grads = rule(e, n, i, acc)
        if len(grads) != len(n.inputs):
            raise CompileError(
                f"internal error: the gradient rule of '{n.op}' gave {len(grads)} gradients for {len(n.inputs)} inputs",
                n.loc,
            )
        for j, gj in zip(n.inputs, grads):
            if gj is None or not reaches[j]:
                continue
            if b.shape(gj) != g.nodes[j].shape:
                raise CompileError(
                    f"internal error: the gradient rule of '{n.op}' gave shape "
                    f"{format_shape(b.shape(gj))} for an input of shape "
                    f"{format_shape(g.nodes[j].shape)}",
                    n.loc,
                )
            pending.setdefault(j, []).append(gj)

    out: dict[str, int] = {}
    for name in wrt:
        i = g.names[name]
        if i in total:
            out[name] = total[i]
        else:
            zero = b.const(0.0, (), g.nodes[i].loc)
            shape = g.nodes[i].shape
            out[name] = zero if shape == () else b.add("broadcast_to", [zero], g.nodes[i].loc, shape=shape)
        b.names[grad_name(name)] = out[name]

    graph = Graph(tuple(b.nodes), dict(b.names), g.inputs, g.params, g.states, g.losses, g.updates)
    # Rules build a gradient for every input; drop the ones no target needed.
    pruned = eliminate_dead_code(graph, start=start)
    return pruned, {name: pruned.names[grad_name(name)] for name in wrt}
