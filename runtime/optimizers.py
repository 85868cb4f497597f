"""Optimizers, as users name them (seed: deeplearn.js's SGDOptimizer, ...).

Plain dataclasses: the update rules themselves are IR, built by
`dlc.compiler.optimizers`. `lr` is fed at run time (it may change between
steps); the other fields are compiled into the training step.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar


@dataclass
class Optimizer:
    lr: float
    name: ClassVar[str] = ""

    def config(self) -> tuple:
        """What the compiled step depends on: the name and every field but lr."""
        return (self.name, *((f.name, getattr(self, f.name)) for f in fields(self) if f.name != "lr"))


@dataclass
class SGD(Optimizer):
    name: ClassVar[str] = "sgd"


@dataclass
class Momentum(Optimizer):
    momentum: float = 0.9
    name: ClassVar[str] = "momentum"


@dataclass
class RMSProp(Optimizer):
    decay: float = 0.9
    eps: float = 1e-10
    name: ClassVar[str] = "rmsprop"


@dataclass
class Adagrad(Optimizer):
    eps: float = 1e-8
    name: ClassVar[str] = "adagrad"


@dataclass
class Adadelta(Optimizer):
    lr: float = 1.0
    rho: float = 0.95
    eps: float = 1e-6
    name: ClassVar[str] = "adadelta"


@dataclass
class Adam(Optimizer):
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    name: ClassVar[str] = "adam"


@dataclass
class Adamax(Optimizer):
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    name: ClassVar[str] = "adamax"


OPTIMIZERS: dict[str, type[Optimizer]] = {c.name: c for c in (SGD, Momentum, RMSProp, Adagrad, Adadelta, Adam, Adamax)}

# The usual defaults (Keras's) when no learning rate is given.
DEFAULT_LR: dict[str, float] = {
    "sgd": 0.01,
    "momentum": 0.01,
    "rmsprop": 0.001,
    "adagrad": 0.01,
    "adadelta": 1.0,
    "adam": 0.001,
    "adamax": 0.002,
}


def make(name: str, lr: float | None = None) -> Optimizer:
    """An optimizer by its lower-case name, with its default learning rate unless given."""
    key = name.lower()
    if key not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer '{name}': choose one of {', '.join(OPTIMIZERS)}")
    return OPTIMIZERS[key](lr=DEFAULT_LR[key] if lr is None else float(lr))


def optimizer_record(optimizer: Optimizer) -> dict:
    """The optimizer as a checkpoint or a manifest records it: its name and every field."""
    return {"name": optimizer.name, **vars(optimizer)}


def from_record(record: dict) -> Optimizer:
    """The optimizer an `optimizer_record` describes; ValueError naming what is wrong."""
    cls = OPTIMIZERS.get(record.get("name"))
    if cls is None:
        raise ValueError(f"unknown optimizer {record.get('name')!r} (known: {', '.join(OPTIMIZERS)})")
    settings = {k: v for k, v in record.items() if k != "name"}
    known = {f.name for f in fields(cls)}
    odd = sorted(set(settings) - known)
    if odd:
        raise ValueError(f"{cls.name} has no setting '{odd[0]}' (its settings: {', '.join(sorted(known))})")
    return cls(**{k: float(v) for k, v in settings.items()})
