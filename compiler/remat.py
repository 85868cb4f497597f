"""Rematerialization: a gradient graph recomputes cheap forward values in its backward pass
instead of keeping them alive from the forward pass to the backward.

A training step's peak memory is the forward activations the backward reads. Some of them
cost only a pass over memory to make again from tensors the backward keeps anyway: `h =
layer_norm(x, w, b)` when layer_norm's gradient keeps x; `gelu(a)` when gelu's gradient keeps
a; a transpose of the attention's output, which the attention's gradient keeps. For such a
node the backward's readers get a copy of it, computed again just before the first of them
(the graph's topological order is its schedule's: compiler/fusion.py). The forward's copy
then dies in the forward pass. Both copies compute the same op on the same values, so every
result is unchanged (simplify's CSE would merge them: this runs after it).

The backward is what follows the loss: autodiff appends the gradients after the forward
(compiler/autodiff.py), so a reader past the loss node is a backward reader. Graphs with no
gradient (`grad$` names) are left as they are.
"""

from __future__ import annotations

import math

from . import registry
from .fusion import recomputed_where_read
from .grad_names import backward_start
from .ir import Graph, Node
from .rewriter import Rewriter

# What is cheap to compute again: one pass over its inputs, no reduction across them.
_CHEAP_KINDS = ("elementwise", "layout")
_CHEAP_NORMS = ("layer_norm", "rms_norm")
_NEVER = ("reshape", "gather_grad")  # a view (no storage of its own); a loop over indices


def rematerialize(g: Graph) -> Graph:
    """`g` with its backward's readers of each cheap forward value (see the module) reading a
    copy made in the backward. `g` itself when it has no gradient or nothing to copy."""
    boundary = backward_start(g)
    if boundary is None:
        return g
    copied = _to_copy(g, boundary)
    if not copied:
        return g
    rw = Rewriter(g)
    late: dict[int, int] = {}  # copied node -> the new index of its backward copy

    def late_input(j: int) -> int:
        if j not in copied:
            return rw.remap[j]
        if j not in late:
            n = g.nodes[j]
            late[j] = rw.append(Node(n.op, tuple(late_input(i) for i in n.inputs), n.shape, n.attrs, n.loc))
        return late[j]

    for i, n in enumerate(g.nodes):
        if i > boundary and any(j in copied for j in n.inputs):
            n = Node(n.op, tuple(late_input(j) for j in n.inputs), n.shape, n.attrs, n.loc)
        else:
            n = rw.node(n)
        rw.remap[i] = rw.append(n)
    return rw.graph()


def _to_copy(g: Graph, boundary: int) -> set[int]:
    """The forward nodes to copy: cheap, read by the forward and by the backward, and made from
    values the backward has anyway: leaves, scalars, values it reads itself, other copies, and
    what fusion recomputes wherever it is read (dropout masks, views of leaves)."""
    late_read: set[int] = set()
    early_read: set[int] = set()
    for i, n in enumerate(g.nodes):
        for j in n.inputs:
            (late_read if i > boundary else early_read).add(j)
    free = recomputed_where_read(g, range(boundary))
    out: set[int] = set()

    def available(j: int) -> bool:
        return g.nodes[j].is_leaf or _elements(g.nodes[j]) == 1 or j in late_read or j in out or j in free

    for i, n in enumerate(g.nodes[:boundary]):
        if n.is_leaf or _elements(n) == 1 or i in free:
            continue
        if _cheap(n) and i in late_read and i in early_read and all(available(j) for j in n.inputs):
            out.add(i)
    return out


def _cheap(n: Node) -> bool:
    if n.op in _NEVER:
        return False
    return registry.get(n.op).kind in _CHEAP_KINDS or n.op in _CHEAP_NORMS


def _elements(n: Node) -> int | None:
    return None if any(isinstance(d, str) for d in n.shape) else math.prod(n.shape)
