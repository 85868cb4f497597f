"""Optimizers, as users name them (seed: deeplearn.js's SGDOptimizer, ...).

Plain dataclasses: the update rules themselves are IR, built by
`dlc.compiler.optimizers`. `lr` is fed at run time (it may change between
steps); the other fields are compiled into the training step.

Every optimizer also takes, by keyword, `clip_norm` (clip the gradients to this global L2
norm before the update, as `torch.nn.utils.clip_grad_norm_`; 0: off) and `schedule` (a
`dlc.schedules` learning-rate schedule, computed inside the step from `lr` and the step
count).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import ClassVar

from .errors import DlcError
from .schedules import Schedule, from_config


@dataclass
class Optimizer:
    lr: float
    clip_norm: float = field(default=0.0, kw_only=True)
    schedule: Schedule | None = field(default=None, kw_only=True)
    name: ClassVar[str] = ""

    def __post_init__(self) -> None:
        self.schedule = from_config(self.schedule)  # an artifact's manifest holds it as a dict
        if not (isinstance(self.clip_norm, (int, float)) and math.isfinite(self.clip_norm) and self.clip_norm >= 0):
            raise DlcError(f"clip_norm must be a finite number >= 0 (0: no clipping), not {self.clip_norm!r}")

    def config(self) -> tuple:
        """What the compiled step depends on: the name and every field but lr.

        >>> dlc.SGD(0.1).config()
        ('sgd', ('clip_norm', 0.0), ('schedule', None))
        """
        return (self.name, *((f.name, getattr(self, f.name)) for f in fields(self) if f.name != "lr"))

    def to_config(self) -> dict:
        """As an artifact's manifest records it (plain JSON values; no clipping and no
        schedule are left out, so a plain optimizer reads as it always has).

        >>> dlc.SGD(0.1).to_config()
        {'name': 'sgd', 'lr': 0.1}
        """
        out = {"name": self.name, **{f.name: getattr(self, f.name) for f in fields(self)}}
        if not self.clip_norm:
            del out["clip_norm"]
        if self.schedule is None:
            del out["schedule"]
        else:
            out["schedule"] = self.schedule.config()
        return out

    def lr_at(self, step: int) -> float:
        """The learning rate step `step` (0 for the first) trains at.

        >>> dlc.Adam(0.001, schedule=dlc.schedules.Cosine(decay_steps=100, min_lr=1e-5)).lr_at(100)
        1e-05
        """
        return self.schedule.lr(self.lr, step) if self.schedule else self.lr


@dataclass
class SGD(Optimizer):
    """Plain gradient descent: p -= lr * g (torch.optim.SGD without momentum). Every
    optimizer also takes `clip_norm` (clip the global gradient norm; 0: off) and `schedule`
    (a dlc.schedules one).

    >>> history = sess.fit(xs, ys, epochs=10, optimizer=dlc.SGD(0.1, clip_norm=1.0))
    """

    name: ClassVar[str] = "sgd"


@dataclass
class Momentum(Optimizer):
    """SGD with (heavy-ball) `momentum` (torch.optim.SGD(momentum=0.9)).

    >>> history = sess.fit(xs, ys, epochs=10, optimizer=dlc.Momentum(0.01, momentum=0.9))
    """

    momentum: float = 0.9
    name: ClassVar[str] = "momentum"


@dataclass
class RMSProp(Optimizer):
    """RMSProp: divides by a running root mean square of the gradients (`decay` its rate).

    >>> history = sess.fit(xs, ys, epochs=10, optimizer=dlc.RMSProp(0.001, decay=0.9))
    """

    decay: float = 0.9
    eps: float = 1e-10
    name: ClassVar[str] = "rmsprop"


@dataclass
class Adagrad(Optimizer):
    """Adagrad: divides by the root of the summed squared gradients.

    >>> history = sess.fit(xs, ys, epochs=10, optimizer=dlc.Adagrad(0.01))
    """

    eps: float = 1e-8
    name: ClassVar[str] = "adagrad"


@dataclass
class Adadelta(Optimizer):
    """Adadelta (Zeiler): `rho` the decay of both running averages; lr defaults to 1.0.

    >>> history = sess.fit(xs, ys, epochs=10, optimizer=dlc.Adadelta(rho=0.95))
    """

    lr: float = 1.0
    rho: float = 0.95
    eps: float = 1e-6
    name: ClassVar[str] = "adadelta"


@dataclass
class Adam(Optimizer):
    """Adam (Kingma & Ba; torch.optim.Adam) with `beta1`, `beta2` and `eps`.

    >>> history = sess.fit(xs, ys, epochs=10, optimizer=dlc.Adam(3e-4, schedule=dlc.schedules.Cosine(decay_steps=5000)))
    """

    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    name: ClassVar[str] = "adam"


@dataclass
class AdamW(Optimizer):
    """Adam with decoupled weight decay (Loshchilov & Hutter; torch.optim.AdamW): each step
    first shrinks a decayed param by lr * weight_decay * p. The params that decay are those
    of rank >= 2 (matrices, filters, embeddings), as nanoGPT's configure_optimizers; biases,
    norm gains and scalars do not.

    >>> history = sess.fit(xs, ys, epochs=10, optimizer=dlc.AdamW(1e-3, weight_decay=0.1))
    """

    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.01
    name: ClassVar[str] = "adamw"


@dataclass
class Adamax(Optimizer):
    """Adamax: Adam with the infinity norm in place of the second moment.

    >>> history = sess.fit(xs, ys, epochs=10, optimizer=dlc.Adamax(0.002))
    """

    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    name: ClassVar[str] = "adamax"


OPTIMIZERS: dict[str, type[Optimizer]] = {
    c.name: c for c in (SGD, Momentum, RMSProp, Adagrad, Adadelta, Adam, AdamW, Adamax)
}

# The usual defaults (Keras's) when no learning rate is given.
DEFAULT_LR: dict[str, float] = {
    "sgd": 0.01,
    "momentum": 0.01,
    "rmsprop": 0.001,
    "adagrad": 0.01,
    "adadelta": 1.0,
    "adam": 0.001,
    "adamw": 0.001,
    "adamax": 0.002,
}


def make(name: str, lr: float | None = None, **options) -> Optimizer:
    """An optimizer by its name (any case), with its default learning rate unless given;
    `options` are its other fields (those it lacks are refused)."""
    key = name.lower()
    if key not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer '{name}': choose one of {', '.join(OPTIMIZERS)}")
    cls = OPTIMIZERS[key]
    known = {f.name for f in fields(cls)}
    for k in options:
        if k not in known:
            raise DlcError(f"the {key} optimizer has no {k.replace('_', ' ')} (it takes: {', '.join(sorted(known))})")
    return cls(lr=DEFAULT_LR[key] if lr is None else float(lr), **options)


def optimizer_record(optimizer: Optimizer) -> dict:
    """The optimizer as a checkpoint or a manifest records it: its name and every field."""
    return optimizer.to_config()


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
    try:
        return cls(**{k: v if k == "schedule" else float(v) for k, v in settings.items()})
    except DlcError as e:  # a schedule or clip_norm out of range
        raise ValueError(str(e)) from None
