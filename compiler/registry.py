"""The op registry: one entry per primitive op of the IR.

An entry holds the op's shape rule, its reference semantics (NumPy) and, for
elementwise ops, its GLSL expression. Gradient rules live in one table in
`gradients.py` and kernel templates for the other kinds in `codegen/`; the
test suite sweeps this registry to check that every op has all of them.

Kinds (codegen and fusion ask `op.kind`, never list ops):
  leaf         input, param, const, state
  elementwise  one output element from the same element of each (broadcast) input
  layout       one output element from one computed position of an input
               (reshape, transpose, broadcast_to, slice, pad, concat, one_hot, take)
  reduce       sum, max, min, argmax, argmin over axes
  matmul       (batched) matrix product
  window       conv2d, pools and their gradients
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .ir import Shape

ShapeRule = Callable[[list[Shape], dict[str, Any]], Shape]
RefRule = Callable[[list[np.ndarray], dict[str, Any], dict[str, int]], np.ndarray]


@dataclass(frozen=True)
class OpDef:
    name: str
    kind: str
    shape: ShapeRule
    ref: RefRule
    arity: int | None = None  # None: any number of inputs
    differentiable: bool = True
    glsl: str | None = None  # elementwise only: expression over a, b, c and {attrs}


REGISTRY: dict[str, OpDef] = {}


def register(op: OpDef) -> OpDef:
    if op.name in REGISTRY:
        raise ValueError(f"op {op.name!r} registered twice")
    REGISTRY[op.name] = op
    return op


def get(name: str) -> OpDef:
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"no op named {name!r} in the registry") from None


def _load() -> None:
    # Importing the op modules fills the registry.
    from .ops import elementwise, layout, leaf, linalg, reduce, special, window  # noqa: F401


_load()
