"""Prepared launches: a kernel dispatch worked out once, issued many times.

A `Prepared` launch is (program handle, int uniform values, calls, groups): `calls` are the
raw ctypes GL calls (the entry points, `Device.fast`, of the device they run on) with their
arguments already converted to plain ints (use the program, bind each buffer, dispatch,
barrier). The executor prepares one per kernel for each binding of
the dims (and its update copies as `copy_calls`); `run_prepared` issues them: per launch a
uniform check against the shared uniform cache, then `fn(*args)` per call; nothing is
allocated. Eager ops, whose buffers change every call, issue theirs with `launch_now`
through the same entry points and cache.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from typing import NamedTuple

from .gl import GL_SHADER_STORAGE_BUFFER, Fast
from .program import BARRIER_BITS

Call = tuple[Callable, tuple]


class Prepared(NamedTuple):
    """One kernel launch, resolved for a binding of the dims."""

    program: int  # GL program handle
    uniforms: tuple[tuple[int, int], ...]  # int uniforms: (location, value)
    calls: tuple[Call, ...]  # use, bind each buffer, dispatch, barrier
    groups: tuple[int, int, int]  # the work groups it dispatches


def _entry_points(fast: Fast) -> tuple:
    if not fast._resolved:
        fast.resolve()
    return fast.use_program, fast._bind_buffer_base, fast.dispatch, fast.memory_barrier


def kernel_calls(
    fast: Fast, program: int, uniforms: Sequence[tuple[int, int]], handles: Sequence[int], groups: tuple[int, int, int]
) -> Prepared:
    """A launch of `program` with buffer `handles[i]` at binding i, int `uniforms` as
    (location, value), `groups` work groups, then a barrier (no dispatch when a count is 0)."""
    use, bind, dispatch, barrier = _entry_points(fast)
    calls: list[Call] = [(use, (int(program),)), *_bind_calls(fast, handles)]
    x, y, z = (int(n) for n in groups)
    if x and y and z:
        calls += [(dispatch, (x, y, z)), (barrier, (BARRIER_BITS,))]
    return Prepared(int(program), tuple((int(loc), int(v)) for loc, v in uniforms), tuple(calls), (x, y, z))


def _bind_calls(fast: Fast, handles: Sequence[int]) -> list[Call]:
    """Calls binding buffer `handles[i]` at shader-storage binding i: one glBindBuffersBase
    where the driver has it (GL 4.4), else a glBindBufferBase each."""
    if not handles:
        return []
    many = fast.bind_buffers_base
    if many is not None and len(handles) > 1:
        array = (ctypes.c_uint * len(handles))(*(int(h) for h in handles))  # kept alive by the call
        return [(many, (GL_SHADER_STORAGE_BUFFER, 0, len(handles), array))]
    bind = fast._bind_buffer_base
    return [(bind, (GL_SHADER_STORAGE_BUFFER, i, int(h))) for i, h in enumerate(handles)]


def copy_calls(
    fast: Fast, program: int, location: int, copies: Sequence[tuple[int, int, int, tuple]]
) -> tuple[Call, ...]:
    """Calls of the copy program (runtime/executor.py `_COPY_SOURCE`, its uniform `n` at
    `location`) copying `n` floats for each (dst handle, src handle, n, work groups), then one
    barrier: the copies must not overlap."""
    use, bind, dispatch, barrier = _entry_points(fast)
    set_int = fast.program_uniform1i
    calls: list[Call] = [(use, (int(program),))]
    for dst, src, n, groups in copies:
        if n == 0:
            continue
        calls += [
            (set_int, (int(program), int(location), int(n))),
            *_bind_calls(fast, (src, dst)),
            (dispatch, tuple(int(g) for g in groups)),
        ]
    calls.append((barrier, (BARRIER_BITS,)))
    return tuple(calls)


def launch_now(
    fast: Fast,
    program: int,
    uniforms: tuple[tuple[int, int], ...],
    handles: Sequence[int],
    groups: tuple[int, int, int],
    uniforms_set: dict,
) -> None:
    """One launch issued at once through the same entry points and uniform cache as
    `run_prepared`, for a launch whose buffers change every call (eager ops): nothing is
    built to be kept."""
    use, bind, dispatch, barrier = _entry_points(fast)
    if uniforms_set.get(program) != uniforms:
        set_int = fast.program_uniform1i
        for loc, v in uniforms:
            set_int(program, loc, v)
        uniforms_set[program] = uniforms
    use(program)
    for i, h in enumerate(handles):
        bind(GL_SHADER_STORAGE_BUFFER, i, h)
    x, y, z = groups
    if x and y and z:
        dispatch(x, y, z)
        barrier(BARRIER_BITS)


def run_prepared(fast: Fast, launches: Sequence[Prepared], uniforms_set: dict) -> None:
    """Issue `launches` in order. `uniforms_set` (program handle -> the values last set on
    it) skips setting uniforms a program already holds."""
    set_int = fast.program_uniform1i
    for program, values, calls, _ in launches:
        if uniforms_set.get(program) != values:
            for loc, v in values:
                set_int(program, loc, v)
            uniforms_set[program] = values
        for fn, args in calls:
            fn(*args)
