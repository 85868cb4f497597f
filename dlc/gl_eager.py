"""Eager kernels on the GPU: one `dlc.ops.Kernel` compiled to GLSL once, run over arrays' buffers.

The GL compiler (`dlc.compiler.pipeline.compile_program`) turns the op's small graph into a
program spec (`runtime.spec.ProgramSpec`); this module launches it with the argument arrays'
own buffers bound to its input slots (no upload), sets the call's numbers as float uniforms
and its dims (a flat kernel's length) as int uniforms, and hands the buffer the result was
written to over to the new array (no download). Uniform locations, values and group counts
are worked out once per op and binding of the dims; the launches go through the executor's
launch path (runtime/launches.py: raw ctypes calls, the shared uniform cache). Scratch
buffers of multi-kernel ops (softmax, ...) are kept per compiled op and reused by later
calls; the GPU runs commands in order, so reuse is safe without waiting. `drop` frees them when `dlc.ops` evicts the op.

Programs come from the runtime's LRU program cache unpinned: a launch whose program was
evicted links it again from its source.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dlc.runtime.context import get_context
from dlc.runtime.device import current_device
from dlc.runtime.errors import RuntimeFailure
from dlc.runtime.executor import eval_size, gpu_copy, group_counts, scratch_words
from dlc.runtime.launches import launch_now
from dlc.runtime.program import Program, get_program, pin, unpin
from dlc.runtime.spec import Kernel, Slot
from dlc.runtime.storage import Buffer


@dataclass
class _Launch:
    program: Program
    kernel: Kernel  # its spec: slots, grid, int uniforms (dims), float uniforms (numbers)


@dataclass
class _Dims:
    """An op's launches prepared for one binding of its dims: per launch the int uniforms as
    (location, value), the work groups and the split scratch words."""

    uniforms: list[tuple[tuple[int, int], ...]]
    groups: list[tuple[int, int, int]]
    words: list[int]
    floats: list[tuple[tuple[int, str], ...]]  # (location, number input) per launch


@dataclass
class _Compiled:
    """One eager op's program: its launches, and the buffers it keeps between calls."""

    launches: list[_Launch]
    slots: tuple[Slot, ...]
    input_slot: dict[str, int]  # input name -> slot
    out_slot: int
    scratch: dict[int, Buffer] = field(default_factory=dict)  # temp slots but the output's
    consts: dict[int, Buffer] = field(default_factory=dict)
    split: dict[int, Buffer] = field(default_factory=dict)  # launch -> a split reduction's scratch
    prepared: dict[tuple, _Dims] = field(default_factory=dict)  # dims binding -> its launches

    def delete(self) -> None:
        for buf in (*self.scratch.values(), *self.consts.values(), *self.split.values()):
            buf.delete()
        self.scratch.clear()
        self.consts.clear()
        self.split.clear()


# Kernel -> its compiled program; dlc.ops calls `drop` when it evicts the kernel
_compiled: dict[Any, _Compiled] = {}
_PREPARED_DIMS = 64  # bindings of the dims kept prepared per op (a flat op sees many lengths)


def compiled_ops() -> int:
    """How many eager ops hold compiled programs (and maybe buffers) on the GPU."""
    return len(_compiled)


def drop(kernel: Any) -> None:
    """Free what `kernel` holds on the GPU (its programs stay in the program cache)."""
    compiled = _compiled.pop(kernel, None)
    if compiled is not None:
        compiled.delete()


def run(call: Any, handles: list[Buffer]) -> Buffer:
    """Run eager `call` (a `dlc.ops.Call`) over input buffers `handles` (in `arg_names`
    order); the result is a new buffer the caller owns."""
    kernel, dims = call.kernel, call.dims
    compiled = _compiled.get(kernel)
    if compiled is None:
        compiled = _compiled[kernel] = _compile(kernel, dims)
    # A program evicted from the cache is linked again, and then every program of the op is
    # pinned until it has run: linking one may evict another of the same op (the least recently
    # used), which would launch as program 0. Nothing evicted (the steady state): no pins.
    pinned: list[Program] = []
    try:
        if not all(launch.program.handle for launch in compiled.launches):
            for launch in compiled.launches:
                if not launch.program.handle:
                    launch.program = get_program(launch.program.source, launch.program.name)
                    compiled.prepared.clear()  # its uniform locations may differ
                pin(launch.program)
                pinned.append(launch.program)
        return _launch_all(compiled, call, handles)
    finally:
        for program in pinned:
            unpin(program)


def _launch_all(compiled: _Compiled, call: Any, handles: list[Buffer]) -> Buffer:
    """`run`'s launches, with every program of the op linked and pinned."""
    kernel, dims = call.kernel, call.dims
    prepared = _prepared(compiled, dims)
    scalars = dict(zip(kernel.scalar_names, call.scalars))
    buffers: dict[int, Buffer] = {**compiled.consts}
    for s, buf in compiled.scratch.items():
        need = 4 * max(eval_size(z, dims) for z in compiled.slots[s].sizes)
        if buf.nbytes < need:  # a flat kernel called on a longer array
            buf.delete()
            buf = compiled.scratch[s] = Buffer(need)
        buffers[s] = buf
    for name, handle in zip(kernel.arg_names, handles):
        if name in compiled.input_slot:
            buffers[compiled.input_slot[name]] = handle
    count = math.prod(call.shape)
    out_slot = compiled.slots[compiled.out_slot]
    if out_slot.kind == "temp":  # the planner may share it with a larger temp written before it
        out = Buffer(4 * max(count, *(eval_size(z, dims) for z in out_slot.sizes)))
        buffers[compiled.out_slot] = out
    else:
        out = Buffer(4 * count)
    device = current_device()  # eager ops run on the device used last (the default one unless another is)
    max_block = device.limits["max_ssbo_size"]
    fast = device.fast
    set_float = fast.program_uniform1f
    for j, launch in enumerate(compiled.launches):
        program = launch.program.handle
        for loc, name in prepared.floats[j]:
            set_float(program, loc, scalars[name])
        bound = [buffers[s] for s in launch.kernel.slots]
        words = prepared.words[j]
        if words:  # a split reduction's counters and partials, bound after its slots
            buf = compiled.split.get(j)
            if buf is None or buf.nbytes < 4 * words:  # zeroed once: the kernel resets its counters
                if buf is not None:
                    buf.delete()
                buf = compiled.split[j] = Buffer(4 * words, zero=True)
            bound.append(buf)
        for index, buf in enumerate(bound):
            if not buf.handle:
                raise RuntimeFailure(
                    f"internal dlc error: kernel '{launch.kernel.name}' got a deleted buffer at binding {index}"
                )
            if buf.capacity > max_block:
                raise RuntimeFailure(
                    f"kernel '{launch.kernel.name}': buffer {index} holds {buf.nbytes} bytes, more "
                    f"than this GPU's {max_block}-byte storage block limit"
                )
        launch_now(fast, program, prepared.uniforms[j], [b.handle for b in bound], prepared.groups[j], device.uniforms)
    if out_slot.kind == "temp":
        return out
    if out_slot.name in scalars:  # the result is a number as it came (a reshape of it)
        out.upload(np.full(count, scalars[out_slot.name], np.float32))
    else:  # an input's or a constant's storage (a reshape): copy
        gpu_copy(out, buffers[compiled.out_slot], 4 * count)
    return out


def _prepared(compiled: _Compiled, dims: dict) -> _Dims:
    """The op's launches worked out for `dims` (cached per binding)."""
    key = tuple(sorted(dims.items()))
    found = compiled.prepared.get(key)
    if found is not None:
        return found
    if len(compiled.prepared) >= _PREPARED_DIMS:
        compiled.prepared.clear()
    max_count = get_context().limits["max_work_group_count"]
    found = _Dims([], [], [], [])
    for launch in compiled.launches:
        k, program = launch.kernel, launch.program
        uniforms = ((program.uniform_location(u), int(dims[d])) for u, d in k.uniforms.items())
        found.uniforms.append(tuple(u for u in uniforms if u[0] >= 0))
        floats = ((program.uniform_location(u), name) for u, name in k.scalars.items())
        found.floats.append(tuple(f for f in floats if f[0] >= 0))
        found.groups.append(group_counts(k.grid, dims, max_count))
        found.words.append(scratch_words(k.grid, dims))
    compiled.prepared[key] = found
    return found


def _compile(kernel: Any, dims: dict) -> _Compiled:
    from dlc.compiler.pipeline import compile_program

    options = {"device": get_context().renderer}  # the matmul tuning table's row for this GPU
    program = compile_program(kernel.graph, [kernel.out], name=f"eager_{kernel.name}", ref_dims=dims, options=options)
    spec, sources = program.spec, program.sources
    slots = spec.slots
    launches = [_Launch(get_program(sources[k.file], k.name), k) for k in spec.kernels]
    out_slot = spec.tensors[kernel.out].slot
    compiled = _Compiled(launches, slots, {s.name: i for i, s in enumerate(slots) if s.kind == "input"}, out_slot)
    for i, s in enumerate(slots):
        if s.kind == "const":
            compiled.consts[i] = Buffer.from_array(np.asarray(s.values, np.float32))
        elif s.kind == "temp" and i != out_slot:
            compiled.scratch[i] = Buffer(4 * max(eval_size(z, dims) for z in s.sizes))
    return compiled
