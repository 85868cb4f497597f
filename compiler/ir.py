"""The IR: a graph in A-normal form of immutable nodes, each with its shape.

A `Graph` is a topologically ordered tuple of `Node`s; a node is referred to by
its index. Leaves are `input`, `param`, `const` and `state` nodes (`state` is
persistent storage that is not trained: optimizer slots, and the model's own state).
Every dim of a shape is an int or the name of a symbolic dim (bound when data is fed).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dlc.runtime.errors import Loc, format_shape

Dim = int | str
Shape = tuple[Dim, ...]

LEAF_OPS = frozenset({"input", "param", "const", "state"})

# Each node's element type comes from its op's rule in the op registry, which sits above the
# IR: the registry hands its `element_types` down when it loads (compiler/registry.py).
_element_types: Callable[[Graph], tuple[str, ...]] | None = None


def set_element_types(rule: Callable[[Graph], tuple[str, ...]]) -> None:
    global _element_types
    _element_types = rule


@dataclass(frozen=True, slots=True)
class Node:
    op: str
    inputs: tuple[int, ...]
    shape: Shape
    attrs: tuple[tuple[str, Any], ...] = ()
    loc: Loc | None = field(default=None, compare=False)

    def attr(self, key: str, default: Any = None) -> Any:
        for k, v in self.attrs:
            if k == key:
                return v
        return default

    @property
    def is_leaf(self) -> bool:
        return self.op in LEAF_OPS


def make_attrs(**kw: Any) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(kw.items()))


@dataclass(frozen=True)
class Graph:
    """nodes plus the names a user can refer to.

    names: every named tensor (inputs, params, consts, `NAME = ...`, losses).
    updates: (leaf name, node) pairs: the new value of a param or state tensor after a
    training step (a model's graph holds its states' updates; the step adds the optimizer's).
    """

    nodes: tuple[Node, ...]
    names: Mapping[str, int]
    inputs: tuple[str, ...] = ()
    params: tuple[str, ...] = ()
    states: tuple[str, ...] = ()
    losses: tuple[str, ...] = ()
    updates: tuple[tuple[str, int], ...] = ()
    # `metric NAME = EXPR` (named tensors reported with the loss); only the model's own graph
    # keeps them: the programs built from it need not.
    metrics: tuple[str, ...] = ()

    def node(self, name: str) -> Node:
        return self.nodes[self.names[name]]

    def shape(self, name: str) -> Shape:
        return self.node(name).shape

    @functools.cached_property
    def labels(self) -> dict[int, str]:
        """Node -> the first name given to it (an immutable graph's names never change)."""
        labels: dict[int, str] = {}
        for name, i in self.names.items():
            labels.setdefault(i, name)
        return labels

    @functools.cached_property
    def dtypes(self) -> tuple[str, ...]:
        """Each node's element type, "f32" or "i32" (compiler/dtypes.py)."""
        if _element_types is None:
            raise RuntimeError("a graph's element types need the op registry: import dlc.compiler.registry")
        return _element_types(self)

    def dtype(self, name: str) -> str:
        return self.dtypes[self.names[name]]

    def label(self, i: int) -> str:
        return self.labels.get(i, f"%{i}")

    def __str__(self) -> str:
        return format_graph(self)


def _format_attr(v: Any) -> str:
    if isinstance(v, tuple) and len(v) > 8:
        return "(" + ", ".join(_format_attr(x) for x in v[:6]) + f", ... {len(v)} values)"
    if isinstance(v, float):
        return repr(v)
    return str(v)


def _format_leaf(n: Node) -> str:
    if n.op == "const":
        values = n.attr("value")
        return "const " + (repr(values[0]) if n.shape == () else _format_attr(values))
    init = n.attr("init")
    if init and init[0] == "array":
        return f"{n.op} array{_format_attr(init[1])}"
    if init:
        kind, *args = init
        return f"{n.op} {kind}" + (f"({', '.join(map(repr, args))})" if args else "")
    return f"{n.op} {n.attr('dtype')}" if n.attr("dtype") else n.op


def format_node(g: Graph, i: int, labels: dict[int, str] | None = None, locs: bool = True) -> str:
    labels = labels if labels is not None else g.labels
    n = g.nodes[i]
    lab = labels.get(i, f"%{i}")
    if n.is_leaf:
        call = _format_leaf(n)
    else:
        args = [labels.get(j, f"%{j}") for j in n.inputs]
        attrs = [f"{k}={_format_attr(v)}" for k, v in n.attrs]
        call = f"{n.op}(" + ", ".join(args + attrs) + ")"
    where = f"  # line {n.loc.line}" if n.loc and locs else ""
    return f"{lab} = {call} : {format_shape(n.shape)}{where}"


def format_graph(g: Graph, locs: bool = True) -> str:
    """The IR as text; locs=False leaves out source lines (to compare two front ends)."""
    labels = g.labels
    lines = ["graph {"]
    for i in range(len(g.nodes)):
        lines.append("  " + format_node(g, i, labels, locs))
    for name in g.losses:
        lines.append(f"  loss {name}")
    for target, i in g.updates:
        lines.append(f"  update {target} <- {labels.get(i, f'%{i}')}")
    lines.append("}")
    return "\n".join(lines)


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


def model_outputs(graph: Graph) -> list[str]:
    """The model's outputs, in the order the model names them: its named tensors, losses
    aside, that no other such tensor reads without needing more inputs (so `h` feeding
    `logits` is not one, and `prediction` stays one though `accuracy` reads it with the
    labels): the quadratic's `y`; a classifier's `probs`, `prediction` and `accuracy`; an
    imported model's graph outputs (its importer names every ONNX value, each read by the next).
    What `Session.predict` fetches by default, and the roots of an artifact's `outputs` program."""
    named = {i: n for n, i in graph.names.items()}
    skip = {graph.names[n] for n in (*graph.inputs, *graph.params, *graph.losses)}
    candidates = [i for i in named if i not in skip]
    needs = {i: leaf_inputs(graph, [i]) for i in candidates}
    read: set[int] = set()
    for i in candidates:
        stack, seen = list(graph.nodes[i].inputs), set()
        while stack:  # the named tensors i reads: its cone, stopping at each named node
            j = stack.pop()
            if j in seen:
                continue
            seen.add(j)
            if j in named:
                if j in needs and needs[i] <= needs[j]:
                    read.add(j)
            else:
                stack.extend(graph.nodes[j].inputs)
    return [n for n, i in graph.names.items() if i not in skip and i not in read]
