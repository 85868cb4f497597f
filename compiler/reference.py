"""The reference interpreter: plain NumPy over the IR, the oracle for every backend.

float32 by default (to compare with GL), float64 for gradient checks.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping

import numpy as np

from . import registry
from .dtypes import I32, INT_LOWERING
from .ir import Graph, cone, leaf_inputs  # noqa: F401  (leaf_inputs: asked for here too)


def evaluate(
    graph: Graph,
    roots: Iterable[int],
    leaves: Mapping[str, np.ndarray],
    dims: Mapping[str, int],
    dtype=np.float32,
    on_node: Callable[[int, np.ndarray, float], None] | None = None,
) -> dict[int, np.ndarray]:
    """Values of `roots` (and everything they need). `leaves`: input, param and state values.

    `on_node(i, value, seconds)`, if given, sees each computed node as it is made (debug mode
    times nodes and stops at the first NaN with it)."""
    values: dict[int, np.ndarray] = {}
    dims = dict(dims)
    types = graph.dtypes
    for i in cone(graph, roots):
        n = graph.nodes[i]
        own = np.int32 if types[i] == I32 else dtype  # i32 values are int32 arrays
        if n.op in ("input", "param", "state"):
            values[i] = np.asarray(leaves[n.attr("name")]).astype(own, copy=False)
            continue
        op = registry.get(n.op)
        start = time.perf_counter() if on_node is not None else 0.0
        args = [values[j] for j in n.inputs]
        exact = INT_LOWERING in op.lowering and all(a.dtype == np.int32 for a in args)
        if op.kind == "elementwise" and not exact:  # an i32 operand is computed on as a float, as on GL
            args = [a.astype(dtype) if a.dtype == np.int32 else a for a in args]
        out = op.ref(args, dict(n.attrs), dims)
        values[i] = np.asarray(out).astype(own, copy=False)
        if on_node is not None:
            on_node(i, values[i], time.perf_counter() - start)
    return values
