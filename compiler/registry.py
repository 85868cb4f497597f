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

Everything else is derived from here: the language's function table (`functions.FUNCTIONS`),
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
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .dtypes import floats
from .ir import Shape

ShapeRule = Callable[[list[Shape], dict[str, Any]], Shape]
RefRule = Callable[[list[np.ndarray], dict[str, Any], dict[str, int]], np.ndarray]
# (emit, forward node, its own index y, upstream gradient g) -> one gradient (or None) per input;
# `emit` is gradients.Emit: emit(op, *inputs, **attrs), emit.const(v), emit.shape(i).
GradRule = Callable[..., Any]

REQUIRED = object()  # a parameter without a default


@dataclass(frozen=True)
class Param:
    """A parameter of a language function. Kinds: tensor, tensors (a list of tensors), int,
    float, bool, str, axis (int, list of ints, or None), ints (int or list), dim (an int, a
    symbolic name or a product of them), dims (a list of those and one -1), padding (a string or a list of ints)."""

    name: str
    kind: str
    default: Any = REQUIRED


# -- test oracles ---------------------------------------------------------------------------

# Input domains an oracle may name; tests sample through `sample`.
DOMAINS: dict[str, Callable[[np.random.Generator, tuple], np.ndarray]] = {
    "normal": lambda rng, s: rng.normal(size=s),
    "wide": lambda rng, s: rng.uniform(-8.0, 8.0, size=s),
    "positive": lambda rng, s: rng.uniform(0.5, 2.0, size=s),
    "unit": lambda rng, s: rng.uniform(-0.9, 0.9, size=s),  # inside (-1, 1): asin, acos
    "above_minus_one": lambda rng, s: rng.uniform(-0.8, 2.0, size=s),  # log1p
    "away": lambda rng, s: rng.choice([-1.0, 1.0], size=s) * rng.uniform(0.3, 2.0, size=s),  # |x| >= 0.3
    "relu6": lambda rng, s: rng.choice([-1.0, 3.0, 7.0], size=s) + rng.uniform(-0.7, 0.7, size=s),  # not 0, 6
    "hard": lambda rng, s: rng.choice([-4.5, 0.0, 4.5], size=s) + rng.uniform(-1.2, 1.2, size=s),  # not +-3
    "off_integers": lambda rng, s: rng.integers(-3, 4, size=s) + rng.uniform(0.1, 0.9, size=s),
    "bools": lambda rng, s: rng.choice([0.0, 1.0, -2.5], size=s),  # zero or not
    "ints": lambda rng, s: rng.integers(-2, 3, size=s).astype(float),  # ties for comparisons
    "ids": lambda rng, s: rng.integers(0, 3, size=s).astype(np.int32),  # i32 indices of >= 3 rows
}


def sample(domain: str, rng: np.random.Generator, shape: tuple) -> np.ndarray:
    try:
        return DOMAINS[domain](rng, shape)
    except KeyError:
        raise KeyError(f"no input domain named {domain!r} (registry.DOMAINS)") from None


@dataclass(frozen=True)
class Oracle:
    """How tests check an op independently of its reference.

    numpy: a float64 closed form `f(*xs, **kwargs)`, right on NaN, infinities and signed zeros
    too (the special-value sweeps feed it); torch: `f(torch, *tensors, **kwargs)`, PyTorch's
    equivalent (forward and autograd); domain: the domain of each tensor input (DOMAINS);
    attrs: the primitive's attr sets to sweep; calls: the language keyword sets to sweep
    (default: attrs)."""

    numpy: Callable | None = None
    torch: Callable | None = None
    domain: tuple[str, ...] = ()
    attrs: tuple[Mapping[str, Any], ...] = ({},)
    calls: tuple[Mapping[str, Any], ...] | None = None

    def domains(self, arity: int) -> list[str]:
        """The domain of each of `arity` inputs ("normal" where the oracle names none)."""
        return [*self.domain, *["normal"] * (arity - len(self.domain))][:arity]

    def call_sets(self) -> tuple[Mapping[str, Any], ...]:
        return self.calls if self.calls is not None else self.attrs


# -- entries --------------------------------------------------------------------------------

# The lowerings that are code, not one GLSL expression: (kind or op name, target key) -> a
# callable. Codegen's modules register them as they load (kernel templates per kind, the
# layout ops' index maps per op); `OpDef.lower` finds an op's own before its kind's. The
# callable's signature is its target's (codegen/target.py).
LOWERINGS: dict[tuple[str, str], Callable] = {}


def register_lowering(what: str, target: str, fn: Callable) -> Callable:
    """Lower kind (or op) `what` on target key `target` with `fn`; returns fn."""
    if (what, target) in LOWERINGS:
        raise ValueError(f"a lowering of {what!r} for {target!r} is registered twice")
    LOWERINGS[what, target] = fn
    return fn


@dataclass(frozen=True)
class OpDef:
    name: str
    kind: str
    shape: ShapeRule
    ref: RefRule
    arity: int | None = None  # None: any number of inputs
    differentiable: bool = True
    lowering: Mapping[str, str] = field(default_factory=dict)
    gradient: GradRule | None = None
    params: tuple[Param, ...] | None = None  # the language signature; None: not a function
    doc: str = ""
    group: str = ""
    build: Callable[..., int] | None = None  # the language function; None: add the node
    oracle: Oracle | None = None
    helpers: str = ""  # GLSL functions the lowering calls (dlc_* names), for the preamble
    # Its element-type rule, a dtypes.py maker (op name -> rule); None: f32 operands only.
    dtype: Callable[[str], Callable[..., str]] | None = None

    def __post_init__(self):
        if self.kind == "elementwise" and self.lower("glsl-compute") is None:
            raise ValueError(f"elementwise op {self.name!r} has no GLSL lowering")

    def lower(self, target: str | Sequence[str]) -> str | Callable | None:
        """The lowering for target key `target` (or the first of several keys that has one,
        most specific first; "glsl", every GLSL target's, last): an elementwise op's GLSL
        expression, else the callable registered for the op, else for its kind
        (`register_lowering`)."""
        keys = (target,) if isinstance(target, str) else tuple(target)
        if self.kind == "elementwise":
            found = next((self.lowering[k] for k in keys if k in self.lowering), None)
            return found if found is not None else self.lowering.get("glsl")
        _load_lowerings()
        for k in (*keys, "glsl"):
            fn = LOWERINGS.get((self.name, k)) or LOWERINGS.get((self.kind, k))
            if fn is not None:
                return fn
        return None

    def element_type(self, ins: list[str], attrs: Mapping[str, Any]) -> str:
        """The result's element type for operands of types `ins` (dtypes.ElementTypeError if
        one is refused)."""
        return (self.dtype or floats)(self.name)(ins, attrs)

    @property
    def glsl(self) -> str | None:
        """The GLSL expression both GLSL targets use (elementwise ops)."""
        return self.lowering.get("glsl") if self.kind == "elementwise" else None


@dataclass(frozen=True)
class Composite:
    """A language function that expands into primitives (`build(b, loc, *args)`)."""

    name: str
    params: tuple[Param, ...]
    build: Callable[..., int]
    doc: str = ""
    group: str = ""
    differentiable: bool = True
    oracle: Oracle | None = None
    kind = "composite"


REGISTRY: dict[str, OpDef] = {}  # the primitives: one per IR op
COMPOSITES: dict[str, Composite] = {}


def register(op: OpDef) -> OpDef:
    if op.name in REGISTRY or op.name in COMPOSITES:
        raise ValueError(f"op {op.name!r} registered twice")
    REGISTRY[op.name] = op
    return op


def register_composite(c: Composite) -> Composite:
    if c.name in REGISTRY or c.name in COMPOSITES:
        raise ValueError(f"op {c.name!r} registered twice")
    COMPOSITES[c.name] = c
    return c


def get(name: str) -> OpDef:
    try:
        return REGISTRY[name]
    except KeyError:
        raise KeyError(f"no op named {name!r} in the registry") from None


def update(name: str, **fields) -> OpDef:
    """Set fields of a primitive's entry from the module that writes them (the language front
    ends in functions.py that check their arguments)."""
    op = dataclasses.replace(get(name), **fields)
    REGISTRY[name] = op
    return op


def entries() -> list[OpDef | Composite]:
    """Every entry, primitives first, each group in registration order."""
    _complete()
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


def _load() -> None:
    # Importing the op modules fills the registry.
    from .ops import elementwise, layout, leaf, linalg, norm, reduce, special, window  # noqa: F401, I001
    from .ops import activations, math_ops, logic  # noqa: F401, I001  (after special: gelu calls dlc_erf)
    from .ops import integers  # noqa: F401
    from .ops import modes, random, batch_norm  # noqa: F401, I001  (training/eval, random, model state)
    from .ops import attention  # noqa: F401


def _load_lowerings() -> None:
    # Codegen registers the lowerings that are code as it loads (it imports this module).
    from . import codegen  # noqa: F401


def _complete() -> None:
    # functions.py fills in the front ends of the primitives whose functions check their
    # arguments, and registers the composites (it imports the builder, which imports this).
    from . import functions  # noqa: F401


_load()
