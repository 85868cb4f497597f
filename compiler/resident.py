"""A training step that reads its batch from data kept on the GPU.

`resident_graph(step, inputs, dim, examples)` rewrites a training step (`build_train_graph`)
so that each batched input `x: [dim, ...]` named in `inputs` becomes `take($data$x, $idx)`:
`$data$x: [examples, ...]` is a `state` leaf holding the whole data set, uploaded once per
training run, and `$idx: [dim]` a new input, the rows of this step's batch (as floats). Per
step only `$idx` (and `$lr`) move from the host.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from .ir import Graph, Node, make_attrs
from .optimizers import ZEROS
from .resident_names import IDX, data_name
from .rewriter import Rewriter, rewrite
from .verify import check_graph


def resident_graph(step: Graph, inputs: Sequence[str], dim: str, examples: int) -> Graph:
    """`step` with every input in `inputs` (each led by symbolic `dim`, its other dims concrete)
    gathered by `$idx` from a state leaf of `examples` rows."""

    batched = set(inputs)
    idx: int | None = None
    states: dict[str, int] = {}  # data leaf name -> its node

    def visit(rw: Rewriter, i: int, n: Node) -> int:
        nonlocal idx
        name = n.attr("name") if n.op == "input" else None
        if name not in batched:
            return rw.append(n)
        if n.shape[:1] != (dim,) or any(isinstance(d, str) for d in n.shape[1:]):
            raise ValueError(f"input '{name}' {list(n.shape)} is not [{dim}, concrete dims...]")
        if idx is None:
            idx = rw.append(Node("input", (), (dim,), make_attrs(name=IDX, shape=(dim,))))
        rows = (examples, *n.shape[1:])
        typed = {"dtype": n.attr("dtype")} if n.attr("dtype") else {}  # i32 data stays i32
        data = states[data_name(name)] = rw.append(
            Node("state", (), rows, make_attrs(name=data_name(name), shape=rows, init=ZEROS, **typed), n.loc)
        )
        return rw.append(Node("take", (data, idx), n.shape, (), n.loc))

    g = rewrite(step, visit)
    out = dataclasses.replace(
        g,
        names={**g.names, **states, **({IDX: idx} if idx is not None else {})},
        inputs=tuple(k for k in step.inputs if k not in batched) + ((IDX,) if states else ()),
        states=(*step.states, *states),
    )
    check_graph(out)
    return out
