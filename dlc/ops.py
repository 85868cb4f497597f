"""Eager ops: every function of the language, run now on device arrays (the seeds' NDArrayMath).

    y = dlc.ops.relu(dlc.ops.matmul(x, w) + b)

Each call builds a small IR graph for the function (inputs a0, a1, ... of the arguments'
shapes; numbers and static arguments baked in), compiles it once per (function, shapes,
static arguments), and runs it on the arguments' device; the result stays there. A shape
mistake raises dlc.CompileError pointing at the Python line of the call.

Numbers passed where a tensor goes (`x * 2`) are baked into the kernel as constants, so a
loop over many different numbers compiles many kernels: pass a 0-d array instead.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import numpy as np

from dlc.compiler.builder import GraphBuilder
from dlc.compiler.functions import FUNCTIONS, REQUIRED
from dlc.compiler.ir import Graph

from .devices import Device, get_device
from .errors import CompileError
from .graph import SEED_ALIASES, _call_site, bind_args


@dataclass(frozen=True, eq=False)
class Kernel:
    """One eager op compiled for fixed shapes: `graph` reads inputs `arg_names` and
    computes node `out` of concrete `shape`."""

    name: str
    graph: Graph
    out: int
    arg_names: tuple[str, ...]
    shape: tuple[int, ...]


_cache: dict[tuple, Kernel] = {}


def cached_kernels() -> int:
    """How many eager kernels have been built (for tests of the cache)."""
    return len(_cache)


def call(fname: str, args: tuple, kwargs: dict) -> Any:
    """Run language function `fname` eagerly; gives a new Array on the arguments' device."""
    from .arrays import Array, array

    loc = None
    try:
        bound = bind_args(fname, args, dict(kwargs), None)
    except CompileError as e:
        raise CompileError(e.message, _call_site()) from None

    arrays: list[Array] = []
    temporaries: list[Array] = []
    key_parts: list[Any] = [fname]

    def tensor_key(v: Any) -> Any:
        # An Array becomes an input of the kernel; a number a constant baked in; other
        # array-likes are uploaded for this call.
        if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool):
            return ("c", float(v))
        if not isinstance(v, Array):
            try:
                host = np.asarray(v, dtype=np.float32)
            except (TypeError, ValueError):
                raise CompileError(f"{fname} expects an array or a number, got {type(v).__name__}",
                                   _call_site()) from None
            v = array(host, backend=arrays[0].backend if arrays else None)
            temporaries.append(v)
        arrays.append(v)
        return ("a", v.shape)

    for p, v in bound:
        if p.kind == "tensor":
            key_parts.append(tensor_key(v))
        elif p.kind == "tensors":
            key_parts.append(tuple(tensor_key(t) for t in v))
        else:
            key_parts.append(_hashable(v))
    key = tuple(key_parts)

    try:
        device = _device_of(arrays, fname)
        kernel = _cache.get(key)
        if kernel is None:
            loc = _call_site()
            kernel = _cache[key] = _build(fname, key, loc)
        handles = [a._live_handle() for a in arrays]
        from . import debug

        if debug.enabled():
            handle = debug.run_eager(device, kernel, handles, loc or _call_site())
        else:
            handle = device.run(kernel, handles)
        return Array(device, handle, kernel.shape)
    finally:
        for t in temporaries:
            t.dispose()


def _device_of(arrays: list, fname: str) -> Device:
    if not arrays:
        return get_device()
    devices = {id(a._device): a._device for a in arrays}
    if len(devices) > 1:
        names = sorted({a.backend for a in arrays})
        raise ValueError(f"{fname}: the arrays live on different backends ({', '.join(names)}); "
                         "copy one over with dlc.array(x, backend=...)")
    return arrays[0]._device


def _hashable(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return tuple(_hashable(x) for x in v)
    return v


def _build(fname: str, key: tuple, loc: Any) -> Kernel:
    """The IR of one call: an input leaf per array argument, constants for numbers."""
    b = GraphBuilder()
    names: list[str] = []

    def leaf(part: tuple) -> int:
        kind, value = part
        if kind == "c":
            return b.const(value, (), loc)
        name = f"a{len(names)}"
        names.append(name)
        return b.input(name, value, loc)

    values = []
    for p, part in zip(FUNCTIONS[fname].params, key[1:]):
        if p.kind == "tensor":
            values.append(leaf(part))
        elif p.kind == "tensors":
            values.append([leaf(x) for x in part])
        else:
            values.append(part)
    out = FUNCTIONS[fname].impl(b, loc, *values)
    graph = b.build()
    shape = tuple(int(d) for d in graph.nodes[out].shape)
    return Kernel(fname, graph, out, tuple(names), shape)


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
    op.__doc__ = (f"{fname}({', '.join(p.name for p in fn.params)}): the language's `{fname}`, "
                  "run eagerly on device arrays; gives a new Array.")
    return op


__all__ = ["Kernel", "call", "cached_kernels"]
for _name in FUNCTIONS:
    globals()[_name] = _make(_name)
    __all__.append(_name)
# The seeds' names (NDArrayMath / Graph methods) that are not the language's.
for _alias, _target in {**SEED_ALIASES, "matrix_times_vector": "matmul", "vector_times_matrix": "matmul",
                        "dot": "matmul", "scalar_times_array": "mul", "array_divided_by_scalar": "div",
                        "switch_dim": "transpose"}.items():
    if _alias not in globals():
        globals()[_alias] = globals()[_target]
        __all__.append(_alias)
# Note: this module's `sum`, `max`, `min`, `abs`, `pow` and `slice` are ops, not the builtins.


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
