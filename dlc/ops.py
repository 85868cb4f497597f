"""Eager ops: every function of the language, run now on device arrays (the seeds' NDArrayMath).

    y = dlc.ops.relu(dlc.ops.matmul(x, w) + b)

Each op compiles once per kind of call and runs on its arguments' device; the result stays
there (dlc/eager_kernels.py says what a compiled op is keyed by, dlc/arrays.py runs the
calls). A shape mistake raises dlc.CompileError pointing at the Python line of the call.
Compiled ops live in an LRU cache as large as the GL program cache (`dlc.set_program_cache_limit`,
env DLC_PROGRAM_CACHE; `runtime/cache_limit.py`); an evicted op frees its GPU scratch buffers.
"""

from __future__ import annotations

import sys

from dlc.compiler.registry import FUNCTIONS
from dlc.compiler.seed_names import suggest

from .arrays import call, op_function
from .arrays import split as _split
from .eager_kernels import Call, Kernel, cache_limit, cached_kernels, clear_cache, pool_limit, set_pool_limit, trim_pool
from .graph import SEED_ALIASES

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

for _name in FUNCTIONS:
    globals()[_name] = op_function(_name)
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
# the builtins (this module's code calls none of them).


# -- what `dlc.ops` shows ---------------------------------------------------------------
# Only the ops (and the names in __all__): the names this module imports for its own use
# (sys, suggest, ...) are no attributes of it for users, nor in dir(). The
# functions above still read them, from the module's globals.


class _OpsModule(type(sys)):
    def __getattribute__(self, name: str):
        if name[:1] != "_" and name not in _PUBLIC:
            raise AttributeError(f"module 'dlc.ops' has no op '{name}'{suggest(name, _PUBLIC)}")
        return super().__getattribute__(name)

    def __dir__(self) -> list[str]:
        return sorted(n for n in super().__dir__() if n[:1] == "_" or n in _PUBLIC)


_PUBLIC = frozenset(__all__)
sys.modules[__name__].__class__ = _OpsModule
