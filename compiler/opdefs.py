"""The op registry's entries and its tables: what an entry is (`OpDef`, a primitive; `Composite`,
a language function expanding into primitives; `Param`, `Oracle`), the tables they are
registered in, and lookups. The op modules (`ops/`) and the language's front ends
(`functions.py`, ...) register into it; `registry.py` imports them all and is what the rest of
the compiler asks (see there).
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
    # Inputs its kernel wants stored, never recomputed inside it (fusion.py): read whole by
    # every work group (attention_cached's keys and values, then read as vec4s).
    stored_inputs: tuple[int, ...] = ()

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
        # (the codegen modules register these as they load: codegen, above the registry, asks)
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
