"""Learning-rate schedules (PyTorch's LambdaLR family, nanoGPT's warmup + cosine).

A schedule is compiled into the training step: the step computes its learning rate from the
fed base rate (`$lr`, the optimizer's `lr`) and the step counter `$t` (the steps already
taken), so no host write happens per step. `factor`/`lr` here are the same rule in Python,
for progress displays and for tests against torch.

Every schedule may start with `warmup` steps of a linear ramp: step t < warmup trains at
lr * (t + 1) / (warmup + 1) (nanoGPT's). After it:

- `Constant()`: lr.
- `Cosine(decay_steps, min_lr)`: from lr down to min_lr along half a cosine, reached at step
  decay_steps (counted from 0, warmup included), min_lr after it.
- `Linear(decay_steps, min_lr)`: the same along a straight line.
- `Step(step_size, gamma)`: lr * gamma ** ((t - warmup) // step_size) (PyTorch's StepLR).

    optimizer = dlc.Adam(3e-4, schedule=dlc.schedules.Cosine(warmup=100, decay_steps=5000, min_lr=3e-5))
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import ClassVar

from .errors import DlcError


@dataclass(frozen=True, kw_only=True)
class Schedule:
    """Base of the learning-rate schedules: `warmup` steps of a linear ramp, then the rule.

    >>> opt = dlc.Adam(1e-3, schedule=dlc.schedules.Constant(warmup=100))
    """

    warmup: int = 0
    name: ClassVar[str] = ""

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise DlcError(f"{type(self).__name__}: {f.name} must be a finite number >= 0, not {v!r}")
        if int(self.warmup) != self.warmup:
            raise DlcError(f"{type(self).__name__}: warmup must be a whole number of steps, not {self.warmup!r}")

    def lr(self, base: float, t: int) -> float:
        """The learning rate of step t (0 for the first step).

        >>> dlc.schedules.Cosine(decay_steps=100).lr(0.1, 50)
        0.05
        """
        if t < self.warmup:
            return base * (t + 1) / (self.warmup + 1)
        return self.after_warmup(base, t)

    def after_warmup(self, base: float, t: int) -> float:
        """The rule's learning rate at step t >= warmup (`lr` adds the warmup ramp).

        >>> dlc.schedules.Step(step_size=10, gamma=0.5).after_warmup(1.0, 25)
        0.25
        """
        return base

    def config(self) -> dict:
        """As the artifact's manifest records it.

        >>> dlc.schedules.Cosine(decay_steps=100).config()
        {'name': 'cosine', 'warmup': 0, 'decay_steps': 100, 'min_lr': 0.0}
        """
        return {"name": self.name, **asdict(self)}


@dataclass(frozen=True, kw_only=True)
class Constant(Schedule):
    """The optimizer's lr throughout (after any warmup).

    >>> dlc.schedules.Constant(warmup=3).lr(1.0, 0)
    0.25
    """

    name: ClassVar[str] = "constant"


@dataclass(frozen=True, kw_only=True)
class _Decay(Schedule):
    """A decay from lr to `min_lr`, reached at step `decay_steps` (warmup included)."""

    decay_steps: int = 0
    min_lr: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.decay_steps <= self.warmup:
            raise DlcError(
                f"{type(self).__name__}: decay_steps ({self.decay_steps}) must be more than warmup ({self.warmup})"
            )

    def progress(self, t: int) -> float:
        """How far the decay is, from 0 (end of warmup) to 1 (decay_steps and after).

        >>> dlc.schedules.Cosine(decay_steps=100).progress(50)
        0.5
        """
        return min(max((t - self.warmup) / (self.decay_steps - self.warmup), 0.0), 1.0)


@dataclass(frozen=True, kw_only=True)
class Cosine(_Decay):
    """From lr down to `min_lr` along half a cosine, reached at step `decay_steps`.

    >>> dlc.schedules.Cosine(decay_steps=100).lr(0.1, 50)
    0.05
    """

    name: ClassVar[str] = "cosine"

    def after_warmup(self, base: float, t: int) -> float:
        return self.min_lr + 0.5 * (1.0 + math.cos(math.pi * self.progress(t))) * (base - self.min_lr)


@dataclass(frozen=True, kw_only=True)
class Linear(_Decay):
    """From lr down to `min_lr` along a straight line, reached at step `decay_steps`.

    >>> dlc.schedules.Linear(decay_steps=10).lr(1.0, 5)
    0.5
    """

    name: ClassVar[str] = "linear"

    def after_warmup(self, base: float, t: int) -> float:
        return self.min_lr + (1.0 - self.progress(t)) * (base - self.min_lr)


@dataclass(frozen=True, kw_only=True)
class Step(Schedule):
    """lr * gamma ** ((t - warmup) // step_size) (PyTorch's StepLR).

    >>> dlc.schedules.Step(step_size=10, gamma=0.5).lr(1.0, 25)
    0.25
    """

    step_size: int = 1
    gamma: float = 0.1
    name: ClassVar[str] = "step"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.step_size < 1:
            raise DlcError(f"Step: step_size must be at least 1, not {self.step_size!r}")

    def after_warmup(self, base: float, t: int) -> float:
        return base * self.gamma ** ((t - self.warmup) // self.step_size)


SCHEDULES: dict[str, type[Schedule]] = {c.name: c for c in (Constant, Cosine, Linear, Step)}


def from_config(config: dict | Schedule | None) -> Schedule | None:
    """A schedule from its manifest form (or itself); an unknown name or field is a DlcError."""
    if config is None or isinstance(config, Schedule):
        return config
    if not isinstance(config, dict) or config.get("name") not in SCHEDULES:
        raise DlcError(f"unknown learning-rate schedule {config!r}: choose one of {', '.join(SCHEDULES)}")
    cls = SCHEDULES[config["name"]]
    known = {f.name for f in fields(cls)}
    extra = set(config) - known - {"name"}
    if extra:
        raise DlcError(f"schedule {cls.name}: unknown field(s) {', '.join(sorted(extra))}")
    return cls(**{k: v for k, v in config.items() if k != "name"})
