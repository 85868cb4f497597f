"""Eager ops: every function of the language, run now on device arrays (the seeds' NDArrayMath).

    y = dlc.ops.relu(dlc.ops.matmul(x, w) + b)

Each call builds a small IR graph for the function (inputs a0, a1, ... for the array
arguments; static arguments such as `axis` baked in), compiles it once, and runs it on the
arguments' device; the result stays there. A shape mistake raises dlc.CompileError pointing at
the Python line of the call.

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
import inspect
import math
import sys
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from dlc.compiler import registry
from dlc.compiler.builder import GraphBuilder
from dlc.compiler.functions import REQUIRED
from dlc.compiler.ir import Graph
from dlc.compiler.registry import FUNCTIONS
from dlc.runtime import cache_limit as _limits
from dlc.runtime import dims as dim_algebra

from . import debug
from .devices import Device, get_device
from .graph import SEED_ALIASES, _call_site, bind_args
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
    from .devices import _devices

    if "gl" in _devices:
        from .backends import gl_eager

        gl_eager.drop(kernel)


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
    from dlc.runtime.buffer_pool import set_limits

    set_limits(buffers, nbytes)


def pool_limit() -> tuple[int, int]:
    """(buffers, bytes): how much each GL device's eager buffer pool keeps at most."""
    from dlc.runtime.buffer_pool import limits

    return limits()


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


def call(fname: str, args: tuple, kwargs: dict) -> Any:
    """Run language function `fname` eagerly; gives a new Array on the arguments' device."""
    Array = _array_class()
    if kwargs or debug._enabled or len(args) > _TENSOR_PREFIX.get(fname, -1):
        return _call(fname, args, kwargs)
    # A repeated call: look up what it was worked out to (`_seen`), and run it.
    sig: list = [fname]
    handles: list = []
    scalars: list[float] = []
    device = None
    for v in args:
        if isinstance(v, Array):
            sig.append(v.shape)
            if v._handle is None or (device is not None and v._device is not device):
                return _call(fname, args, kwargs)  # the full path says what is wrong
            device = v._device
            handles.append(v._handle)
        elif isinstance(v, _NUMBERS) and not isinstance(v, bool):
            sig.append(None)
            scalars.append(_to_float(v))
        else:
            return _call(fname, args, kwargs)
    key = tuple(sig)
    seen = _seen.get(key)
    if seen is None or device is None:
        return _call(fname, args, kwargs, key)
    kernel_key, dims, shape, nbytes = seen
    kernel = _cache.get(kernel_key)
    if kernel is None:  # evicted since
        return _call(fname, args, kwargs, key)
    _cache.move_to_end(kernel_key)
    return Array._wrap(device, device.run(Call(kernel, tuple(scalars), dims, shape), handles), shape, nbytes)


_NUMBERS = (int, float, np.integer, np.floating)  # `_is_number`'s, for the loop above
_Array: Any = None


def _array_class() -> Any:
    """dlc.arrays.Array (imported on first use: dlc.arrays imports this module)."""
    global _Array
    if _Array is None:
        from .arrays import Array

        _Array = Array
    return _Array


def _call(fname: str, args: tuple, kwargs: dict, sig: tuple | None = None) -> Any:
    """`call` worked out in full; `sig`: the call's key in `_seen`, when it may be kept."""
    if fname not in FUNCTIONS:
        from dlc.compiler.seed_names import suggest

        raise ValueError(f"dlc.ops.call: no function '{fname}'{suggest(fname, FUNCTIONS)}")
    from .arrays import Array, array

    try:
        bound = bind_args(fname, args, dict(kwargs), None)
    except CompileError as e:
        raise CompileError(e.message, _call_site()) from None

    arrays: list[Array] = []
    scalars: list[float] = []
    temporaries: list[Array] = []

    def tensor(v: Any) -> Any:
        # An Array becomes an input of the kernel; a number a uniform input; other
        # array-likes are uploaded for this call.
        if _is_number(v):
            scalars.append(_to_float(v))
            return ("s",)
        if not isinstance(v, Array):
            try:
                host = np.asarray(v, dtype=np.float32)
            except (TypeError, ValueError):
                raise CompileError(
                    f"{fname} expects an array or a number, got {type(v).__name__}", _call_site()
                ) from None
            v = array(host, backend=arrays[0].backend if arrays else None)
            temporaries.append(v)
        arrays.append(v)
        return ("a", v.shape)

    parts: list[Any] = []
    for p, v in bound:
        if p.kind == "tensor":
            parts.append(tensor(v))
        elif p.kind == "tensors":
            parts.append(tuple(tensor(t) for t in v))
        else:
            parts.append(_hashable(v))

    try:
        device = _device_of(arrays, fname)
        flat = None if debug.enabled() else _flat_shape(fname, arrays, bound)
        symbolic: dict[tuple, tuple] = {}  # array shape -> the shape the kernel is built for
        dims: dict[str, int] = {}
        if flat is not None:  # every array argument of one shape: key by the flat layout
            count = math.prod(flat)
            vec4 = count % 4 == 0 and fname in FLAT_FUNCTIONS  # vec4 lanes need [4, N]
            symbolic = {flat: (4, FLAT_DIM) if vec4 else (FLAT_DIM,)}
            dims = {FLAT_DIM: count // 4 if vec4 else count}
        elif not debug.enabled():
            symbolic, dims = _broadcast_dims(fname, arrays)
        parts = [_rename_shapes(x, symbolic) for x in parts]
        key = (fname, *parts)
        kernel = _cache.get(key)
        loc = None
        if kernel is None:
            loc = _call_site()
            kernel = _build(fname, parts, loc)
            _remember(key, kernel)
        else:
            _cache.move_to_end(key)
        if flat is not None and FLAT_DIM in kernel.shape:  # the arrays' shape, not [4, N]
            shape = flat
        else:
            shape = dim_algebra.bind(kernel.shape, dims)
        run = Call(kernel, tuple(scalars), dims, tuple(shape))
        handles = [a._live_handle() for a in arrays]
        if debug.enabled():
            handle = debug.run_eager(device, run, handles, loc or _call_site())
        else:
            handle = device.run(run, handles)
        result = Array(device, handle, run.shape)
        if sig is not None and not temporaries:
            if len(_seen) >= _SEEN_LIMIT:
                _seen.clear()
            _seen[sig] = (key, dims, run.shape, result.nbytes)
        return result
    finally:
        for t in temporaries:
            t.dispose()


def _to_float(v: Any) -> float:
    try:
        return builtins.float(v)  # this module's `float` is the op
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


# -- one module-level function per language function ---------------------------------


def _make(fname: str):
    fn = FUNCTIONS[fname]

    def op(*args: Any, **kwargs: Any):
        return call(fname, args, kwargs)

    params = []
    for p in fn.params:
        default = inspect.Parameter.empty if p.default is REQUIRED else p.default
        params.append(inspect.Parameter(p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default))
    op.__signature__ = inspect.Signature(params)
    op.__name__ = op.__qualname__ = fname
    required = [p.name for p in fn.params if p.default is REQUIRED]
    method = f"{required[0]}.{fname}({', '.join(required[1:])})" if fn.params[0].kind == "tensor" else ""
    op.__doc__ = (
        f"{fname}({', '.join(p.name for p in fn.params)}): the language's `{fname}`, "
        "run eagerly on device arrays; gives a new Array.\n\n"
        f">>> y = dlc.ops.{fname}({', '.join(required)})" + (f"  # or {method}" if method else "")
    )
    return op


__all__ = [
    "Call",
    "Kernel",
    "cache_limit",
    "call",
    "cached_kernels",
    "clear_cache",
    "pool_limit",
    "set_pool_limit",
    "trim_pool",
]


def _split(x: Any, sizes, axis: int = 0) -> tuple:
    """split(x, sizes, axis): the language's `split`, run eagerly: a tuple of Arrays, one
    `slice` each (the language function checks the arguments first, with its errors).

    >>> head, tail = dlc.ops.split(dlc.zeros([5, 2]), [2, 3])
    """
    shape = tuple(np.shape(x))
    b = GraphBuilder()
    FUNCTIONS["split"].impl(b, _call_site(), b.input("x", shape), tuple(sizes), builtins.int(axis))
    ax = builtins.int(axis) % len(shape)
    parts, offset = [], 0
    for s in sizes:
        begin = [offset if k == ax else 0 for k in range(len(shape))]
        size = [builtins.int(s) if k == ax else -1 for k in range(len(shape))]
        parts.append(call("slice", (x, begin, size), {}))
        offset += builtins.int(s)
    return tuple(parts)


for _name in FUNCTIONS:
    globals()[_name] = _make(_name)
    __all__.append(_name)
split = _split  # several results: not through one kernel
# The seeds' names (NDArrayMath / Graph methods) that are not the language's.
for _alias, _target in {
    **SEED_ALIASES,
    "matrix_times_vector": "matmul",
    "vector_times_matrix": "matmul",
    "dot": "matmul",
    "scalar_times_array": "mul",
    "array_divided_by_scalar": "div",
    "switch_dim": "transpose",
}.items():
    if _alias not in globals():
        globals()[_alias] = globals()[_target]
        __all__.append(_alias)
# Note: this module's `sum`, `max`, `min`, `abs`, `pow`, `round`, `slice`, `float` and `int` are ops, not
# the builtins (its own code calls `builtins.float` and `builtins.int`).


# -- what `dlc.ops` shows ---------------------------------------------------------------
# Only the ops (and the names in __all__): the names this module imports for its own use
# (np, inspect, dataclass, Any, ...) are no attributes of it for users, nor in dir(). The
# functions above still read them, from the module's globals.


class _OpsModule(type(__import__("sys"))):
    def __getattribute__(self, name: str):
        if name[:1] != "_" and name not in _PUBLIC:
            from dlc.compiler.seed_names import suggest

            raise AttributeError(f"module 'dlc.ops' has no op '{name}'{suggest(name, _PUBLIC)}")
        return super().__getattribute__(name)

    def __dir__(self) -> list[str]:
        return sorted(n for n in super().__dir__() if n[:1] == "_" or n in _PUBLIC)


_PUBLIC = frozenset(__all__)
__import__("sys").modules[__name__].__class__ = _OpsModule
