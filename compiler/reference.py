"""The reference interpreter: plain NumPy over the IR, the oracle for every backend.

float32 by default (to compare with GL), float64 for gradient checks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from . import registry
from .ir import Graph


def cone(graph: Graph, roots: Iterable[int]) -> list[int]:
    """The nodes that `roots` depend on, in topological (index) order."""
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        i = stack.pop()
        if i not in seen:
            seen.add(i)
            stack.extend(graph.nodes[i].inputs)
    return sorted(seen)


def leaf_inputs(graph: Graph, roots: Iterable[int]) -> set[str]:
    """Names of the `input` leaves that `roots` depend on."""
    return {graph.nodes[i].attr("name") for i in cone(graph, roots) if graph.nodes[i].op == "input"}


def evaluate(graph: Graph, roots: Iterable[int], leaves: Mapping[str, np.ndarray],
             dims: Mapping[str, int], dtype=np.float32) -> dict[int, np.ndarray]:
    """Values of `roots` (and everything they need). `leaves`: input, param and state values."""
    values: dict[int, np.ndarray] = {}
    dims = dict(dims)
    for i in cone(graph, roots):
        n = graph.nodes[i]
        if n.op in ("input", "param", "state"):
            values[i] = np.asarray(leaves[n.attr("name")], dtype=dtype)
            continue
        op = registry.get(n.op)
        out = op.ref([values[j] for j in n.inputs], dict(n.attrs), dims)
        values[i] = np.asarray(out, dtype=dtype)
    return values
