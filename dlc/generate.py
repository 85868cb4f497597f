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

With a key/value cache (`KVCache`, when compiler/decode.py finds the model's logits
position-wise along T but for causal attention), a step feeds only the ids the cache does
not hold yet: the prompt in one call (a prefill), then one id a step, reading back only the
last position's logits. Once the context is the whole block, nanoGPT crops it to the last
`block` ids and recomputes: the positions shift, so every step past the block is a prefill
of the whole window, as with no cache, and the text is the same either way.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from .runtime.errors import DataError
from .runtime.optional import require
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
        kth = np.partition(logits, -top_k)[-top_k]  # the k-th largest, as a full sort finds it
        logits = np.where(logits < kth, -np.inf, logits)
    p = np.exp(logits - logits.max())
    target = u * p.sum()
    # The running sum in id order, as dlc.js adds them: cumsum adds one after another (no
    # pairwise split), so its sums are the loop's to the bit.
    passed = np.cumsum(p) > target
    first = int(passed.argmax())
    if passed[first]:
        return first
    return int(np.flatnonzero(p)[-1])


def logits_of(session, longest: int) -> Callable[[np.ndarray], np.ndarray]:
    """`run` for `generate` over a Session: `ids [1, t] -> logits [1, t, V]` through its eval
    plan of `logits` (the int32 window passes the plan's fast path: no checks per token). On
    the GPU its first call runs a forward of the `longest` context `generate` will feed
    first: that sizes every buffer (the program's slots and the readback) for it, so the
    growing context of the first steps allocates nothing."""
    plan = session._eval_plan((LOGITS,))
    sized = session.backend.name != "gl"

    def run(context: np.ndarray) -> np.ndarray:
        nonlocal sized
        if not sized:
            sized = True
            if longest > context.shape[1]:
                plan({TOKENS: np.zeros((1, longest), dtype=np.int32)})
        return plan({TOKENS: context})[0]

    return run


class KVCache:
    """A session's decode steps (compiler/decode.py) with their caches as backend leaves:
    `cache(ids [1, n], pos) -> logits [V]` of the last of n new ids at positions [pos, pos + n),
    the caches holding positions [0, pos) (written by earlier calls) and then [0, pos + n); a
    whole window (n = block) runs the window step, which needs no cache (the next step
    slides the window: a whole window again). `KVCache.of(session, block)` is the session's
    (built once), or None with the reason."""

    def __init__(self, session, decoder):
        self.decoder = decoder
        self.backend = session.backend
        self.block = decoder.block
        self._pos = np.zeros(1, dtype=np.int32)
        self._tokens, pos = decoder.step.graph.inputs  # the new ids, the first one's position
        self._feeds: dict[str, np.ndarray] = {self._tokens: self._pos, pos: self._pos}
        batch, self._length = decoder.step.graph.node(self._tokens).shape
        self._dims = {self._length: 1, **({batch: 1} if isinstance(batch, str) else {})}
        self._sized = session.backend.name != "gl"

    @staticmethod
    def of(session, block: int) -> tuple[KVCache | None, str]:
        """The session's cache for `block` (None and why when its model has none)."""
        if session._artifact is not None:
            return None, "a compiled artifact keeps no model graph to derive a decode step from"
        found = _caches.setdefault(session, {})
        graph = session._eval_program()
        key = (id(graph), block)
        if key not in found:  # the decode steps from dlc's cache on disk when it holds them
            decoder, why = require("dlc.compiler.compile_cache").decode_form(graph, block)
            found[key] = (None if decoder is None else KVCache(session, decoder), why)
        return found[key]

    def start(self, prompt: int, longest: int) -> None:
        """Empty caches and the weights read transposed, from the params as they are now. On
        the GPU, for a generation from `prompt` ids whose context grows to `longest`, a first
        run of each step at the most new ids it will take sizes every buffer, so that no later
        step allocates."""
        d = self.decoder
        for name, shape in (*d.caches, *d.hoisted):
            self.backend.set_leaf(name, np.zeros([1 if isinstance(x, str) else x for x in shape], np.float32))
        if d.hoisted:
            self.backend.step(d.constants, [], {}, {})
        if not self._sized:
            self._sized = True
            prefill = min(prompt, self.block)
            for n in {prefill if prefill < self.block else 1, longest if longest == self.block else 1}:
                self(np.zeros((1, n), dtype=np.int32), 0)

    def __call__(self, ids: np.ndarray, pos: int) -> np.ndarray:
        self._pos[0] = pos
        self._feeds[self._tokens] = ids
        self._dims[self._length] = n = ids.shape[1]
        if n == self.block:
            window = self.decoder.window
            return self.backend.run(window.graph, (window.logits,), self._feeds, self._dims)[0][0]
        step = self.decoder.step
        return self.backend.step(step.graph, (step.logits,), self._feeds, self._dims)[0][0]

    def close(self) -> None:
        """Free the caches' and the transposed weights' storage (the compiled steps stay for
        the next generation)."""
        for name, _ in (*self.decoder.caches, *self.decoder.hoisted):
            self.backend.drop_leaf(name)


_caches: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # session -> {key: (KVCache, why not)}


def generate(
    run: Callable[[np.ndarray], np.ndarray] | None,
    prompt: Sequence[int],
    tokens: int,
    block: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    seed: int = 0,
    cache: KVCache | None = None,
) -> Iterator[int]:
    """Yield `tokens` new ids after `prompt`; `run(ids [1, t]) -> logits [1, t, V]`, or with
    a `cache` (started), `cache(new ids [1, n], pos) -> logits [V]` of the last one."""
    if tokens < 0 or block < 1:
        raise ValueError(f"tokens must be >= 0 and block >= 1, not {tokens} and {block}")
    if not temperature >= 0 or (top_k is not None and top_k < 1):
        raise ValueError(f"temperature must be >= 0 and top_k >= 1, not {temperature} and {top_k}")
    if len(prompt) == 0:
        raise DataError("generation needs a prompt of at least one token")
    # The context window, kept in one int32 buffer: each step writes the new id in place (and
    # shifts the window by one once it is full) instead of making a new array from a list.
    # `run` gets a [1, t] view of it, which the eval plan uploads as it is.
    prompt = [int(i) for i in prompt][-block:]
    window = np.zeros((1, block), dtype=np.int32)
    t = len(prompt)
    window[0, :t] = prompt
    cached = 0  # the window's first ids whose keys and values the cache holds
    for step in range(tokens):
        if cache is None:
            logits = run(window[:, :t])[0, -1]
        else:
            logits = cache(window[:, cached:t], cached)
            cached = t
        nxt = sample(logits, temperature, top_k, uniform(seed, step))
        if t == block:
            window[0, :-1] = window[0, 1:]  # overlapping: NumPy copies as memmove does
            window[0, -1] = nxt
            cached = 0  # every position moved: the next step is a prefill of the window
        else:
            window[0, t] = nxt
            t += 1
        yield nxt
