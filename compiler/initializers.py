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
    "zeros": (), "ones": (), "glorot": (), "he": (),
    "normal": (("mean", 0.0), ("std", 1.0)),
    "uniform": (("low", -1.0), ("high", 1.0)),
}


def default_init(shape) -> tuple:
    return ("glorot",) if len(shape) >= 2 else ("zeros",)


def _fans(shape) -> tuple[int, int]:
    if len(shape) < 2:
        n = int(np.prod(shape)) if shape else 1
        return n, n
    receptive = int(np.prod(shape[:-2]))
    return shape[-2] * receptive, shape[-1] * receptive


def initial_value(init: tuple, shape, seed: int, name: str) -> np.ndarray:
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    shape = tuple(shape)
    kind, *args = init
    if kind == "value":
        out = np.full(shape, args[0])
    elif kind == "array":
        out = np.asarray(args[0], dtype=np.float64).reshape(shape)
    elif kind == "zeros":
        out = np.zeros(shape)
    elif kind == "ones":
        out = np.ones(shape)
    elif kind == "normal":
        out = rng.normal(args[0], args[1], shape)
    elif kind == "uniform":
        out = rng.uniform(args[0], args[1], shape)
    elif kind == "glorot":
        fan_in, fan_out = _fans(shape)
        limit = math.sqrt(6.0 / (fan_in + fan_out))
        out = rng.uniform(-limit, limit, shape)
    elif kind == "he":
        fan_in, _ = _fans(shape)
        out = rng.normal(0.0, math.sqrt(2.0 / fan_in), shape)
    else:
        raise ValueError(f"unknown initializer {kind!r}")
    return np.asarray(out, dtype=np.float32)
