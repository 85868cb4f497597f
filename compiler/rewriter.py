"""Rewriting an IR graph node by node: the machinery every pass that rebuilds a graph shares
(simplify's passes, the attention packing, resident data, autodiff's pruning)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from .ir import Graph, Node, cone


class Rewriter:
    """Builds a new node list; `remap[i]` is the new index of old node i."""

    def __init__(self, g: Graph) -> None:
        self.g = g
        self.nodes: list[Node] = []
        self.remap: dict[int, int] = {}

    def node(self, old: Node) -> Node:
        """`old` with its inputs renumbered."""
        return Node(old.op, tuple(self.remap[j] for j in old.inputs), old.shape, old.attrs, old.loc)

    def append(self, n: Node) -> int:
        self.nodes.append(n)
        return len(self.nodes) - 1

    def graph(self) -> Graph:
        g = self.g
        names = {name: self.remap[i] for name, i in g.names.items()}
        updates = tuple((name, self.remap[i]) for name, i in g.updates)
        return Graph(tuple(self.nodes), names, g.inputs, g.params, g.states, g.losses, updates)


def rewrite(g: Graph, visit: Callable[[Rewriter, int, Node], int]) -> Graph:
    """Apply `visit(rewriter, old index, node with new inputs) -> new index` to every node."""
    rw = Rewriter(g)
    for i, n in enumerate(g.nodes):
        rw.remap[i] = visit(rw, i, rw.node(n))
    return rw.graph()


def eliminate_dead_code(g: Graph, keep: Iterable[int] | None = None, start: int = 0) -> Graph:
    """Drop nodes nothing kept depends on. Kept by default: every named node (inputs,
    params, states, named tensors, losses) and every update. Only nodes at index
    >= `start` are dropped, so a pass can prune what it appended and leave the rest."""
    roots = set(g.names.values()) | {i for _, i in g.updates}
    if keep is not None:
        roots |= set(keep)
    live = set(cone(g, roots)) | set(range(start))

    def visit(rw: Rewriter, i: int, n: Node) -> int:
        return rw.append(n) if i in live else -1

    return rewrite(g, visit)
