"""The eager kernel cache: each call of a language function on device arrays (`dlc.ops`,
the methods of `dlc.Array`) builds a small IR graph for the function (inputs a0, a1, ... for
the array arguments; static arguments such as `axis` baked in), compiles it once, and runs it
on the arguments' device. `dlc/arrays.py` turns calls into `Call`s of the `Kernel`s kept here.
What a compiled op is keyed by, so that loops compile once:
- Python numbers passed where a tensor goes (`x * 2.5`) are inputs s0, s1, ... marked
  `uniform`: on GL a float uniform set at each call, never a constant in the kernel.
- Elementwise functions whose array arguments all have one shape (numbers and 0-d arrays
  beside them) run over a flat symbolic length `N` (`[4, N]` when the length divides by 4, so
  the kernel still reads vec4s), bound at each call as a dim uniform: one kernel for every
  shape. So do sum, mean, max and min over all of an array's elements.
- Elementwise functions over arrays that broadcast (`x[B, 4] + b[4]`) are built over symbolic
  dims `D0, D1, ...` (one per distinct size other than 1): one kernel for every shape with the
  same pattern of ones and equal sizes. Other calls (reductions over axes, matmul, conv,
  layout ops, ...) compile per shape.
Compiled ops live in an LRU cache as large as the GL program cache (`dlc.set_program_cache_limit`,
env DLC_PROGRAM_CACHE; `runtime/cache_limit.py`); an evicted op frees its GPU scratch buffers.
"""

from __future__ import annotations

import builtins
import math
import sys
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from dlc.compiler import registry
from dlc.compiler.builder import GraphBuilder
from dlc.compiler.ir import Graph
from dlc.compiler.registry import FUNCTIONS
from dlc.runtime import cache_limit as _limits
from dlc.runtime.optional import require

from . import devices
from .devices import Device, get_device
from .runtime.errors import CompileError

# Functions made of elementwise ops alone: they may run over a flat symbolic length. The
# language's functions that are elementwise registry ops, and clip (maximum of minimum).
FLAT_FUNCTIONS = frozenset(
    name for name in FUNCTIONS if name in registry.REGISTRY and registry.get(name).kind == "elementwise"
) | {"clip"}
# Reductions over every element (axis=None, keepdims=False) of one array: also flat.
FLAT_REDUCTIONS = frozenset(["sum", "mean", "max", "min"])
FLAT_DIM = "N"  # the symbolic length of a flat kernel


@dataclass(frozen=True, eq=False)
class Kernel:
    """One eager op compiled: `graph` reads array inputs `arg_names` and number inputs
    `scalar_names` (0-d, marked uniform) and computes node `out`. `shape` is its output shape,
    symbolic (FLAT_DIM) for a flat kernel; a `Call` binds it."""

    name: str
    graph: Graph
    out: int
    arg_names: tuple[str, ...]
    shape: tuple
    scalar_names: tuple[str, ...] = ()


@dataclass(eq=False, slots=True)
class Call:
    """One run of a `Kernel`: this call's numbers, dims and output shape. Devices and debug
    mode take it where they take a kernel. (Made at every op: slotted, not frozen, which
    costs a setattr call per field.)"""

    kernel: Kernel
    scalars: tuple[float, ...]
    dims: dict
    shape: tuple[int, ...]

    @property
    def name(self) -> str:
        return self.kernel.name

    @property
    def graph(self) -> Graph:
        return self.kernel.graph

    @property
    def out(self) -> int:
        return self.kernel.out

    @property
    def arg_names(self) -> tuple[str, ...]:
        return self.kernel.arg_names

    @property
    def scalar_names(self) -> tuple[str, ...]:
        return self.kernel.scalar_names


_cache: OrderedDict[tuple, Kernel] = OrderedDict()  # key -> kernel, least recently used first
_limits.on_change(lambda limit: _shrink(limit))


def cached_kernels() -> int:
    """How many eager kernels are cached now (for tests of the cache)."""
    return len(_cache)


def cache_limit() -> int:
    """How many compiled eager ops are kept: the GL program cache's limit."""
    return _limits.limit()


def _remember(key: tuple, kernel: Kernel) -> None:
    """Cache `kernel`, evicting the least recently used ops past the limit."""
    _cache[key] = kernel
    _shrink(cache_limit())


def _shrink(limit: int) -> None:
    while len(_cache) > limit:
        _, old = _cache.popitem(last=False)
        _forget(old)


def _forget(kernel: Kernel) -> None:
    """Free what the GL device keeps for `kernel` (scratch and constant buffers)."""
    if "gl" in devices._devices:
        devices.gl_eager().drop(kernel)


def clear_cache() -> None:
    """Drop every compiled eager op (their GL programs stay in the program cache)."""
    _seen.clear()
    while _cache:
        _forget(_cache.popitem()[1])


def trim_pool() -> None:
    """Delete the GPU buffers kept for reuse in the eager buffer pools (freed arrays'
    buffers, runtime/buffer_pool.py), on every GL device. `dlc.memory().gl_pooled` counts them."""
    if "dlc.runtime.buffer_pool" in sys.modules:
        sys.modules["dlc.runtime.buffer_pool"].trim_all()


def set_pool_limit(buffers: int | None = None, nbytes: int | None = None) -> None:
    """Keep at most `buffers` freed GPU buffers and `nbytes` bytes of them for reuse by later
    eager ops, per GL device (ints >= 0; 0 keeps none; None: the default, 256 buffers and
    64 MiB); the pools are trimmed to it now."""
    _buffer_pool().set_limits(buffers, nbytes)


def pool_limit() -> tuple[int, int]:
    """(buffers, bytes): how much each GL device's eager buffer pool keeps at most."""
    return _buffer_pool().limits()


def _buffer_pool() -> Any:
    return require("dlc.runtime.buffer_pool")  # it imports OpenGL; the numpy backend has no pools


_NUMBERS = (int, float, np.integer, np.floating)  # numbers that become uniforms


def _is_number(v: Any) -> bool:
    return isinstance(v, _NUMBERS) and not isinstance(v, bool)


# Calls seen before, by function and each positional argument's shape (None for a number):
# the kernel's cache key, the dims and the result's shape `call` worked out for them, so that
# a repeated call (`a + b` in a loop) skips binding, keying and shape work. Kept for calls of
# arrays and numbers passed positionally to tensor parameters (their values are uniforms,
# never part of a key), outside debug mode; an entry whose kernel was evicted is worked out
# again.
_seen: dict[tuple, tuple[tuple, dict, tuple, int]] = {}
_SEEN_LIMIT = 4096
# fname -> how many leading parameters are tensors (positional arguments up to it may be seen)
_TENSOR_PREFIX = {
    name: next((i for i, p in enumerate(fn.params) if p.kind != "tensor"), len(fn.params))
    for name, fn in FUNCTIONS.items()
}


def _to_float(v: Any) -> float:
    try:
        return builtins.float(v)
    except OverflowError:  # an int past float64: infinite, as in float32
        return math.inf if v > 0 else -math.inf


def _flat_shape(fname: str, arrays: list, bound: list) -> tuple[int, ...] | None:
    """The one shape of the array arguments (0-d ones aside) when `fname` may run flat."""
    if fname in FLAT_REDUCTIONS:
        static = {p.name: v for p, v in bound if p.kind != "tensor"}
        if static != {"axis": None, "keepdims": False}:
            return None
    elif fname not in FLAT_FUNCTIONS:
        return None
    shapes = {a.shape for a in arrays if a.shape != ()}
    if len(shapes) != 1:
        return None
    shape = shapes.pop()
    return shape if math.prod(shape) > 0 else None


def _broadcast_dims(fname: str, arrays: list) -> tuple[dict[tuple, tuple], dict[str, int]]:
    """For an elementwise function over arrays of shapes that broadcast: each shape with its
    dims other than 1 made symbolic (`D<k>`, one name per distinct size), and the binding.
    The kernel then depends only on where sizes are 1 and which are equal."""
    shapes = {a.shape for a in arrays}
    if fname not in FLAT_FUNCTIONS or any(0 in shape for shape in shapes):
        return {}, {}
    try:
        np.broadcast_shapes(*shapes)
    except ValueError:  # the concrete shapes give the clearer error
        return {}, {}
    names: dict[int, str] = {}  # named in argument order, so the key follows the pattern
    for a in arrays:
        for d in a.shape:
            if d != 1 and d not in names:
                names[d] = f"D{len(names)}"
    return ({shape: tuple(names.get(d, 1) for d in shape) for shape in shapes}, {name: d for d, name in names.items()})


def _rename_shapes(part: Any, symbolic: dict[tuple, tuple]) -> Any:
    """A key part with its array shapes replaced as `symbolic` says."""
    if isinstance(part, tuple) and part[:1] == ("a",):
        return ("a", symbolic.get(part[1], part[1]))
    if isinstance(part, tuple) and part and isinstance(part[0], tuple) and part[0][:1] in (("a",), ("s",)):
        return tuple(_rename_shapes(x, symbolic) for x in part)
    return part


def _device_of(arrays: list, fname: str) -> Device:
    if not arrays:
        return get_device()
    devices = {id(a._device): a._device for a in arrays}
    if len(devices) > 1:
        names = sorted({a.backend for a in arrays})
        raise ValueError(
            f"{fname}: the arrays live on different backends ({', '.join(names)}); "
            "copy one over with dlc.array(x, backend=...)"
        )
    return arrays[0]._device


def _hashable(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return tuple(_hashable(x) for x in v)
    return v


def _build(fname: str, parts: list, loc: Any) -> Kernel:
    """The IR of one call: an input leaf per array argument, a uniform input per number."""
    b = GraphBuilder()
    names: list[str] = []
    scalar_names: list[str] = []

    def leaf(part: tuple) -> int:
        if part[0] == "s":
            name = f"s{len(scalar_names)}"
            scalar_names.append(name)
            i = b.add("input", (), loc, shape=(), name=name, uniform=True)
            b.declare(name, i, loc)
            b.inputs.append(name)
            return i
        name = f"a{len(names)}"
        names.append(name)
        return b.input(name, part[1], loc)

    values = []
    for p, part in zip(FUNCTIONS[fname].params, parts):
        if p.kind == "tensor":
            values.append(leaf(part))
        elif p.kind == "tensors":
            values.append([leaf(x) for x in part])
        else:
            values.append(part)
    out = FUNCTIONS[fname].impl(b, loc, *values)
    if b.dtype(out) == "i32":  # eager arrays hold f32: int(x) comes back as whole floats
        out = b.add("float", [out], loc)
    graph = b.build()
    if graph.states:  # the random ops' step counter, batch_norm's running statistics
        raise CompileError(
            f"{fname} reads model state ({', '.join(graph.states)}), which an eager call has none of: "
            "use it in a model (a .dl file or a dlc.Graph); dlc.rand and dlc.randn draw eagerly",
            loc,
        )
    shape = tuple(d if isinstance(d, str) else builtins.int(d) for d in graph.nodes[out].shape)
    return Kernel(fname, graph, out, tuple(names), shape, tuple(scalar_names))


devices.on_gl_reset(clear_cache)  # a closed GL device's kernels held its buffers
