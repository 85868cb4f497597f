"""The gradient table: one rule per differentiable registry op (tinygrad style).

Rules live in the registry entries (`OpDef.gradient`, written in `compiler/ops/` beside
each op); `GRADIENTS` is the table derived from the registry, and `Emit` what rules write
their IR through.

A rule gets an `Emit` (appends IR at the forward node's source position), the
forward node, its own index `y` and the upstream gradient `g` (shape of the
node), and returns one gradient per input, each of that input's exact shape,
or None where an input gets no gradient. Ops the registry marks not
differentiable need no rule; a differentiable op without one is an error
naming the op (`rule_for`).

Gradients of broadcasting ops are summed back to the operand's shape
(`unbroadcast`). Ties (maximum, minimum, max/min reductions) share the
gradient equally, as PyTorch does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dlc.runtime.errors import CompileError, Loc

from . import registry
from .builder import GraphBuilder
from .ir import Node, Shape


@dataclass(frozen=True)
class Emit:
    """Appends nodes through the builder, all at one source position."""

    b: GraphBuilder
    loc: Loc | None

    def __call__(self, op: str, *inputs: int, **attrs) -> int:
        return self.b.add(op, inputs, self.loc, **attrs)

    def const(self, value: float) -> int:
        return self.b.const(float(value), (), self.loc)

    def shape(self, i: int) -> Shape:
        return self.b.shape(i)


Grads = Sequence[int | None]
Rule = Callable[[Emit, Node, int, int], Grads]


def rule_for(node: Node) -> Rule | None:
    """The rule for `node`'s op; None when the op is not differentiable."""
    if not registry.get(node.op).differentiable:
        return None
    rule = GRADIENTS.get(node.op)  # the derived table (tests take a rule out of it)
    if rule is None:
        raise CompileError(f"no gradient rule for op '{node.op}': it cannot be differentiated", node.loc)
    return rule


# The gradient table, derived from the entries.
GRADIENTS: dict[str, Rule] = {n: op.gradient for n, op in registry.REGISTRY.items() if op.gradient is not None}
