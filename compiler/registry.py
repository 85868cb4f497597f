"""The op registry: one entry per op, holding everything about it.

A primitive op (an `OpDef`, one kind of IR node) holds:
  - its language signature, when the language exposes it (`params`, `doc`, `group`; `build`
    when the function does more than add the node, e.g. checks or normalizes arguments),
  - its shape rule and NumPy reference (`shape`, `ref`),
  - its gradient rule (`gradient`; None where the op is not differentiable),
  - its lowering per codegen target (`lower(target)`): an elementwise op's is a GLSL
    expression over a, b, c and {attrs} (`lowering`, keyed by target: "glsl" serves every GLSL
    target, a target's own key such as "glsl-texture" overrides it); every other kind's is a
    callable that the codegen targets register here (`register_lowering`, keyed by (kind or
    op, target): a kernel template, or a layout op's index map), plus the GLSL helper
    functions its expression calls (`helpers`, appended to the codegen preamble),
  - its test oracle (`oracle`: a float64 closed form, a PyTorch equivalent and the input domain
    to sample).
A composite (a `Composite`: mean, softmax, the costs, gelu's tanh form ...) is a language
function that expands into primitives; it holds its signature, its expansion and its oracle.

Everything else is derived from here: the language's function table (`FUNCTIONS` below),
the "not differentiable" list, the gradient table, the README's op table (`optable.py`) and the
test sweeps, so a new entry is swept with no test edit.

Kinds (codegen and fusion ask `op.kind`, never list ops):
  leaf         input, param, const, state
  elementwise  one output element from the same element of each (broadcast) input
  layout       one output element from one computed position of an input
               (reshape, transpose, broadcast_to, slice, pad, concat, one_hot, take, gather,
               pick; gather_grad, its one exception, loops over the indices; iota computes its
               element from its own position)
  reduce       sum, max, min, argmax, argmin over axes
  matmul       (batched) matrix product
  window       conv2d, pools and their gradients
  norm         layer_norm, rms_norm and their gradients: each output row from its input row
  attention    attention, its row statistics and gradients: tiled over blocks of query or key
               rows (the compute target); a loop over the other rows per output element on
               the texture target

This module is the registry complete: it imports every op module and every language front end
(which register into the tables of `opdefs.py`), then derives the tables above. Ask it, not
`opdefs`, for entries: importing it guarantees they are all there.
"""

from __future__ import annotations

# The imports run in registration order (isort would reorder them).
# isort: off
from . import ir
from .dtypes import F32

# The entries' types and the tables' lookups (opdefs.py), for the registry's users.
from .opdefs import (
    COMPOSITES,
    DOMAINS,
    LOWERINGS,
    REGISTRY,
    REQUIRED,
    Composite,
    OpDef,
    Oracle,
    Param,
    get,
    register,
    register_composite,
    register_lowering,
    sample,
    update,
)

# Importing the op modules fills the registry with the primitives (ops/__init__.py).
from . import ops  # noqa: F401

# The language's front ends, after the primitives: functions.py fills in those of the
# primitives that check their arguments and registers the composites; the others are
# defined in their own modules.
from .functions import Function, _default_build
from . import attention_functions, norm_functions, shape_functions  # noqa: F401

# isort: on

__all__ = [
    "COMPOSITES",
    "DOMAINS",
    "FUNCTIONS",
    "LOWERINGS",
    "NOT_DIFFERENTIABLE",
    "REGISTRY",
    "REQUIRED",
    "Composite",
    "OpDef",
    "Oracle",
    "Param",
    "element_types",
    "entries",
    "get",
    "glsl_helpers",
    "language_entries",
    "not_differentiable",
    "register",
    "register_composite",
    "register_lowering",
    "sample",
    "update",
]


def entries() -> list[OpDef | Composite]:
    """Every entry, primitives first, each group in registration order."""
    return [*REGISTRY.values(), *COMPOSITES.values()]


def language_entries() -> list[OpDef | Composite]:
    """The entries the language exposes as functions."""
    return [e for e in entries() if e.params is not None]


def not_differentiable() -> list[str]:
    """The language's functions that pass no gradient."""
    return [e.name for e in language_entries() if not e.differentiable]


def glsl_helpers() -> str:
    """The GLSL helper functions the entries bring, for the codegen preamble."""
    return "".join(op.helpers for op in REGISTRY.values() if op.helpers)


def element_types(graph: ir.Graph) -> tuple[str, ...]:
    """The element type of every node of `graph` (leaves by attr, the rest by their rules)."""
    out: list[str] = []
    for n in graph.nodes:
        if n.is_leaf:
            out.append(n.attr("dtype", F32))
        else:
            out.append(get(n.op).element_type([out[j] for j in n.inputs], dict(n.attrs)))
    return tuple(out)


# The IR sits below the registry: a graph's `dtypes` asks the registry through this.
ir.set_element_types(element_types)


def _derive() -> dict[str, Function]:
    table = {}
    for e in language_entries():
        impl = e.build or _default_build(e)
        table[e.name] = Function(e.name, e.params, impl, e.differentiable, e.doc)
    return table


# The language's function table and its "not differentiable" list, derived from the registry.
FUNCTIONS: dict[str, Function] = _derive()
NOT_DIFFERENTIABLE = frozenset(name for name, f in FUNCTIONS.items() if not f.differentiable)
