"""Random ops from a counter-based generator, the same bits on NumPy and on both GL targets.

Element i of a random op is a hash of (session seed, step, the op's key, i): lowbias32
(Chris Wellons' 32-bit integer hash: xor-shift, multiply, xor-shift, multiply, xor-shift)
applied in a chain, h = H(H(H(H(seed ^ 0x9e3779b9) ^ step) ^ key) ^ i). Only 32-bit
unsigned integer arithmetic, which GLSL 3.30, GLSL ES 3.00 (WebGL2) and NumPy's uint32 do
alike, so every target draws the same bits. A uniform is the top 24 bits over 2^24 (exact in
float32); a normal is Box-Muller over two uniforms (the second from H(h ^ 0x5bd1e995)).

The seed and the step are the model states `$seed` (the session's seed mod 2^24) and `$step`
(training steps taken, counted on the device: +1 each step), made when the first random op
is; the key is fixed at compile time (the op's number among the model's random ops). Eval
reads the states without advancing them, so it is deterministic.
"""

from __future__ import annotations

import numpy as np

from dlc.runtime.errors import CompileError

from ..ir import Shape
from ..opdefs import Composite, OpDef, Param, register, register_composite
from ..shapes import ShapeError, bind

SEED, STEP = "$seed", "$step"
_M1, _M2 = np.uint32(0x7FEB352D), np.uint32(0x846CA68B)

HELPERS = """\
// lowbias32 (Wellons): the random ops' 32-bit hash (compiler/ops/random.py).
uint dlc_hash(uint x) {
    x ^= x >> 16u; x *= 0x7feb352du; x ^= x >> 15u; x *= 0x846ca68bu; x ^= x >> 16u;
    return x;
}
uint dlc_random_bits(float seed, float step, float key, int i) {
    uint h = dlc_hash(uint(seed) ^ 0x9e3779b9u);
    h = dlc_hash(h ^ uint(step));
    h = dlc_hash(h ^ uint(key));
    return dlc_hash(h ^ uint(i));
}
float dlc_random_uniform(float seed, float step, float key, int i) {
    return float(dlc_random_bits(seed, step, key, i) >> 8u) * (1.0 / 16777216.0);
}
float dlc_random_normal(float seed, float step, float key, int i) {
    uint h = dlc_random_bits(seed, step, key, i);
    float u1 = (float(h >> 8u) + 1.0) * (1.0 / 16777216.0);
    float u2 = float(dlc_hash(h ^ 0x5bd1e995u) >> 8u) * (1.0 / 16777216.0);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
"""


def _hash(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.uint32)
    x = x ^ (x >> np.uint32(16))
    x = x * _M1
    x = x ^ (x >> np.uint32(15))
    x = x * _M2
    return x ^ (x >> np.uint32(16))


def random_bits(seed: float, step: float, key: int, n: int) -> np.ndarray:
    """The generator's uint32 bits for elements 0..n-1 (what dlc_random_bits computes)."""
    h = _hash(np.array([int(seed)], dtype=np.uint32) ^ np.uint32(0x9E3779B9))
    h = _hash(h ^ np.uint32(int(step)))
    h = _hash(h ^ np.uint32(int(key)))
    return _hash(h ^ np.arange(n, dtype=np.uint32))


def uniform_from_bits(h: np.ndarray) -> np.ndarray:
    return (h >> np.uint32(8)).astype(np.float64) / 16777216.0


def normal_from_bits(h: np.ndarray) -> np.ndarray:
    u1 = ((h >> np.uint32(8)).astype(np.float64) + 1.0) / 16777216.0  # in (0, 1]: log is finite
    u2 = uniform_from_bits(_hash(h ^ np.uint32(0x5BD1E995)))
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)


def _shape(ins, attrs) -> Shape:
    for s in ins:
        if tuple(s) != ():
            raise ShapeError("a random op's seed and step are scalars")
    return tuple(attrs["shape"])


def _ref(draw):
    def ref(args, attrs, dims):
        seed, step = (float(np.asarray(a).reshape(())) for a in args)
        shape = bind(attrs["shape"], dims)
        n = int(np.prod(shape)) if shape else 1
        return draw(random_bits(seed, step, attrs["key"], n)).reshape(shape).astype(args[0].dtype)

    return ref


for _name, _draw, _doc in (
    ("random_uniform", uniform_from_bits, "uniform in [0, 1), a new draw each training step"),
    ("random_normal", normal_from_bits, "standard normal, a new draw each training step"),
):
    register(
        OpDef(
            _name,
            "elementwise",
            _shape,
            _ref(_draw),
            arity=2,
            differentiable=False,
            lowering={"glsl": f"dlc_{_name}(a, b, {{key}}, {{index}})"},
            doc=_doc,
            group="networks",
            helpers=HELPERS if _name == "random_uniform" else "",
        )
    )


# -- the language's functions ------------------------------------------------------------------


def rng_leaves(b) -> tuple[int, int]:
    """The `$seed` and `$step` states (made, with `$step`'s +1 update, on first use)."""
    if SEED not in b.names:
        b.state(SEED, (), ("seed",))
        step = b.state(STEP, (), ("zeros",))
        b.update(STEP, b.add("add", (step, b.const(1.0, ())), None))
    return b.names[SEED], b.names[STEP]


def next_key(b) -> int:
    """The key of the model's next random draw: 1 + the draws made so far (random ops, and
    attentions that drop their probabilities: `attention(..., dropout=p)`)."""
    return 1 + sum(
        1
        for n in b.nodes
        if n.op in ("random_uniform", "random_normal") or (n.op == "attention" and n.attr("key") is not None)
    )


def draw(b, loc, op: str, shape: Shape) -> int:
    """A random op of `shape` with the next key."""
    seed, step = rng_leaves(b)
    return b.add(op, (seed, step), loc, shape=tuple(shape), key=next_key(b))


def _random(op: str):
    def build(b, loc, shape):
        for d in shape:
            if isinstance(d, int) and d <= 0:
                raise CompileError(f"{op}'s dims must be positive, got {d}", loc)
        return draw(b, loc, op, shape)

    return build


def _dropout(b, loc, x, p):
    if not 0.0 <= p <= 1.0:
        raise CompileError(f"dropout's p is a probability in [0, 1], got {p:g}", loc)
    u = draw(b, loc, "random_uniform", b.shape(x))
    # p as float32, so that NumPy (float64) and GL (float32) compare the same uniform alike
    keep = b.add("ge", (u, b.const(float(np.float32(p)), ())), loc)
    scale = b.const(0.0 if p == 1.0 else 1.0 / (1.0 - p), ())
    train = b.add("mul", (x, b.add("mul", (keep, scale), loc)), loc)
    return b.add("training", (train, x), loc)


from ..opdefs import update as _update  # noqa: E402

_update("random_uniform", params=(Param("shape", "dims"),), build=_random("random_uniform"))
_update("random_normal", params=(Param("shape", "dims"),), build=_random("random_normal"))

register_composite(
    Composite(
        "dropout",
        (Param("x", "tensor"), Param("p", "float", 0.5)),
        _dropout,
        doc="training: x * mask / (1 - p), mask 0 with probability p (a new mask each step); eval: x",
        group="networks",
        differentiable=True,
    )
)
