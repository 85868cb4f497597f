"""Sampling text from a language model (`Session.generate`, `dlc generate`): nanoGPT's
`generate`, one token at a time.

Each step feeds the last `block` ids as `tokens` (an int32 [1, t] batch), reads the logits of
the last position, divides them by the temperature, keeps the `top_k` largest (the rest
-inf), and draws the next id from their softmax: the first id whose running sum of
probabilities (float64, in id order) passes u, a uniform number made from (seed, step) by a
32-bit integer hash (`uniform`), which dlc.js computes the same way, so the same seed,
weights and prompt give the same text in Python and in the browser. The model names its output `logits`
([B, T, V]) and declares `input tokens: i32[B, T]` with T symbolic, so any context length up
to the block runs one compiled program.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np

from .runtime.errors import DataError
from .text import TOKENS

LOGITS = "logits"


def check_model(inputs: dict, tensors: dict, fetch: str = LOGITS) -> None:
    """A model generation can drive: `tokens: i32[B, T]` with T symbolic, and `logits`."""
    shape = inputs.get(TOKENS)
    if shape is None or len(shape) != 2:
        raise DataError(f"generation feeds an input 'tokens' of shape [B, T]; the model's inputs: {', '.join(inputs)}")
    if not isinstance(shape[1], str):
        raise DataError(
            f"generation feeds contexts of any length up to the block, so the model's 'tokens' needs a symbolic "
            f"length (e.g. [B, T]), not the fixed {shape[1]}"
        )
    if fetch not in tensors:
        raise DataError(f"generation reads a tensor '{fetch}' [B, T, V] of next-token logits; the model has none")


def _mix32(x: int) -> int:
    """murmur3's 32-bit finalizer: a bijection that scatters every input bit."""
    x &= 0xFFFFFFFF
    x ^= x >> 16
    x = (x * 0x85EBCA6B) & 0xFFFFFFFF
    x ^= x >> 13
    x = (x * 0xC2B2AE35) & 0xFFFFFFFF
    return x ^ (x >> 16)


def uniform(seed: int, step: int) -> float:
    """A number in [0, 1) for draw `step` of `seed`: 24 bits of a hash of both (dlc.js: the same)."""
    return (_mix32(_mix32(seed & 0xFFFFFFFF) ^ (step & 0xFFFFFFFF)) >> 8) / float(1 << 24)


def sample(logits: np.ndarray, temperature: float, top_k: int | None, u: float) -> int:
    """One id from a row of logits and a uniform u (temperature 0: the most likely one)."""
    logits = np.asarray(logits, dtype=np.float64)
    if temperature == 0:
        return int(np.argmax(logits))
    logits = logits / temperature
    if top_k is not None and top_k < logits.size:
        kth = np.sort(logits)[-top_k]
        logits = np.where(logits < kth, -np.inf, logits)
    p = np.exp(logits - logits.max())
    total = 0.0
    target = u * p.sum()
    for i, q in enumerate(p):  # in id order, as dlc.js adds them
        total += q
        if total > target:
            return i
    return int(np.flatnonzero(p)[-1])


def generate(
    run: Callable[[np.ndarray], np.ndarray],
    prompt: Sequence[int],
    tokens: int,
    block: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    seed: int = 0,
) -> Iterator[int]:
    """Yield `tokens` new ids after `prompt`; `run(ids [1, t]) -> logits [1, t, V]`."""
    if tokens < 0 or block < 1:
        raise ValueError(f"tokens must be >= 0 and block >= 1, not {tokens} and {block}")
    if not temperature >= 0 or (top_k is not None and top_k < 1):
        raise ValueError(f"temperature must be >= 0 and top_k >= 1, not {temperature} and {top_k}")
    if len(prompt) == 0:
        raise DataError("generation needs a prompt of at least one token")
    ids = list(prompt)
    for step in range(tokens):
        context = np.asarray([ids[-block:]], dtype=np.int32)
        logits = run(context)
        nxt = sample(logits[0, -1], temperature, top_k, uniform(seed, step))
        ids.append(nxt)
        yield nxt
