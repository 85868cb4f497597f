"""Eager kernels on the GPU: one `dlc.ops.Kernel` compiled to GLSL once, run over arrays' buffers.

The GL compiler (`dlc.compiler.pipeline.compile_program`) turns the op's small graph into a
program spec (`runtime.spec.ProgramSpec`); this module launches it with the argument arrays'
own buffers bound to its input slots (no upload), sets the call's numbers as float uniforms
and its dims (a flat kernel's length) as int uniforms, and hands the buffer the result was
written to over to the new array (no download). That buffer comes from the device's pool of
freed eager buffers (runtime/buffer_pool.py), so a loop of ops whose results die creates none.

Everything a call needs but the buffers is worked out once per op and binding of the dims (a
`_Plan`: program handles, int uniforms, float uniform locations, work groups, which binding
takes which buffer, the result's size), so a call is: look up the plan, take a buffer, issue
the launches (runtime/launches.py `launch_now`: raw ctypes calls, the shared uniform cache).
Scratch buffers of multi-kernel ops (softmax, ...) are kept per compiled op and reused by
later calls; the GPU runs commands in order, so reuse is safe without waiting. `drop` frees
them when `dlc.ops` evicts the op.

Programs come from the runtime's LRU program cache unpinned: a launch whose program was
evicted links it again from its source.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dlc.compiler.pipeline import compile_program
from dlc.runtime.buffer_pool import pool_of
from dlc.runtime.device import current_device, default_device, get_context, open_device, open_devices
from dlc.runtime.dims import eval_size
from dlc.runtime.errors import RuntimeFailure
from dlc.runtime.executor import gpu_copy, group_counts, scratch_words
from dlc.runtime.launches import launch_now
from dlc.runtime.program import Program, get_program, pin, unpin
from dlc.runtime.spec import Kernel, Slot
from dlc.runtime.storage import Buffer, live_buffers, live_bytes
from dlc.runtime.sync import read_async


@dataclass
class _Launch:
    program: Program
    kernel: Kernel  # its spec: slots, grid, int uniforms (dims), float uniforms (numbers)


_OUT = -1  # a plan's binding that is the call's output buffer; -2 - i: the call's input i


@dataclass
class _Plan:
    """An op's launches for one binding of its dims: everything a call needs but the buffers
    of its arguments and result. Per launch: (program handle, int uniforms as (location,
    value), float uniforms as (location, index of the call's number), work groups, what each
    binding holds: a GL handle (>= 0) of a buffer the op keeps, `_OUT`, or -2 - i for input i)."""

    launches: tuple[tuple[int, tuple, tuple, tuple, tuple], ...]
    out_nbytes: int  # the result's buffer (a temp output may share a larger slot)
    copy_input: int | None = None  # the result is this input's storage (a reshape): copied
    number: int | None = None  # the result is this number as it came: uploaded
    copy_const: Buffer | None = None  # the result is this constant (a reshape): copied


@dataclass
class _Compiled:
    """One eager op's program: its launches, and the buffers it keeps between calls."""

    kernel: Any  # the dlc.ops.Kernel
    launches: list[_Launch]
    slots: tuple[Slot, ...]
    input_slot: dict[str, int]  # input name -> slot
    out_slot: int
    scratch: dict[int, Buffer] = field(default_factory=dict)  # temp slots but the output's
    consts: dict[int, Buffer] = field(default_factory=dict)
    split: dict[int, Buffer] = field(default_factory=dict)  # launch -> a split reduction's scratch
    prepared: dict[tuple, _Plan] = field(default_factory=dict)  # dims binding -> its plan

    def delete(self) -> None:
        for buf in (*self.scratch.values(), *self.consts.values(), *self.split.values()):
            buf.delete()
        self.scratch.clear()
        self.consts.clear()
        self.split.clear()
        self.prepared.clear()


# Kernel -> its compiled program; dlc.ops calls `drop` when it evicts the kernel
_compiled: dict[Any, _Compiled] = {}
_PREPARED_DIMS = 64  # bindings of the dims kept prepared per op (a flat op sees many lengths)


def drop(kernel: Any) -> None:
    """Free what `kernel` holds on the GPU (its programs stay in the program cache)."""
    compiled = _compiled.pop(kernel, None)
    if compiled is not None:
        compiled.delete()


def run(call: Any, handles: list[Buffer]) -> Buffer:
    """Run eager `call` (a `dlc.ops.Call`) over input buffers `handles` (in `arg_names`
    order) on the current device; the result is a buffer the caller owns, taken from the
    device's pool (runtime/buffer_pool.py)."""
    kernel, dims = call.kernel, call.dims
    compiled = _compiled.get(kernel)
    if compiled is None:
        compiled = _compiled[kernel] = _compile(kernel, dims)
    for launch in compiled.launches:
        if not launch.program.handle:
            return _relink_and_run(compiled, call, handles)
    key = tuple(dims.items())
    plan = compiled.prepared.get(key)
    if plan is None:
        plan = _plan(compiled, call, key)
    return _launch(plan, call.scalars, handles)


def _relink_and_run(compiled: _Compiled, call: Any, handles: list[Buffer]) -> Buffer:
    """`run` when a program of the op was evicted from the cache: link it again, then keep
    every program of the op pinned until it has run (linking one may evict another of the
    same op, the least recently used, which would launch as program 0)."""
    pinned: list[Program] = []
    try:
        for launch in compiled.launches:
            if not launch.program.handle:
                launch.program = get_program(launch.program.source, launch.program.name)
                compiled.prepared.clear()  # its handle and uniform locations differ
            pin(launch.program)
            pinned.append(launch.program)
        return _launch(_plan(compiled, call, tuple(call.dims.items())), call.scalars, handles)
    finally:
        for program in pinned:
            unpin(program)


def _launch(plan: _Plan, scalars: tuple[float, ...], handles: list[Buffer]) -> Buffer:
    """Issue `plan` over the argument buffers `handles` and a result buffer from the pool."""
    device = current_device()  # eager ops run on the device used last (the default one unless another is)
    max_block = device.limits["max_ssbo_size"]
    for index, buf in enumerate(handles):  # the plan checked every other buffer
        if buf.capacity > max_block:
            raise RuntimeFailure(
                f"eager op input {index} holds {buf.nbytes} bytes, more than this GPU's "
                f"{max_block}-byte storage block limit"
            )
    if plan.number is not None:  # host data: a fresh buffer, never a pooled one
        out = pool_of(device).fresh(plan.out_nbytes)
        out.upload(np.full(plan.out_nbytes // 4, scalars[plan.number], np.float32))
        return out
    pool = pool_of(device)
    out = pool.take_class(pool.class_for(plan.out_nbytes), plan.out_nbytes)
    dynamic = [out.handle] + [h.handle for h in handles]  # binding _OUT -> 0, input i (-2 - i) -> 1 + i
    fast, uniforms_set = device.fast, device.uniforms
    set_float = fast.program_uniform1f
    for program, ints, floats, groups, bindings in plan.launches:
        for loc, i in floats:
            set_float(program, loc, scalars[i])
        launch_now(fast, program, ints, [b if b >= 0 else dynamic[-1 - b] for b in bindings], groups, uniforms_set)
    if plan.copy_input is not None:
        gpu_copy(out, handles[plan.copy_input], plan.out_nbytes)
    elif plan.copy_const is not None:
        gpu_copy(out, plan.copy_const, plan.out_nbytes)
    return out


def _plan(compiled: _Compiled, call: Any, key: tuple) -> _Plan:
    """The op's launches worked out for `call`'s dims and kept as `key`'s plan; the op's
    scratch buffers grown to fit them (plans that named the old ones are dropped)."""
    if len(compiled.prepared) >= _PREPARED_DIMS:
        compiled.prepared.clear()
    kernel, dims = compiled.kernel, call.dims
    limits = current_device().limits
    max_count, max_block = limits["max_work_group_count"], limits["max_ssbo_size"]
    where: dict[int, int] = {s: buf.handle for s, buf in compiled.consts.items()}  # slot -> binding code
    for s, buf in list(compiled.scratch.items()):
        need = 4 * max(eval_size(z, dims) for z in compiled.slots[s].sizes)
        if buf.nbytes < need:  # a flat kernel called on a longer array
            buf.delete()
            buf = compiled.scratch[s] = Buffer(need)
            compiled.prepared.clear()
        where[s] = buf.handle
    for i, name in enumerate(kernel.arg_names):
        if name in compiled.input_slot:
            where[compiled.input_slot[name]] = -2 - i
    count = math.prod(call.shape)
    out_slot = compiled.slots[compiled.out_slot]
    copy_input = number = copy_const = None
    if out_slot.kind == "temp":  # the planner may share it with a larger temp written before it
        out_nbytes = 4 * max(count, *(eval_size(z, dims) for z in out_slot.sizes))
        where[compiled.out_slot] = _OUT
    elif out_slot.name in kernel.scalar_names:
        out_nbytes, number = 4 * count, kernel.scalar_names.index(out_slot.name)
    elif where.get(compiled.out_slot, 0) < _OUT:  # an input's storage
        out_nbytes, copy_input = 4 * count, -2 - where[compiled.out_slot]
    else:  # a constant's storage
        out_nbytes, copy_const = 4 * count, compiled.consts[compiled.out_slot]
    launches = []
    for j, launch in enumerate(compiled.launches):
        k, program = launch.kernel, launch.program
        ints = ((program.uniform_location(u), int(dims[d])) for u, d in k.uniforms.items())
        floats = ((program.uniform_location(u), kernel.scalar_names.index(n)) for u, n in k.scalars.items())
        bindings = [where[s] for s in k.slots]
        words = scratch_words(k.grid, dims)
        if words:  # a split reduction's counters and partials, bound after its slots
            buf = compiled.split.get(j)
            if buf is None or buf.nbytes < 4 * words:  # zeroed once: the kernel resets its counters
                if buf is not None:
                    buf.delete()
                    compiled.prepared.clear()
                buf = compiled.split[j] = Buffer(4 * words, zero=True)
            bindings.append(buf.handle)
        launches.append(
            (
                program.handle,
                tuple(u for u in ints if u[0] >= 0),
                tuple(f for f in floats if f[0] >= 0),
                group_counts(k.grid, dims, max_count),
                tuple(bindings),
            )
        )
    for nbytes, what in (
        (out_nbytes, "its result"),
        *((b.capacity, "a buffer it keeps") for b in (*compiled.consts.values(), *compiled.scratch.values())),
        *((b.capacity, "a split reduction's scratch") for b in compiled.split.values()),
    ):
        if nbytes > max_block:
            raise RuntimeFailure(
                f"eager op '{kernel.name}': {what} of {nbytes} bytes is more than this GPU's "
                f"{max_block}-byte storage block limit"
            )
    plan = compiled.prepared[key] = _Plan(tuple(launches), out_nbytes, copy_input, number, copy_const)
    return plan


def _compile(kernel: Any, dims: dict) -> _Compiled:
    ctx = get_context()
    options = {"device": ctx.renderer, "limits": ctx.limits}  # the matmul tuning row and limits of this GPU
    program = compile_program(kernel.graph, [kernel.out], name=f"eager_{kernel.name}", ref_dims=dims, options=options)
    spec, sources = program.spec, program.sources
    slots = spec.slots
    launches = [_Launch(get_program(sources[k.file], k.name), k) for k in spec.kernels]
    out_slot = spec.tensors[kernel.out].slot
    compiled = _Compiled(
        kernel, launches, slots, {s.name: i for i, s in enumerate(slots) if s.kind == "input"}, out_slot
    )
    for i, s in enumerate(slots):
        if s.kind == "const":
            compiled.consts[i] = Buffer.from_array(np.asarray(s.values, np.float32))
        elif s.kind == "temp" and i != out_slot:
            compiled.scratch[i] = Buffer(4 * max(eval_size(z, dims) for z in s.sizes))
    return compiled


# -- the eager arrays' GL device (dlc/devices.py makes one through `dlc.devices.gl_eager()`) --


class GLDevice:
    """Handles are `dlc.runtime.storage.Buffer`s; kernels are compiled GLSL (dlc.backends.gl_eager).
    They live on the process's default GL device (`dlc.runtime.device`), whichever device
    sessions use: every call makes it current first.

    A freed array's buffer goes to the device's pool (runtime/buffer_pool.py) for the next
    op's result; GL calls are made only on the thread that holds the context, and a finalizer
    may run anywhere: `release` queues the buffer and the next call on the owning thread
    pools it. Uploads go to fresh buffers, never pooled ones (no host write into a buffer
    that queued kernels may still read).
    """

    name = "gl"

    def __init__(self) -> None:
        self._pool_of = pool_of  # kept: finalizers call `release`, where nothing is imported
        self.gl_device = default_device()
        self.context = self.gl_device.context
        if not self.context.has_compute:  # eager kernels are compute shaders only
            raise RuntimeFailure(
                f"eager arrays on gl need compute shaders; this OpenGL ({self.context.version}) has none"
            )

    def upload(self, value: np.ndarray) -> Any:
        data = np.ascontiguousarray(value, dtype=np.float32)
        buffer = self._pool_of(self.gl_device).fresh(data.nbytes)
        buffer.upload(data)
        return buffer

    def download(self, handle: Any, shape: tuple[int, ...]) -> np.ndarray:
        return handle.download(int(np.prod(shape, dtype=np.int64))).reshape(shape)

    async def read(self, handle: Any, shape: tuple[int, ...]) -> np.ndarray:
        self.gl_device.activate()
        values = await read_async(handle, int(np.prod(shape, dtype=np.int64)))
        return values.reshape(shape)

    def free(self, handle: Any) -> None:
        if not handle.device.closed:  # else it went with its device
            self._pool_of(handle.device).give(handle)

    def release(self, handle: Any) -> None:
        if not handle.device.closed:
            self._pool_of(handle.device).release(handle)

    def flush(self) -> None:
        """Pool the buffers finalizers queued (call on the GL thread)."""
        pool = self.gl_device.pool
        if pool is not None and not self.gl_device.closed:
            pool.collect()

    def run(self, call: Any, handles: list[Any]) -> Any:
        self.gl_device.activate()  # gl_eager makes its buffers and programs on the current device
        return run(call, handles)


def gl_devices() -> list:
    """The GL devices open now, the default one first (made here if none is yet)."""
    default_device()
    return open_devices()


def open_gl_device(egl_device: int | None = None):
    """A new GL device on EGL device `egl_device` (default: the default device's)."""
    return open_device(egl_device)


def live_counts() -> tuple[int, int]:
    """GPU buffers and bytes held in all, on every GL device."""
    return live_buffers(), live_bytes()
