"""Optimizer update rules as IR (the seven of deeplearn.js).

Each rule appends, for one param p with gradient g, the new value of p and of
its slots. Slots are `state` leaves named `<param>$<slot>` (zeros at start);
Adam and Adamax share a step counter `$t`. The learning rate is the `$lr`
input, fed each step; the other hyper-parameters are constants. Updates are
(name, node of its new value) pairs, applied by the backend after the step.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from dlc.runtime.errors import Loc

from .builder import GraphBuilder
from .ir import Shape

ZEROS = ("zeros",)


class UpdateBuilder:
    """Appends update IR: slots, the shared step counter, and the update list."""

    def __init__(self, b: GraphBuilder, lr: int) -> None:
        self.b = b
        self.lr = lr
        self.states: list[str] = []
        self.updates: list[tuple[str, int]] = []
        self.loc: Loc | None = None
        self._t: tuple[int, int] | None = None

    def __call__(self, op: str, *inputs: int, **attrs: Any) -> int:
        return self.b.add(op, inputs, self.loc, **attrs)

    def c(self, value: float) -> int:
        # 1 - 0.9 prints as 0.1, not 0.09999999999999998
        return self.b.const(float(f"{value:.15g}"), (), self.loc)

    def state(self, name: str, shape: Shape) -> int:
        i = self.b.add("state", (), None, shape=tuple(shape), name=name, init=ZEROS)
        self.b.declare(name, i, None)
        self.states.append(name)
        return i

    def slot(self, param: str, slot: str) -> int:
        return self.state(f"{param}${slot}", self.b.shape(self.b.names[param]))

    def step(self) -> tuple[int, int]:
        """(t, t + 1): the step counter before and after this step, made once."""
        if self._t is None:
            t = self.state("$t", ())
            t1 = self.b.add("add", (t, self.b.const(1.0, ())), None)
            self.updates.append(("$t", t1))
            self._t = (t, t1)
        return self._t

    def update(self, name: str, node: int) -> None:
        self.updates.append((name, node))

    # small algebra helpers
    def ema(self, old: int, new: int, decay: float) -> int:
        """decay * old + (1 - decay) * new."""
        return self("add", self("mul", self.c(decay), old), self("mul", self.c(1.0 - decay), new))

    def descend(self, p: int, direction: int) -> int:
        """p - lr * direction."""
        return self("sub", p, self("mul", self.lr, direction))


Rule = Callable[[UpdateBuilder, Any, str, int, int], None]
RULES: dict[str, Rule] = {}


def rule(name: str):
    def deco(fn: Rule) -> Rule:
        RULES[name] = fn
        return fn

    return deco


@rule("sgd")
def _sgd(u: UpdateBuilder, opt, name: str, p: int, g: int) -> None:
    # p <- p - lr g
    u.update(name, u.descend(p, g))


@rule("momentum")
def _momentum(u, opt, name, p, g):
    # v <- momentum v + g;  p <- p - lr v   (deeplearn.js / TensorFlow MomentumOptimizer)
    v = u.slot(name, "v")
    v1 = u("add", u("mul", u.c(opt.momentum), v), g)
    u.update(name, u.descend(p, v1))
    u.update(f"{name}$v", v1)


@rule("rmsprop")
def _rmsprop(u, opt, name, p, g):
    # ms <- decay ms + (1 - decay) g^2;  p <- p - lr g / sqrt(ms + eps)   (TensorFlow)
    ms = u.slot(name, "ms")
    ms1 = u.ema(ms, u("square", g), opt.decay)
    u.update(name, u.descend(p, u("div", g, u("sqrt", u("add", ms1, u.c(opt.eps))))))
    u.update(f"{name}$ms", ms1)


@rule("adagrad")
def _adagrad(u, opt, name, p, g):
    # acc <- acc + g^2;  p <- p - lr g / sqrt(acc + eps)   (deeplearn.js, accumulator from 0)
    acc = u.slot(name, "acc")
    acc1 = u("add", acc, u("square", g))
    u.update(name, u.descend(p, u("div", g, u("sqrt", u("add", acc1, u.c(opt.eps))))))
    u.update(f"{name}$acc", acc1)


@rule("adadelta")
def _adadelta(u, opt, name, p, g):
    # acc <- rho acc + (1 - rho) g^2
    # d   <- g sqrt(delta + eps) / sqrt(acc + eps)
    # p   <- p - lr d;  delta <- rho delta + (1 - rho) d^2   (Zeiler 2012, as Keras)
    acc, delta = u.slot(name, "acc"), u.slot(name, "delta")
    eps = u.c(opt.eps)
    acc1 = u.ema(acc, u("square", g), opt.rho)
    d = u("mul", g, u("div", u("sqrt", u("add", delta, eps)), u("sqrt", u("add", acc1, eps))))
    u.update(name, u.descend(p, d))
    u.update(f"{name}$acc", acc1)
    u.update(f"{name}$delta", u.ema(delta, u("square", d), opt.rho))


@rule("adam")
def _adam(u, opt, name, p, g):
    # t <- t + 1;  m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2
    # p <- p - lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)   (Kingma & Ba, deeplearn.js)
    _, t = u.step()
    m, v = u.slot(name, "m"), u.slot(name, "v")
    m1 = u.ema(m, g, opt.beta1)
    v1 = u.ema(v, u("square", g), opt.beta2)
    m_hat = u("div", m1, u("sub", u.c(1.0), u("pow", u.c(opt.beta1), t)))
    v_hat = u("div", v1, u("sub", u.c(1.0), u("pow", u.c(opt.beta2), t)))
    u.update(name, u.descend(p, u("div", m_hat, u("add", u("sqrt", v_hat), u.c(opt.eps)))))
    u.update(f"{name}$m", m1)
    u.update(f"{name}$v", v1)


@rule("adamw")
def _adamw(u, opt, name, p, g):
    # p <- p - lr wd p for a param of rank >= 2 (decoupled decay, torch.optim.AdamW), then Adam's step
    if len(u.b.shape(p)) >= 2 and opt.weight_decay:
        p = u("sub", p, u("mul", u("mul", u.lr, u.c(opt.weight_decay)), p))
    _adam(u, opt, name, p, g)


@rule("adamax")
def _adamax(u, opt, name, p, g):
    # t <- t + 1;  m <- b1 m + (1 - b1) g;  u <- max(b2 u, |g|)
    # p <- p - (lr / (1 - b1^t)) m / (u + eps)   (Kingma & Ba section 7.1, as Keras)
    _, t = u.step()
    m, inf = u.slot(name, "m"), u.slot(name, "u")
    m1 = u.ema(m, g, opt.beta1)
    inf1 = u("maximum", u("mul", u.c(opt.beta2), inf), u("abs", g))
    scale = u("div", u.lr, u("sub", u.c(1.0), u("pow", u.c(opt.beta1), t)))
    u.update(name, u("sub", p, u("mul", scale, u("div", m1, u("add", inf1, u.c(opt.eps))))))
    u.update(f"{name}$m", m1)
    u.update(f"{name}$u", inf1)


def add_updates(b: GraphBuilder, optimizer, grads: dict[str, int], lr: int) -> tuple[list[str], list[tuple[str, int]]]:
    """Append `optimizer`'s update of every param in `grads` (name -> gradient node).

    Returns the state leaves made and the (param or state name, new value) updates.
    """
    if optimizer.name not in RULES:
        raise ValueError(f"no update rule for optimizer '{optimizer.name}' (known: {', '.join(RULES)})")
    u = UpdateBuilder(b, lr)
    if getattr(optimizer, "schedule", None) is not None:
        u.lr = scheduled_lr(u, optimizer.schedule)
    if getattr(optimizer, "clip_norm", 0):
        grads = clipped(u, grads, optimizer.clip_norm)
    for name, g in grads.items():
        p = b.names[name]
        u.loc = b.nodes[p].loc  # update IR points at the param's declaration
        RULES[optimizer.name](u, optimizer, name, p, g)
    return u.states, u.updates


def scheduled_lr(u: UpdateBuilder, schedule) -> int:
    """The step's learning rate under `schedule` (`dlc.runtime.schedules`, whose `lr` is the
    same rule in Python): a function of the fed base rate and of `$t`, the steps taken."""
    t, _ = u.step()
    base = u.lr
    if schedule.name == "constant":
        lr = base
    elif schedule.name in ("cosine", "linear"):
        span = schedule.decay_steps - schedule.warmup
        ratio = u("div", u("sub", t, u.c(schedule.warmup)), u.c(span))
        progress = u("minimum", u("maximum", ratio, u.c(0.0)), u.c(1.0))
        if schedule.name == "cosine":  # (1 + cos(pi progress)) / 2
            shape = u("mul", u.c(0.5), u("add", u.c(1.0), u("cos", u("mul", u.c(math.pi), progress))))
        else:
            shape = u("sub", u.c(1.0), progress)
        floor = u.c(schedule.min_lr)
        lr = u("add", floor, u("mul", shape, u("sub", base, floor)))
    elif schedule.name == "step":
        drops = u("floor", u("div", u("sub", t, u.c(schedule.warmup)), u.c(schedule.step_size)))
        lr = u("mul", base, u("pow", u.c(schedule.gamma), drops))
    else:
        raise ValueError(f"no rule for the learning-rate schedule '{schedule.name}'")
    if schedule.warmup:  # step t < warmup: lr (t + 1) / (warmup + 1)
        ramp = u("mul", base, u("div", u("add", t, u.c(1.0)), u.c(schedule.warmup + 1)))
        lr = u("where", u("lt", t, u.c(schedule.warmup)), ramp, lr)
    return lr


def clipped(u: UpdateBuilder, grads: dict[str, int], max_norm: float) -> dict[str, int]:
    """The gradients scaled by min(1, max_norm / (norm + 1e-6)), norm their global L2 norm
    (torch.nn.utils.clip_grad_norm_)."""
    squares = []
    for g in grads.values():
        sq = u("square", g)
        rank = len(u.b.shape(g))
        squares.append(u("sum", sq, axes=tuple(range(rank)), keepdims=False) if rank else sq)
    total = squares[0]
    for sq in squares[1:]:
        total = u("add", total, sq)
    coef = u("minimum", u("div", u.c(max_norm), u("add", u("sqrt", total), u.c(1e-6))), u.c(1.0))
    return {name: u("mul", g, coef) for name, g in grads.items()}
