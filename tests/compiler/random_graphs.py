"""Random IR graphs for property tests of fusion, planning and codegen.

Mixes elementwise ops with broadcasting, reductions (with and without keepdims), matmuls,
transposes, reshapes, slices and pads over a symbolic batch dim B, plus param updates so that
in-place writes are exercised. Values stay bounded (no exp or log), so the same graphs can be
run on GL and compared with the reference.
"""

from __future__ import annotations

import numpy as np

from dlc.compiler.builder import GraphBuilder
from dlc.compiler.ir import Graph
from dlc.compiler.shapes import ShapeError, broadcast

UNARY = ["neg", "tanh", "relu", "sigmoid", "abs", "square", "sin"]
BINARY = ["add", "sub", "mul", "maximum", "minimum"]


def _broadcasts(a: tuple, b: tuple) -> bool:
    try:
        broadcast(a, b)
        return True
    except ShapeError:
        return False


def random_graph(seed: int, n_ops: int = 14) -> tuple[Graph, list[int]]:
    """A graph and the nodes to fetch; its updates are in `graph.updates`."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder()
    pool = [
        b.input("x", ("B", 4)),
        b.input("y", ("B", 3)),
        b.input("s", (4,)),
        b.param("w", (4, 3), ("normal", 0.0, 0.5)),
        b.param("c", (3,), ("normal", 0.0, 0.5)),
    ]
    params = {"w": pool[3], "c": pool[4]}

    def pick(pred=lambda s: True):
        options = [n for n in pool if pred(b.shape(n))]
        return options[int(rng.integers(len(options)))] if options else None

    for _ in range(n_ops):
        kind = rng.choice(["unary", "binary", "binary", "reduce", "matmul", "transpose", "reshape", "slice", "pad"])
        n = None
        if kind == "unary":
            n = b.add(str(rng.choice(UNARY)), [pick()])
        elif kind == "binary":
            a = pick()
            sa = b.shape(a)
            other = pick(lambda s, sa=sa: _broadcasts(sa, s))
            n = b.add(str(rng.choice(BINARY)), [a, other])
        elif kind == "reduce":
            a = pick(lambda s: len(s) >= 1)
            rank = len(b.shape(a))
            axes = tuple(sorted(rng.choice(rank, size=int(rng.integers(1, rank + 1)), replace=False).tolist()))
            n = b.add(str(rng.choice(["sum", "max"])), [a], axes=axes, keepdims=bool(rng.integers(2)))
        elif kind == "matmul":
            a = pick(lambda s: len(s) == 2)
            k = b.shape(a)[-1]
            other = pick(lambda s, k=k: len(s) == 2 and s[0] == k)
            if other is not None:
                n = b.add("matmul", [a, other], ta=False, tb=False)
        elif kind == "transpose":
            a = pick(lambda s: len(s) == 2)
            n = b.add("transpose", [a], perm=(1, 0))
        elif kind == "reshape":
            a = pick(lambda s: len(s) == 2 and isinstance(s[1], int) and s[1] % 2 == 0)
            if a is not None:
                s = b.shape(a)
                n = b.add("reshape", [a], shape=(s[0], 2, s[1] // 2))
        elif kind == "slice":
            a = pick(lambda s: len(s) == 2 and isinstance(s[1], int) and s[1] >= 2)
            if a is not None:
                s = b.shape(a)
                n = b.add("slice", [a], begin=(0, 1), size=(s[0], s[1] - 1))
        elif kind == "pad":
            a = pick(lambda s: len(s) == 2 and isinstance(s[1], int))
            n = b.add("pad", [a], before=(0, 1), after=(0, 0))
        if n is not None:
            pool.append(n)
    roots = sorted({pool[-1], *(int(i) for i in rng.choice(pool[5:], size=2))} if len(pool) > 5 else {pool[-1]})
    updates = []
    for name, p in params.items():
        same = [n for n in pool[5:] if b.shape(n) == b.shape(p)]
        if same:
            step = b.add("mul", [b.const(0.1), same[int(rng.integers(len(same)))]])
            updates.append((name, b.add("sub", [p, step])))
    g = b.build()
    return Graph(g.nodes, g.names, g.inputs, g.params, g.states, g.losses, tuple(updates)), roots
