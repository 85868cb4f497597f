"""GraphBuilder: appends IR nodes, running each op's shape rule as it goes.

Both front ends build through it (the .dl language and `dlc.Graph`), so a
model written either way gives the same IR. A shape rule's ShapeError becomes
a CompileError at the node's source position.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from dlc.runtime.errors import CompileError, Loc, format_shape
from dlc.runtime.sizes import too_many

from . import opdefs
from .dtypes import F32
from .initializers import init_problem
from .ir import Graph, Node, Shape, make_attrs
from .shapes import ShapeError, split_size


class GraphBuilder:
    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self.names: dict[str, int] = {}
        self.inputs: list[str] = []
        self.params: list[str] = []
        self.losses: list[str] = []
        self.states: list[str] = []  # model state (`state NAME`), saved with the params
        self.updates: list[tuple[str, int]] = []  # (state, its value after a training step)
        self.metrics: list[str] = []  # `metric NAME = EXPR`: scalars reported beside the loss
        self.name_locs: dict[str, Loc | None] = {}
        self._consts: dict[tuple, int] = {}
        self.dtypes: list[str] = []  # each node's element type (dtypes.py)

    # -- nodes ---------------------------------------------------------------
    def add(self, op: str, inputs: tuple[int, ...] | list[int], loc: Loc | None = None, **attrs: Any) -> int:
        opdef = opdefs.get(op)
        inputs = tuple(inputs)
        if opdef.arity is not None and len(inputs) != opdef.arity:
            raise CompileError(f"{op} takes {opdef.arity} inputs, got {len(inputs)}", loc)
        try:
            shape = opdef.shape([self.nodes[i].shape for i in inputs], attrs)
            dtype = (
                attrs.get("dtype", F32)
                if opdef.kind == "leaf"
                else opdef.element_type([self.dtypes[i] for i in inputs], attrs)
            )
        except ShapeError as e:
            raise CompileError(str(e), loc) from None
        known = math.prod(d for d in shape if isinstance(d, int))
        why = too_many(known, shape)
        if why:  # symbolic dims are at least 1: the fixed part alone is too big already
            what = f"{op} {attrs['name']!r}" if op in ("input", "param") else f"the {op}"
            raise CompileError(f"{what}: {why}", loc)
        self.nodes.append(Node(op, inputs, tuple(shape), make_attrs(**attrs), loc))
        self.dtypes.append(dtype)
        return len(self.nodes) - 1

    def dtype(self, i: int) -> str:
        return self.dtypes[i]

    def shape(self, i: int) -> Shape:
        return self.nodes[i].shape

    def const(self, value: float | list | tuple, shape: Shape = (), loc: Loc | None = None) -> int:
        """A constant; scalars are shared so that `2` written twice is one node."""
        flat = tuple(float(v) for v in _flatten(value))
        key = (flat, tuple(shape))
        if key not in self._consts:
            self._consts[key] = self.add("const", (), loc, shape=tuple(shape), value=flat)
        return self._consts[key]

    # -- names ---------------------------------------------------------------
    def declare(self, name: str, i: int, loc: Loc | None) -> None:
        if name in self.names:
            first = self.name_locs.get(name)
            where = f" (first defined at line {first.line})" if first else ""
            raise CompileError(f"duplicate name '{name}'{where}", loc)
        self.names[name] = i
        self.name_locs[name] = loc

    def rebind(self, name: str, i: int, loc: Loc | None) -> None:
        """Point `name` at node `i` (a loop's `x = block(x)`): fetching it gives its last value."""
        self.names[name] = i
        self.name_locs[name] = loc

    def input(self, name: str, shape: Shape, loc: Loc | None = None, dtype: str = F32) -> int:
        # Only an i32 input carries the attr, so an f32 model's IR is as it was.
        typed = {} if dtype == F32 else {"dtype": dtype}
        i = self.add("input", (), loc, shape=tuple(shape), name=name, **typed)
        self.declare(name, i, loc)
        self.inputs.append(name)
        return i

    def param(self, name: str, shape: Shape, init: tuple, loc: Loc | None = None, frozen: bool = False) -> int:
        """A param; `frozen` ones are saved and loaded but never trained."""
        sym = [d for d in shape if isinstance(d, str)]
        if sym:
            raise CompileError(f"param '{name}' has symbolic dim '{sym[0]}': a param's shape must be concrete", loc)
        problem = init_problem(init)
        if problem:
            raise CompileError(f"param '{name}': {problem[1]}", loc)
        extra = {"frozen": True} if frozen else {}  # absent otherwise: the IR of other params is unchanged
        i = self.add("param", (), loc, shape=tuple(shape), name=name, init=init, **extra)
        self.declare(name, i, loc)
        self.params.append(name)
        return i

    def state(self, name: str, shape: Shape, init: tuple, loc: Loc | None = None) -> int:
        """A model state: not trained, saved with the params, set by its update after each
        training step (see `update`)."""
        sym = [d for d in shape if isinstance(d, str)]
        if sym:
            raise CompileError(f"state '{name}' has symbolic dim '{sym[0]}': a state's shape must be concrete", loc)
        problem = init_problem(init)
        if problem:
            raise CompileError(f"state '{name}': {problem[1]}", loc)
        i = self.add("state", (), loc, shape=tuple(shape), name=name, init=init)
        self.declare(name, i, loc)
        self.states.append(name)
        return i

    def update(self, name: str, i: int, loc: Loc | None = None) -> None:
        """After each training step, state `name` takes the value node `i` had in that step."""
        if name not in self.states:
            raise CompileError(f"'{name}' is not a state: only a `state` is updated", loc)
        for target, j in self.updates:
            if target == name:
                first = self.nodes[j].loc
                where = f" (first at line {first.line})" if first else ""
                raise CompileError(f"state '{name}' is updated twice{where}", loc)
        want, got = self.nodes[self.names[name]].shape, self.nodes[i].shape
        if tuple(got) != tuple(want):
            raise CompileError(f"update of state '{name}' {format_shape(want)} has shape {format_shape(got)}", loc)
        self.updates.append((name, i))

    def loss(self, name: str, i: int, loc: Loc | None = None) -> None:
        if self.nodes[i].shape != ():
            shape = format_shape(self.nodes[i].shape)
            raise CompileError(f"loss '{name}' must be a scalar, but its shape is {shape}", loc)
        self.losses.append(name)

    def metric(self, name: str, i: int, loc: Loc | None = None) -> None:
        if self.nodes[i].shape != ():
            shape = format_shape(self.nodes[i].shape)
            raise CompileError(f"metric '{name}' must be a scalar, but its shape is {shape}", loc)
        self.metrics.append(name)

    def build(self) -> Graph:
        graph = Graph(
            tuple(self.nodes),
            dict(self.names),
            tuple(self.inputs),
            tuple(self.params),
            tuple(self.states),
            tuple(self.losses),
            tuple(self.updates),
        )
        return dataclasses.replace(graph, metrics=tuple(self.metrics)) if self.metrics else graph


def _flatten(v):
    if isinstance(v, (list, tuple)):
        for x in v:
            yield from _flatten(x)
    else:
        yield v


def count(b: GraphBuilder, loc, shape: Shape) -> int:
    """The element count of `shape`: a constant, or a dim_size for symbolic dims."""
    known, sym = split_size(shape)
    if not sym:
        return b.const(float(known), (), loc)
    return b.add("dim_size", [], loc, dims=tuple(shape))
