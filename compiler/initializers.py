"""Param initializers: named in the language, materialized deterministically.

An init is a tuple: ("value", v), ("zeros",), ("ones",), ("normal", mean, std),
("uniform", low, high), ("glorot",), ("he",), or ("array", flat values) for a
variable created from an array (dlc.Graph.variable). Each param draws from its own
generator seeded by (seed, param name), so adding a param changes no other.
"""

from __future__ import annotations

import math
import zlib

import numpy as np

# name -> ((argument, default), ...); an empty tuple means no arguments.
INITIALIZERS: dict[str, tuple[tuple[str, float], ...]] = {
    "zeros": (),
    "ones": (),
    "glorot": (),
    "he": (),
    "normal": (("mean", 0.0), ("std", 1.0)),
    "uniform": (("low", -1.0), ("high", 1.0)),
}


F32_MAX = 3.4028234663852886e38
# normal(mean, std) is refused when mean +- NORMAL_SPAN * std leaves float32: a draw that far
# out (probability about 1e-23) would be an infinite param.
NORMAL_SPAN = 10.0


def init_problem(init: tuple) -> tuple[str, str] | None:
    """(argument name, what is wrong) when an initializer's arguments cannot draw finite
    float32 values, else None. Checked at compile time, so `dlc check` finds it."""
    kind, *args = init
    if any(isinstance(a, float) and not math.isfinite(a) for a in args):
        return (
            "",
            "an initial value must be a finite number"
            if kind == "value"
            else f"{kind}'s arguments must be finite numbers",
        )
    if kind == "value" and abs(args[0]) > F32_MAX:
        return ("", f"{args[0]} is beyond float32's range (about 3.4e38)")
    if kind == "normal":
        mean, std = args
        if std < 0:
            return ("std", f"normal's std must be >= 0, got {_num(std)}")
        if abs(mean) + NORMAL_SPAN * std > F32_MAX:
            return ("std", f"normal({_num(mean)}, {_num(std)}) would draw values beyond float32's range (about 3.4e38)")
    if kind == "uniform":
        low, high = args
        if low > high:
            return ("high", f"uniform's high must be >= its low, got low {_num(low)} and high {_num(high)}")
    return None


def _num(v: float) -> str:
    return f"{v:g}"


def default_init(shape) -> tuple:
    return ("glorot",) if len(shape) >= 2 else ("zeros",)


def _fans(shape) -> tuple[int, int]:
    if len(shape) < 2:
        n = int(np.prod(shape)) if shape else 1
        return n, n
    receptive = int(np.prod(shape[:-2]))
    return shape[-2] * receptive, shape[-1] * receptive


def initial_value(init: tuple, shape, seed: int, name: str) -> np.ndarray:
    shape = tuple(shape)
    kind, *args = init
    if kind in ("normal", "uniform", "glorot", "he"):
        rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    if kind == "value":
        out = np.full(shape, args[0])
    elif kind == "array":
        out = np.asarray(args[0], dtype=np.float64).reshape(shape)
    elif kind == "zeros":  # made as float32 at once: optimizer moments are as big as the params
        return np.zeros(shape, dtype=np.float32)
    elif kind == "ones":
        return np.ones(shape, dtype=np.float32)
    elif kind == "normal":
        out = rng.normal(args[0], args[1], shape)
    elif kind == "uniform":
        out = rng.uniform(args[0], args[1], shape)
    elif kind == "glorot":
        fan_in, fan_out = _fans(shape)
        limit = math.sqrt(6.0 / (fan_in + fan_out))
        out = rng.uniform(-limit, limit, shape)
    elif kind == "seed":  # the random ops' `$seed` state: the session's seed, exact in float32
        out = np.full(shape, float(seed % (1 << 24)))
    elif kind == "he":
        fan_in, _ = _fans(shape)
        out = rng.normal(0.0, math.sqrt(2.0 / fan_in), shape)
    else:
        raise ValueError(f"unknown initializer {kind!r}")
    return np.asarray(out, dtype=np.float32)
