"""`dlc.memory()`: what device arrays, the eager ops, the GL program cache and live sessions
hold now; and `dlc.set_program_cache_limit`."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from . import scope as _scope
from .devices import flush_pending, gl_counts
from .eager_kernels import cached_kernels
from .runtime import cache_limit


@dataclass(frozen=True)
class SessionMemory:
    """GPU buffers and bytes the live GL sessions hold, in all and by what they hold."""

    sessions: int
    buffers: int
    bytes: int
    params: int  # bytes of params
    state: int  # bytes of optimizer state
    data: int  # bytes of training data kept on the GPU
    snapshots: int  # bytes of the copies training keeps to undo a diverged step
    slots: int  # bytes of the programs' planned storage (temporaries, inputs, constants)


@dataclass(frozen=True)
class Memory:
    """What `dlc.memory()` reports: live device arrays and their bytes (float32); on the GL
    backend also the GPU buffers dlc holds in all (arrays, sessions, eager scratch, staging),
    the GL program cache (linked programs, an estimate of their driver bytes, its limit), the
    compiled eager ops kept, and what live sessions hold (`SessionMemory`). `gl_pooled` and
    `gl_pooled_bytes`: those of the GPU buffers (counted in `gl_buffers`, `gl_bytes`) that sit
    freed in the eager buffer pools for reuse (runtime/buffer_pool.py; `dlc.ops.trim_pool()`
    deletes them)."""

    arrays: int
    bytes: int
    gl_buffers: int | None = None
    gl_bytes: int | None = None
    programs: int | None = None
    program_bytes: int | None = None
    program_cache_limit: int | None = None
    eager_ops: int = 0
    sessions: SessionMemory | None = None
    gl_pooled: int | None = None
    gl_pooled_bytes: int | None = None


def memory() -> Memory:
    """Live arrays and bytes now (pools first what the garbage collector let go of), and
    on GL the buffers, programs and sessions behind them.

    >>> used = dlc.memory()  # used.arrays, used.bytes, used.gl_buffers, ...
    """
    # GL modules are asked only when something loaded them (then GL is in use): this
    # imports none, so dlc.memory() on the numpy backend stays free of OpenGL.
    loaded = sys.modules.get
    flush_pending()
    buffers, nbytes = gl_counts()
    storage = loaded("dlc.runtime.storage")
    if buffers is None and storage is not None:  # sessions use GL, arrays not
        buffers, nbytes = storage.live_buffers(), storage.live_bytes()
    pool_count = pool_bytes = None
    pool = loaded("dlc.runtime.buffer_pool")
    if buffers is not None:  # no pool loaded: no eager op ran on GL, nothing pooled
        pool_count, pool_bytes = (pool.pooled_buffers(), pool.pooled_bytes()) if pool else (0, 0)
    programs = program_bytes = limit = None
    sessions = None
    program = loaded("dlc.runtime.program")
    if program is not None:  # GL was used: say what it holds
        stats = program.program_cache_stats()
        programs, program_bytes, limit = stats["programs"], stats["bytes"], stats["limit"]
    backends = loaded("dlc.backends.protocol")
    if backends is not None:  # GL sessions over models and artifacts
        sessions = _sessions_memory(backends.live_gl_backends())
    return Memory(
        *_scope.live(),
        buffers,
        nbytes,
        programs,
        program_bytes,
        limit,
        cached_kernels(),
        sessions,
        pool_count,
        pool_bytes,
    )


def set_program_cache_limit(limit: int | None) -> None:
    """Keep at most `limit` (an int >= 1) compiled GL programs and as many compiled eager ops,
    deleting the least recently used past it (now and from then on); None: back to the default,
    256, or env DLC_PROGRAM_CACHE. Programs a live Session uses are never deleted.

    >>> dlc.set_program_cache_limit(64)
    """
    cache_limit.set_limit(limit)


def _sessions_memory(backends: list) -> SessionMemory:
    kinds = {"params": 0, "state": 0, "data": 0, "snapshots": 0, "slots": 0}
    count = 0
    for backend in backends:
        for kind, (n, b) in backend.memory().items():
            kinds[kind] += b
            count += n
    return SessionMemory(len(backends), count, sum(kinds.values()), **kinds)
